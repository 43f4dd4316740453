"""``collection()``: the entry point of the Python API."""

from __future__ import annotations

import logging

from django.db import IntegrityError, connections, transaction

from .conf import rag_settings
from .dberrors import translate_db_errors
from .exceptions import ConfigurationError
from .models import Collection

__all__ = ["collection", "refresh_text_index"]

logger = logging.getLogger(__name__)


def collection(
    name: str,
    *,
    create: bool = False,
    embedder: str | None = None,
    text_config: str | None = None,
    text_search: bool | None = None,
    using: str | None = None,
) -> Collection:
    """The collection ``name``: created on first use when declared in ``RAG["COLLECTIONS"]``.

    Settings are the source of truth for declared collections: a changed EMBEDDER, TEXT_CONFIG,
    TEXT_SEARCH or chunking option is written to the row the next time the collection is used
    (a text setting also rebuilds the chunks' text index then, see ``refresh_text_index``). An
    undeclared name must already exist, or be created with ``create=True``.
    """
    using = using or rag_settings.DATABASE
    declared = rag_settings.collection_options(name)
    wanted: dict[str, object] = {}
    if declared is not None:
        wanted = {
            "embedder": declared["EMBEDDER"],
            "text_config": declared["TEXT_CONFIG"],
            "text_search": declared["TEXT_SEARCH"],
            "chunk_size": declared["CHUNK_SIZE"],
            "chunk_overlap": declared["CHUNK_OVERLAP"],
        }
    if embedder is not None:
        wanted["embedder"] = embedder
    if text_config is not None:
        wanted["text_config"] = text_config
    if text_search is not None:
        wanted["text_search"] = text_search
    if wanted.get("embedder") is not None and wanted["embedder"] not in rag_settings.EMBEDDERS:
        raise ConfigurationError(
            f"collection {name!r} uses embedder {wanted['embedder']!r}, "
            "which RAG['EMBEDDERS'] does not define "
            f"(it defines {sorted(rag_settings.EMBEDDERS)})"
        )
    with translate_db_errors(using):
        row = Collection.objects.using(using).filter(name=name).first()
        if row is None:
            if declared is None and not create:
                known = sorted(rag_settings.COLLECTIONS)
                raise ConfigurationError(
                    f"unknown collection {name!r}: declare it in RAG['COLLECTIONS'] (declared: {known}) "
                    f"or call collection({name!r}, create=True)"
                )
            try:
                with transaction.atomic(using=using):
                    return Collection.objects.using(using).create(name=name, **wanted)
            except IntegrityError:
                # Another process created it between our read and our insert.
                row = Collection.objects.using(using).get(name=name)
        changed = [field for field, value in wanted.items() if getattr(row, field) != value]
        if changed:
            with transaction.atomic(using=using):
                for field in changed:
                    setattr(row, field, wanted[field])
                row.save(using=using, update_fields=[*changed, "updated_at"])
                if {"text_config", "text_search"} & set(changed):
                    refresh_text_index(row, using=using)
        return row


def refresh_text_index(coll: Collection, *, using: str) -> int:
    """Rebuild the stored text vectors (and so the BM25 postings) of ``coll`` from its settings.

    Runs when TEXT_CONFIG or TEXT_SEARCH changes, in the transaction that records the change,
    so text search never mixes two configs. One UPDATE over the collection's chunks, no
    embedding, but the triggers rewrite every posting: 8-24 s per 10k SciFact chunks measured
    here. On a large collection run ``manage.py rag_reindex NAME`` right after deploying the
    change, so that no request pays for it. Returns the number of chunks rewritten.
    """
    config = coll.text_config if coll.text_search else None
    with connections[using].cursor() as cursor:
        # to_tsvector is strict: a NULL config (text search off) stores NULL and drops the postings.
        cursor.execute(
            "UPDATE django_rag_chunk SET search_vector = to_tsvector(%s::regconfig, content) "
            "WHERE collection_id = %s",
            [config, coll.pk],
        )
        rewritten = cursor.rowcount
    logger.info(
        "collection %r: text index of %d chunks rebuilt (TEXT_SEARCH %s, TEXT_CONFIG %r)",
        coll.name, rewritten, "on" if coll.text_search else "off", coll.text_config,
    )
    return rewritten
