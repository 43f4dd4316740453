"""Collections and the embedding space they search: ``Collection``, its manager, and ``EmbeddingSwitch``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from django.contrib.postgres.search import SearchVector
from django.db import IntegrityError, connections, models, transaction
from django.utils.translation import gettext_lazy as _

from ..conf import rag_settings
from ..embedders import Embedder, get_embedder
from ..exceptions import ConfigurationError
from ..querysets import ChunkQuerySet
from ..replicas import reachable_read_alias
from ..validation import shown, unstorable
from .documents import Chunk

__all__ = ["Collection", "CollectionManager", "EmbeddingSwitch", "SpaceState", "embedder_for_space"]

logger = logging.getLogger(__name__)


class CollectionManager(models.Manager["Collection"]):
    """``resolve(name)``: a collection row as the settings declare it, created on first use."""

    def resolve(
        self,
        name: str | Collection,
        *,
        create: bool = False,
        embedder: str | None = None,
        text_config: str | None = None,
        text_search: bool | None = None,
    ) -> Collection:
        """The collection ``name`` in this manager's database, in step with ``RAG["COLLECTIONS"]``.

        Settings are the source of truth for declared collections: a changed EMBEDDER,
        TEXT_CONFIG, TEXT_SEARCH or chunking option is written to the row here (a text setting
        also rebuilds the chunks' text index, see ``Collection.refresh_text_index``). An
        undeclared name must already exist, or be created with ``create=True``.
        """
        if isinstance(name, Collection):
            name = name.name
        if not isinstance(name, str) or not name or unstorable(name):
            # NUL or a lone surrogate would fail in the database, not here: no collection has them.
            raise ConfigurationError(f"a collection name must be a non-empty string, got {shown(name)}")
        declared = rag_settings.collection_options(name)
        wanted: dict[str, Any] = {}
        if declared is not None:
            wanted = {
                "embedder": declared["EMBEDDER"],
                "text_config": declared["TEXT_CONFIG"],
                "text_search": declared["TEXT_SEARCH"],
                "chunk_size": declared["CHUNK_SIZE"],
                "chunk_overlap": declared["CHUNK_OVERLAP"],
                "context_headers": declared["CONTEXT_HEADERS"],
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
        using = self.db
        row = self.filter(name=name).first()
        if row is None:
            if declared is None and not create:
                known = sorted(rag_settings.COLLECTIONS)
                raise ConfigurationError(
                    f"unknown collection {name!r}: declare it in RAG['COLLECTIONS'] (declared: {known}) "
                    f"or call collection({name!r}, create=True)"
                )
            alias = wanted.get("embedder") or Collection._meta.get_field("embedder").get_default()
            active = {"active_embedder": alias, "active_space": get_embedder(alias).space}
            try:
                with transaction.atomic(using=using):
                    return self.create(name=name, **wanted, **active)
            except IntegrityError:
                # Another process created it between our read and our insert.
                row = self.get(name=name)
        changed = [field for field, value in wanted.items() if getattr(row, field) != value]
        if changed:
            with transaction.atomic(using=using):
                for field in changed:
                    setattr(row, field, wanted[field])
                row.save(using=using, update_fields=[*changed, "updated_at"])
                if {"text_config", "text_search"} & set(changed):
                    row.refresh_text_index()
        if not row.active_space or row.embedder_space() != row.active_space:
            row = self._follow_embedder(row)
        return row

    def _follow_embedder(self, row: Collection) -> Collection:
        """Bring the row's active space in step with its declared embedder, or open a switch.

        A collection with no vectors in its active space moves to the declared embedder at once.
        One with vectors keeps searching them, and gets an ``EmbeddingSwitch`` towards the
        declared embedder: ``rag_reindex`` fills the new space, then flips. A switch already
        open towards another space is left alone (``rag_reindex NAME --abort`` ends it).
        """
        using = self.db
        declared = row.embedder_space()
        if row.active_space and EmbeddingSwitch.objects.using(using).filter(collection=row).exists():
            return row  # a switch is open (towards ``declared``, or else one rag_reindex reports)
        with transaction.atomic(using=using):
            row = self.select_for_update().get(pk=row.pk)
            if row.active_space and row.active_space == declared:
                return row
            if not row.active_space:
                # A row from before migration 0009: its active space is where most of its chunks are.
                held = (
                    Chunk.objects.using(using)
                    .filter(collection=row)
                    .values_list("space")
                    .annotate(n=models.Count("id"))
                    .order_by("-n")
                    .first()
                )
                row.active_space = held[0] if held else declared
                row.active_embedder = row.embedder if row.active_space == declared else ""
                row.save(using=using, update_fields=["active_embedder", "active_space", "updated_at"])
            switch = EmbeddingSwitch.objects.using(using).filter(collection=row).first()
            holds = row.active_space != declared and (
                Chunk.objects.using(using).filter(collection=row, space=row.active_space).exists()
            )
            if not holds and switch is None:
                row.active_embedder, row.active_space = row.embedder, declared
                row.save(using=using, update_fields=["active_embedder", "active_space", "updated_at"])
            elif switch is None:
                # Leftovers of that space (a switch back before --drop-old) are stale for every
                # document changed since: they go, so the switch refills the space completely.
                Chunk.objects.using(using).filter(collection=row, space=declared).delete()
                EmbeddingSwitch.objects.using(using).create(
                    collection=row, embedder=row.embedder, space=declared, source_space=row.active_space
                )
                logger.warning(
                    "collection %r: EMBEDDER is now %r (%s); searches keep using %s until "
                    "`manage.py rag_reindex %s` has embedded every document into the new space",
                    row.name,
                    row.embedder,
                    declared,
                    row.active_space,
                    row.name,
                )
        return row


class Collection(models.Model):
    """A knowledge base: a namespace of documents sharing an embedder and a text search config."""

    name = models.SlugField(_("name"), max_length=100, unique=True)
    embedder = models.CharField(
        _("embedder"), max_length=100, default="default", help_text=_("Alias in RAG['EMBEDDERS'].")
    )
    text_config = models.CharField(
        _("text search config"),
        max_length=63,
        default="english",
        help_text=_("PostgreSQL regconfig, e.g. english, portuguese, simple."),
    )
    text_search = models.BooleanField(
        _("full-text search"),
        default=True,
        help_text=_("Index chunk text for text and hybrid search (off: vector search only, faster ingest)."),
    )
    chunk_size = models.PositiveIntegerField(_("chunk size (tokens)"), default=256)
    chunk_overlap = models.PositiveIntegerField(_("chunk overlap (tokens)"), default=32)
    context_headers = models.BooleanField(
        _("contextual headers"),
        default=True,
        help_text=_("Embed and match each chunk with its document's title and heading path."),
    )
    # What searches use: the last complete space. ``embedder`` above is what the settings ask
    # for; while the two differ, an EmbeddingSwitch row tracks the move (see rag_reindex).
    active_embedder = models.CharField(
        _("active embedder"),
        max_length=100,
        blank=True,
        default="",
        help_text=_("Alias whose vectors searches use until a switch to EMBEDDER flips."),
    )
    active_space = models.CharField(_("active space"), max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects: ClassVar[CollectionManager] = CollectionManager()

    class Meta:
        verbose_name = _("collection")
        verbose_name_plural = _("collections")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def using(self) -> str:
        """The database alias this row was read from (``RAG["DATABASE"]`` for a new row)."""
        return self._state.db or rag_settings.DATABASE

    def embedder_space(self) -> str:
        """The space of the embedder the settings (or the row) ask for: a switch's target."""
        return get_embedder(self.embedder).space

    def get_embedder(self) -> Embedder:
        """The embedder of the active space: what searches embed queries with.

        During a switch this is the *old* embedder (``active_embedder``), so queries stay
        comparable with the complete space. If the settings no longer define an embedder of
        that space, searches cannot embed queries for it: the error says how to keep it.
        """
        if not self.active_space:
            return get_embedder(self.embedder)
        return embedder_for_space(self.active_space, (self.active_embedder, self.embedder), self.name)

    @property
    def space(self) -> str:
        """The embedding space this collection searches (its active space)."""
        return self.active_space or self.get_embedder().space

    def space_state(self, *, lock: bool = False, using: str | None = None) -> SpaceState:
        """The active space and the switch target as the database holds them now.

        ``lock``: inside a transaction, hold a share lock on the collection row until it ends, so
        a switch cannot begin, flip or abort while a writer relies on what it read.
        """
        with connections[using or self.using].cursor() as cursor:
            cursor.execute(_SPACE_STATE + (" FOR SHARE OF c" if lock else ""), [self.pk])
            row = cursor.fetchone()
        if row is None:
            raise ConfigurationError(f"collection {self.name!r} no longer exists")
        active_embedder, active_space, embedder, target_embedder, target_space = row
        if not active_space:
            active_space = get_embedder(embedder).space
            active_embedder = embedder
        return SpaceState(active_embedder or embedder, active_space, target_embedder, target_space)

    def chunks(self) -> ChunkQuerySet:
        """This collection's chunks, ready for ``.nearest()`` with its embedder.

        Read from the collection's own database, or its read replica (``RAG["READ_DATABASE"]``).
        """
        chunks = Chunk.objects.using(reachable_read_alias(self.using))
        return chunks.filter(collection=self).for_collection(self)

    def refresh_text_index(self) -> int:
        """Rebuild the stored text vectors (and so the BM25 postings) of this collection's chunks.

        Runs when TEXT_CONFIG or TEXT_SEARCH changes, in the transaction that records the change,
        so text search never mixes two configs. One UPDATE over the collection's chunks, no
        embedding, but the triggers rewrite every posting: 8-24 s per 10k SciFact chunks measured
        here. On a large collection run ``manage.py rag_reindex NAME`` right after deploying the
        change, so that no request pays for it. Returns the number of chunks rewritten.
        """
        # The header is matched with the content, as ingestion indexes it (stores.pgvector).
        vector = SearchVector("header", "content", config=self.text_config) if self.text_search else None
        rewritten = Chunk.objects.using(self.using).filter(collection=self).update(search_vector=vector)
        logger.info(
            "collection %r: text index of %d chunks rebuilt (TEXT_SEARCH %s, TEXT_CONFIG %r)",
            self.name,
            rewritten,
            "on" if self.text_search else "off",
            self.text_config,
        )
        return rewritten


_SPACE_STATE = """
SELECT c.active_embedder, c.active_space, c.embedder, s.embedder, s.space
FROM django_rag_collection AS c LEFT JOIN django_rag_embeddingswitch AS s ON s.collection_id = c.id
WHERE c.id = %s
"""


@dataclass(frozen=True)
class SpaceState:
    """Where a collection's vectors go: the active space, and the target of a switch in progress."""

    active_embedder: str
    active_space: str
    target_embedder: str | None = None
    target_space: str | None = None


def embedder_for_space(space: str, preferred: tuple[str, ...] = (), collection: str = "") -> Embedder:
    """An embedder of ``RAG["EMBEDDERS"]`` whose space is ``space``, trying ``preferred`` aliases first."""
    aliases = [a for a in preferred if a and a in rag_settings.EMBEDDERS]
    aliases += [a for a in rag_settings.EMBEDDERS if a not in aliases]
    for alias in aliases:
        embedder = get_embedder(alias)
        if embedder.space == space:
            return embedder
    raise ConfigurationError(
        f"collection {collection!r} searches space {space!r}, its last complete one, but no embedder in "
        "RAG['EMBEDDERS'] produces it any more; keep the old embedder under an alias of its own "
        "(e.g. 'previous') until `manage.py rag_reindex "
        f"{collection or 'NAME'}` has flipped the collection to its new EMBEDDER"
    )


class EmbeddingSwitch(models.Model):
    """A collection moving to another embedder: its target space is being filled.

    Created when a collection's EMBEDDER changes while its active space holds vectors; searches
    keep using the active space until ``rag_reindex`` has embedded every document into the
    target and flips (``Collection.active_space`` becomes ``space``; this row is deleted).
    Meanwhile the ingest pipeline writes every document into both spaces. The ``run_*`` fields
    and ``progress_at`` are the current ``rag_reindex`` run's, for the rate and ETA of ``rag_status``.
    """

    collection = models.OneToOneField(
        Collection, on_delete=models.CASCADE, primary_key=True, related_name="switch"
    )
    embedder = models.CharField(_("target embedder"), max_length=100)
    space = models.CharField(_("target space"), max_length=200)
    source_space = models.CharField(_("source space"), max_length=200)
    started_at = models.DateTimeField(_("started"), auto_now_add=True)
    run_started_at = models.DateTimeField(_("run started"), null=True, blank=True)
    run_documents = models.PositiveBigIntegerField(_("documents embedded by this run"), default=0)
    texts_embedded = models.PositiveBigIntegerField(_("texts embedded"), default=0)
    progress_at = models.DateTimeField(_("last batch"), null=True, blank=True)

    class Meta:
        verbose_name = _("embedding switch")
        verbose_name_plural = _("embedding switches")

    def __str__(self) -> str:
        return f"{self.collection_id}: {self.source_space} -> {self.space}"
