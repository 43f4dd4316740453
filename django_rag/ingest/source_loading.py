"""Reading one source (a file or a URL) into documents, or into the reason it cannot be indexed."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from ..exceptions import FileRefusedError, LoaderError, OutboundPolicyError
from ..types import (
    EMPTY_TEXT,
    EXTRACTION_FAILED,
    OUTBOUND_REFUSED,
    TOO_LARGE,
    UNREADABLE,
    UNSUPPORTED_TYPE,
)
from .loaders import get_loader, guess_content_type, load_bytes, load_web
from .loaders.pdfpages import load_pdf_pages
from .loaders.registry import resolve_content_type
from .loaders.sniff import OLE, TEXT_TYPES, ZIP, sniff_content_type
from .source_values import DEFAULT_MAX_BYTES, SourceOutcome

__all__ = ["is_url", "load_source"]

# Any "scheme://", not only http(s): "file:///etc/passwd", "gopher://..." or "HTTP://..." are URLs
# that the outbound policy judges (and refuses, naming the setting), never local paths by accident.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(source: str) -> bool:
    """Whether ``source`` is a URL (any ``scheme://``) rather than a local path."""
    return _URL.match(source) is not None


def load_source(
    source: str | Path,
    *,
    source_id: str | None = None,
    per_page: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    policy: Any = None,
    password: str | None = None,
) -> SourceOutcome:
    """Load one file path or URL; never raises for bad content, reports it instead."""
    label = str(source)
    if isinstance(source, str) and is_url(source):
        sid = source_id or source
        try:
            docs = load_web(source, policy=policy, source_id=sid)
        except OutboundPolicyError as exc:
            return SourceOutcome(label, sid, "failed", OUTBOUND_REFUSED, str(exc))
        except FileRefusedError as exc:
            return SourceOutcome(label, sid, "skipped", exc.reason, str(exc))
        except LoaderError as exc:
            return SourceOutcome(label, sid, "failed", EXTRACTION_FAILED, str(exc))
        if not docs:
            return SourceOutcome(label, sid, "skipped", EMPTY_TEXT, "the page has no text")
        return SourceOutcome(label, sid, "loaded", documents=docs, content_type="text/html")
    path = os.path.abspath(source)
    sid = source_id or Path(path).as_posix()
    content_type = guess_content_type(os.path.basename(path)) or ""
    outcome = SourceOutcome(path, sid, "skipped", content_type=content_type)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            # Reading a FIFO or a device would block or never end: refuse before opening it.
            return _failed(outcome, UNREADABLE, f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            outcome.reason, outcome.error = TOO_LARGE, f"{info.st_size} bytes > --max-bytes {max_bytes}"
            return outcome
        with open(path, "rb") as file:
            head = file.read(8192)
            if not _worth_reading(head, content_type):
                # Its name and its first bytes both say no loader reads it: not read any further.
                outcome.reason = UNSUPPORTED_TYPE
                outcome.error = resolve_content_type(head, content_type).error
                return outcome
            data = head + file.read(max_bytes + 1 - len(head))  # a growing file cannot make us read more
    except OSError as exc:
        return _failed(outcome, UNREADABLE, f"cannot read: {exc.strerror or exc}")
    if len(data) > max_bytes:
        outcome.reason, outcome.error = TOO_LARGE, f"more than --max-bytes {max_bytes} bytes"
        return outcome
    # The bytes say what the file is; the name only picks among text types (see loaders.sniff).
    resolved = resolve_content_type(data, content_type)
    outcome.content_type = resolved.content_type
    if resolved.reason:
        outcome.reason, outcome.error = resolved.reason, resolved.error
        return outcome
    meta = {"source": path}
    try:
        if resolved.content_type == "application/pdf":
            docs = load_pdf_pages(data, source_id=sid, per_page=per_page, password=password, metadata=meta)
        else:
            docs = load_bytes(data, content_type=resolved.content_type, source_id=sid, metadata=meta)
    except FileRefusedError as exc:
        outcome.reason, outcome.error = exc.reason, str(exc)
        return outcome
    except LoaderError as exc:
        hint = " (rag_ingest: --password or --password-map)" if "encrypted" in str(exc) else ""
        return _failed(outcome, EXTRACTION_FAILED, f"{exc}{hint}")
    if not docs:
        outcome.reason, outcome.error = EMPTY_TEXT, "no text to index"
        return outcome
    for doc in docs:
        # The file's own title (its metadata, its first heading) first; its name as a last resort.
        if doc.metadata.get("title") in (None, "", doc.source_id):
            doc.metadata["title"] = os.path.basename(path)
    outcome.status, outcome.documents = "loaded", docs
    return outcome


def _worth_reading(head: bytes, content_type: str) -> bool:
    """Whether a file is to be read whole: its name's type or its first bytes' type has a loader
    (zip and OLE files are told apart only by what they hold further on)."""
    if content_type and get_loader(content_type) is not None:
        return True
    sniffed = sniff_content_type(head, content_type)
    return sniffed in (ZIP, OLE) or (sniffed not in TEXT_TYPES and get_loader(sniffed) is not None)


def _failed(outcome: SourceOutcome, reason: str, error: str) -> SourceOutcome:
    outcome.status, outcome.reason, outcome.error = "failed", reason, error
    return outcome


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"
