"""Content types to loaders: ``load_bytes`` picks the loader registered for a file's type."""

from __future__ import annotations

import mimetypes
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ...exceptions import FileRefusedError, LoaderError
from ...types import BINARY_CONTENT, ENCRYPTED, UNSUPPORTED_TYPE, RagDocument
from . import sniff
from .base import decode_text, sniff_html_charset
from .html import load_html
from .mail import load_email
from .markup import load_markdown_bytes, load_tabular
from .ocr import load_image, ocr_enabled
from .ooxml import load_docx, load_pptx, load_xlsx
from .opendocument import load_epub, load_odf
from .outlook import load_msg
from .pagehtml import load_main_html
from .pdf import load_pdf
from .pdfpages import load_pdf_pages
from .rtf import load_rtf
from .structure import title_from_text
from .text import load_text

__all__ = [
    "BytesLoader",
    "Resolved",
    "available",
    "decode_text",
    "get_loader",
    "guess_content_type",
    "load_bytes",
    "load_html",
    "load_pdf",
    "load_text",
    "register_loader",
    "resolve_content_type",
    "supported_content_types",
]


class BytesLoader(Protocol):
    """Loads raw bytes of one content type. ``charset`` and ``base_url`` are hints and may be None."""

    def __call__(
        self,
        data: bytes,
        *,
        source_id: str,
        metadata: Mapping[str, Any] | None,
        tags: Iterable[str] | None,
        charset: str | None,
        base_url: str | None,
    ) -> list[RagDocument]: ...


def _text_bytes(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
    charset: str | None,
    base_url: str | None,
) -> list[RagDocument]:
    derived: dict[str, str | None] = {"source": base_url} if base_url else {}
    text = decode_text(data, charset)
    # A file's title is its first heading, else (the caller's) its name: never a line of its text.
    derived["title"] = title_from_text(text)
    return load_text(text, source_id=source_id, metadata={**derived, **(metadata or {})}, tags=tags)


def _html_bytes(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
    charset: str | None,
    base_url: str | None,
) -> list[RagDocument]:
    # A charset in the HTTP header wins over <meta charset>, as in browsers.
    text = decode_text(data, charset or sniff_html_charset(data))
    # The page's main content when trafilatura (the "html" extra) finds it, else all its text.
    main = load_main_html(text, source_id=source_id, metadata=metadata, tags=tags, base_url=base_url)
    if main is not None:
        return main
    return load_html(text, source_id=source_id, metadata=metadata, tags=tags, base_url=base_url)


def _pdf_bytes(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
    charset: str | None,
    base_url: str | None,
) -> list[RagDocument]:
    derived = {"source": base_url} if base_url else {}
    return load_pdf_pages(data, source_id=source_id, metadata={**derived, **(metadata or {})}, tags=tags)


def _mail_bytes(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
    charset: str | None,
    base_url: str | None,
) -> list[RagDocument]:
    # An attachment is loaded by its own type, through this registry.
    loader = load_msg if data.startswith(sniff.OLE_MAGIC) else load_email
    return loader(
        load_bytes,
        guess_content_type,
        data,
        source_id=source_id,
        metadata=metadata,
        tags=tags,
        charset=charset,
        base_url=base_url,
    )


def _rtf_bytes(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
    charset: str | None,
    base_url: str | None,
) -> list[RagDocument]:
    return load_rtf(
        data, source_id=source_id, metadata=metadata, tags=tags, charset=charset, base_url=base_url
    )


_REGISTRY: dict[str, BytesLoader] = {
    "text/plain": _text_bytes,
    "text/markdown": load_markdown_bytes,
    "text/x-markdown": load_markdown_bytes,
    "text/csv": load_tabular,
    "text/tab-separated-values": load_tabular,
    "text/html": _html_bytes,
    "application/xhtml+xml": _html_bytes,
    "application/pdf": _pdf_bytes,
    sniff.DOCX: load_docx,
    sniff.XLSX: load_xlsx,
    sniff.PPTX: load_pptx,
    sniff.ODT: load_odf,
    sniff.ODS: load_odf,
    sniff.ODP: load_odf,
    sniff.EPUB: load_epub,
    sniff.EML: _mail_bytes,
    sniff.MSG: _mail_bytes,
    sniff.RTF: _rtf_bytes,
    "text/rtf": _rtf_bytes,
    "image/png": load_image,
    "image/jpeg": load_image,
    "image/tiff": load_image,
    "image/webp": load_image,
    "image/gif": load_image,
}
# File extensions the platform's mimetypes table may not know (it varies by OS).
_EXTENSIONS = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".xhtml": "application/xhtml+xml",
    ".pdf": "application/pdf",
    ".docx": sniff.DOCX,
    ".xlsx": sniff.XLSX,
    ".pptx": sniff.PPTX,
    ".odt": sniff.ODT,
    ".ods": sniff.ODS,
    ".odp": sniff.ODP,
    ".epub": sniff.EPUB,
    ".eml": sniff.EML,
    ".msg": sniff.MSG,
    ".rtf": sniff.RTF,
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".tab": "text/tab-separated-values",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".tif": "image/tiff",
    ".tiff": "image/tiff",
    ".webp": "image/webp",
    ".gif": "image/gif",
}


