"""Registered model rows into documents: per row, gate -> read -> extract -> index -> record.

Per file: content-type gate, size gate, bytes read through the field's storage (so local disks
and django-storages S3 work alike), extraction by content type, then ``index_documents`` (the
one pipeline), which replaces the document's chunks in one transaction (a shrunken re-upload
leaves no stale tail; unchanged chunks are not embedded again). Skips and failures are
recorded on the Document through the store. Embedding happens before the write, so a failing
embedder leaves the old chunks untouched.

Two databases are involved: the row's own (``row_using``, the site's routing by default) and
the knowledge base's (``using``, ``RAG["DATABASE"]`` by default).
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.contrib.contenttypes.models import ContentType
from django.dispatch import Signal

from ..conf import rag_settings
from ..exceptions import FileRefusedError, RagError
from ..models import Collection, Document
from ..retry import is_transient
from ..signals import document_indexed, document_removed, ingestion_failed, ingestion_skipped
from ..stores import ALL_TENANTS, DocumentInfo, get_store
from ..types import EMPTY_TEXT, TOO_LARGE, UNSUPPORTED_TYPE, IngestResult, RagDocument
from .loaders import guess_content_type, load_bytes, load_text
from .loaders.registry import resolve_content_type
from .pipeline import index_documents
from .registration import Registration, get_registration

__all__ = [
    "document_for",
    "ingest_instance",
    "ingest_row",
    "is_up_to_date",
    "prune_orphans",
    "remove_instance",
    "remove_row",
    "rescope_row",
]

logger = logging.getLogger("django_rag.ingest")

Status = Document.Status

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


def ingest_instance(
    app_label: str,
    model_name: str,
    pk: Any,
    *,
    raise_transient: bool = False,
    using: str | None = None,
    row_using: str | None = None,
) -> IngestResult:
    """Sync one registered row into its collection and record the outcome on its Document.

    Returns an ``IngestResult`` (indexed, skipped with a reason, failed with the error, or
    removed when the row no longer exists); never raises for a bad file or a failing
    embedder. With ``raise_transient`` a transient error (embedder 429/5xx, a dropped
    connection) is recorded and then re-raised, so a task can retry it.
    """
    model = apps.get_model(app_label, model_name)
    return ingest_row(
        get_registration(model), pk, raise_transient=raise_transient, using=using, row_using=row_using
    )


def remove_instance(app_label: str, model_name: str, pk: Any, *, using: str | None = None) -> int:
    """Remove the documents of a (deleted) registered row; returns how many were removed."""
    model = apps.get_model(app_label, model_name)
    return remove_row(get_registration(model), pk, using=using)


def ingest_row(
    registration: Registration,
    pk: Any,
    *,
    raise_transient: bool = False,
    using: str | None = None,
    row_using: str | None = None,
) -> IngestResult:
    """Sync one row of a registered model; see ``ingest_instance``."""
    using = using or rag_settings.DATABASE
    instance = None
    try:
        kb = Collection.objects.db_manager(using).resolve(registration.collection)
        for _ in range(_MAX_PASSES):
            instance = _fetch(registration, pk, row_using)
            if instance is None:
                return _removed(registration, pk, using)
            # Access follows the row before anything can fail: a row moved to another tenant (or
            # whose tags changed) must not stay readable by its old scope because its text failed.
            get_store(kb.using).rescope(
                kb,
                prefix=registration.source_id(pk),
                tenant=registration.tenant_for(instance),
                tags=registration.tags_for(instance),
            )
            seen = registration.fingerprint(instance)
            result, document = _ingest_once(registration, kb, instance)
            fresh = _fetch(registration, pk, row_using)
            if fresh is None:
                # Deleted while we wrote: its removal may have run before our write landed.
                return _removed(registration, pk, using)
            if registration.fingerprint(fresh) == seen:
                break
            # Saved again while we read the old values; a stale write must not be the last one.
            logger.info("%s changed during ingestion; ingesting it again", registration.source_id(pk))
    except Exception as exc:
        return _failed(registration, pk, instance, exc, raise_transient=raise_transient, using=using)
    if result.status == Status.INDEXED:
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


def remove_row(registration: Registration, pk: Any, *, using: str | None = None) -> int:
    """Delete the row's documents (``source_id`` and its ``#part`` children, in any tenant)."""
    kb = Collection.objects.db_manager(using or rag_settings.DATABASE).resolve(registration.collection)
    source_id = registration.source_id(pk)
    count = get_store(kb.using).delete(kb, prefix=source_id, tenant=ALL_TENANTS)
    _send(document_removed, registration, pk=pk, source_id=source_id, collection=kb.name, count=count)
    return count


