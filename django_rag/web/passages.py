"""A document's stored text for the source view: each passage once, Markdown shown as text.

Chunks overlap (the chunker repeats the end of one at the start of the next); the source view
shows the document, so each passage starts where the previous one ended. Headings and list
items are rendered as such and every piece of text is escaped: a stored document never adds
markup of its own to the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..models import Chunk
from ..search.grouping import markdown_to_text

__all__ = ["Passage", "document_passages", "render_markdown"]

_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d{1,9}[.)]\s+(.*)$")


@dataclass
class Passage:
    """One chunk as the source view shows it: its index, page and text without the overlap."""

    index: int
    page: int | None
    text: str
    current: bool = False

    @property
    def html(self) -> SafeString:
        return render_markdown(self.text)


def _overlap(previous: Chunk, chunk: Chunk) -> int:
    """How many leading characters of ``chunk`` repeat the end of ``previous``."""
    content = chunk.content
    if (
        previous.char_end > chunk.char_start >= previous.char_start
        and chunk.char_end - chunk.char_start == len(content)
    ):
        return min(previous.char_end - chunk.char_start, len(content))
    # Offsets that do not describe the text: find the repeated text itself (longest first).
    tail = previous.content[-len(content) :]
    for size in range(min(len(tail), len(content)), 0, -1):
        if tail.endswith(content[:size]):
            return size if size >= 8 else 0  # a few shared letters are chance, not overlap
    return 0


def document_passages(chunks: Iterable[Chunk], current: int | None = None) -> list[Passage]:
    """The chunks in order, each without what the previous one already showed."""
    passages: list[Passage] = []
    previous: Chunk | None = None
    for chunk in chunks:
        text = chunk.content
        if previous is not None:
            text = text[_overlap(previous, chunk) :]
        passages.append(
            Passage(index=chunk.index, page=chunk.page, text=text, current=chunk.index == current)
        )
        previous = chunk
    return passages


def render_markdown(text: str) -> SafeString:
    """Markdown as escaped HTML of headings, lists and paragraphs (no raw HTML, no links)."""
    blocks: list[str] = []
    paragraph: list[str] = []
    items: list[str] = []
    ordered = False

    def flush() -> None:
        nonlocal items
        if paragraph:
            blocks.append(f"<p>{escape(' '.join(paragraph))}</p>")
            paragraph.clear()
        if items:
            tag = "ol" if ordered else "ul"
            blocks.append(f"<{tag}>" + "".join(f"<li>{escape(item)}</li>" for item in items) + f"</{tag}>")
            items = []

    for line in markdown_to_text(_keep_markers(text), headings=True).splitlines():
        heading = re.match(r"^\x00H([1-6])\x00(.*)$", line)
        bullet = re.match(r"^\x00([UO])\x00(.*)$", line)
        if heading:
            flush()
            # Headings inside a document's text sit below the page's own h1 and h2.
            level = min(int(heading.group(1)) + 2, 6)
            blocks.append(f"<h{level}>{escape(heading.group(2))}</h{level}>")
        elif bullet:
            if paragraph or (items and ordered != (bullet.group(1) == "O")):
                flush()
            ordered = bullet.group(1) == "O"
            items.append(bullet.group(2))
        elif not line.strip():
            flush()
        elif items and line.startswith((" ", "\t")):
            items[-1] += " " + line.strip()  # a list item's continuation line
        else:
            if items:
                flush()
            paragraph.append(line.strip())
    flush()
    # Every piece of stored text went through escape() above; only our own tags are markup.
    return mark_safe("\n".join(blocks))


def _keep_markers(text: str) -> str:
    """Tag heading and list lines, so that they survive ``markdown_to_text`` as what they were."""
    out = []
    for line in text.splitlines():
        heading = _HEADING.match(line)
        bullet = _BULLET.match(line)
        numbered = _NUMBERED.match(line)
        if heading:
            out.append(f"\x00H{len(heading.group(1))}\x00{heading.group(2)}")
        elif bullet:
            out.append(f"\x00U\x00{bullet.group(1)}")
        elif numbered:
            out.append(f"\x00O\x00{numbered.group(1)}")
        else:
            out.append(line)
    return "\n".join(out)
