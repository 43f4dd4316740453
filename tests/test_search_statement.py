"""How a vector search reaches PostgreSQL: one flat statement, one round trip, settings that end
with the search, server-prepared when the connection allows it, hits as the ORM builds them."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, transaction
from django.db.models.signals import post_init

import django_rag as rag
from django_rag.ddl import IndexSpec
from django_rag.models import Chunk, Document
from django_rag.stores.base import QueryScope, SearchRequest
from django_rag.stores.pgsearch import build_sql, run_search
from tests.plans import build_space_index, explain
from tests.wire import counted

DOCS = [rag.RagDocument(f"n/{i}", f"note {i} about subject {i % 50}") for i in range(40)]


def request(kb: rag.Collection, text: str = "subject 7", **scope: object) -> SearchRequest:
    return SearchRequest(
        mode="vector",
        space=kb.space,
        k=10,
        vector=kb.get_embedder().embed_query(text),
        scope=QueryScope(**scope),
    )


def setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s, true)", [name])
        return cursor.fetchone()[0]


@pytest.fixture
def prepared() -> Iterator[psycopg.Connection]:
    """Django's connection with psycopg's prepared statements on, as OPTIONS={"prepare_threshold": 5} does."""
    connection.ensure_connection()
    raw = connection.connection
    raw.prepare_threshold = 5
    yield raw
    raw.prepare_threshold = None


def prepared_statements(raw: psycopg.Connection) -> list[tuple[str, str, int]]:
    return raw.execute(
        "SELECT name, statement, generic_plans FROM pg_prepared_statements WHERE statement LIKE '%<=>%'"
    ).fetchall()


@pytest.mark.django_db
def test_an_unfiltered_vector_search_binds_only_the_query_vector() -> None:
    kb = rag.collection("docs")
    sql, params = build_sql(kb, request(kb))
    assert list(params) == ["vector"]
    assert "WITH" not in sql and "OVER" not in sql
    assert f"c.collection_id = {kb.pk} " in sql and "LIMIT 10)" in sql


@pytest.mark.django_db
def test_filters_stay_bound_parameters_in_the_vector_statement() -> None:
    kb = rag.collection("docs")
    sql, params = build_sql(kb, request(kb, tenant="x'; DROP TABLE t; --", tags=["a"], source_prefix="kb/"))
    assert "DROP" not in sql
    assert params["tenant"] == "x'; DROP TABLE t; --"


@pytest.mark.django_db(transaction=True)
def test_a_vector_search_sends_one_statement_with_its_settings_and_no_transaction() -> None:
    kb = rag.collection("docs")
    kb.index(DOCS)
    kb.search("subject 7", k=5)  # the first search of a collection counts its chunks (search.relevance)
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            hits = kb.search("subject 7", k=5)
        finally:
            pgconn.untrace()
        trace.seek(0)
        lines = [line.split("\t") for line in trace]
    sent = [line[2].strip() for line in lines if line[0] == "F"]
    assert len(hits) == 5
    # No BEGIN/COMMIT, no settings statement, no Flush: what one execute of raw psycopg sends.
    assert sent == ["Parse", "Bind", "Describe", "Execute", "Sync"]
    [statement] = [line[3] for line in lines if line[0] == "F" and line[2].strip() == "Parse"]
    assert "set_config('hnsw.ef_search', '40', true)" in statement


@pytest.mark.django_db(transaction=True)
def test_a_warm_vector_search_is_one_write_and_one_round_trip_on_the_wire() -> None:
    kb = rag.collection("docs")
    kb.index(DOCS)
    vector = kb.get_embedder().embed_query("subject 7")
    kb.search(vector, k=5)  # the first search of a collection counts its chunks (search.relevance)
    with counted() as wire:  # a new connection: its first search too
        for query in (vector, "subject 7", vector):
            wire.reset()
            hits = kb.search(query, k=5)
            counts = wire.snapshot()
            assert len(hits) == 5
            assert (counts.round_trips, counts.writes) == (1, 1), counts.log


@pytest.mark.django_db(transaction=True)
def test_a_search_past_ef_search_sends_the_planner_its_ef_first_in_the_same_round_trip() -> None:
    kb = rag.collection("docs")
    kb.index(DOCS)
    with counted() as wire:
        kb.search("subject 7", k=5)
        wire.reset()
        assert len(kb.search("subject 7", k=45)) == 40  # every chunk
        counts = wire.snapshot()
    # The settings statement and the search leave before the server's first reply: no wait between
    # them. (The pipeline's closing Sync may follow a first buffer of a large result: a timing of
    # the read, not a statement waiting for another.)
    first_reply = next(i for i, (side, _) in enumerate(counts.log) if side == "B")
    sent_before = sum(size for side, size in counts.log[:first_reply] if side == "F")
    search_sql = build_sql(kb, request(kb))[0]
    assert sent_before > len(search_sql.encode()), counts.log
    assert counts.round_trips <= 2, counts.log


@pytest.mark.django_db(transaction=True)
def test_search_settings_end_with_the_search_in_autocommit_mode() -> None:
    kb = rag.collection("docs")
    kb.index(DOCS)
    assert len(kb.search("subject 7", k=25)) == 25
    assert setting("hnsw.ef_search") == "40"
    assert setting("hnsw.iterative_scan") == "strict_order"


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_search_settings_last_until_it_ends() -> None:
    kb = rag.collection("docs")
    kb.index(DOCS)
    with transaction.atomic():
        kb.search("subject 7", k=50)
        assert setting("hnsw.ef_search") == "50"
        assert setting("hnsw.iterative_scan") == "relaxed_order"
    assert setting("hnsw.ef_search") == "40"
    assert setting("hnsw.iterative_scan") == "strict_order"


@pytest.mark.django_db(transaction=True)
def test_a_failed_search_leaves_the_connection_idle_and_usable() -> None:
    kb = rag.collection("docs")
    kb.index(DOCS)
    wrong = request(kb)
    wrong.vector = [0.1, 0.2, 0.3]  # the space's index cast wants 64 dimensions
    with pytest.raises(psycopg.errors.DataException):
        run_search(kb, wrong, "default")
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert setting("hnsw.iterative_scan") == "strict_order"
    assert len(kb.search("subject 7", k=3)) == 3


@pytest.mark.django_db
def test_vector_hits_are_ranked_by_distance_with_scores_falling() -> None:
    kb = rag.collection("docs")
    kb.index(DOCS)
    hits = kb.search("subject 7", k=10)
    assert [h.vector_rank for h in hits] == list(range(1, 11))
    assert all(h.text_rank is None for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.django_db
def test_vector_hits_hold_the_instances_the_orm_loads() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("a", "Backups run nightly.", metadata={"team": "ops"}, tags=["faq"])])
    hit = kb.search("backups", k=1)[0]
    chunk = Chunk.objects.defer("embedding", "search_vector").get(pk=hit.chunk.pk)
    document = Document.objects.get(pk=hit.document.pk)
    for built, loaded in ((hit.chunk, chunk), (hit.document, document)):
        assert type(built) is type(loaded)
        assert {k: v for k, v in vars(built).items() if k != "_state"} == {
            k: v for k, v in vars(loaded).items() if k != "_state"
        }
        assert (built._state.adding, built._state.db) == (False, "default")
        assert built.get_deferred_fields() == loaded.get_deferred_fields()
    assert hit.chunk.get_deferred_fields() == {"embedding", "search_vector"}
    assert hit.chunk.metadata == {"team": "ops"} and hit.document.tags == ["faq"]


@pytest.mark.django_db
def test_vector_hits_send_post_init_to_its_receivers() -> None:
    kb = rag.collection("docs")
    kb.index(DOCS[:3])
    seen: list[object] = []

    def receiver(sender: type, instance: object, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Chunk)
    try:
        hits = kb.search("subject 1", k=3)
    finally:
        post_init.disconnect(receiver, sender=Chunk)
    assert [h.chunk for h in hits] == seen
    assert all(h.chunk.get_deferred_fields() == {"embedding", "search_vector"} for h in hits)


@pytest.fixture
def indexed() -> rag.Collection:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument(f"n/{i}", f"note {i} about subject {i % 50}") for i in range(3000)], tenant="t")
    build_space_index(kb)
    return kb


@pytest.mark.django_db
def test_an_unfiltered_vector_search_runs_a_generic_plan_on_the_space_index(
    indexed: rag.Collection, prepared: psycopg.Connection
) -> None:
    kb = indexed
    custom = [h.chunk.pk for h in kb.search("subject 7", k=10)]  # prepared, planned for its vector
    prepared.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    for _ in range(3):
        assert [h.chunk.pk for h in kb.search("subject 7", k=10)] == custom
    [(name, _, generic_plans)] = prepared_statements(prepared)
    assert generic_plans == 3
    vector = prepared.execute("SELECT %s::vector::text", [str(request(kb).vector)]).fetchone()[0]
    plan = "\n".join(r[0] for r in prepared.execute(f"EXPLAIN EXECUTE {name}(%s::vector)", [vector]))
    assert f"Index Scan using {IndexSpec(kb.space, 64).name}" in plan, plan


@pytest.mark.django_db
def test_the_settings_run_before_the_index_walk_starts(indexed: rag.Collection) -> None:
    plan = explain(indexed, mode="vector", tenant="t").splitlines()
    at = next(i for i, line in enumerate(plan) if "One-Time Filter" in line)
    # The one-time filter (set_config) is the walk's parent: evaluated before its first row.
    assert "Result" in plan[at - 1], plan
    assert f"Index Scan using {IndexSpec(indexed.space, 64).name}" in plan[at + 1], plan


@pytest.mark.django_db
def test_a_filtered_vector_search_is_planned_for_its_values(
    indexed: rag.Collection, prepared: psycopg.Connection
) -> None:
    for _ in range(7):  # past psycopg's prepare_threshold
        assert len(indexed.search("subject 7", k=10, tenant="t")) == 10
    assert prepared_statements(prepared) == []


@pytest.mark.django_db
def test_a_one_percent_tenant_is_sorted_exactly_from_the_scope_index() -> None:
    kb = rag.collection("docs")
    docs = [rag.RagDocument(f"n/{i}", f"note {i} about subject {i % 50}") for i in range(3000)]
    kb.index(docs[:2970], tenant="big")
    kb.index(docs[2970:], tenant="rare")  # 1% of the rows
    index = build_space_index(kb)
    plans = {tenant: explain(kb, mode="vector", tenant=tenant) for tenant in ("rare", "big")}
    assert "Index Scan using django_rag_chunk_scope" in plans["rare"], plans["rare"]
    assert f"Index Scan using {index}" in plans["big"], plans["big"]


@pytest.mark.django_db
def test_hits_of_one_document_share_its_instance() -> None:
    kb = rag.collection("docs")
    long_text = "\n\n".join(f"Paragraph {i} about backups and restores, its own words." for i in range(60))
    kb.index([rag.RagDocument("manual", long_text), rag.RagDocument("other", "Invoices and billing.")])
    hits = kb.search("backups and restores", k=5)
    manual = [hit for hit in hits if hit.source_id == "manual"]
    assert len(manual) >= 2
    assert all(hit.document is manual[0].document for hit in manual)
    assert all(hit.chunk.document is hit.document for hit in hits)


@pytest.mark.django_db
def test_a_small_collection_in_a_shared_space_is_sorted_exactly_and_joins_only_its_hits() -> None:
    big, small = rag.collection("docs"), rag.collection("notes")  # one embedder: one space and index
    docs = [rag.RagDocument(f"n/{i}", f"note {i} about subject {i % 50}") for i in range(3000)]
    big.index(docs[:2970])
    small.index(docs[2970:])  # 1% of the space's rows
    build_space_index(big)
    plan = explain(small, mode="vector")
    assert "Index Scan using django_rag_chunk_scope" in plan, plan
    # Documents are looked up for the k hits, never hashed whole (5x slower at this size).
    assert "Index Scan using django_rag_document_pkey" in plan and "Seq Scan" not in plan, plan
    hits = small.search("subject 7", k=10)
    assert len(hits) == 10
    assert {hit.document.collection_id for hit in hits} == {small.pk}


@pytest.mark.django_db
def test_hits_are_built_by_the_models_from_db(monkeypatch: pytest.MonkeyPatch) -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("a", "Backups run nightly.", metadata={"team": "ops", "n": [1, 2.5, None]})])
    built: list[tuple[type, str]] = []
    for model in (Chunk, Document):
        original = model.from_db.__func__  # type: ignore[attr-defined]

        def from_db(cls: type, db: str, names: list[str], values: list[object], _original=original) -> object:
            built.append((cls, db))
            return _original(cls, db, names, values)

        monkeypatch.setattr(model, "from_db", classmethod(from_db))
    [hit] = kb.search("backups", k=1)
    assert built == [(Chunk, "default"), (Document, "default")]
    assert hit.chunk.metadata == {"team": "ops", "n": [1, 2.5, None]}


@pytest.mark.django_db
def test_a_setting_in_the_statements_one_time_filter_reaches_the_hnsw_walk() -> None:
    """What the store's statement relies on (pgvector reads its settings when the walk starts, not
    when the plan is set up): iterative scan set by set_config(..., true) in a one-time filter above
    the index scan lets a selective filter fill k rows, where the same query without it starves."""
    rnd = random.Random(0)
    rows = [
        (i, 1 if i % 50 == 0 else 0, "[" + ",".join(f"{rnd.gauss(0, 1):.4f}" for _ in range(16)) + "]")
        for i in range(20_000)
    ]
    query = "[" + ",".join("0.1" for _ in range(16)) + "]"
    walk = f"FROM gated WHERE tag = 1 {{gate}} ORDER BY v <=> '{query}'::vector LIMIT 10"
    gate = "AND (SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)) IS NOT NULL"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE gated (id int PRIMARY KEY, tag int, v vector(16))")
        cursor.executemany("INSERT INTO gated VALUES (%s, %s, %s::vector)", rows)
        cursor.execute("CREATE INDEX ON gated USING hnsw (v vector_cosine_ops)")
        cursor.execute("ANALYZE gated")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL hnsw.iterative_scan = off")
        cursor.execute("SELECT id " + walk.format(gate=""))
        starved = cursor.fetchall()
        cursor.execute("SELECT id " + walk.format(gate=gate))
        gated = cursor.fetchall()
        cursor.execute("EXPLAIN SELECT id " + walk.format(gate=gate))
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "One-Time Filter" in plan and "Index Scan using" in plan, plan
    assert len(starved) < 10 and len(gated) == 10
