"""A recursive, token-aware, page-aware text splitter that streams: linear time, bounded memory.

Text is cut at the coarsest separator that brings each piece within the token budget: page
break (``\\f``, never crossed), blank line, line, sentence end, whitespace, then a hard split
inside a word as a last resort. Pieces are merged greedily into chunks of at most
``chunk_size`` tokens; each chunk after the first starts with whole trailing pieces of the
previous one (at most ``chunk_overlap`` tokens, refined down to sentences when needed).

Offsets invariant: every chunk's ``content`` is non-empty, has no leading or trailing
whitespace, and equals ``text[chunk.char_start:chunk.char_end]``.

Streaming: :func:`iter_chunks` walks the text once, finding separators lazily and counting
pieces in batches of about ``BATCH_CHARS`` characters; only pieces over the budget are cut and
counted again, one level finer, and a piece longer than ``MAX_COUNT_CHARS`` is cut before it is
counted; the overlap's sentences are looked for only at the end of the previous chunk. So every
character is counted a bounded number of times (time linear in the text) and the splitter holds
a batch and the chunk being built, never the whole text's tokens.

Token counting uses tiktoken's ``cl100k_base`` when it is installed and its data loads
(offline: from tiktoken's cache). Otherwise :func:`estimate_tokens` counts one token per four
ASCII characters (rounded up) plus one per non-ASCII character. Either way pass
``token_counter`` to use a model's own tokenizer, and ``batch_counter`` (many texts in one
call, e.g. ``LocalEmbedder.count_tokens_batch``) to count faster. Counts of pieces are taken
less the per-text overhead (special tokens: ``token_counter("")``). With ``additive=True`` (the
counter's counts add up at separators, which all end in whitespace: true of WordPiece
tokenizers such as MiniLM's, and of word counts) a chunk's count is the sum of its pieces',
paragraphs and lines are counted whole and summed (a one-line paragraph as its head and its
last sentences, whose counts the overlap then takes), and little is counted twice (a line over
the budget when it looked like it would fit, an overlap reaching past those sentences);
otherwise (tiktoken, the estimate) a span is counted whole before a chunk is closed, and every
chunk is counted once more for its ``token_count``. The budget holds exactly for additive and
subadditive counters; ``token_count`` is always the real count.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..exceptions import ConfigurationError
from ..types import ChunkData, RagDocument

__all__ = [
    "BATCH_CHARS",
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "MAX_COUNT_CHARS",
    "BatchCounter",
    "Chunker",
    "TokenCounter",
    "chunk_document",
    "default_token_counter",
    "estimate_tokens",
    "iter_chunks",
    "split_text",
]

DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 32
# Characters of pieces counted in one batch call, and the longest piece counted at all: longer
# ones are cut at the next separator first, so no call tokenizes more than this.
BATCH_CHARS = 64 * 1024
MAX_COUNT_CHARS = 64 * 1024
# Chunks whose exact count is taken in one batch call before they are yielded.
_EMIT_BATCH = 32
# Characters at the end of a chunk's last piece searched first for the sentences of the overlap.
_TAIL_CHARS = 256
# Characters at the end of a one-line paragraph whose sentences are counted apart: enough for
# the overlap's sentences most of the time, so that they need not be counted again.
_TAIL_COUNTED_CHARS = 512

TokenCounter = Callable[[str], int]
BatchCounter = Callable[[Sequence[str]], list[int]]

PAGE_BREAK = "\f"
# Coarsest first; a level is tried only on pieces still over budget. A separator stays with
# the piece before it, so pieces tile the text with no gaps.
_SEPARATORS = (
    re.compile(r"\n[^\S\n]*\n\s*"),  # paragraph: a blank line and the whitespace after it
    re.compile(r"\n\s*"),  # line
    # sentence end, punctuation kept with its sentence: a run of western sentence punctuation
    # with closing quotes or brackets and whitespace after it, or of CJK full stops with any
    # whitespace. Written to start with one character class (checked again by a lookbehind):
    # then ``re`` skips ahead to the next candidate in C instead of trying a match at every
    # character, half the time of ``(?=[...])(?:[.!?\u2026]+...|[\u3002...]+...)``, same matches.
    re.compile(
        r"[.!?\u2026\u3002\uff01\uff1f]"
        r"(?:(?<=[.!?\u2026])[.!?\u2026]*[\"'\u201d\u2019\u00bb)\]]*\s+|(?<=[\u3002\uff01\uff1f])[\u3002\uff01\uff1f]*\s*)"
    ),
    re.compile(r"\s+"),  # word
)
_SENTENCE_LEVEL = 2
_HARD_LEVEL = len(_SEPARATORS)


class _Line(NamedTuple):
    """A line of a paragraph and the spans it is counted in (their counts add up to its count)."""

    start: int
    end: int
    spans: list[tuple[int, int]]  # the line, its sentences, or its head and its last sentences
    whole: bool  # counted as if whole (it looked short enough to fit): if not, cut from the top
    known: int  # index of the first span that is one of the line's sentences (len(spans): none)


# A paragraph's span and its lines.
_Paragraph = tuple[int, int, list[_Line]]
# A sentence's span and its content tokens.
_Sentence = tuple[tuple[int, int], int]


class _Piece(NamedTuple):
    start: int
    end: int
    tokens: int  # content tokens (the counter's per-text overhead taken off); -1: not counted yet
    level: int  # the next separator to try if this piece must be split further
    # The piece's last sentences, counted when it was (a line or a one-line paragraph): the
    # overlap, which is made of them, needs not count them again.
    tail: tuple[_Sentence, ...] = ()


def estimate_tokens(text: str) -> int:
    """Estimate tokens without a tokenizer: ceil(ASCII chars / 4) + one per non-ASCII char.

    English averages about four characters per token in cl100k_base; CJK and other scripts
    take about one token per character or more, so counting them singly keeps chunks of such
    text within a model's context instead of four times over it.
    """
    if text.isascii():
        return math.ceil(len(text) / 4)
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 4) + len(text) - ascii_chars


@functools.cache
def default_token_counter() -> TokenCounter:
    """tiktoken's cl100k_base when importable and loadable, else :func:`estimate_tokens`."""
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base")
    except Exception:  # not installed, or its data is neither cached nor downloadable
        return estimate_tokens

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return count


