"""Where an embedder switch stands, and the ANN index its target space needs before it may flip."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connections

from ..ddl import IndexSpec
from ..embedders import Embedder
from ..exceptions import ConfigurationError, RagError
from ..models import Collection, EmbeddingSwitch, embedder_for_space
from ..stores import get_store

__all__ = [
    "SpaceStatus",
    "SwitchStatus",
    "build_index",
    "check_switch",
    "get_switch",
    "has_index",
    "index_problem",
    "status",
    "target_embedder",
]


@dataclass
class SpaceStatus:
    space: str
    chunks: int
    documents: int
    active: bool = False
    target: bool = False
    indexed: bool = False


@dataclass
class SwitchStatus:
    """A collection's spaces and, during a switch, its progress: ``rag_status`` and the admin show it."""

    name: str
    declared_embedder: str
    active_embedder: str
    active_space: str
    spaces: list[SpaceStatus] = field(default_factory=list)
    target_embedder: str | None = None
    target_space: str | None = None
    documents_total: int = 0
    documents_done: int = 0
    started_at: datetime | None = None
    progress_at: datetime | None = None
    rate: float | None = None  # documents per second of the current (or last) run
    eta_seconds: float | None = None
    problem: str = ""

    @property
    def percent(self) -> float:
        return 100.0 * self.documents_done / self.documents_total if self.documents_total else 100.0


def target_embedder(switch: EmbeddingSwitch, collection: Collection) -> Embedder:
    """The switch's embedder: its alias if it still makes the target space, else any that does."""
    try:
        return embedder_for_space(switch.space, (switch.embedder,), collection.name)
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"collection {collection.name!r} is switching to space {switch.space!r} but no embedder in "
            "RAG['EMBEDDERS'] produces it; restore that embedder, or run "
            f"`manage.py rag_reindex {collection.name} --abort`"
        ) from exc


def check_switch(collection: Collection, switch: EmbeddingSwitch) -> None:
    """Refuse to go on with a switch the settings no longer ask for (a second switch at once)."""
    declared = collection.embedder_space()
    if switch.space != declared:
        raise ConfigurationError(
            f"collection {collection.name!r} is switching from {switch.source_space} to {switch.space} "
            f"(EMBEDDER {switch.embedder!r}), but its EMBEDDER is now {collection.embedder!r} "
            f"({declared}); one switch at a time: run `manage.py rag_reindex {collection.name} --abort` "
            "to drop the unfinished space, then `manage.py rag_reindex "
            f"{collection.name}` to switch to the new EMBEDDER (or set EMBEDDER back to "
            f"{switch.embedder!r} to finish the first switch)"
        )


def has_index(space: str, using: str) -> bool:
    """Whether a partial ANN index covers ``space`` (found by its definition, whatever its name)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_indexes WHERE tablename = 'django_rag_chunk' "
            "AND (indexdef ILIKE '%%USING hnsw%%' OR indexdef ILIKE '%%USING ivfflat%%') "
            "AND position(%s IN indexdef) > 0",
            [f"'{space}'"],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def build_index(space: str, dimensions: int, *, using: str) -> IndexSpec | None:
    """Build ``space``'s HNSW index now, concurrently (no table lock); None when too wide to index.

    For sites that let a command run DDL; the others emit it with ``rag_migration``.
    """
    spec = IndexSpec(space, dimensions)
    if not spec.indexable:
        return None
    connection = connections[using]
    if connection.in_atomic_block:
        raise ConfigurationError("build_index runs CREATE INDEX CONCURRENTLY: call it outside a transaction")
    with connection.cursor() as cursor:
        cursor.execute(spec.create_sql(concurrently=True))
    return spec


def status(collection: Collection, *, using: str | None = None) -> SwitchStatus:
    """Each space's chunks and documents, and a switch's progress, rate and ETA."""
    using = using or collection.using
    store = get_store(using)
    row = Collection.objects.using(using).get(pk=collection.pk)
    switch = EmbeddingSwitch.objects.using(using).filter(collection=row).first()
    counts = store.space_counts(row)
    active_space = row.active_space
    if not active_space:
        try:
            active_space = row.embedder_space()
        except RagError as exc:
            active_space = f"({exc})"
    report = SwitchStatus(
        name=row.name,
        declared_embedder=row.embedder,
        active_embedder=row.active_embedder or row.embedder,
        active_space=active_space,
    )
    spaces = set(counts) | {active_space} | ({switch.space} if switch else set())
    for space in sorted(spaces):
        chunks, documents = counts.get(space, (0, 0))
        report.spaces.append(
            SpaceStatus(
                space,
                chunks,
                documents,
                active=space == active_space,
                target=switch is not None and space == switch.space,
                indexed=_indexed(space, using),
            )
        )
    if switch is not None:
        report.target_embedder, report.target_space = switch.embedder, switch.space
        report.documents_done = counts.get(switch.space, (0, 0))[1]
        report.documents_total = max(counts.get(active_space, (0, 0))[1], report.documents_done)
        report.started_at, report.progress_at = switch.started_at, switch.progress_at
        if switch.run_started_at and switch.progress_at and switch.run_documents:
            elapsed = (switch.progress_at - switch.run_started_at).total_seconds()
            if elapsed > 0:
                report.rate = switch.run_documents / elapsed
                report.eta_seconds = (report.documents_total - report.documents_done) / report.rate
        try:
            check_switch(row, switch)
            target_embedder(switch, row)
        except RagError as exc:
            report.problem = str(exc)
    return report


def _indexed(space: str, using: str) -> bool:
    try:
        return has_index(space, using)
    except Exception:  # a store without the chunk table (memory) has no index to report
        return False


def get_switch(collection: Collection, *, using: str | None = None) -> EmbeddingSwitch | None:
    """The collection's switch in progress, if any."""
    return (
        EmbeddingSwitch.objects.using(using or collection.using).filter(collection_id=collection.pk).first()
    )


def index_problem(collection: Collection, space: str, *, using: str | None = None) -> str:
    """Why ``space`` should not become active yet ("" when it may): it lacks the ANN index the
    active space has, so the flip would turn indexed searches into sequential scans."""
    using = using or collection.using
    dims = space.rpartition(":")[2]
    if not dims.isdigit() or not IndexSpec(space, int(dims)).indexable:
        return ""  # too wide for an ANN index: searches in it are exact anyway
    active = collection.space_state(using=using).active_space
    if has_index(space, using) or not has_index(active, using):
        return ""
    return (
        f"space {space} has no ANN index while {active} has one, so searches after the flip would scan "
        "every chunk; run `manage.py rag_migration --app <your_app>` then `manage.py migrate` (or pass "
        f"--build-index), then `manage.py rag_reindex {collection.name}` again to flip"
    )