def _normalise(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def register_loader(content_type: str, loader: BytesLoader) -> None:
    """Load ``content_type`` (e.g. ``"text/csv"``) with ``loader``, replacing any previous one."""
    _REGISTRY[_normalise(content_type)] = loader


def get_loader(content_type: str) -> BytesLoader | None:
    """The loader for ``content_type`` (parameters such as ``charset`` are ignored), or None."""
    return _REGISTRY.get(_normalise(content_type))


def supported_content_types() -> list[str]:
    """Content types ``load_bytes`` can load, sorted."""
    return sorted(_REGISTRY)


def guess_content_type(filename: str) -> str | None:
    """The content type of a file name or path, from its extension; None when unknown."""
    name = filename.lower()
    extension = name[name.rfind(".") :] if "." in name.rsplit("/", 1)[-1] else ""
    return _EXTENSIONS.get(extension) or mimetypes.guess_type(name, strict=False)[0]


def available(content_type: str) -> bool:
    """Whether a file of ``content_type`` can be loaded now (images only while OCR is on)."""
    normal = _normalise(content_type)
    return get_loader(normal) is not None and (not normal.startswith("image/") or ocr_enabled())


@dataclass(frozen=True)
class Resolved:
    """What a file holds (``content_type``, from its bytes) and, when it is not to be read, why."""

    content_type: str
    reason: str = ""
    error: str = ""


def resolve_content_type(data: bytes, declared: str | None) -> Resolved:
    """The type ``data`` holds (``declared``, a name's or a header's type, only picks among text
    types) and whether it is read: a binary type no loader reads is ``unsupported-type``, or
    ``binary-content`` when the name said text; an encrypted Office file is ``encrypted``."""
    declared_type = _normalise(declared or "")
    actual = sniff.sniff_content_type(data, declared_type)
    if actual in sniff.TEXT_TYPES and get_loader(declared_type) is None:
        # Text under a name no loader reads (.py, .json, .xyz): not a document the site asked for.
        return Resolved(
            declared_type or actual, UNSUPPORTED_TYPE, f"no loader for {declared_type or 'this file'}"
        )
    if actual == sniff.ZIP and declared_type in sniff.ZIP_TYPES:
        # A zip that does not hold what a DOCX (ODT, EPUB...) holds: its loader says what is wrong.
        return Resolved(declared_type)
    if actual == sniff.ENCRYPTED_OFFICE:
        return Resolved(actual, ENCRYPTED, "a password-protected Office file (an encrypted package)")
    if available(actual):
        return Resolved(actual)
    holds = sniff.describe(actual)
    if actual.startswith("image/") and get_loader(actual) is not None:
        why = f"{holds} needs OCR, which is off (RAG['OCR']['ENABLED'])"
    else:
        why = f"no loader for {holds} ({actual})"
    if declared_type in sniff.TEXT_TYPES or declared_type.startswith("text/"):
        return Resolved(actual, BINARY_CONTENT, f"named as {declared_type} but holds {holds}; {why}")
    return Resolved(actual, UNSUPPORTED_TYPE, why)


def load_bytes(
    data: bytes,
    *,
    content_type: str,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """Load raw bytes with the loader registered for ``content_type``.

    A ``charset=`` parameter in ``content_type`` is used when ``charset`` is not given; text
    without a usable charset is decoded as UTF-8 with a fallback guess. Raises LoaderError for a
    content type no loader handles. The bytes decide: a file declared as one type that holds
    another is read as what it holds, or refused (FileRefusedError, with the reason to record).
    """
    resolved = resolve_content_type(data, content_type)
    if resolved.reason == UNSUPPORTED_TYPE and get_loader(content_type) is None:
        raise LoaderError(
            f"no loader for content type {_normalise(content_type)!r} (source {source_id!r}); "
            f"supported: {', '.join(supported_content_types())}"
        )
    if resolved.content_type == sniff.BINARY and get_loader(content_type) is not None:
        # Bytes of no known kind, given as a type we read: the caller's word (text with NUL bytes
        # is still text to decode; files and uploads are refused before, as binary-content).
        resolved = Resolved(_normalise(content_type))
    if resolved.reason:
        raise FileRefusedError(resolved.reason, f"{source_id!r}: {resolved.error}")
    loader = get_loader(resolved.content_type)
    assert loader is not None  # resolve_content_type only accepts a type with a loader
    if resolved.content_type != _normalise(content_type):
        # Declared as one type, it holds another: the bytes say what it is; the charset no longer applies.
        content_type, charset = resolved.content_type, None
    if charset is None and "charset=" in content_type.lower():
        charset = content_type.lower().split("charset=", 1)[1].split(";", 1)[0].strip().strip("\"'")
    # The content type is known better here than inside a loader shared by several types.
    metadata = {"content_type": _normalise(content_type), **(metadata or {})}
    return loader(data, source_id=source_id, metadata=metadata, tags=tags, charset=charset, base_url=base_url)
