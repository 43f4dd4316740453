"""A recursive, token-aware, page-aware text splitter.

Text is cut at the coarsest separator that brings each piece within the token budget: page
break (``\\f``, never crossed), blank line, line, sentence end, whitespace, then a hard split
inside a word as a last resort. Pieces are merged greedily into chunks of at most
``chunk_size`` tokens; each chunk after the first starts with whole trailing pieces of the
previous one (at most ``chunk_overlap`` tokens, refined down to sentences when needed).

Offsets invariant: every chunk's ``content`` is non-empty, has no leading or trailing
whitespace, and equals ``text[chunk.char_start:chunk.char_end]``.

Token counting uses tiktoken's ``cl100k_base`` when it is installed and its data loads
(offline: from tiktoken's cache). Otherwise :func:`estimate_tokens` counts one token per four
ASCII characters (rounded up) plus one per non-ASCII character. Either way pass
``token_counter`` to use a model's own tokenizer. The budget holds exactly for subadditive
counters (the estimate, word counts): a chunk never counts more than the pieces it joins.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, NamedTuple

from ..exceptions import ConfigurationError
from ..types import ChunkData, RagDocument

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "Chunker",
    "chunk_document",
    "default_token_counter",
    "estimate_tokens",
    "split_text",
]

DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 32

TokenCounter = Callable[[str], int]

PAGE_BREAK = "\f"
# Coarsest first; a level is tried only on pieces still over budget. A separator stays with
# the piece before it, so pieces tile the text with no gaps.
_SEPARATORS = (
    re.compile(r"\n[^\S\n]*\n\s*"),  # paragraph: a blank line and the whitespace after it
    re.compile(r"\n\s*"),  # line
    # sentence end, punctuation kept with its sentence (the lookahead only makes scanning faster)
    re.compile(
        r"(?=[.!?\u2026\u3002\uff01\uff1f])(?:[.!?\u2026]+[\"'\u201d\u2019\u00bb)\]]*\s+|[\u3002\uff01\uff1f]+\s*)"
    ),
    re.compile(r"\s+"),  # word
)
_SENTENCE_LEVEL = 2
_HARD_LEVEL = len(_SEPARATORS)


class _Piece(NamedTuple):
    start: int
    end: int
    tokens: int
    level: int  # the next separator to try if this piece must be split further


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
    def __init__(self, text: str, size: int, overlap: int, count: TokenCounter) -> None:
        self.text = text
        self.size = size
        self.overlap = overlap
        self.count = count

    def _cuts(self, level: int, start: int, end: int) -> list[int]:
        return [m.end() for m in _SEPARATORS[level].finditer(self.text, start, end) if m.end() < end]

    def pieces(self, start: int, end: int, level: int, out: list[_Piece]) -> None:
        """Append pieces tiling text[start:end], each within the budget."""
        tokens = self.count(self.text[start:end])
        if tokens <= self.size:
            out.append(_Piece(start, end, tokens, level))
            return
        for finer in range(level, _HARD_LEVEL):
            if cuts := self._cuts(finer, start, end):
                for cut in (*cuts, end):
                    self.pieces(start, cut, finer + 1, out)
                    start = cut
                return
        self._hard_split(start, end, tokens, out)

    def _hard_split(self, start: int, end: int, tokens: int, out: list[_Piece]) -> None:
        # One ratio for the whole run keeps this linear; each window is then shrunk to fit.
        step = max(1, (end - start) * self.size // tokens)
        while start < end:
            window = min(step, end - start)
            n = self.count(self.text[start : start + window])
            while n > self.size and window > 1:
                window = max(1, min(window - 1, window * self.size // n))
                n = self.count(self.text[start : start + window])
            out.append(_Piece(start, start + window, n, _HARD_LEVEL))
            start += window

    def overlap_pieces(self, previous: list[_Piece], budget: int) -> list[_Piece]:
        """Whole trailing pieces of ``previous`` worth at most ``budget`` tokens."""
        taken: list[_Piece] = []
        stack = list(previous)
        while stack and budget > 0:
            piece = stack.pop()
            if piece.tokens < 0:
                piece = piece._replace(tokens=self.count(self.text[piece.start : piece.end]))
            if piece.tokens <= budget:
                taken.append(piece)
                budget -= piece.tokens
            elif finer := self._split_once(piece):
                stack.extend(finer)  # too big to repeat whole: try its last lines or sentences
            else:
                break
        taken.reverse()
        return taken

    def _split_once(self, piece: _Piece) -> list[_Piece]:
        """``piece`` cut at its coarsest separator down to sentences (uncounted), or []."""
        for level in range(piece.level, _SENTENCE_LEVEL + 1):
            if cuts := self._cuts(level, piece.start, piece.end):
                return [_Piece(a, b, -1, level + 1) for a, b in pairwise([piece.start, *cuts, piece.end])]
        return []

    def chunks(self, start: int, end: int) -> list[tuple[int, int]]:
        """Character spans of the chunks of one page, text[start:end]."""
        pieces: list[_Piece] = []
        self.pieces(start, end, 0, pieces)
        spans: list[tuple[int, int]] = []
        current: list[_Piece] = []
        total = 0
        for piece in pieces:
            if current and total + piece.tokens > self.size:
                # Piece counts add up to more than the joined text counts (a token per piece is
                # rounded up or split): count the real span before giving up on this chunk.
                total = self.count(self.text[current[0].start : piece.end])
                if total <= self.size:
                    current.append(piece)
                    continue
                spans.append((current[0].start, current[-1].end))
                current = self.overlap_pieces(current, min(self.overlap, self.size - piece.tokens))
                total = sum(p.tokens for p in current)
            current.append(piece)
            total += piece.tokens
        if current:
            spans.append((current[0].start, current[-1].end))
        return spans


def split_text(
    text: str,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    token_counter: TokenCounter | None = None,
    first_page: int | None = None,
) -> list[ChunkData]:
    """Split ``text`` into chunks of at most ``chunk_size`` tokens that never cross a ``\\f``.

    ``page`` is ``first_page`` plus the number of page breaks before the chunk; ``first_page``
    defaults to 1 when the text holds a page break and to ``None`` (no page) otherwise.
    """
    _check_options(chunk_size, chunk_overlap)
    count = token_counter or default_token_counter()
    if first_page is None and PAGE_BREAK in text:
        first_page = 1
    splitter = _Splitter(text, chunk_size, chunk_overlap, count)
    chunks: list[ChunkData] = []
    page_start = 0
    for page_index, page_text in enumerate(text.split(PAGE_BREAK)):
        page_end = page_start + len(page_text)
        if page_text.strip():
            page = None if first_page is None else first_page + page_index
            for start, end in splitter.chunks(page_start, page_end):
                raw = text[start:end]
                content = raw.strip()
                if not content:
                    continue
                char_start = start + len(raw) - len(raw.lstrip())
                chunks.append(
                    ChunkData(
                        index=len(chunks),
                        content=content,
                        content_hash=hashlib.sha1(content.encode("utf-8", "surrogatepass")).hexdigest(),
                        token_count=count(content),
                        page=page,
                        char_start=char_start,
                        char_end=char_start + len(content),
                    )
                )
        page_start = page_end + len(PAGE_BREAK)
    return chunks


@dataclass(frozen=True)
class Chunker:
    """Chunking options a collection carries (``CHUNK_SIZE``, ``CHUNK_OVERLAP``), validated once."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    token_counter: TokenCounter | None = None

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

    def split_text(self, text: str, *, first_page: int | None = None) -> list[ChunkData]:
        return split_text(
            text,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            token_counter=self.token_counter,
            first_page=first_page,
        )

    def chunk_document(self, doc: RagDocument) -> list[ChunkData]:
        """Chunks of ``doc``; a ``page`` in its metadata numbers the page its text starts on."""
        page = doc.metadata.get("page")
        if isinstance(page, str) and page.isdigit():
            page = int(page)
        first_page = page if isinstance(page, int) and not isinstance(page, bool) else None
        return self.split_text(doc.text, first_page=first_page)


def chunk_document(
    doc: RagDocument,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    token_counter: TokenCounter | None = None,
) -> list[ChunkData]:
    """Chunks of one loaded document (see :meth:`Chunker.chunk_document`)."""
    return Chunker(chunk_size, chunk_overlap, token_counter).chunk_document(doc)
