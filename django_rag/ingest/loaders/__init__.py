"""Loaders turn a source into ``RagDocument`` objects; this module also maps content types to them.

Every loader returns a list (empty when the source has no text). Derived metadata keys are
``source``, ``loader``, ``title``, ``content_type`` (and ``page``/``page_count`` for PDFs), with
the caller's ``metadata`` merged over them; ``tags`` go on every document.

``load_bytes`` is how uploaded files are loaded: it picks the loader registered for the file's
content type. Sites add types with ``register_loader``.
"""

from .base import binary_kind, decode_text
from .html import load_html
from .pdf import load_pdf
from .registry import (
    BytesLoader,
    get_loader,
    guess_content_type,
    load_bytes,
    register_loader,
    supported_content_types,
)
from .text import load_text
from .web import load_web

__all__ = [
    "BytesLoader",
    "binary_kind",
    "decode_text",
    "get_loader",
    "guess_content_type",
    "load_bytes",
    "load_html",
    "load_pdf",
    "load_text",
    "load_web",
    "register_loader",
    "supported_content_types",
]
