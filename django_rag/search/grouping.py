"""Hits as people read them: one entry per document, and snippets made of whole sentences.

Presentation only: the store still returns chunks, ranked; ``group_hits`` folds them into
documents in the order of each document's best hit, and ``choose_passages`` picks which of a
document's passages is displayed on the passage's own text (see there). A snippet is plain
text (Markdown turned into text) made of the sentences around the query's words, with the
matched words as offsets into it, so that a page can mark them (escaped) and JSON can carry them without HTML.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..embedders.base import Embedder
from ..exceptions import EmbedderError
from ..types import Hit
from .relevance import background_for, combined, text_relevance, unit_vector, vector_relevance

__all__ = [
    "DocumentHits",
    "Snippet",
    "choose_passages",
    "displayed_text",
    "group_hits",
    "markdown_to_text",
    "query_terms",
    "same_word",
    "sentence_snippet",
]

SNIPPET_CHARS = 320

# Words too common to mark (English and Portuguese, the demo's languages); see same_word.
_STOP = frozenset(
    (
        "a",
        "about",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "may",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "should",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "o",
        "os",
        "as",
        "um",
        "uma",
        "de",
        "da",
        "do",
        "das",
        "dos",
        "em",
        "no",
        "na",
        "nos",
        "nas",
        "por",
        "para",
        "com",
        "que",
        "se",
        "e",
        "é",
        "ao",
        "aos",
        "à",
        "às",
        "como",
        "mais",
    )
)
_WORD = re.compile(r"\w+", re.UNICODE)
# A sentence ends at . ! ? (and closing quotes or brackets) before whitespace; a line break ends one too.
_SENTENCE_END = re.compile("(?<=[.!?])[\"'\u201d\u2019)\\]]*\\s+|\n+")


@dataclass(frozen=True)
class Snippet:
    """Plain text and the ``(start, end)`` offsets of the query's words in it (code points)."""

    text: str
    marks: tuple[tuple[int, int], ...] = ()

    def html(self) -> SafeString:
        """The text HTML-escaped, each mark in ``<mark>``."""
        parts, at = [], 0
        for start, end in self.marks:
            parts.append(str(escape(self.text[at:start])))
            parts.append(f"<mark>{escape(self.text[start:end])}</mark>")
            at = end
        parts.append(str(escape(self.text[at:])))
        # Every piece of text is escaped above; only our own <mark> tags are markup.
        return mark_safe("".join(parts))

    def as_json(self) -> dict[str, object]:
        return {"text": self.text, "highlights": [list(mark) for mark in self.marks]}


@dataclass
class DocumentHits:
    """A document's hits in rank order: ``best`` is shown, ``others`` under "more from this document"."""

    best: Hit
    others: list[Hit] = field(default_factory=list)

    @property
    def hits(self) -> list[Hit]:
        return [self.best, *self.others]


def group_hits(hits: Sequence[Hit]) -> list[DocumentHits]:
    """One entry per document, in the order of each document's first hit.

    A document's ``best`` passage is its most relevant hit (calibrated ``relevance``, then
    cosine ``similarity``), not necessarily its first: a fused ranking can put first a passage
    that shares more of the query's words but answers it less.
    """
    ordered: dict[object, list[Hit]] = {}
    for hit in hits:
        key = hit.document.pk if hit.document is not None else hit.source_id
        ordered.setdefault(key, []).append(hit)
    groups = []
    for found in ordered.values():
        best = max(found, key=_strength)
        groups.append(DocumentHits(best=best, others=[hit for hit in found if hit is not best]))
    return groups


def _strength(hit: Hit) -> tuple[float, float]:
    return (hit.relevance or 0.0, hit.similarity if hit.similarity is not None else -1.0)


def choose_passages(
    groups: Sequence[DocumentHits], query: str, *, embedder: Embedder | None, chunks: int
) -> list[DocumentHits]:
    """Each document's displayed passage chosen on the text a reader would see, not its header.

    With contextual headers every passage of a document is embedded and matched with the same
    title and heading path. That header rightly helps rank the *document*, but it cannot tell
    its passages apart and it is never displayed: a passage can outrank its neighbour only
    because the shared header weighs more beside a vaguer text. So, among a document's
    passages, the one displayed is the one whose *snippet* (``sentence_snippet``: the sentences
    the entry would show) earns the highest relevance, computed as the search computes it
    (``search.relevance``: the same calibration, the same ``combined`` meaning and words, from the
    evidence the mode used) but from that text alone: its cosine similarity to the query,
    embedded without any header (vector and hybrid), and the share of the query's words it holds
    (text and hybrid). Ties keep the ranking's choice; the others follow in their order, under
    "more from this document". The documents' order does not change.

    Only documents with several passages whose chunks carry a header are looked at again (a
    chunk without one was already scored on its own text); their snippets are embedded in one
    call. ``chunks`` is the collection's size in the embedder's space, as the search used it.
    If that embedding fails, the ranking's choice stands: this is a reading aid, not a result.
    """
    looked = [
        i for i, group in enumerate(groups) if len(group.hits) > 1 and any(_header(h) for h in group.hits)
    ]
    if not looked:
        return list(groups)
    hits = [hit for i in looked for hit in groups[i].hits]
    texts = [sentence_snippet(hit.chunk.content, query).text for hit in hits]
    meaning: list[float] | None = None
    if embedder is not None and any(hit.similarity is not None for hit in hits):
        try:
            vectors = embedder.embed_documents(texts)
            question = unit_vector(embedder.embed_query(query))
        except EmbedderError:
            return list(groups)
        background = background_for(embedder)
        centre = background.centre(question)
        meaning = [
            vector_relevance(_cosine(question, vector), centre, background.spread, chunks)
            for vector in vectors
        ]
    words = any(hit.text_match is not None for hit in hits)
    terms = query_terms(query)
    own: dict[int, float] = {}
    for n, (hit, text) in enumerate(zip(hits, texts, strict=True)):
        relevance = meaning[n] if meaning is not None and hit.similarity is not None else 0.0
        if words and hit.text_match is not None and terms:
            relevance = combined(relevance, text_relevance(len(_matched(text, terms)) / len(terms)))
        own[id(hit)] = relevance
    chosen = list(groups)
    for i in looked:
        group = groups[i]
        best = max(group.hits, key=lambda hit: own[id(hit)])  # the first of equals: the ranking's
        chosen[i] = DocumentHits(best=best, others=[hit for hit in group.hits if hit is not best])
    return chosen


