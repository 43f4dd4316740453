"""What the commands print about stored things (source ids, titles, paths, errors), made terminal-safe.

A file may be named ``"\\x1b]0;owned\\x07report.md"`` or ``"a\\nfailed  unreadable  b.md"``:
printed raw, the first drives the operator's terminal, the second forges a line of the report.
Every command prints such values through ``printable`` (or ``printable_json``), which writes
control characters as escapes, as Python writes them in a string literal (``\\x1b``, ``\\n``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.core.management.base import BaseCommand, CommandError

__all__ = ["RagCommand", "printable", "printable_json"]

# C0 and C1 controls, DEL, and the Unicode line separators and bidirectional overrides (which
# reorder what the terminal shows, as in "Trojan Source").
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_BUT_NEWLINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# Left alone by json.dumps(ensure_ascii=False), and still read by a terminal.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(value: object, *, lines: bool = False) -> str:
    """``str(value)`` with its control characters escaped; ``lines=True`` keeps newlines and tabs (prose)."""
    return (_UNSAFE_BUT_NEWLINE if lines else _UNSAFE).sub(_escape, str(value))


def printable_json(value: Any, **kwargs: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)`` with the characters JSON leaves raw but a terminal
    reads (DEL, C1 controls, line separators, bidi overrides) written as ``\\uXXXX`` escapes."""
    text = json.dumps(value, ensure_ascii=False, **kwargs)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class RagCommand(BaseCommand):
    """The commands' base: a ``CommandError`` raised with a stored name in it is printed escaped too."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except CommandError as exc:
            if type(exc) is not CommandError:  # SystemCheckError's text carries the checks' colours
                raise
            raise CommandError(printable(exc, lines=True), returncode=exc.returncode) from exc