def _fetch(registration: Registration, pk: Any, row_using: str | None) -> Any:
    manager = registration.model._default_manager
    if row_using is not None:
        manager = manager.db_manager(row_using)
    return manager.filter(pk=pk).first()


def _removed(registration: Registration, pk: Any, using: str) -> IngestResult:
    remove_row(registration, pk, using=using)
    return IngestResult(status="removed")


def _ingest_once(
    registration: Registration, kb: Collection, instance: Any
) -> tuple[IngestResult, Document | None]:
    store = get_store(kb.using)
    source_id = registration.source_id(instance.pk)
    tenant = registration.tenant_for(instance)
    loaded = _load(registration, instance)
    if not loaded.skip_reason:
        sync = index_documents(
            kb, loaded.docs, tags=registration.tags_for(instance), tenant=tenant, owner=instance
        )
        if sync.documents:
            # The row's documents of an earlier version: other parts, or another tenant it left.
            keep = {(tenant, doc.source_id) for doc in loaded.docs}
            store.delete(kb, prefix=source_id, tenant=ALL_TENANTS, keep=keep)
            return IngestResult(status=Status.INDEXED, sync=sync), store.document(
                kb, source_id, tenant=tenant
            )
        loaded.skip_reason, loaded.skip_detail = EMPTY_TEXT, "the extracted text has no content to chunk"
    info = _info(registration, instance, loaded, instance.pk, kb.using)
    document = store.record(
        kb, info, status=Status.SKIPPED, reason=loaded.skip_reason, error=loaded.skip_detail, drop_chunks=True
    )
    store.delete(kb, prefix=source_id, tenant=ALL_TENANTS, keep={(info.tenant, source_id)})
    return IngestResult(status=Status.SKIPPED, reason=loaded.skip_reason, error=loaded.skip_detail), document


def _info(registration: Registration, instance: Any, loaded: _Loaded, pk: Any, using: str) -> DocumentInfo:
    info = DocumentInfo(
        source_id=registration.source_id(pk),
        title=loaded.title,
        source=loaded.source,
        content_type=loaded.content_type,
        owner_id=str(pk),
    )
    if instance is not None:
        info.owner = instance
        info.tenant = registration.tenant_for(instance)
        info.tags = registration.tags_for(instance)
    else:
        info.owner_type_id = ContentType.objects.db_manager(using).get_for_model(registration.model).pk
    return info


def _load(registration: Registration, instance: Any) -> _Loaded:
    """The row's documents, through the content-type and size gates for a file."""
    source_id = registration.source_id(instance.pk)
    derived = {"model": registration.label, "object_id": str(instance.pk)}
    if registration.file_field is None:
        title = str(instance)
        loaded = _Loaded(title=title, source="", content_type="text/plain")
        metadata = {"title": title, **derived, **registration.metadata_for(instance)}
        text = registration.text_of(instance)
        size, limit = len(text.encode("utf-8", "surrogatepass")), registration.text_limit()
        if size > limit:
            # Chunking and embedding grow with the text: an unbounded field would hold a worker for minutes.
            loaded.skip_reason = TOO_LARGE
            loaded.skip_detail = (
                f"the row's text is {size} bytes; the limit is {limit} (RAG['MEDIA']['MAX_TEXT_BYTES'])"
            )
            return loaded
        loaded.docs = load_text(text, source_id=source_id, metadata=metadata)
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
    # The bytes say what the upload is, whatever its name or declared type (see loaders.sniff).
    resolved = resolve_content_type(data, content_type)
    loaded.content_type = resolved.content_type
    if resolved.reason:
        loaded.skip_reason, loaded.skip_detail = resolved.reason, f"{name}: {resolved.error}"
        return loaded
    if resolved.content_type not in allowed:
        loaded.skip_reason = UNSUPPORTED_TYPE
        loaded.skip_detail = f"{name}: {resolved.content_type} is not one of {', '.join(allowed)}"
        return loaded
    metadata = {"source": name, **derived, **registration.metadata_for(instance)}
    try:
        loaded.docs = load_bytes(
            data, content_type=resolved.content_type, source_id=source_id, metadata=metadata
        )
    except FileRefusedError as exc:
        loaded.skip_reason, loaded.skip_detail = exc.reason, f"{name}: {exc}"
        return loaded
    for doc in loaded.docs:
        # The file's own title (its metadata, its first heading) first; its name as a last resort.
        if doc.metadata.get("title") in (None, "", doc.source_id):
            doc.metadata["title"] = loaded.title
    if not loaded.docs:
        loaded.skip_reason, loaded.skip_detail = EMPTY_TEXT, f"{name} has no extractable text"
    return loaded


