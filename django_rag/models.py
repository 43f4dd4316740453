"""Collection, Document and Chunk: the knowledge base as plain rows.

Behaviour that searches, indexes or answers lives above this module (``django_rag.api``'s
``KnowledgeBase``, a proxy of ``Collection``); these models only describe and read their rows.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import IntegrityError, connections, models, transaction
from django.utils.translation import gettext_lazy as _
from pgvector.django import VectorField

from .conf import rag_settings
from .embedders import Embedder, get_embedder
from .exceptions import ConfigurationError
from .querysets import ChunkQuerySet
from .replicas import reachable_read_alias
from .validation import shown, unstorable

__all__ = [
    "POSTING_BUCKET_BITS",
    "Chunk",
    "Collection",
    "CollectionManager",
    "Document",
    "EmbeddingSwitch",
    "IngestBatch",
    "IngestJob",
    "Posting",
    "PostingBlock",
    "SpaceState",
    "TextStats",
]

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


class Document(models.Model):
    """One logical source (a file, a page, a model row), identified by ``source_id``."""

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        INDEXED = "indexed", _("indexed")
        SKIPPED = "skipped", _("skipped")
        FAILED = "failed", _("failed")

    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="documents")
    source_id = models.CharField(_("source id"), max_length=1024)
    title = models.CharField(_("title"), max_length=1024, blank=True, default="")
    source = models.TextField(_("source"), blank=True, default="", help_text=_("URL or path."))
    content_type = models.CharField(_("content type"), max_length=255, blank=True, default="")
    loader = models.CharField(_("loader"), max_length=100, blank=True, default="")
    metadata = models.JSONField(_("metadata"), default=dict, blank=True)
    tags = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    tenant = models.CharField(_("tenant"), max_length=200, blank=True, default="", db_index=True)
    owner_type = models.ForeignKey(ContentType, null=True, blank=True, on_delete=models.CASCADE)
    owner_id = models.CharField(max_length=255, null=True, blank=True)
    owner = GenericForeignKey("owner_type", "owner_id")
    status = models.CharField(_("status"), max_length=16, choices=Status.choices, default=Status.PENDING)
    status_reason = models.CharField(_("status reason"), max_length=100, blank=True, default="")
    error = models.TextField(_("error"), blank=True, default="")
    content_hash = models.CharField(max_length=40, blank=True, default="")
    page_count = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("document")
        verbose_name_plural = _("documents")
        constraints = [
            # A tenant's documents are its own: another tenant may load the same source (a URL).
            models.UniqueConstraint(
                fields=["collection", "tenant", "source_id"], name="django_rag_document_unique_source"
            ),
        ]
        indexes = [
            # Prefix removal (source_id LIKE 'docs/%') needs a pattern-ops index under any collation.
            models.Index(
                fields=["source_id"], name="django_rag_doc_source_like", opclasses=["varchar_pattern_ops"]
            ),
            models.Index(fields=["owner_type", "owner_id"], name="django_rag_doc_owner"),
            GinIndex(fields=["tags"], name="django_rag_doc_tags"),
        ]

    def __str__(self) -> str:
        return self.title or self.source_id


class Chunk(models.Model):
    """A piece of a document with its text search vector and its embedding in one space."""

    id = models.BigAutoField(primary_key=True)
    # No single-column FK indexes: django_rag_chunk_doc and django_rag_chunk_scope lead with these
    # columns, and every index costs each inserted chunk.
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks", db_index=False)
    # Denormalised from the document so search filters never need a join.
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="+", db_index=False)
    tenant = models.CharField(max_length=200, blank=True, default="")
    tags = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    index = models.PositiveIntegerField()
    content = models.TextField()
    # The contextual header (title and heading path): embedded and matched with the content, not shown.
    header = models.TextField(blank=True, default="", db_default="")
    content_hash = models.CharField(max_length=40)
    token_count = models.PositiveIntegerField(default=0)
    page = models.PositiveIntegerField(null=True, blank=True)
    char_start = models.PositiveIntegerField(default=0)
    char_end = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    search_vector = SearchVectorField(null=True)
    space = models.CharField(max_length=200)
    # No fixed width: each space's ANN index casts to its own vector(N) (see rag_migration).
    embedding = VectorField()

    objects = ChunkQuerySet.as_manager()

    class Meta:
        verbose_name = _("chunk")
        verbose_name_plural = _("chunks")
        ordering = ["document_id", "index"]
        indexes = [
            models.Index(fields=["document", "space", "index"], name="django_rag_chunk_doc"),
            models.Index(fields=["collection", "space", "tenant"], name="django_rag_chunk_scope"),
            models.Index(fields=["space", "content_hash"], name="django_rag_chunk_hash"),
            GinIndex(fields=["search_vector"], name="django_rag_chunk_fts"),
            GinIndex(fields=["tags"], name="django_rag_chunk_tags"),
            GinIndex(fields=["metadata"], name="django_rag_chunk_meta", opclasses=["jsonb_path_ops"]),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.index}"


# A posting block holds postings of one term among 16,384 consecutive chunk ids, so a chunk's
# postings are found from its id without an index on chunk ids.
POSTING_BUCKET_BITS = 14


class PostingBlock(models.Model):
    """Postings of one lexeme among 16,384 consecutive chunk ids, for BM25.

    Kept by triggers on the chunk table (migration 0008). Parallel arrays: ``chunks[i]`` holds
    the lexeme ``tfs[i]`` times (PostgreSQL keeps at most 256 positions per lexeme, so very
    repetitive chunks saturate, as BM25 does anyway) and is ``dls[i]`` lexemes long. A chunk's
    postings live in bucket ``chunk_id >> 14``. Writers append to a block of the bucket with
    room that no other writer holds, else add a row of their own (``block``, from a sequence),
    so concurrent ingestion never waits on postings and a rare term keeps about one row per
    bucket; deletes rewrite the blocks holding the chunk. About one row per term per bucket or
    batch instead of one per (term, chunk), on disk and at ingest.
    Postings carry the chunk's embedding space, so that a collection moving to a new embedder
    keeps one consistent BM25 per space. Never written by the app directly (migration 0008).
    """

    pk = models.CompositePrimaryKey("collection_id", "space", "term", "bucket", "block")
    collection = models.ForeignKey(
        Collection, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    space = models.CharField(max_length=200)
    term = models.TextField()
    bucket = models.BigIntegerField()
    block = models.BigIntegerField()
    # The block's size, in the key index (migration 0008): a term's document frequency is an
    # index-only sum of its blocks' sizes.
    n = models.IntegerField()
    chunks = ArrayField(models.BigIntegerField())
    tfs = ArrayField(models.SmallIntegerField())
    dls = ArrayField(models.IntegerField())

    class Meta:
        db_table = "django_rag_postblock"


class Posting(models.Model):
    """One lexeme of one chunk: a read-only view over ``PostingBlock`` (one row per array element).

    For inspection and tests; the search legs read the blocks. Filter on ``bucket``
    (``chunk_id >> 14``) as well as the chunk to look a chunk's postings up without a scan.
    """

    pk = models.CompositePrimaryKey("chunk_id", "term")
    chunk = models.ForeignKey(
        Chunk, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    collection = models.ForeignKey(
        Collection, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    space = models.CharField(max_length=200)
    term = models.TextField()
    bucket = models.BigIntegerField()
    tf = models.IntegerField()
    dl = models.IntegerField()

    class Meta:
        managed = False
        db_table = "django_rag_posting"


class TextStats(models.Model):
    """Per-collection, per-space chunk count and total length for BM25, as deltas in shard rows.

    Each writer adds its deltas to the shard of its database backend, so concurrent ingestion
    into one collection does not queue on a single row; readers sum the shards.
    """

    collection = models.ForeignKey(
        Collection, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    space = models.CharField(max_length=200)
    shard = models.SmallIntegerField()
    chunks = models.BigIntegerField(default=0)
    length = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["collection", "space", "shard"], name="django_rag_textstats_shard"
            ),
        ]


class IngestJob(models.Model):
    """One ``rag_ingest --async`` run: its sources, split in batches that Celery workers ingest.

    Workers add each finished batch's counts in the transaction that records the batch as an
    ``IngestBatch`` row (unique per job and number), so a batch redelivered after a worker died
    is counted once. ``manage.py rag_ingest`` waits on this row; the admin lists it read-only.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, related_name="ingest_jobs")
    tenant = models.CharField(_("tenant"), max_length=200, blank=True, default="")
    queue = models.CharField(_("queue"), max_length=200)
    # How the workers read the sources: root, tags, per_page, max_bytes, batch_size (see ingest.jobs).
    options = models.JSONField(_("options"), default=dict)
    total = models.PositiveIntegerField(_("sources"), default=0)
    batches = models.PositiveIntegerField(_("batches"), default=0)
    batches_done = models.PositiveIntegerField(_("batches done"), default=0)
    loaded = models.PositiveIntegerField(_("loaded"), default=0)
    skipped = models.PositiveIntegerField(_("skipped"), default=0)
    failed = models.PositiveIntegerField(_("failed"), default=0)
    failed_batches = models.PositiveIntegerField(_("failed batches"), default=0)
    chunks_added = models.PositiveIntegerField(_("chunks added"), default=0)
    chunks_removed = models.PositiveIntegerField(_("chunks removed"), default=0)
    chunks_unchanged = models.PositiveIntegerField(_("chunks unchanged"), default=0)
    embedded = models.PositiveIntegerField(_("texts embedded"), default=0)
    error = models.TextField(_("last batch error"), blank=True, default="")
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        verbose_name = _("ingest job")
        verbose_name_plural = _("ingest jobs")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return str(self.id)

    @property
    def done(self) -> int:
        """Sources whose batch has finished, whatever their outcome."""
        return self.loaded + self.skipped + self.failed

    @property
    def complete(self) -> bool:
        return self.batches_done >= self.batches


class IngestBatch(models.Model):
    """A batch of an ``IngestJob`` that has been counted (its number, once per job)."""

    job = models.ForeignKey(IngestJob, on_delete=models.CASCADE, related_name="counted_batches")
    number = models.PositiveIntegerField()
    failed = models.BooleanField(default=False)
    finished_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="django_rag_ingestbatch_unique"),
        ]
