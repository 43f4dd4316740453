"""The pipeline behind ``media.ingest_instance``: per row, gate -> read -> extract -> sync -> record.

Per file: content-type gate, size gate, bytes read through the field's storage (so local disks
and django-storages S3 work alike), extraction by content type, then a sync by chunk hash that
replaces the document's chunks in one transaction (a shrunken re-upload leaves no stale tail;
unchanged chunks are not embedded again). Skips and failures are recorded on the Document.
Embedding happens before the write, so a failing embedder leaves the old chunks untouched.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.dispatch import Signal

from .conf import rag_settings
from .dberrors import translate_db_errors
from .exceptions import RagError
from .signals import document_indexed, document_removed, ingestion_failed, ingestion_skipped
from .types import IngestResult, RagDocument

if TYPE_CHECKING:
    from .media import Registration
    from .models import Collection, Document

__all__ = [
    "EMPTY_TEXT",
    "TOO_LARGE",
    "UNSUPPORTED_TYPE",
    "ingest",
    "is_transient",
    "is_up_to_date",
    "prune_orphans",
    "remove",
]

logger = logging.getLogger("django_rag.media")

UNSUPPORTED_TYPE = "unsupported-type"
TOO_LARGE = "too-large"
EMPTY_TEXT = "empty-text"

# A row edited while it is being ingested is ingested again, at most this many times in all.
_MAX_PASSES = 3


@dataclass
class _Loaded:
    """What one pass read from the row: its documents, or why there is nothing to index."""

    title: str
    source: str
    content_type: str
    docs: list[RagDocument] = field(default_factory=list)
    skip_reason: str = ""
    skip_detail: str = ""


def ingest(registration: Registration, pk: Any, *, raise_transient: bool = False) -> IngestResult:
    """Sync one row; see ``media.ingest_instance``."""
    from .api import collection

    instance = None
    try:
        kb = collection(registration.collection)
        for _ in range(_MAX_PASSES):
            instance = _fetch(registration, pk)
            if instance is None:
                return _removed(registration, pk)
            seen = registration.fingerprint(instance)
            result, document = _ingest_once(registration, kb, instance)
            fresh = _fetch(registration, pk)
            if fresh is None:
                # Deleted while we wrote: its removal may have run before our write landed.
                return _removed(registration, pk)
            if registration.fingerprint(fresh) == seen:
                break
            # Saved again while we read the old values; a stale write must not be the last one.
            logger.info("%s changed during ingestion; ingesting it again", registration.source_id(pk))
    except Exception as exc:
        return _failed(registration, pk, instance, exc, raise_transient=raise_transient)
    if result.status == "indexed":
        _send(document_indexed, registration, instance=instance, document=document, result=result)
    else:
        _send(
            ingestion_skipped,
            registration,
            instance=instance,
            document=document,
            reason=result.reason,
            result=result,
        )
    return result


def remove(registration: Registration, pk: Any) -> int:
    """Delete the row's documents (``source_id`` and its ``#part`` children); returns how many."""
    from .api import collection

    kb = collection(registration.collection)
    source_id = registration.source_id(pk)
    count = kb.remove(prefix=source_id)
    _send(document_removed, registration, pk=pk, source_id=source_id, collection=kb.name, count=count)
    return count


def _fetch(registration: Registration, pk: Any) -> Any:
    return registration.model._default_manager.filter(pk=pk).first()


def _removed(registration: Registration, pk: Any) -> IngestResult:
    remove(registration, pk)
    return IngestResult(status="removed")


def _ingest_once(registration: Registration, kb: Collection, instance: Any) -> tuple[IngestResult, Document]:
    from .indexing import index_documents

    source_id = registration.source_id(instance.pk)
    loaded = _load(registration, instance)
    if not loaded.skip_reason:
        sync = index_documents(
            kb,
            loaded.docs,
            tags=registration.tags_for(instance),
            tenant=registration.tenant_for(instance),
            owner=instance,
        )
        if sync.documents:
            keep = {doc.source_id for doc in loaded.docs}
            with transaction.atomic(using=rag_settings.DATABASE):
                _drop_documents(kb, source_id, keep=keep)
            return IngestResult(status="indexed", sync=sync), _document(kb, source_id)
        loaded.skip_reason, loaded.skip_detail = EMPTY_TEXT, "the extracted text has no content to chunk"
    document = _record(
        kb,
        registration,
        instance,
        loaded,
        status="skipped",
        reason=loaded.skip_reason,
        error=loaded.skip_detail,
        drop_chunks=True,
    )
    return IngestResult(status="skipped", reason=loaded.skip_reason, error=loaded.skip_detail), document