def _header(hit: Hit) -> str:
    return str(getattr(hit.chunk, "header", "") or "")


def _cosine(unit_query: Sequence[float], vector: Sequence[float]) -> float:
    norm = sum(x * x for x in vector) ** 0.5
    return sum(a * b for a, b in zip(unit_query, vector, strict=True)) / norm if norm else 0.0


_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+")
_QUOTE = re.compile(r"^\s*>\s?")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|~~)(?=\S)(.+?)(?<=\S)\1")
_CODE = re.compile(r"`([^`]*)`")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")


def markdown_to_text(text: str, *, headings: bool = False) -> str:
    """Markdown as plain text: markers, links and emphasis gone; heading lines dropped (or kept
    as text with ``headings``). Lines of a paragraph stay as they are; blank lines separate."""
    lines = []
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if not fence:
            heading = _HEADING.match(line)
            if heading:
                if headings:
                    lines.append(heading.group(1))
                lines.append("")  # a heading ends the sentence before it
                continue
            if _RULE.match(line):
                lines.append("")
                continue
            line = _QUOTE.sub("", line)
            line = _LIST_ITEM.sub("", line)
            line = _IMAGE.sub(r"\1", line)
            line = _LINK.sub(r"\1", line)
            line = _CODE.sub(r"\1", line)
            line = _EMPHASIS.sub(r"\2", line)
        lines.append(line)
    return "\n".join(lines)


def query_terms(query: str) -> list[str]:
    """The query's words worth marking, lower-case, each once."""
    terms = []
    for word in _WORD.findall(query.lower()):
        if word in _STOP or (len(word) < 3 and not word.isdigit()):
            continue
        if word not in terms:
            terms.append(word)
    return terms


# Two words are taken for forms of one word when they share a beginning and differ only in
# endings of at most _ENDING characters: "backup" and "backups", "restaurar" and "restauradas",
# "long" and "longer". Language-neutral on purpose: marking is a reading aid in any language a
# site uses (ranking used the collection's own text search configuration), so it may mark a
# near relative ("general", "generate") but never needs a stemmer per language. The shared
# beginning is the whole shorter word, or at least _STEM characters of both.
_STEM = 5
_ENDING = 3


def same_word(a: str, b: str) -> bool:
    """Whether lower-case words ``a`` and ``b`` look like forms of one word (see ``_ENDING``)."""
    if a.isdigit() or b.isdigit():
        return a == b  # 35 days is not 350 days
    shared = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    if len(a) - shared > _ENDING or len(b) - shared > _ENDING:
        return False
    return shared >= _STEM or shared == min(len(a), len(b))


def _sentences(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if match.start() > start:
            spans.append((start, match.start()))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _marks(text: str, terms: Sequence[str]) -> list[tuple[int, int]]:
    if not terms:
        return []
    return [
        (m.start(), m.end())
        for m in _WORD.finditer(text)
        if m.group().lower() not in _STOP and any(same_word(m.group().lower(), term) for term in terms)
    ]


def displayed_text(content: str) -> str:
    """A chunk's text as its snippet shows it: Markdown as text, heading lines dropped, lines of
    a paragraph kept (a line break ends a sentence), paragraphs joined."""
    text = " ".join(markdown_to_text(content).split("\n\n"))
    return re.sub(r"[ \t]*\n[ \t]*", "\n", text).strip()


def _matched(text: str, terms: Sequence[str]) -> set[str]:
    found = {text[a:b].lower() for a, b in _marks(text, terms)}
    return {term for term in terms if any(same_word(word, term) for word in found)}


def sentence_snippet(content: str, query: str, *, max_chars: int = SNIPPET_CHARS) -> Snippet:
    """Whole sentences of ``content`` around the query's words (its opening when none matches),
    about ``max_chars`` long: the best sentence, then its neighbours, the one before first."""
    text = displayed_text(content)
    sentences = _sentences(text)
    if not sentences:
        return Snippet("")
    terms = query_terms(query)
    scores = []
    for start, end in sentences:
        scores.append(len(_matched(text[start:end], terms)))
    best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    first = last = best
    length = sentences[best][1] - sentences[best][0]
    while True:
        grown = False
        for candidate in (first - 1, last + 1):
            if 0 <= candidate < len(sentences):
                size = sentences[candidate][1] - sentences[candidate][0] + 1
                if length + size <= max_chars:
                    first, last = min(first, candidate), max(last, candidate)
                    length += size
                    grown = True
        if not grown:
            break
    start, end = sentences[first][0], sentences[last][1]
    piece = " ".join(text[start:end].split())
    if len(piece) > max_chars * 2:
        # One sentence longer than any snippet: its words around the first match, marked as cut.
        marks = _marks(piece, terms)
        at = piece.rfind(" ", 0, max(0, marks[0][0] - max_chars // 2)) + 1 if marks else 0
        stop = piece.rfind(" ", at, at + max_chars)
        piece = ("… " if at else "") + piece[at : stop if stop > at else at + max_chars] + " …"
    return Snippet(piece, tuple(_marks(piece, terms)))