def _failed(
    registration: Registration, pk: Any, instance: Any, exc: Exception, *, raise_transient: bool, using: str
) -> IngestResult:
    error = f"{type(exc).__name__}: {exc}"
    result = IngestResult(status=Status.FAILED, error=error)
    transient = is_transient(exc)
    document = None
    try:
        kb = Collection.objects.db_manager(using).resolve(registration.collection)
        store = get_store(kb.using)
        loaded = _Loaded(title=str(instance) if instance is not None else "", source="", content_type="")
        info = _info(registration, instance, loaded, pk, kb.using)
        if instance is None:
            # The row could not be read: record the failure on the document it already has.
            existing = store.document(kb, info.source_id)
            info.tenant = existing.tenant if existing is not None else ""
        document = store.record(kb, info, status=Status.FAILED, error=error, drop_chunks=False)
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


def _send(signal: Signal, registration: Registration, **kwargs: Any) -> None:
    for receiver, response in signal.send_robust(sender=registration.model, **kwargs):
        if isinstance(response, Exception):
            logger.error("signal receiver %r raised", receiver, exc_info=response)


def is_up_to_date(registration: Registration, instance: Any, document: Document | None) -> bool:
    """Whether ``document`` still reflects ``instance`` (for ``rag_reindex --changed-only``).

    Text rows compare the text's hash; file rows compare the file's name and the storage's
    modification time with the document's. Metadata changes are not detected.
    """
    if document is None or document.status not in (Status.INDEXED, Status.SKIPPED):
        return False
    if document.tenant != registration.tenant_for(instance) or sorted(document.tags) != registration.tags_for(
        instance
    ):
        return False
    if registration.file_field is None:
        docs = load_text(registration.text_of(instance), source_id=document.source_id)
        if not docs:
            return document.status == Status.SKIPPED
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


def prune_orphans(registration: Registration, *, using: str | None = None) -> int:
    """Remove documents of rows that no longer exist (deleted while signals were off)."""
    kb = Collection.objects.db_manager(using or rag_settings.DATABASE).resolve(registration.collection)
    prefix = f"{registration.label}:"
    stored = get_store(kb.using).source_ids(kb, prefix=prefix)
    pks = {re.split(r"[#/?]", source_id[len(prefix) :], maxsplit=1)[0] for _, source_id in stored}
    existing = {str(pk) for pk in registration.model._default_manager.values_list("pk", flat=True)}
    return sum(remove_row(registration, pk, using=kb.using) for pk in sorted(pks - existing))


def document_for(instance: Any, *, using: str | None = None) -> Document | None:
    """The Document a registered row was ingested into (with its status), or None."""
    registration = get_registration(type(instance))
    kb = Collection.objects.db_manager(using or rag_settings.DATABASE).resolve(registration.collection)
    return get_store(kb.using).document(kb, registration.source_id(instance.pk))


def rescope_row(
    registration: Registration, pk: Any, *, using: str | None = None, row_using: str | None = None
) -> int:
    """Give the row's documents its current tenant and tags now, before its ingestion is queued.

    Access follows the row at once: a document moved to another tenant (or whose tags changed)
    is out of reach for the old scope on the next request, while the re-embedding, if the text
    changed too, waits for a worker. Returns how many documents moved.
    """
    instance = _fetch(registration, pk, row_using)
    if instance is None:
        return 0
    kb = Collection.objects.db_manager(using or rag_settings.DATABASE).resolve(registration.collection)
    return get_store(kb.using).rescope(
        kb,
        prefix=registration.source_id(pk),
        tenant=registration.tenant_for(instance),
        tags=registration.tags_for(instance),
    )
