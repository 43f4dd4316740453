"""An answer without a language model: sentences quoted from the retrieved passages, with [n] citations.

The default chat backend when ``RAG["CHAT"]`` is not set. It writes no word of its own: it
splits the passages into sentences, scores each against the question by embedding similarity
(the collection's embedder) and term overlap, and quotes the best few, each followed by the
number of its passage. The answer says that it is quoted. When no sentence shares a term with
the question (or comes close in meaning) it gives the "not enough information" answer.

Called through ``ask()`` it receives the hits and the collection's embedder
(``quote_passages``); called as a plain chat backend (``complete``/``stream``) it reads the
numbered context block of the prompt and scores by term overlap alone.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from django.utils.translation import gettext as _

from ..embedders import Embedder
from ..types import Hit
from .chat import ChatStream, Message, Usage
from .prompts import NOT_ENOUGH_INFORMATION, neutralise

__all__ = ["ExtractiveChat", "Passage", "PassageQuoter", "Sentence", "key_terms", "passage", "sentences"]

# (number, text, document title, heading of the passage's start)
Passage = tuple[int, str, str, str]

# A sentence ends at . ! ? or an ellipsis, after any closing quotes or brackets.
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026])[\"\u201d\u2019)]*\s+")
_WORD = re.compile(r"\w+", re.UNICODE)
_PASSAGE = re.compile(r"^\[(\d+)\] \([^\n]*?\) ", re.MULTILINE)
_QUESTION = re.compile(r"<question>\s*(.*?)\s*</question>", re.DOTALL)
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
# Words that carry no meaning of their own in a question (English and Portuguese, the demo's two).
STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have how i if in into
    is it its me my no not of on one or our should so that the their them then there these they this
    to was we were what when where which who whom why will with would you your about after all also
    any before being both each few get got just long many more most much must now only other out over
    same some such than too under until up very via want well o os as um uma uns umas de da do das dos
    e em no na nos nas por para com que se ao aos como mais mas ou seu sua quando onde qual quais quem
    é são foi ser ter tem há""".split()  # noqa: SIM905 (a list literal would be 150 lines)
)


