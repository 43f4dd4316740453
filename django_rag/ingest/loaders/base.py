"""Helpers every loader shares: metadata merging, tags, derived ids and text clean-up."""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ...types import RagDocument

__all__ = [
    "binary_kind",
    "clean_text",
    "content_source_id",
    "decode_text",
    "make_document",
    "merge_tags",
    "sniff_html_charset",
]

# PDF extractors emit typographic ligatures; embedders and full-text search want the letters.
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})
# NUL cannot be stored in a PostgreSQL text column; zero-width characters only split words.
_INVISIBLE = str.maketrans({"\x00": None, "\u200b": None, "\ufeff": None})
_SURROGATE = re.compile("[\ud800-\udfff]")
# Python codecs that are not charsets: they read escapes or domain-name syntax out of the bytes
# (unicode_escape turns the text "\\ud800" into a lone surrogate). A document naming one is
# decoded as if it named none.
_NOT_CHARSETS = frozenset({"unicode_escape", "raw_unicode_escape", "punycode", "idna"})
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def clean_text(text: str) -> str:
    """Normalise line endings, drop characters a database or an embedder chokes on, trim the ends."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if _SURROGATE.search(text):
        # No UTF-8 (so no PostgreSQL text) holds a lone surrogate; a pair is the character it spells.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text.translate(_INVISIBLE).translate(_LIGATURES).strip()


def content_source_id(prefix: str, data: str | bytes) -> str:
    """A stable id derived from the content, so re-loading the same text syncs rather than duplicates."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return f"{prefix}:{hashlib.sha1(raw).hexdigest()[:16]}"


def merge_tags(*groups: Iterable[str] | None) -> list[str]:
    """Concatenate tag lists, dropping duplicates and blanks but keeping first-seen order."""
    seen: dict[str, None] = {}
    for group in groups:
        for tag in group or ():
            if isinstance(tag, str) and tag.strip():
                seen.setdefault(tag.strip(), None)
    return list(seen)


def make_document(
    source_id: str,
    text: str,
    derived: Mapping[str, Any],
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
) -> RagDocument:
    """Build a RagDocument with the caller's ``metadata`` merged over the loader-derived keys."""
    merged = {key: value for key, value in derived.items() if value is not None}
    merged.update(metadata or {})
    if not merged.get("title"):
        merged["title"] = source_id
    return RagDocument(source_id=source_id, text=text, metadata=merged, tags=merge_tags(tags))


def decode_text(data: bytes, charset: str | None = None) -> str:
    """Decode bytes of unknown provenance: BOM, then the declared charset, then UTF-8, then a guess.

    A declared charset is often wrong (servers default to ISO-8859-1), so a failure to decode
    with it falls through to sniffing instead of raising.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    candidates = [charset.strip().strip("\"'")] if charset and _is_charset(charset) else []
    candidates.append("utf-8")
    for encoding in candidates:
        try:
            return data.decode(encoding)
        except (LookupError, UnicodeError, ValueError):
            continue
    try:
        from charset_normalizer import from_bytes  # requests depends on it, so it is normally there
    except ImportError:  # pragma: no cover - depends on the environment
        best = None
    else:
        # The guess decodes what it is given with every candidate charset, several times over:
        # 20 MB took 40 s. A bounded sample from the start, middle and end guesses as well; then
        # the whole text is decoded once with the charset guessed.
        best = from_bytes(_guess_sample(data)).best()
    if best is not None:
        if len(data) <= _GUESS_BYTES:
            return str(best)
        return data.decode(best.encoding, errors="replace")
    # cp1252 is what unlabelled non-UTF-8 text on the web almost always is.
    return data.decode("cp1252", errors="replace")


_GUESS_BYTES = 96 * 1024


def _guess_sample(data: bytes) -> bytes:
    if len(data) <= _GUESS_BYTES:
        return data
    third = _GUESS_BYTES // 3
    middle = len(data) // 2
    return data[:third] + data[middle : middle + third] + data[-third:]


def _is_charset(name: str) -> bool:
    try:
        codec = codecs.lookup(name.strip().strip("\"'"))
    except (LookupError, ValueError):  # ValueError: a NUL in the name
        return False
    return codec.name.replace("-", "_") not in _NOT_CHARSETS


_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def sniff_html_charset(data: bytes) -> str | None:
    """The charset an HTML document declares in a ``<meta>`` tag near its start, if any."""
    match = _CHARSET_RE.search(data[:4096])
    return match.group(1).decode("ascii") if match else None


# A file whose name says text but whose first bytes say otherwise (a PDF saved as .html, an image
# or an archive renamed .txt) is not to be read as text: its bytes would be indexed as gibberish.
_MAGIC = (
    (b"%PDF-", "a PDF"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"GIF8", "a GIF image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"\x7fELF", "an executable"),
)
_SNIFF_BYTES = 8192
_TEXT_TYPES = ("text/", "application/xhtml")


def binary_kind(data: bytes, content_type: str) -> str:
    """What binary data ``data``, named as ``content_type``, holds if that type is text ("a PDF",
    "NUL bytes (binary data)"); "" when it looks like text or the type is not a text type."""
    if not content_type.lower().startswith(_TEXT_TYPES):
        return ""
    head = data[:_SNIFF_BYTES]
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    # UTF-16 and UTF-32 text is full of NUL bytes: the loader decodes it by its byte-order mark.
    if head.startswith((b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf")):
        return ""
    return "NUL bytes (binary data)" if b"\x00" in head else ""
