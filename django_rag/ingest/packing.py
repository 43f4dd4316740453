"""The chunker's packing: counted headings and sentences into chunks within the token budget.

``chunking`` is the public face (``split_text``, ``Chunker``...); this module holds the one
streaming pass behind it: pages, batches of counts, heading paths and contextual headers,
paragraphs kept whole, long sentences cut, whole-sentence overlap.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple, cast

from .segments import Heading, Sentence, new_fence, scan_page
from .tokens import TokenCounting

__all__ = [
    "BATCH_CHARS",
    "HEADER_SEPARATOR",
    "MAX_COUNT_CHARS",
    "MAX_PAGES",
    "PAGE_BREAK",
    "Splitter",
    "context_header",
    "embedded_text",
    "pages",
]

# Characters of sentences counted in one batch call, and the longest text counted at all.
BATCH_CHARS = 64 * 1024
MAX_COUNT_CHARS = 64 * 1024
PAGE_BREAK = "\f"
# Page breaks honoured in one text (a PDF loader stops at RAG["LOADERS"]["PDF_MAX_PAGES"], 10,000).
MAX_PAGES = 100_000
HEADER_SEPARATOR = " > "

# A whole sentence, a heading line, a piece of a long sentence; a page's start (``start``: its index).
_SENTENCE, _HEADING, _FRAGMENT, _PAGE = 0, 1, 2, 3
# Items (sentences, headings, pages) counted in one batch call at most: many tiny pages or
# sentences cost one call per batch, not one each.
_BATCH_ITEMS = 4096


_second = operator.itemgetter(1)


class _Unit(NamedTuple):
    start: int
    end: int
    tokens: int  # content tokens; -1: too long to count, to be cut
    kind: int


@dataclass(frozen=True)
class _Section:
    path: tuple[str, ...] = ()
    header: str = ""
    header_tokens: int = 0


def context_header(title: str, path: tuple[str, ...] | list[str]) -> str:
    """The contextual header of a chunk: the document's title and its heading path.

    The title is left out when the path already starts with it (a Markdown document's ``# Title``).
    """
    parts = [p for p in path if p]
    if title and (not parts or parts[0].casefold() != title.casefold()):
        parts.insert(0, title)
    return HEADER_SEPARATOR.join(parts)


class Splitter:
    """One text's pass: ``spans()`` gives its chunks' offsets, counts, sections and pages."""

    def __init__(self, text: str, size: int, overlap: int, count: TokenCounting, title: str | None) -> None:
        self.text = text
        self.size = size
        self.overlap = overlap
        self.count = count
        self.title = title  # None: no contextual headers
        self.levels: list[tuple[int, str]] = []  # the heading path: (level, title)
        self.section = self._section()
        self.room = self._room(self.section)
        self.fence = new_fence()

    # --- counting: headings and sentences in batches, with their sections ---------------------

    def _section(self) -> _Section:
        path = tuple(map(_second, self.levels))
        if self.title is None:
            return _Section(path)
        header = context_header(self.title, path)
        if not header:
            return _Section(path)
        tokens = self.count.one(header)
        limit = max(1, self.size // 4)
        while tokens > limit and header:  # a header never takes more than a quarter of a chunk
            header = header[: max(0, len(header) * limit // tokens - 1)].rstrip()
            tokens = self.count.one(header) if header else 0
        return _Section(path, header, tokens)

    def _counted(self) -> Iterator[tuple[_Unit, bool, _Section | None]]:
        """``(unit, first of its paragraph, the section a heading opens)`` for the whole text,
        counted, with a ``_PAGE`` unit before each page that is not blank."""
        batch: list[Heading | Sentence | _Unit] = []
        chars = 0
        for page_index, start, end in pages(self.text):
            batch.append(_Unit(page_index, page_index, 0, _PAGE))
            for item in scan_page(self.text, start, end, self.fence):
                batch.append(item)
                chars += item[1] - item[0]  # end - start, by index: this runs once per sentence
                if chars >= BATCH_CHARS or len(batch) >= _BATCH_ITEMS:
                    yield from self._count_batch(batch)
                    batch, chars = [], 0
        yield from self._count_batch(batch)

    def _count_batch(
        self, batch: list[Heading | Sentence | _Unit]
    ) -> Iterator[tuple[_Unit, bool, _Section | None]]:
        text = self.text
        counted = [
            text[i[0] : i[1]] for i in batch if type(i) is not _Unit and i[1] - i[0] <= MAX_COUNT_CHARS
        ]
        counts = iter(self.count.many(counted))
        # Once per sentence: type() identity and tuple indexes, not isinstance() and attributes.
        for item in batch:
            if type(item) is _Unit:
                yield item, True, None
                continue
            start, end = item[0], item[1]
            tokens = next(counts) if end - start <= MAX_COUNT_CHARS else -1
            if type(item) is Sentence:
                yield _Unit(start, end, tokens, _SENTENCE), item.first, None
                continue
            heading = cast(Heading, item)
            levels, level = self.levels, heading.level
            while levels and levels[-1][0] >= level:
                levels.pop()
            levels.append((level, heading.title))
            yield _Unit(start, end, tokens, _HEADING), True, self._section()

    # --- packing units into chunks ------------------------------------------------------------

    def spans(self) -> Iterator[tuple[int, int, int, _Section, int]]:
        """``(start, end, tokens, section, page index)`` of the chunks of the text."""
        self.current: list[_Unit] = []
        self.total = 0
        self.page = 0
        self.chunk_section = self.section
        self.out: list[tuple[int, int, int, _Section, int]] = []
        units = self._counted()
        ahead: list[tuple[_Unit, bool, _Section | None]] = []
        while item := (ahead.pop() if ahead else next(units, None)):
            unit, first, section = item
            if unit.kind == _PAGE:
                self._close(carry=False)  # a chunk never crosses a page break
                self.page = unit.start
            elif section is not None:
                self._heading(unit, section)
            elif first:
                # A paragraph that fits goes whole into one chunk: look ahead at most a chunk's worth.
                paragraph = [unit]
                tokens = unit.tokens if unit.tokens >= 0 else self.size + 1
                while tokens <= self.room:
                    following = next(units, None)
                    if following is None:
                        break
                    if following[1] or following[2] is not None:  # the next paragraph, a heading, a page
                        ahead.append(following)
                        break
                    paragraph.append(following[0])
                    tokens += following[0].tokens if following[0].tokens >= 0 else self.size + 1
                if tokens <= self.room:
                    self._paragraph(paragraph, tokens)
                else:
                    for sentence in paragraph:
                        self._add(sentence)
            else:
                self._add(unit)
            yield from self.out
            self.out.clear()
        self._close(carry=False)
        yield from self.out
        self.out.clear()

    def _room(self, section: _Section) -> int:
        """Content tokens a chunk of ``section`` may hold."""
        return max(1, self.size - self.count.overhead - section.header_tokens)

    def _has_body(self) -> bool:
        # Heading lines only ever open a chunk: a chunk has a body once its last unit is not one.
        return bool(self.current) and self.current[-1].kind != _HEADING

    def _heading(self, unit: _Unit, section: _Section) -> None:
        if self._has_body():
            self._close(carry=False)
        self.section = self.chunk_section = section
        self.room = self._room(section)
        if unit.tokens < 0 or self.total + unit.tokens > self.room:
            self._long(unit)
            return
        self.current.append(unit)
        self.total += unit.tokens

    def _paragraph(self, units: list[_Unit], tokens: int) -> None:
        if self.total + tokens > self.room:
            if not self._has_body():  # after heading lines: fill with its sentences
                for unit in units:
                    self._add(unit)
                return
            self._close(carry=True, next_tokens=tokens)
        self.chunk_section = self.section
        self.current.extend(units)
        self.total += tokens

    def _add(self, unit: _Unit) -> None:
        if unit.tokens < 0 or unit.tokens > self.room:
            self._long(unit)
            return
        if self.total + unit.tokens > self.room:
            # After heading lines only, they make a chunk of their own rather than cut the sentence.
            self._close(carry=self._has_body(), next_tokens=unit.tokens)
        self.chunk_section = self.section
        self.current.append(unit)
        self.total += unit.tokens

    def _long(self, unit: _Unit) -> None:
        """A sentence (or heading line) longer than a chunk: cut into pieces that fit, the first
        joining the heading lines of the chunk being built, the last left open for what follows."""
        if self._has_body() or self.room - self.total < self.room // 4:
            self._close(carry=False)
        self.chunk_section = self.section
        for piece in self._pieces(unit.start, unit.end, self.room - self.total):
            if self._has_body():
                self._close(carry=False)
            self.current.append(piece)
            self.total += piece.tokens

    def _pieces(self, start: int, end: int, room: int) -> Iterator[_Unit]:
        """``text[start:end]`` cut into pieces of at most ``room`` tokens (the first), then
        ``self.room``: at the last line break, else whitespace, in the second half of a window
        sized by the characters per token of a bounded sample; else anywhere."""
        text, count = self.text, self.count
        sample = min(end, start + 4096)
        per_token = max(0.25, (sample - start) / max(1, count.one(text[start:sample])))
        room = max(1, room)
        while start < end:
            width = max(1, min(end - start, MAX_COUNT_CHARS, int(room * per_token)))
            cut = _cut(text, start, start + width, end)
            tokens = count.one(text[start:cut])
            while tokens > room and cut - start > 1:
                width = max(1, min(cut - start - 1, (cut - start) * room // max(1, tokens)))
                cut = _cut(text, start, start + width, end)
                tokens = count.one(text[start:cut])
            yield _Unit(start, cut, tokens, _FRAGMENT)
            start = cut
            room = self.room

    def _close(self, *, carry: bool, next_tokens: int = 0) -> None:
        current = self.current
        if not current:
            return
        section = self.chunk_section
        tokens = self.count.overhead + section.header_tokens + self.total
        if not (self.count.additive and self._sums_up(current)):
            tokens = self._real_count(current, section)
            while tokens > self.size and len(current) > 1 and current[-1].kind != _HEADING:
                # Counts that do not add up went over the budget: the last unit opens the next chunk.
                last = current.pop()
                self.total -= last.tokens
                self._emit(current, section, self._real_count(current, section))
                self.current, self.total = [last], last.tokens
                return
        self._emit(current, section, tokens)
        keep: list[_Unit] = []
        if carry and self.overlap:
            budget = min(self.overlap, self.room - next_tokens)
            for unit in reversed(current):
                if unit.kind != _SENTENCE or unit.tokens > budget:
                    break
                keep.append(unit)
                budget -= unit.tokens
            keep.reverse()
        self.current = keep
        self.total = sum(unit.tokens for unit in keep)

    def _sums_up(self, units: list[_Unit]) -> bool:
        text = self.text
        return all(a.end < b.start or text[a.end - 1].isspace() for a, b in itertools.pairwise(units))

    def _real_count(self, units: list[_Unit], section: _Section) -> int:
        content = self.text[units[0].start : units[-1].end].strip()
        return self.count.one(embedded_text(section.header, content)) + self.count.overhead

    def _emit(self, units: list[_Unit], section: _Section, tokens: int) -> None:
        self.out.append((units[0].start, units[-1].end, tokens, section, self.page))


def _cut(text: str, start: int, limit: int, end: int) -> int:
    if limit >= end:
        return end
    half = start + (limit - start) // 2
    for mark in ("\n", " "):
        found = text.rfind(mark, half, limit)
        if found >= 0:
            return found + 1
    return limit


def embedded_text(header: str, content: str) -> str:
    """What is embedded and matched for a chunk (``ChunkData.embedded_text``)."""
    return f"{header}\n\n{content}" if header else content


def pages(text: str) -> Iterator[tuple[int, int, int]]:
    """``(index, start, end)`` of every page of ``text`` that is not blank, pages split at ``\\f``.

    After ``MAX_PAGES`` pages the rest of the text is one last page (its form feeds whitespace):
    megabytes of ``x\\f`` would otherwise make a chunk of every two bytes."""
    start = 0
    index = 0
    while True:
        end = text.find(PAGE_BREAK, start) if index < MAX_PAGES - 1 else -1
        stop = len(text) if end < 0 else end
        if stop > start and not text[start:stop].isspace():
            yield index, start, stop
        if end < 0:
            return
        start = end + 1
        index += 1