def _load(registration: Registration, instance: Any) -> _Loaded:
    """The row's documents, through the content-type and size gates for a file."""
    from .loaders import get_loader, guess_content_type, load_bytes, load_text

    source_id = registration.source_id(instance.pk)
    derived = {"model": registration.label, "object_id": str(instance.pk)}
    if registration.file_field is None:
        title = str(instance)
        loaded = _Loaded(title=title, source="", content_type="text/plain")
        metadata = {"title": title, **derived, **registration.metadata_for(instance)}
        loaded.docs = load_text(registration.text_of(instance), source_id=source_id, metadata=metadata)
        if not loaded.docs:
            loaded.skip_reason, loaded.skip_detail = EMPTY_TEXT, "the row has no text"
        return loaded

    fieldfile = getattr(instance, registration.file_field)
    name = fieldfile.name or ""
    content_type = (guess_content_type(name) or "application/octet-stream") if name else ""
    loaded = _Loaded(title=posixpath.basename(name), source=name, content_type=content_type)
    if not name:
        loaded.skip_reason, loaded.skip_detail = EMPTY_TEXT, f"{registration.file_field!r} holds no file"
        return loaded
    allowed = registration.allowed_content_types()
    if content_type not in allowed or get_loader(content_type) is None:
        loaded.skip_reason = UNSUPPORTED_TYPE
        loaded.skip_detail = f"{name}: {content_type} is not one of {', '.join(allowed)}"
        return loaded
    limit = registration.size_limit()
    # The storage API, not a local path: S3 answers size() with a HEAD and open() with a GET.
    size = fieldfile.storage.size(name)
    data = b""
    if size <= limit:
        with fieldfile.storage.open(name, "rb") as handle:
            data = handle.read(limit + 1)  # a size that lied cannot make us read more
    if size > limit or len(data) > limit:
        loaded.skip_reason = TOO_LARGE
        loaded.skip_detail = f"{name} is {max(size, len(data))} bytes; the limit is {limit}"
        return loaded
    metadata = {"title": loaded.title, "source": name, **derived, **registration.metadata_for(instance)}
    loaded.docs = load_bytes(data, content_type=content_type, source_id=source_id, metadata=metadata)
    if not loaded.docs:
        loaded.skip_reason, loaded.skip_detail = EMPTY_TEXT, f"{name} has no extractable text"
    return loaded


def _failed(
    registration: Registration, pk: Any, instance: Any, exc: Exception, *, raise_transient: bool
) -> IngestResult:
    from .api import collection

    error = f"{type(exc).__name__}: {exc}"
    result = IngestResult(status="failed", error=error)
    transient = is_transient(exc)
    document = None
    try:
        kb = collection(registration.collection)
        loaded = _Loaded(title=str(instance) if instance is not None else "", source="", content_type="")
        document = _record(
            kb, registration, instance, loaded, status="failed", error=error, drop_chunks=False, pk=pk
        )
    except Exception:
        logger.exception("cannot record the failed ingestion of %s", registration.source_id(pk))
    if transient and raise_transient:
        raise exc
    if isinstance(exc, RagError) or transient:
        logger.warning("ingestion of %s failed: %s", registration.source_id(pk), error)
    else:
        logger.error("ingestion of %s failed", registration.source_id(pk), exc_info=exc)
    _send(ingestion_failed, registration, instance=instance, document=document, error=exc, result=result)
    return result


def _record(
    kb: Collection,
    registration: Registration,
    instance: Any,
    loaded: _Loaded,
    *,
    status: str,
    reason: str = "",
    error: str = "",
    drop_chunks: bool,
    pk: Any = None,
) -> Document:
    """Write a skip (the old chunks go) or a failure (the old chunks stay) on the row's Document."""
    from django.contrib.contenttypes.models import ContentType

    from .models import Chunk, Document

    using = rag_settings.DATABASE
    pk = instance.pk if instance is not None else pk
    source_id = registration.source_id(pk)
    state = {"status": status, "status_reason": reason[:100], "error": error}
    described: dict[str, Any] = {
        "title": (loaded.title or source_id)[:1024],
        "source": loaded.source,
        "content_type": loaded.content_type[:255],
        "owner_type": ContentType.objects.db_manager(using).get_for_model(registration.model),
        "owner_id": str(pk),
    }
    if instance is not None:
        described.update(tenant=registration.tenant_for(instance), tags=registration.tags_for(instance))
    with translate_db_errors(using), transaction.atomic(using=using):
        with connections[using].cursor() as cursor:
            from .stores.pgvector import lock_documents

            # The store's key, so a skip/failure record and a sync of one document serialize.
            lock_documents(cursor, kb.pk, [source_id])
        documents = Document.objects.using(using)
        if drop_chunks:
            fields = {**state, **described, "content_hash": "", "page_count": None}
            document, _ = documents.update_or_create(collection=kb, source_id=source_id, defaults=fields)
            Chunk.objects.using(using).filter(document=document).delete()
            _drop_documents(kb, source_id, keep={source_id})
        else:
            document, _ = documents.update_or_create(
                collection=kb, source_id=source_id, defaults=state, create_defaults={**state, **described}
            )
    return document


