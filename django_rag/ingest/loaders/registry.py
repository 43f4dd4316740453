"""Content types to loaders: ``load_bytes`` picks the loader registered for a file's type."""

from __future__ import annotations

import mimetypes
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ...exceptions import LoaderError
from ...types import RagDocument
from .base import decode_text, sniff_html_charset
from .html import load_html
from .pdf import load_pdf
from .text import load_text

__all__ = [
    "BytesLoader",
    "decode_text",
    "get_loader",
    "guess_content_type",
    "load_bytes",
    "load_html",
    "load_pdf",
    "load_text",
    "register_loader",
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
    derived = {"source": base_url} if base_url else {}
    text = decode_text(data, charset)
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
    return load_pdf(data, source_id=source_id, metadata={**derived, **(metadata or {})}, tags=tags)


_REGISTRY: dict[str, BytesLoader] = {
    "text/plain": _text_bytes,
    "text/markdown": _text_bytes,
    "text/x-markdown": _text_bytes,
    "text/html": _html_bytes,
    "application/xhtml+xml": _html_bytes,
    "application/pdf": _pdf_bytes,
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
    content type no loader handles.
    """
    loader = get_loader(content_type)
    if loader is None:
        raise LoaderError(
            f"no loader for content type {_normalise(content_type)!r} (source {source_id!r}); "
            f"supported: {', '.join(supported_content_types())}"
        )
    if charset is None and "charset=" in content_type.lower():
        charset = content_type.lower().split("charset=", 1)[1].split(";", 1)[0].strip().strip("\"'")
    # The content type is known better here than inside a loader shared by several types.
    metadata = {"content_type": _normalise(content_type), **(metadata or {})}
    return loader(data, source_id=source_id, metadata=metadata, tags=tags, charset=charset, base_url=base_url)
