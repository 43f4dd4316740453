"""RTF documents with striprtf (the ``office`` extra): text, title and author from ``\\info``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ...exceptions import ConfigurationError, FileRefusedError
from ...types import CORRUPT_FILE, RagDocument
from .structure import flow_document

__all__ = ["load_rtf"]

_INFO = re.compile(rb"\{\\(title|author)\s+([^{}\\]*)\}")
INSTALL_HINT = 'loading RTF files needs striprtf: pip install "django-rag[office]"'


def load_rtf(
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """An RTF file's text, one paragraph per ``\\par``; ``\\info`` gives the title and author."""
    try:
        from striprtf.striprtf import rtf_to_text  # the optional "office" extra
    except ImportError as exc:
        raise ConfigurationError(INSTALL_HINT) from exc
    # RTF is 7-bit: non-ASCII characters are \'xx or \uN escapes that striprtf decodes.
    source = data.decode("latin-1")
    try:
        text = rtf_to_text(source, errors="replace")  # type: ignore[no-untyped-call]
    except Exception as exc:  # striprtf raises plain exceptions on malformed groups
        raise FileRefusedError(CORRUPT_FILE, f"RTF {source_id!r} cannot be read: {exc}") from exc
    info = {key.decode(): value.decode("latin-1").strip() for key, value in _INFO.findall(data[:65536])}
    derived = {
        "source": base_url or source_id,
        "loader": "rtf",
        "content_type": "application/rtf",
        "title": info.get("title") or None,
        "author": info.get("author") or None,
    }
    return flow_document(source_id, text.split("\n\n"), derived, metadata, tags)
