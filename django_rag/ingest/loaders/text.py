"""Plain text (and Markdown) into documents: a string, a record, or many of either."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...exceptions import LoaderError
from ...types import RagDocument
from .base import clean_text, content_source_id, make_document, merge_tags

__all__ = ["TextInput", "load_text"]

TextInput = str | Mapping[str, Any] | Iterable[str | Mapping[str, Any]]
_RECORD_KEYS = frozenset({"source_id", "text", "metadata", "tags"})
_MAX_TITLE = 80


def load_text(
    text_or_records: TextInput,
    *,
    source_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
) -> list[RagDocument]:
    """Turn text into documents, one per non-blank item.

    Accepts a string, a record ``{"source_id", "text", "metadata", "tags"}`` or an iterable of
    either. A missing ``source_id`` is derived from a hash of the text, so loading the same text
    twice gives the same id. With several items, a given ``source_id`` becomes a prefix
    (``"faq#1"``, ``"faq#2"``...) for the items that have none of their own.
    Record metadata wins over ``metadata``, which wins over the derived keys; tags are combined.
    """
    if isinstance(text_or_records, bytes | bytearray):
        raise LoaderError("load_text() takes str; decode bytes first or use load_bytes(content_type=...)")
    single = isinstance(text_or_records, str | Mapping)
    items = [text_or_records] if single else list(text_or_records)
    documents: dict[str, RagDocument] = {}
    for position, item in enumerate(items, start=1):
        record = _as_record(item, position)
        text = clean_text(record["text"])
        if not text:
            continue
        doc_id = record.get("source_id")
        if not doc_id and source_id:
            doc_id = source_id if single else f"{source_id}#{position}"
        doc_id = doc_id or content_source_id("text", text)
        derived = {
            "source": doc_id,
            "loader": "text",
            "content_type": "text/plain",
            "title": _title_of(text),
        }
        doc = make_document(
            str(doc_id),
            text,
            derived,
            {**(metadata or {}), **(record.get("metadata") or {})},
            merge_tags(tags, record.get("tags")),
        )
        previous = documents.get(doc.source_id)
        if previous is not None and previous.text != text:
            raise LoaderError(f"two different texts were given the same source_id {doc.source_id!r}")
        documents[doc.source_id] = doc
    return list(documents.values())


def _as_record(item: object, position: int) -> Mapping[str, Any]:
    if isinstance(item, str):
        return {"text": item}
    if isinstance(item, Mapping):
        unknown = set(item) - _RECORD_KEYS
        if unknown:
            raise LoaderError(
                f"text record #{position} has unknown keys {sorted(unknown)}; use {sorted(_RECORD_KEYS)}"
            )
        if not isinstance(item.get("text"), str):
            raise LoaderError(f"text record #{position} needs a 'text' string")
        if item.get("source_id") is not None and not isinstance(item["source_id"], str):
            raise LoaderError(f"text record #{position}: 'source_id' must be a string")
        if item.get("metadata") is not None and not isinstance(item["metadata"], Mapping):
            raise LoaderError(f"text record #{position}: 'metadata' must be a dict")
        tags = item.get("tags")
        if tags is not None and (isinstance(tags, str) or not isinstance(tags, Iterable)):
            raise LoaderError(f"text record #{position}: 'tags' must be a list of strings")
        return item
    raise LoaderError(f"load_text() takes strings or records, not {type(item).__name__} (item #{position})")


def _title_of(text: str) -> str | None:
    """A Markdown heading or a short first line reads as a title; a long first line is body text."""
    first = text.split("\n", 1)[0].strip()
    if first.startswith("#"):
        return first.lstrip("#").strip()[: _MAX_TITLE * 2] or None
    return first if len(first) <= _MAX_TITLE else None
