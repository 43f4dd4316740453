"""Outlook ``.msg`` messages with olefile (the ``office`` extra), the way ``mail.py`` reads ``.eml``.

A ``.msg`` is an OLE compound file: each MAPI property is a stream named for it
(``__substg1.0_<id><type>``), fixed-size ones (the date) sit in ``__properties_version1.0``, and
each attachment is a storage ``__attach_version1.0_#<n>``. The message becomes one document
(subject as title and heading, sender, recipients and date as metadata, then the plain body, or
the HTML body as text); each attachment one of its own, ``<id>#attachment-<n>``, loaded by its
own type, within ``EMAIL_MAX_ATTACHMENTS``.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from ...exceptions import ConfigurationError, FileRefusedError
from ...types import CORRUPT_FILE, RagDocument
from .base import clean_text, decode_text, make_document
from .html import html_to_text
from .limits import loader_limits
from .mail import GuessType, LoadBytes, attachment_documents
from .sniff import MSG
from .structure import heading

__all__ = ["load_msg"]

INSTALL_HINT = 'loading Outlook .msg files needs olefile: pip install "django-rag[office]"'
_ATTACHMENT = "__attach_version1.0_#"
_SUBMIT_TIME = 0x00390040  # PidTagClientSubmitTime, a PT_SYSTIME
_DELIVERY_TIME = 0x0E060040  # PidTagMessageDeliveryTime
_FILETIME_EPOCH = dt.datetime(1601, 1, 1, tzinfo=dt.UTC)


class _Storage:
    """The properties of one storage (the message, or an attachment) of an open OLE file."""

    def __init__(self, ole: Any, prefix: list[str]) -> None:
        self.ole = ole
        self.prefix = prefix

    def raw(self, name: str) -> bytes | None:
        path = [*self.prefix, name]
        if not self.ole.exists("/".join(path)):
            return None
        data: bytes = self.ole.openstream(path).read()
        return data

    def text(self, prop: str) -> str:
        """A string property: UTF-16 (type 001F), else 8-bit (001E); NUL padding dropped."""
        unicode = self.raw(f"__substg1.0_{prop}001F")
        if unicode is not None:
            return clean_text(unicode.decode("utf-16-le", "replace").split("\x00", 1)[0])
        single = self.raw(f"__substg1.0_{prop}001E")
        return clean_text(decode_text(single.split(b"\x00", 1)[0])) if single is not None else ""

    def binary(self, prop: str) -> bytes | None:
        return self.raw(f"__substg1.0_{prop}0102")

    def time(self, *tags: int) -> str:
        """A PT_SYSTIME from the fixed-size properties stream (32-byte header for a message)."""
        data = self.raw("__properties_version1.0") or b""
        values: dict[int, int] = {}
        for offset in range(32, len(data) - 15, 16):
            tag, _, value = struct.unpack_from("<IIQ", data, offset)
            values[tag] = value
        for tag in tags:
            if values.get(tag):
                moment = _FILETIME_EPOCH + dt.timedelta(microseconds=values[tag] // 10)
                return moment.isoformat()
        return ""


def load_msg(
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
    """The message and each of its attachments as documents (``load_bytes`` and
    ``guess_content_type`` are the registry's, which loads each attachment by its type)."""
    try:
        import olefile  # the optional "office" extra
    except ImportError as exc:
        raise ConfigurationError(INSTALL_HINT) from exc
    label = f"Outlook message {source_id!r}"
    try:
        ole = olefile.OleFileIO(data)
    except Exception as exc:  # olefile raises OSError, struct.error, IndexError... on broken files
        raise FileRefusedError(CORRUPT_FILE, f"{label} cannot be read: {exc}") from exc
    with ole:
        try:
            message = _Storage(ole, [])
            subject = message.text("0037")
            sender_name, sender_address = message.text("0C1A"), message.text("0C1F") or message.text("5D01")
            sender = f"{sender_name} <{sender_address}>" if sender_name and sender_address else sender_name
            sender = sender or sender_address
            recipients = message.text("0E04")
            date = message.time(_SUBMIT_TIME, _DELIVERY_TIME)
            body = message.text("1000")
            if not body:
                html = message.binary("1013")
                body = html_to_text(decode_text(html))[0] if html else ""
            attachments = _attachments(ole)
        except FileRefusedError:
            raise
        except Exception as exc:
            raise FileRefusedError(CORRUPT_FILE, f"{label} cannot be read: {exc}") from exc
    lines = [heading(1, subject)] if subject else []
    header = [f"From: {sender}" if sender else "", f"To: {recipients}" if recipients else ""]
    header.append(f"Date: {date}" if date else "")
    lines += ["\n".join(line for line in header if line), body]
    derived: dict[str, Any] = {
        "source": base_url or source_id,
        "loader": "email",
        "content_type": MSG,
        "title": subject or None,
        "author": sender or None,
        "email_from": sender or None,
        "email_to": recipients or None,
        "email_date": date or None,
    }
    documents, skipped = attachment_documents(
        load_bytes, guess_content_type, attachments, source_id, subject, metadata, tags
    )
    if skipped:
        derived["attachments_skipped"] = skipped
    text = clean_text("\n\n".join(line for line in lines if line.strip()))
    if text:
        documents.insert(0, make_document(source_id, text, derived, metadata, tags))
    return documents


def _attachments(ole: Any) -> list[tuple[str, str, bytes]]:
    """(file name, MIME type, bytes) of each attachment, in order, at most EMAIL_MAX_ATTACHMENTS + 1."""
    limit = loader_limits().email_max_attachments
    storages = sorted(
        {entry[0] for entry in ole.listdir(streams=True, storages=True) if entry[0].startswith(_ATTACHMENT)}
    )
    found = []
    for number, name in enumerate(storages[: limit + 1], start=1):
        storage = _Storage(ole, [name])
        filename = storage.text("3707") or storage.text("3704") or f"attachment-{number}"
        found.append((filename, storage.text("370E"), storage.binary("3701") or b""))
    return found