def key_terms(text: str) -> list[str]:
    """The text's content words, lower-cased, lightly stemmed, stopwords dropped, first use first."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS or len(word) < 2:
            continue
        stem = _stem(word)
        if stem not in terms:
            terms.append(stem)
    return terms


# Common irregular forms a question and its answer tend to use differently ("kept" / "keeps").
_IRREGULAR = {
    "kept": "keep", "paid": "pay", "sent": "send", "made": "make", "took": "take", "taken": "take",
    "ran": "run", "went": "go", "gone": "go", "bought": "buy", "left": "leave", "lost": "lose",
    "held": "hold", "built": "build", "found": "find", "gave": "give", "given": "give", "got": "get",
    "data": "datum", "children": "child", "people": "person", "men": "man", "women": "woman",
}  # fmt: skip
# A question that asks for an amount, a duration or a time wants a sentence with a number in it.
_WANTS_NUMBER = re.compile(
    r"^\s*(how (long|many|much|often|old|soon|far)|when|what time|what year|quant[oa]s?|quando)\b", re.I
)
_NUMBER = re.compile(r"\d")


def _stem(word: str) -> str:
    # Enough to match "backups" with "backup", "restored" with "restore", "kept" with "keeps";
    # not a real stemmer, and the same on both sides, which is all overlap needs.
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


@dataclass
class Sentence:
    """One candidate: its text, the passage number it comes from, its place there, its score."""

    text: str
    number: int
    position: int
    context: str = ""  # the document's title and the sentence's heading
    score: float = 0.0
    overlap: float = 0.0
    similarity: float = 0.0


def sentences(text: str) -> list[str]:
    """The whole sentences of a passage: headings and fragments cut by a chunk boundary left out."""
    return [sentence for sentence, _heading in _sentences(text)]


def _sentences(text: str, heading: str = "") -> list[tuple[str, str]]:
    """``(sentence, the heading above it)`` for each whole sentence of ``text``."""
    found: list[tuple[str, str]] = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:#|[-*+]\s|\d+[.)]\s))", text):
        lines = []
        for line in block.splitlines():
            if line.lstrip().startswith("#"):
                heading = line.strip().lstrip("#").strip()
            elif line.strip():
                lines.append(line.strip())
        paragraph = _LIST_MARK.sub("", " ".join(lines))
        for piece in _SENTENCE_END.split(paragraph):
            piece = piece.strip()
            if len(_WORD.findall(piece)) >= 4:
                found.append((piece, heading))
    if found and found[0][0][:1].islower():
        found = found[1:]  # the tail of a sentence that began in the previous chunk
    return found


@runtime_checkable
class PassageQuoter(Protocol):
    """A backend that answers from the hits themselves (``ask`` calls it instead of ``complete``)."""

    def quote_passages(self, question: str, hits: Sequence[Hit], embedder: Embedder | None) -> str: ...


class ExtractiveChat:
    """Quote the sentences of the passages that answer the question; cite each ``[n]``.

    Options (``RAG["CHAT"] = {"BACKEND": "django_rag.answer.extractive.ExtractiveChat", ...}``):
    ``MAX_SENTENCES`` (3) and ``MAX_CHARS`` (700) bound the answer; ``SIMILARITY_WEIGHT`` (0.5)
    balances embedding similarity against term overlap; ``MIN_SIMILARITY`` (0.35) is what a
    sentence sharing no term with the question needs to be quoted at all; ``MAX_EMBEDDED`` (16)
    is how many sentences, the likeliest by their terms, are embedded and compared by meaning;
    ``TOPIC_WEIGHT`` (0.25) adds the similarity of the question to the passage's title and heading.
    """

    model = "extractive"

    def __init__(
        self,
        *,
        model: str = "extractive",
        max_sentences: int = 3,
        max_chars: int = 700,
        similarity_weight: float = 0.5,
        min_similarity: float = 0.35,
        max_embedded: int = 16,
        topic_weight: float = 0.25,
    ) -> None:
        self.model = model
        self.max_sentences = int(max_sentences)
        self.max_chars = int(max_chars)
        self.similarity_weight = float(similarity_weight)
        self.min_similarity = float(min_similarity)
        self.max_embedded = int(max_embedded)
        self.topic_weight = float(topic_weight)

    def quote_passages(self, question: str, hits: Sequence[Hit], embedder: Embedder | None) -> str:
        return self.quote(question, [passage(n, hit) for n, hit in enumerate(hits, 1)], embedder)

    def quote(self, question: str, passages: Sequence[Passage], embedder: Embedder | None) -> str:
        """The answer for ``question`` from ``(number, text)`` passages ('' when nothing answers)."""
        chosen = self.choose(question, passages, embedder)
        if not chosen:
            return str(NOT_ENOUGH_INFORMATION)
        quoted = "\n\n".join(f"“{neutralise(sentence.text)}” [{sentence.number}]" for sentence in chosen)
        intro = _("Quoted from the documents (no language model wrote this answer):")
        return f"{intro}\n\n{quoted}"

    def choose(self, question: str, passages: Sequence[Passage], embedder: Embedder | None) -> list[Sentence]:
        """The sentences to quote, best first."""
        candidates = [
            Sentence(
                text=text, number=number, position=position, context=" ".join(filter(None, [title, heading]))
            )
            for number, passage_text, title, first_heading in passages
            for position, (text, heading) in enumerate(_sentences(passage_text, first_heading))
        ]
        terms = key_terms(question)
        if not candidates or not terms:
            return []
        self._score(question, terms, candidates, embedder)
        ranked = sorted(candidates, key=lambda s: (-s.score, s.number, s.position))
        best = ranked[0]
        if best.overlap == 0 and best.similarity < self.min_similarity:
            return []
        chosen = [best]
        covered = set(key_terms(best.text))
        length = len(best.text)
        for sentence in ranked[1:]:
            if len(chosen) >= self.max_sentences or sentence.score < 0.75 * best.score:
                break
            words = set(key_terms(sentence.text))
            if length + len(sentence.text) > self.max_chars or words <= covered:
                continue
            chosen.append(sentence)
            covered |= words
            length += len(sentence.text)
        return chosen

    def _score(
        self, question: str, terms: list[str], candidates: list[Sentence], embedder: Embedder | None
    ) -> None:
        counts = [set(key_terms(c.text)) for c in candidates]
        contexts = [set(key_terms(c.context)) for c in candidates]
        frequency: Counter[str] = Counter(term for words in counts for term in words)
        # Rarer terms weigh more: "35" or "restore" say more than a word every sentence has.
        weight = {term: math.log(1 + len(candidates) / (1 + frequency[term])) + 0.1 for term in terms}
        total = sum(weight.values())
        alpha = self.similarity_weight if embedder is not None else 0.0
        wants_number = bool(_WANTS_NUMBER.match(question))
        for candidate, words, context in zip(candidates, counts, contexts, strict=True):
            # A sentence inherits the subject of its title and heading ("it keeps it for 35 days"
            # under "Backups"): their terms count as the sentence's own.
            matched = sum(weight[t] for t in terms if t in words | context)
            candidate.overlap = matched / total
            cue = 0.1 if wants_number and _NUMBER.search(candidate.text) else 0.0
            # Search already ranked the passages: a preference for its first ones breaks near-ties.
            prior = 0.05 / candidate.number + 0.01 / (1 + candidate.position)
            candidate.score = (1 - alpha) * candidate.overlap + cue + prior
        if embedder is None or alpha == 0:
            return
        # Only the lexically likeliest are embedded: a local model on a busy CPU takes ~50 ms each.
        shortlist = sorted(candidates, key=lambda c: -c.score)[: self.max_embedded]
        # Embedded with its title and heading, as the chunks are: "it" in a sentence means the heading.
        texts = [f"{c.context}: {c.text}" if c.context else c.text for c in shortlist]
        # What the passage is about counts too: a sentence under "Backups and restores" answers a
        # question on backups better than one under "Exporting your data" that mentions them.
        topics = sorted({c.context for c in shortlist if c.context})
        found = _similarities(question, texts + topics, embedder)
        topicality = dict(zip(topics, found[len(texts) :], strict=True))
        for candidate, similarity in zip(shortlist, found, strict=False):
            candidate.similarity = similarity
            topic = topicality.get(candidate.context, 0.0)
            candidate.score += alpha * similarity + self.topic_weight * topic

    def complete(self, messages: Sequence[Message]) -> tuple[str, Usage]:
        question, passages = _read_prompt(messages)
        return self.quote(question, passages, None), {}

    def stream(self, messages: Sequence[Message]) -> ChatStream:
        text, _usage = self.complete(messages)
        return ChatStream(_pieces(text))

    def __repr__(self) -> str:
        return "<ExtractiveChat>"


def _similarities(question: str, texts: list[str], embedder: Embedder | None) -> list[float]:
    if embedder is None:
        return [0.0] * len(texts)
    query = embedder.embed_query(question)
    vectors = embedder.embed_documents(texts)
    return [_cosine(query, vector) for vector in vectors]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def passage(number: int, hit: Hit) -> Passage:
    """``(number, text, title, heading path)`` of a hit, for ``quote``."""
    metadata = getattr(hit.chunk, "metadata", None) or {}
    title = hit.document.title if hit.document is not None else str(metadata.get("title") or "")
    path = metadata.get("heading_path") or []
    heading = str(path[-1]) if isinstance(path, list) and path else ""
    return (number, hit.content, title, heading)


def _read_prompt(messages: Sequence[Message]) -> tuple[str, list[Passage]]:
    """The question and the numbered passages of the user message ``build_messages`` wrote."""
    user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    question = _QUESTION.search(user)
    context = user.split("<context>", 1)[-1].split("</context>", 1)[0]
    marks = list(_PASSAGE.finditer(context))
    passages = []
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        end = following.start() if following is not None else len(context)
        passages.append((int(mark.group(1)), context[mark.end() : end].strip(), "", ""))
    return (question.group(1) if question else user), passages


def _pieces(text: str) -> Generator[str, None, Usage]:
    yield from re.findall(r"\S+\s*|\s+", text) or [text]
    return {}
