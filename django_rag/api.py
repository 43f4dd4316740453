"""``collection()``: the entry point of the Python API."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from .conf import rag_settings
from .dberrors import translate_db_errors
from .exceptions import ConfigurationError
from .models import Collection

__all__ = ["collection"]


def collection(
    name: str,
    *,
    create: bool = False,
    embedder: str | None = None,
    text_config: str | None = None,
    using: str | None = None,
) -> Collection:
    """The collection ``name``: created on first use when declared in ``RAG["COLLECTIONS"]``.

    Settings are the source of truth for declared collections: a changed EMBEDDER, TEXT_CONFIG
    or chunking option is written to the row the next time the collection is used. An
    undeclared name must already exist, or be created with ``create=True``.
    """
    using = using or rag_settings.DATABASE
    declared = rag_settings.collection_options(name)
    wanted: dict[str, object] = {}
    if declared is not None:
        wanted = {
            "embedder": declared["EMBEDDER"],
            "text_config": declared["TEXT_CONFIG"],
            "chunk_size": declared["CHUNK_SIZE"],
            "chunk_overlap": declared["CHUNK_OVERLAP"],
        }
    if embedder is not None:
        wanted["embedder"] = embedder
    if text_config is not None:
        wanted["text_config"] = text_config
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
            for field in changed:
                setattr(row, field, wanted[field])
            row.save(using=using, update_fields=[*changed, "updated_at"])
        return row
