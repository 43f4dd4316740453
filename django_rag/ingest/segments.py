"""Where the chunker may cut a page: Markdown ATX headings, paragraphs and sentences.

Loaders emit a document's headings as Markdown ATX lines (``# Title``, ``## Section``, the
loaders' contract); a heading inside a fenced code block is text. Paragraphs end at blank lines.
Sentences end at ``.``, ``!``, ``?`` or ``…`` (with closing quotes or brackets) followed by
whitespace and not by a lowercase letter, unless the word before a single ``.`` is an
abbreviation ("e.g.", "Dr.", an initial); or at CJK full stops; or at a line break before a list
item, a quote or a table row. A line break inside a paragraph is otherwise a wrapped line
(PDF text, e-mail), not a boundary. After ``MAX_HEADING_RUN`` heading lines in a row with no
text between them, the rest of the run is text.

Every pattern is written so that a match is tried only where it can start (a run of
punctuation only at its first character, possessive quantifiers, no lazy quantifier before an
anchor), so scanning is linear in the text on any input, e.g. megabytes of ``.`` with no space.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["MAX_HEADING_RUN", "Heading", "Sentence", "heading_title", "scan_page"]

# After a line break: a blank line (a paragraph break), a heading line, or a code fence (its line
# stays text). Each starts with one character, "\n", so ``re`` skips to candidates in C; a blank
# line leaves its own "\n" for the next match, which may be a heading.
_BLOCK = re.compile(
    r"\n(?:[^\S\n]*+(?=\n)(?P<para>)|[ ]{0,3}(?:(?P<heading>#{1,6})(?:[ \t][^\n]*+)?$|(?P<fence>```|~~~)))",
    re.MULTILINE,
)
# The same at the start of a page.
_FIRST_LINE = re.compile(
    r"[ ]{0,3}(?:(?P<heading>#{1,6})(?:[ \t][^\n]*+)?$|(?P<fence>```|~~~))", re.MULTILINE
)
_CLOSERS = "\"'\u201d\u2019\u00bb)\\]"
# A sentence end, a CJK one, or a line break before a list item, a quote or a table row. One
# character class first (then ``re`` skips ahead in C); the lookbehinds after it let a run of
# punctuation match only at its first character, so a run is scanned once, not once per character.
_SENTENCE = re.compile(
    r"[.!?\u2026\u3002\uff01\uff1f\n]"
    rf"(?:(?<=[.!?\u2026])(?<![.!?\u2026]{{2}})(?P<end>[.!?\u2026]*+)[{_CLOSERS}]*+\s++"
    rf"|(?<=[\u3002\uff01\uff1f])(?<![\u3002\uff01\uff1f]{{2}})[\u3002\uff01\uff1f]*+[{_CLOSERS}]*+\s*+(?P<cjk>)"
    r"|(?<=\n)(?P<line>)[^\S\n]*+(?=[-*+\u2022>|]|\d{1,9}[.)][ \t]))"
)
_NOT_SPACE = re.compile(r"\S")
# Words that a single "." follows inside a sentence (compared lowercased, without the dot).
_ABBREVIATIONS = frozenset(
    {
        *("al", "approx", "ca", "cf", "dept", "dr", "e.g", "eg", "etc", "fig", "figs", "i.e", "ie", "jr"),
        *("mr", "mrs", "ms", "no", "nos", "p", "pp", "prof", "sr", "st", "vol", "vols", "vs"),
    }
)
_WORD_LOOKBACK = 16
MAX_TITLE_CHARS = 120
# Heading lines in a row (no text between them) read as headings; the rest of the run is text.
# A document opens a section with a few; megabytes of "# h" lines would otherwise each open a
# chunk section of their own, in Python, at a few microseconds each (0.4 MB/s).
MAX_HEADING_RUN = 64


class Heading(NamedTuple):
    start: int
    end: int
    level: int
    title: str


class Sentence(NamedTuple):
    start: int
    end: int
    first: bool  # the first sentence of its paragraph


class _Fence:
    """Whether the scan is inside a fenced code block (it goes on across pages)."""

    def __init__(self) -> None:
        self.open = False


def scan_page(text: str, start: int, end: int, fence: _Fence | None = None) -> Iterator[Heading | Sentence]:
    """Headings and sentences of ``text[start:end]`` in order; sentences tile each paragraph."""
    fence = fence or _Fence()
    position = start
    run = 0  # heading lines in a row, with only blank lines between them
    heading_end = start
    first = _FIRST_LINE.match(text, start, end)
    matches = _BLOCK.finditer(text, start, end)
    for match in itertools.chain((first,) if first else (), matches):
        kind = match.lastgroup
        if kind == "fence":
            fence.open = not fence.open
            continue
        if kind == "heading" and fence.open:
            continue
        begin, stop = match.span()
        if kind == "heading":
            blank = begin == heading_end or _NOT_SPACE.search(text, heading_end, begin) is None
            run = run + 1 if blank else 1
            heading_end = stop
            if run > MAX_HEADING_RUN:
                continue  # text, in the paragraph it is part of
        if begin > position:  # nothing between two heading lines: no call
            yield from _sentences(text, position, begin)
        if kind == "heading":
            marks = match.end("heading")
            level = marks - match.start("heading")
            yield Heading(begin, stop, level, heading_title(text, stop, marks))
        position = stop
    yield from _sentences(text, position, end)


def new_fence() -> _Fence:
    return _Fence()


def heading_title(text: str, end: int, after_marks: int) -> str:
    """The words of an ATX heading line (its closing ``#`` run dropped), at most ``MAX_TITLE_CHARS``."""
    title = text[after_marks : min(end, after_marks + MAX_TITLE_CHARS + 8)].strip()
    if title.isalnum():
        return title[:MAX_TITLE_CHARS]  # one word: nothing to drop or join
    bare = title.rstrip("#")
    if bare != title and (not bare or bare[-1] in " \t"):
        title = bare.rstrip()
    return " ".join(title.split())[:MAX_TITLE_CHARS]


def _sentences(text: str, start: int, end: int) -> Iterator[Sentence]:
    if _NOT_SPACE.search(text, start, end) is None:
        return
    first = True
    position = start
    for match in _SENTENCE.finditer(text, start, end):
        cut = match.end()
        if cut >= end:
            break
        if match.lastgroup == "end" and not _ends_sentence(text, start, match, cut):
            continue
        yield Sentence(position, cut, first)
        first = False
        position = cut
    yield Sentence(position, end, first)


def _ends_sentence(text: str, start: int, match: re.Match[str], cut: int) -> bool:
    if text[cut].islower():
        return False  # "approx. five", "It broke... and then"
    stop = match.start()
    if match.group("end") or text[stop] != ".":
        return True
    floor = max(start, stop - _WORD_LOOKBACK)
    begin = max(text.rfind(" ", floor, stop), text.rfind("\n", floor, stop), text.rfind("(", floor, stop))
    if begin < 0 and floor > start:
        return True  # a long word: not an abbreviation
    word = text[begin + 1 : stop]
    if len(word) == 1:
        return not word.isalpha()  # an initial: "J. Smith"
    return "." not in word and word.lower() not in _ABBREVIATIONS