def _drop_documents(kb: Collection, source_id: str, *, keep: set[str]) -> None:
    """Delete the row's other documents (``source_id#...``) that its latest version no longer has."""
    from .models import Chunk, Document
    from .stores.pgvector import prefix_q

    using = rag_settings.DATABASE
    stale = (
        Document.objects.using(using)
        .filter(collection=kb)
        .filter(prefix_q("source_id", source_id))
        .exclude(source_id__in=keep)
    )
    if stale.exists():
        Chunk.objects.using(using).filter(document__in=stale.values("pk")).delete()
        stale.delete()


def _document(kb: Collection, source_id: str) -> Document:
    from .models import Document

    return Document.objects.using(rag_settings.DATABASE).get(collection=kb, source_id=source_id)


def _send(signal: Signal, registration: Registration, **kwargs: Any) -> None:
    for receiver, response in signal.send_robust(sender=registration.model, **kwargs):
        if isinstance(response, Exception):
            logger.error("signal receiver %r raised", receiver, exc_info=response)


# Exceptions worth retrying, by class name so that optional packages (openai, botocore) need not
# be importable here: connections and timeouts, and database errors such as a dropped connection.
_TRANSIENT_NAMES = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "ConnectionError",
        "ConnectTimeoutError",
        "EndpointConnectionError",
        "InterfaceError",
        "OperationalError",
        "ReadTimeoutError",
        "Timeout",
        "TransientFailure",
    }
)


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` or its cause is worth retrying later (429/5xx, timeouts, lost connections)."""
    from .retry import is_transient_status

    for error in _chain(exc):
        if isinstance(error, ConnectionError | TimeoutError):
            return True
        if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__):
            return True
        status = getattr(error, "status_code", None)
        if status is None:  # botocore's ClientError keeps it in its response
            response = getattr(error, "response", None)
            status = (
                response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if isinstance(response, dict)
                else None
            )
        if isinstance(status, int) and is_transient_status(status):
            return True
    return False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_up_to_date(registration: Registration, instance: Any, document: Document | None) -> bool:
    """Whether ``document`` still reflects ``instance`` (for ``rag_reindex --changed-only``).

    Text rows compare the text's hash; file rows compare the file's name and the storage's
    modification time with the document's. Metadata changes are not detected.
    """
    from .loaders import load_text

    if document is None or document.status not in ("indexed", "skipped"):
        return False
    if document.tenant != registration.tenant_for(instance) or sorted(document.tags) != registration.tags_for(
        instance
    ):
        return False
    if registration.file_field is None:
        docs = load_text(registration.text_of(instance), source_id=document.source_id)
        if not docs:
            return document.status == "skipped"
        return hashlib.sha1(docs[0].text.encode()).hexdigest() == document.content_hash
    fieldfile = getattr(instance, registration.file_field)
    if (fieldfile.name or "") != document.source:
        return False
    if not fieldfile.name:
        return True
    try:
        modified = fieldfile.storage.get_modified_time(fieldfile.name)
    except Exception:  # not implemented, or the file is gone: ingesting again will say which
        return False
    return bool(modified <= document.updated_at)


def prune_orphans(registration: Registration) -> int:
    """Remove documents of rows that no longer exist (deleted while signals were off)."""
    from .api import collection
    from .models import Document

    kb = collection(registration.collection)
    prefix = f"{registration.label}:"
    stored = (
        Document.objects.using(rag_settings.DATABASE)
        .filter(collection=kb, source_id__startswith=prefix)
        .values_list("source_id", flat=True)
    )
    pks = {re.split(r"[#/?]", source_id[len(prefix) :], maxsplit=1)[0] for source_id in stored}
    existing = {str(pk) for pk in registration.model._default_manager.values_list("pk", flat=True)}
    return sum(remove(registration, pk) for pk in sorted(pks - existing))