def _check_options(chunk_size: Any, chunk_overlap: Any) -> None:
    for name, value in (("chunk_size", chunk_size), ("chunk_overlap", chunk_overlap)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigurationError(f"{name} must be an integer number of tokens, got {value!r}")
    if chunk_size <= 0:
        raise ConfigurationError(f"chunk_size must be a positive number of tokens, got {chunk_size}")
    if chunk_overlap < 0:
        raise ConfigurationError(f"chunk_overlap must be 0 or more tokens, got {chunk_overlap}")
    if chunk_overlap >= chunk_size:
        raise ConfigurationError(
            f"chunk_overlap ({chunk_overlap}) must be smaller than chunk_size ({chunk_size}); "
            "set CHUNK_OVERLAP to about a tenth of CHUNK_SIZE"
        )


class _Splitter:
    def __init__(
        self, text: str, size: int, overlap: int, count: TokenCounter, batch: BatchCounter, additive: bool
    ) -> None:
        self.text = text
        self.size = size
        self.overlap = overlap
        self.count = count
        self.batch = batch
        self.overhead = count("")  # special tokens every counted text carries ([CLS], [SEP])
        self.additive = additive
        # Characters and tokens of the paragraphs counted so far: how long a line may be and fit.
        self.chars_seen = 0
        self.tokens_seen = 0

    # --- cutting text into pieces within the budget ------------------------------------------

    def _cuts(self, level: int, start: int, end: int) -> Iterator[tuple[int, int]]:
        """Spans tiling text[start:end], cut after each separator of ``level`` (lazily)."""
        for match in _SEPARATORS[level].finditer(self.text, start, end):
            cut = match.end()
            if cut < end:
                yield start, cut
                start = cut
        yield start, end

    def _has_cut(self, level: int, start: int, end: int) -> bool:
        match = _SEPARATORS[level].search(self.text, start, end)
        return match is not None and match.end() < end

    def pieces(self, spans: Iterator[tuple[int, int]], level: int) -> Iterator[_Piece]:
        """Pieces tiling ``spans`` (in order), each within the budget; counted in batches."""
        batch: list[tuple[int, int]] = []
        chars = 0
        for span in spans:
            batch.append(span)
            chars += span[1] - span[0]
            if chars >= BATCH_CHARS:
                yield from self._resolve(batch, level)
                batch, chars = [], 0
        if batch:
            yield from self._resolve(batch, level)

    def summed_pieces(self, start: int, end: int) -> Iterator[_Piece]:
        """``pieces`` for an additive counter: a paragraph counted as the sum of its lines (what
        counting it whole would give), each line counted whole, or as the sum of its sentences
        when it looks too long to fit (by the characters per token counted so far): then its
        sentences, which it will be cut into, are counted once instead of twice."""
        group: list[_Paragraph] = []
        chars = 0
        for p_start, p_end in self._cuts(0, start, end):
            if p_end - p_start > MAX_COUNT_CHARS:
                # Far over any budget, and its lines must not be listed at once: cut lazily.
                yield from self._sum_up(group)
                group, chars = [], 0
                yield from self._split(p_start, p_end, 1)
                continue
            # Most paragraphs are one line (then a newline starts only their trailing separator):
            # str.find says so faster than the line pattern.
            newline = self.text.find("\n", p_start, p_end)
            one_line = newline < 0 or _blank(self.text, newline, p_end)
            lines = [(p_start, p_end)] if one_line else self._cuts(1, p_start, p_end)
            longest = self.size * self.chars_seen / max(1, self.tokens_seen)
            if one_line and p_end - p_start <= longest:  # most paragraphs
                counted = [self._head_and_tail(p_start, p_end)]
            else:  # a line is counted whole, or by sentences when it looks too long to fit
                counted = [
                    _Line(a, b, list(self._cuts(2, a, b)), False, 0)
                    if b - a > longest
                    else _Line(a, b, [(a, b)], True, 1)
                    for a, b in lines
                ]
            group.append((p_start, p_end, counted))
            chars += p_end - p_start
            if chars >= BATCH_CHARS:
                yield from self._sum_up(group)
                group, chars = [], 0
        yield from self._sum_up(group)

    def _head_and_tail(self, start: int, end: int) -> _Line:
        """A line that looks short enough to fit, counted as its last sentences (those that end
        in the last ``_TAIL_COUNTED_CHARS`` characters) and what comes before them: as many tokens as
        the line whole, and the overlap, made of its last sentences, finds them counted.

        Only cuts after whitespace, where counts add up; the sentences are those
        :meth:`_last_sentences` would find (every cut found in the window is one of the line's,
        and only the sentence ending at the first may start before the window)."""
        text = self.text
        first = max(start, end - _TAIL_COUNTED_CHARS)
        cuts = [m.end() for m in _SEPARATORS[_SENTENCE_LEVEL].finditer(text, first, end)]
        if cuts and cuts[-1] == end:
            cuts.pop()  # the line's own trailing separator
        if not all(text[cut - 1].isspace() for cut in cuts):
            return _Line(start, end, [(start, end)], True, 1)
        bounds = [start, *cuts, end]
        return _Line(start, end, list(itertools.pairwise(bounds)), True, 0 if first == start else 1)

    def _sum_up(self, group: list[_Paragraph]) -> Iterator[_Piece]:
        if not group:
            return
        text = self.text
        texts = [text[s:e] for _, _, lines in group for line in lines for s, e in line.spans]
        counts = iter(self.batch(texts))
        size, overhead = self.size, self.overhead
        for p_start, p_end, lines in group:
            per_line = [[next(counts) - overhead for _ in line.spans] for line in lines]
            total = sum(map(sum, per_line))
            self.chars_seen += p_end - p_start
            self.tokens_seen += total
            if overhead + total <= size:
                line = lines[0]
                # A one-line paragraph's last sentences are its line's.
                tail = _known_sentences(line, per_line[0]) if len(lines) == 1 else ()
                yield _Piece(p_start, p_end, total, 1, tail)
                continue
            for line, tokens in zip(lines, per_line, strict=True):
                l_start, l_end, spans = line.start, line.end, line.spans
                if overhead + sum(tokens) <= size:
                    yield _Piece(l_start, l_end, sum(tokens), 2, _known_sentences(line, tokens))
                elif line.whole:
                    yield from self._split(l_start, l_end, 2)
                else:  # counted by sentences already
                    for (s, e), n in zip(spans, tokens, strict=True):
                        if overhead + n <= size:
                            yield _Piece(s, e, n, 3)
                        else:
                            yield from self._split(s, e, 3)

    def _resolve(self, spans: list[tuple[int, int]], level: int) -> Iterator[_Piece]:
        countable = [(s, e) for s, e in spans if e - s <= MAX_COUNT_CHARS]
        counts = iter(self.batch([self.text[s:e] for s, e in countable])) if countable else iter(())
        for start, end in spans:
            tokens = next(counts) if end - start <= MAX_COUNT_CHARS else None
            if tokens is not None and tokens <= self.size:
                yield _Piece(start, end, tokens - self.overhead, level)
            else:
                yield from self._split(start, end, level)

    def _split(self, start: int, end: int, level: int) -> Iterator[_Piece]:
        """Pieces of a span over the budget (or too long to count): its coarsest separator first."""
        for finer in range(level, _HARD_LEVEL):
            if self._has_cut(finer, start, end):
                yield from self.pieces(self._cuts(finer, start, end), finer + 1)
                return
        yield from self._hard_split(start, end)

    def _hard_split(self, start: int, end: int) -> Iterator[_Piece]:
        # One ratio, from a bounded sample, for the whole run keeps this linear; each window is
        # then shrunk to fit.
        sample = min(end - start, MAX_COUNT_CHARS)
        step = max(1, sample * self.size // max(1, self.count(self.text[start : start + sample])))
        step = min(step, MAX_COUNT_CHARS)
        while start < end:
            window = min(step, end - start)
            n = self.count(self.text[start : start + window])
            while n > self.size and window > 1:
                window = max(1, min(window - 1, window * self.size // n))
                n = self.count(self.text[start : start + window])
            # Inside a word counts do not add up: mark the piece so its chunk is counted whole.
            yield _Piece(start, start + window, n - self.overhead, _HARD_LEVEL)
            start += window

    # --- merging pieces into chunks -------------------------------------------------------------

    def _span_tokens(self, pieces: list[_Piece]) -> int:
        return self.count(self.text[pieces[0].start : pieces[-1].end]) - self.overhead

    def overlap_pieces(self, previous: list[_Piece], budget: int) -> list[_Piece]:
        """Whole trailing pieces of ``previous`` worth at most ``budget`` tokens."""
        taken: list[_Piece] = []
        stack = list(previous)
        while stack and budget > 0:
            piece = stack.pop()
            if piece.tokens < 0:
                piece = piece._replace(tokens=self.count(self.text[piece.start : piece.end]) - self.overhead)
            if piece.tokens <= budget:
                taken.append(piece)
                budget -= piece.tokens
            elif finer := self._split_once(piece, budget):
                stack.extend(finer)  # too big to repeat whole: try its last lines or sentences
            else:
                break
        taken.reverse()
        return taken

    def _split_once(self, piece: _Piece, budget: int) -> list[_Piece]:
        """``piece`` cut at its coarsest separator down to sentences, or [] if it has none.

        Paragraphs and lines come uncounted; sentences come counted, and only the last ones,
        worth more than ``budget`` together: the overlap never reaches the sentences before."""
        if piece.tail:  # a line, or a paragraph of one line: no line to cut it at
            return self._last_sentences(piece, budget)
        for level in range(piece.level, _SENTENCE_LEVEL):
            if self._has_cut(level, piece.start, piece.end):
                return [_Piece(a, b, -1, level + 1) for a, b in self._cuts(level, piece.start, piece.end)]
        return self._last_sentences(piece, budget) if piece.level <= _SENTENCE_LEVEL else []

    def _last_sentences(self, piece: _Piece, budget: int) -> list[_Piece]:
        """The last sentences of ``piece``, counted one by one from the last back until they are
        worth more than ``budget`` tokens together (or all of them); [] if it is one sentence.

        One at a time because the overlap never reaches the sentences before the first that does
        not fit: they are not counted at all (counting the whole window re-counted about a third
        of the text). Sentence ends are looked for in a window at the end of the piece, moved
        back and doubled until it holds enough, so the overlap costs the same whatever the
        paragraph's length. A separator match depends only on the text after its start, so every
        cut found in a window is one of the whole piece's, and so is every sentence between two
        of them; only the sentence ending at the first cut found may start before the window
        (inside a separator it cut), so it is left to the next window."""
        sentences: list[_Piece] = []  # the last one first
        tokens = 0
        bound = piece.end  # the sentences from here on are known and counted
        for (start, end), n in reversed(piece.tail):  # counted with the piece already
            if tokens > budget:
                break
            sentences.append(_Piece(start, end, n, _SENTENCE_LEVEL + 1))
            tokens += n
            bound = start
        window = _TAIL_CHARS
        while bound > piece.start and tokens <= budget:
            first = max(piece.start, bound - window)
            cuts = [m.end() for m in _SEPARATORS[_SENTENCE_LEVEL].finditer(self.text, first, bound)]
            if cuts and cuts[-1] == bound:
                cuts.pop()  # the separator before the sentences already known
            if first == piece.start:
                cuts.insert(0, piece.start)
            for cut in reversed(cuts):
                n = self.count(self.text[cut:bound]) - self.overhead
                sentences.append(_Piece(cut, bound, n, _SENTENCE_LEVEL + 1))
                tokens += n
                bound = cut
                if tokens > budget:
                    break
            window *= 2
        sentences.reverse()
        one = len(sentences) == 1 and sentences[0].start == piece.start
        return [] if one else sentences

    def spans(self, start: int, end: int) -> Iterator[tuple[int, int, int | None]]:
        """``(start, end, tokens)`` of the chunks of one page, text[start:end]; ``tokens`` is None
        when only counting the chunk's text can tell (a counter whose counts do not add up)."""
        current: list[_Piece] = []
        total = 0  # content tokens of ``current``
        page = self.summed_pieces(start, end) if self.additive else self.pieces(iter([(start, end)]), 0)
        for piece in page:
            hard = piece.level == _HARD_LEVEL
            # A chunk is never longer than one count call may be (a counter that sees few tokens in
            # much text, e.g. a word count of base64, would otherwise make chunks without bound).
            too_long = bool(current) and piece.end - current[0].start > MAX_COUNT_CHARS
            over = self.overhead + total + piece.tokens > self.size
            if current and (too_long or over or (hard and self.additive)):
                # Piece counts may add up to more than the joined text counts (a token per piece
                # is rounded up), or, inside a word, to less: count the real span then.
                if not too_long and (not self.additive or hard):
                    real = self._span_tokens([current[0], piece])
                    if self.overhead + real <= self.size:
                        current.append(piece)
                        total = real
                        continue
                yield current[0].start, current[-1].end, total + self.overhead if self.additive else None
                current = self.overlap_pieces(
                    current, min(self.overlap, self.size - self.overhead - piece.tokens)
                )
                current.append(piece)
                while piece.end - current[0].start > MAX_COUNT_CHARS:
                    current.pop(0)  # the overlap too stays within one count call
                if self.additive and _HARD_LEVEL in map(_LEVEL, current[:-1]):
                    total = self._span_tokens(current)
                else:
                    total = sum(map(_TOKENS, current))
                continue
            current.append(piece)
            total += piece.tokens
        if current:
            yield current[0].start, current[-1].end, total + self.overhead if self.additive else None


def iter_chunks(
    text: str,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    token_counter: TokenCounter | None = None,
    batch_counter: BatchCounter | None = None,
    additive: bool = False,
    first_page: int | None = None,
) -> Iterator[ChunkData]:
    """The chunks of ``text`` one by one (see :func:`split_text`), holding only a few at a time."""
    _check_options(chunk_size, chunk_overlap)
    count = token_counter or default_token_counter()
    if batch_counter is not None:
        batch = batch_counter
        # One text through the batch counter too: it is the fast one, and it must agree anyway.
        count = lambda text: batch_counter([text])[0]  # noqa: E731
    else:
        batch = lambda texts: [count(t) for t in texts]  # noqa: E731
    if first_page is None and PAGE_BREAK in text:
        first_page = 1
    splitter = _Splitter(text, chunk_size, chunk_overlap, count, batch, additive)
    index = 0
    pending: list[tuple[int, int, int | None, int | None]] = []  # start, end, tokens, page

    def emit() -> Iterator[ChunkData]:
        nonlocal index
        contents = [text[start:end] for start, end, _, _ in pending]
        unknown = [
            content for content, (_, _, tokens, _) in zip(contents, pending, strict=True) if tokens is None
        ]
        counted = iter(batch(unknown) if unknown else ())
        for content, (start, _, tokens, page) in zip(contents, pending, strict=True):
            chunk_tokens = next(counted) if tokens is None else tokens
            yield ChunkData(
                index=index,
                content=content,
                content_hash=hashlib.sha1(content.encode("utf-8", "surrogatepass")).hexdigest(),
                token_count=chunk_tokens,
                page=page,
                char_start=start,
                char_end=start + len(content),
            )
            index += 1
        pending.clear()

    for page_index, page_start, page_end in _pages(text):
        page = None if first_page is None else first_page + page_index
        for start, end, tokens in splitter.spans(page_start, page_end):
            raw = text[start:end]
            content = raw.strip()
            if not content:
                continue
            char_start = start + len(raw) - len(raw.lstrip())
            pending.append((char_start, char_start + len(content), tokens, page))
            if len(pending) >= _EMIT_BATCH:
                yield from emit()
    yield from emit()


_LEVEL = operator.attrgetter("level")
_TOKENS = operator.attrgetter("tokens")


def _known_sentences(line: _Line, tokens: list[int]) -> tuple[_Sentence, ...]:
    """The last sentences of ``line`` with their counts (``tokens``, one per span)."""
    return tuple(zip(line.spans[line.known :], tokens[line.known :], strict=True))


def _pages(text: str) -> Iterator[tuple[int, int, int]]:
    """``(index, start, end)`` of every page of ``text`` that is not blank, pages split at ``\\f``."""
    start = 0
    for index in itertools.count():
        end = text.find(PAGE_BREAK, start)
        stop = len(text) if end < 0 else end
        if not _blank(text, start, stop):
            yield index, start, stop
        if end < 0:
            return
        start = end + len(PAGE_BREAK)


_NOT_SPACE = re.compile(r"\S")


def _blank(text: str, start: int, end: int) -> bool:
    return _NOT_SPACE.search(text, start, end) is None


def split_text(
    text: str,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    token_counter: TokenCounter | None = None,
    batch_counter: BatchCounter | None = None,
    additive: bool = False,
    first_page: int | None = None,
) -> list[ChunkData]:
    """Split ``text`` into chunks of at most ``chunk_size`` tokens that never cross a ``\\f``.

    ``page`` is ``first_page`` plus the number of page breaks before the chunk; ``first_page``
    defaults to 1 when the text holds a page break and to ``None`` (no page) otherwise.
    """
    return list(
        iter_chunks(
            text,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            token_counter=token_counter,
            batch_counter=batch_counter,
            additive=additive,
            first_page=first_page,
        )
    )


@dataclass(frozen=True)
class Chunker:
    """Chunking options a collection carries (``CHUNK_SIZE``, ``CHUNK_OVERLAP``), validated once."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    token_counter: TokenCounter | None = None
    batch_counter: BatchCounter | None = None
    additive: bool = False

    def __post_init__(self) -> None:
        _check_options(self.chunk_size, self.chunk_overlap)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None) -> Chunker:
        """Build from a settings dict such as ``{"CHUNK_SIZE": 512, "CHUNK_OVERLAP": 64}``."""
        lowered = {key.lower(): value for key, value in (options or {}).items()}
        return cls(
            chunk_size=lowered.get("chunk_size", DEFAULT_CHUNK_SIZE),
            chunk_overlap=lowered.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP),
        )

    def iter_text(self, text: str, *, first_page: int | None = None) -> Iterator[ChunkData]:
        return iter_chunks(
            text,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            token_counter=self.token_counter,
            batch_counter=self.batch_counter,
            additive=self.additive,
            first_page=first_page,
        )

    def split_text(self, text: str, *, first_page: int | None = None) -> list[ChunkData]:
        return list(self.iter_text(text, first_page=first_page))

    def iter_document(self, doc: RagDocument) -> Iterator[ChunkData]:
        """Chunks of ``doc`` one by one; a ``page`` in its metadata numbers the page its text starts on."""
        page = doc.metadata.get("page")
        if isinstance(page, str) and page.isdigit():
            page = int(page)
        first_page = page if isinstance(page, int) and not isinstance(page, bool) else None
        return self.iter_text(doc.text, first_page=first_page)

    def chunk_document(self, doc: RagDocument) -> list[ChunkData]:
        """Chunks of ``doc``; a ``page`` in its metadata numbers the page its text starts on."""
        return list(self.iter_document(doc))


def chunk_document(
    doc: RagDocument,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    token_counter: TokenCounter | None = None,
    batch_counter: BatchCounter | None = None,
    additive: bool = False,
) -> list[ChunkData]:
    """Chunks of one loaded document (see :meth:`Chunker.chunk_document`)."""
    return Chunker(chunk_size, chunk_overlap, token_counter, batch_counter, additive).chunk_document(doc)
