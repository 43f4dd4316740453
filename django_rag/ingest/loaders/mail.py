"""E-mail messages (``.eml``, RFC 822) with the standard library's ``email`` package.

The message is one document: its subject as the title and a heading line, sender, recipients and
date as metadata (``email_from``, ``email_to``, ``email_date``, ``author``), then its body (the
plain-text part, else the HTML part as text). Each attachment is loaded by its own type into
documents of its own, with ids derived from the message's (``<id>#attachment-<n>``) and
``metadata["email_message"]`` naming the message; an attachment that cannot be read is listed in
the message's ``metadata["attachments_skipped"]`` with why, and the rest go on. Bounds:
``EMAIL_MAX_ATTACHMENTS`` per message and ``EMAIL_MAX_DEPTH`` messages inside messages.
"""

from __future__ import annotations

import contextvars
import email
import email.policy
from collections.abc import Callable, Iterable, Mapping
from email.message import EmailMessage
from email.utils import parsedate_to_datetime
from typing import Any

from ...exceptions import FileRefusedError, LoaderError
from ...types import UNSAFE_FILE, RagDocument
from .base import clean_text, make_document
from .html import html_to_text
from .limits import loader_limits
from .sniff import EML
from .structure import heading

__all__ = ["GuessType", "LoadBytes", "attachment_documents", "load_email"]

# load_bytes and guess_content_type of the registry, which imports this module.
LoadBytes = Callable[..., list[RagDocument]]
GuessType = Callable[[str], str | None]
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("django_rag_email_depth", default=0)


def load_email(
    load_bytes: LoadBytes,
    guess_content_type: GuessType,
    data: bytes,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    charset: str | None = None,
    base_url: str | None = None,
) -> list[RagDocument]:
    """The message and each of its attachments as documents (see the module's description).

    ``load_bytes`` and ``guess_content_type`` are the registry's, which loads each attachment by its type.
    """
    limits = loader_limits()
    depth = _DEPTH.get()
    if depth >= limits.email_max_depth:
        raise FileRefusedError(
            UNSAFE_FILE,
            f"e-mail {source_id!r} is nested more than {limits.email_max_depth} messages deep "
            "(RAG['LOADERS']['EMAIL_MAX_DEPTH'])",
        )
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)  # policy.default builds EmailMessage objects
    subject = clean_text(str(message.get("subject", "") or ""))
    sender = clean_text(str(message.get("from", "") or ""))
    recipients = clean_text(str(message.get("to", "") or ""))
    date = _date(message)
    lines = [heading(1, subject)] if subject else []
    header = [f"From: {sender}" if sender else "", f"To: {recipients}" if recipients else ""]
    header.append(f"Date: {date}" if date else "")
    lines.append("\n".join(line for line in header if line))
    lines.append(_body(message))
    derived: dict[str, Any] = {
        "source": base_url or source_id,
        "loader": "email",
        "content_type": EML,
        "title": subject or None,
        "author": sender or None,
        "email_from": sender or None,
        "email_to": recipients or None,
        "email_date": date or None,
    }
    parts = [
        (
            clean_text(part.get_filename() or "") or f"attachment-{number}",
            part.get_content_type(),
            _payload(part),
        )
        for number, part in enumerate(message.iter_attachments(), start=1)
        if number <= limits.email_max_attachments + 1
    ]
    token = _DEPTH.set(depth + 1)
    try:
        documents, skipped = attachment_documents(
            load_bytes, guess_content_type, parts, source_id, subject, metadata, tags
        )
    finally:
        _DEPTH.reset(token)
    if skipped:
        derived["attachments_skipped"] = skipped
    text = clean_text("\n\n".join(line for line in lines if line.strip()))
    if text:
        documents.insert(0, make_document(source_id, text, derived, metadata, tags))
    return documents


def _date(message: EmailMessage) -> str:
    raw = message.get("date")
    if not raw:
        return ""
    try:
        return parsedate_to_datetime(str(raw)).isoformat()
    except (TypeError, ValueError, IndexError):
        return clean_text(str(raw))


def _body(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    try:
        content = part.get_content()
    except (LookupError, ValueError, AssertionError):
        payload = part.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    if part.get_content_type() == "text/html":
        return html_to_text(content)[0]
    return content


def _payload(part: Any) -> bytes:
    if part.get_content_type() == "message/rfc822":
        inner = part.get_payload()
        return inner[0].as_bytes() if isinstance(inner, list) and inner else b""
    raw = part.get_payload(decode=True)
    return raw if isinstance(raw, bytes) else b""


def attachment_documents(
    load_bytes: LoadBytes,
    guess_content_type: GuessType,
    attachments: Iterable[tuple[str, str, bytes]],
    source_id: str,
    subject: str,
    metadata: Mapping[str, Any] | None,
    tags: Iterable[str] | None,
) -> tuple[list[RagDocument], list[dict[str, str]]]:
    """The documents of a message's attachments, ``(file name, MIME type, bytes)`` each, and
    those that could not be read, with why. Past ``EMAIL_MAX_ATTACHMENTS`` they are listed."""
    limit = loader_limits().email_max_attachments
    documents: list[RagDocument] = []
    skipped: list[dict[str, str]] = []
    for number, (name, mime, payload) in enumerate(attachments, start=1):
        if number > limit:
            skipped.append({"name": name, "reason": "past RAG['LOADERS']['EMAIL_MAX_ATTACHMENTS']"})
            break
        declared = guess_content_type(name) or mime or "application/octet-stream"
        child_meta = {**(metadata or {}), "email_message": source_id, "email_subject": subject}
        for key in ("source", "title"):
            child_meta.pop(key, None)
        try:
            loaded = load_bytes(
                payload,
                content_type=declared,
                source_id=f"{source_id}#attachment-{number}",
                metadata=child_meta,
                tags=tags,
            )
        except FileRefusedError as exc:
            skipped.append({"name": name, "reason": exc.reason, "error": str(exc)[:300]})
            continue
        except LoaderError as exc:
            skipped.append({"name": name, "reason": "extraction-failed", "error": str(exc)[:300]})
            continue
        for document in loaded:
            # The attachment's own title (its metadata, its first heading), else its file name.
            if document.metadata.get("title") == document.source_id:
                document.metadata["title"] = name
        documents.extend(loaded)
    return documents, skipped
