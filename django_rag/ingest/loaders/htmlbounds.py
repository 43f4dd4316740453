"""Markup that can never close is made text before ``html.parser`` sees it (linear time).

Python's ``html.parser`` (before 3.13.4 / 3.12.11 / 3.11.13, gh-135462) looks for the end of a
construct that has none from where it starts to the end of the document, then gives up one
character later and looks again: megabytes of ``</``, of unclosed ``<a`` or of ``<!--`` cost
time quadratic in their length (128 KB of ``<a`` took over 40 s). Browsers read such markup as
text. So, in one pass each:

- a ``<!--`` after the last ``-->`` (or ``--!>``), and a ``<![`` after the last ``]]>`` or
  ``]>``, can never close: their ``<`` becomes ``&lt;``;
- then, comments and marked sections left alone (they may hold tags), a ``<`` with no ``>``
  before the next ``<`` (or the end) cannot start a tag: it becomes ``&lt;``.

What is left closes where the parser looks, so each search ends at a closer it consumes.
"""

from __future__ import annotations

import re

__all__ = ["neutralize_unclosed_markup"]

_COMMENT_CLOSE = re.compile(r"--!?\s*+>")
_SECTION_CLOSE = re.compile(r"\]\s*+\]?\s*+>")
# A comment or marked section (each has a closer after it by now: the lazy scan stops there), or
# a "<" that no ">" follows before the next "<".
# A run of such "<" (each with the text up to the next) is one match, so that megabytes of "</"
# cost a call per run, not one per "<" (the run is bounded: ``re`` keeps a mark per repetition).
# A "<" opening a comment or marked section never starts a run: it has a closer by now.
_NO_TAG_END = re.compile(
    r"(<!--.*?--!?\s*+>|<!\[.*?\]\s*+\]?\s*+>)|(?:<(?!!--|!\[)[^<>]*+){1,4096}(?=<|\Z)", re.DOTALL
)


def neutralize_unclosed_markup(html: str, lt: str = "&lt;") -> str:
    """``html`` with every ``<`` that cannot begin a complete construct written as ``lt``."""
    if "<" not in html:
        return html
    html = _escape_after_last(html, "<!--", _COMMENT_CLOSE, lt)
    html = _escape_after_last(html, "<![", _SECTION_CLOSE, lt)
    return _NO_TAG_END.sub(lambda match: match.group(1) or match.group(0).replace("<", lt), html)


def _escape_after_last(html: str, opener: str, closer: re.Pattern[str], lt: str) -> str:
    first = html.find(opener)
    if first < 0:
        return html
    last_close = -1
    for match in closer.finditer(html, first):
        last_close = match.end()
    tail_start = max(first, last_close)
    tail = html[tail_start:]
    if opener not in tail:
        return html
    return html[:tail_start] + tail.replace(opener, lt + opener[1:])
