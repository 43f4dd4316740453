"""Faults during a sync: what survives a database error, a killed connection, a failing embedder,
concurrent writers and a read-only or full database (docs/security/faults.md).

Every fault is real: PostgreSQL raises from a trigger or a constraint, another connection
terminates the writer's backend, the real ``openai`` client talks to a loopback server that
answers 500, 429 and 503, eight threads write one document at once. The full disk is the one
stand-in: a trigger raises the server's own SQLSTATE for it (53100), as PostgreSQL does when a
write meets ENOSPC. A worker killed mid-task is in tests/test_celery_worker.py
(``test_a_worker_killed_mid_ingestion_is_redelivered_and_leaves_one_copy``).
"""

from __future__ import annotations

import hashlib
import io
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, connections

import django_rag as rag
from django_rag.embedders.hashing import HashingEmbedder
from django_rag.exceptions import ConfigurationError, EmbedderError
from django_rag.ingest.pipeline import IndexProgress, chunking_options, index_documents
from django_rag.ingest.rows import document_for, ingest_instance
from django_rag.ingest.semantic import make_chunker
from django_rag.ingest.switch import reembed
from django_rag.models import Chunk, Document
from django_rag.retry import is_transient
from django_rag.testing import OpenAICompatibleServer
from django_rag.types import ChunkData, SyncResult
from tests.mediaapp.models import Note
from tests.web_support import login

pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.conftest_web"]


def version(label: str, paragraphs: int) -> str:
    """A document text of one chunk per paragraph (in "notes"), every chunk naming ``label``."""
    words = " ".join(f"{label.lower()}word{n}" for n in range(20))
    return "\n\n".join(f"Version {label} paragraph {i} says {words}." for i in range(paragraphs))


OLD = version("OLD", 6)
NEW = version("NEW", 9)


def chunks_of(text: str) -> list[ChunkData]:
    """The chunks a from-scratch sync of ``text`` into "notes" makes."""
    kb = rag.collection("notes")
    embedder = kb.get_embedder()
    return make_chunker(chunking_options(kb, embedder), embedder).chunk_document(rag.RagDocument("x", text))


def index(text: str, source_id: str = "handbook", collection: str = "notes") -> SyncResult:
    return rag.collection(collection).index([rag.RagDocument(source_id, text)])


@pytest.fixture(params=["notes", "vectors"], ids=["insert", "copy"])
def writes(request, settings) -> str:
    """The collection to write: "notes" inserts chunk rows with one INSERT ... SELECT, "vectors"
    (TEXT_SEARCH off) with one binary COPY."""
    vectors = {"TEXT_SEARCH": False, "CHUNK_SIZE": 64, "CHUNK_OVERLAP": 8}
    settings.RAG = {**settings.RAG, "COLLECTIONS": {**settings.RAG["COLLECTIONS"], "vectors": vectors}}
    name: str = request.param
    return name


def ingest(folder: Path) -> None:
    call_command(
        "rag_ingest",
        str(folder),
        collection="notes",
        root=str(folder),
        stdout=io.StringIO(),
        stderr=io.StringIO(),
        verbosity=0,
    )


def execute(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def state(collection: str = "notes") -> dict[str, Any]:
    """Everything a sync writes for a collection: documents, chunks with their vectors, text statistics."""
    kb = rag.collection(collection)
    return {
        "documents": sorted(
            Document.objects.filter(collection=kb).values_list(
                "tenant", "source_id", "status", "error", "content_hash", "updated_at"
            )
        ),
        "chunks": sorted(
            (c.pk, c.document_id, c.index, c.content, c.content_hash, c.space, list(c.embedding))
            for c in Chunk.objects.filter(collection=kb)
        ),
        "postings": execute(
            "SELECT chunk_id, term, tf, dl FROM django_rag_posting WHERE collection_id = %s ORDER BY 1, 2",
            [kb.pk],
        ),
        "textstats": execute(
            "SELECT space, sum(chunks), sum(length) FROM django_rag_textstats WHERE collection_id = %s "
            "GROUP BY space ORDER BY space",
            [kb.pk],
        ),
        "termstats": execute(
            "SELECT space, term, sum(n) FROM django_rag_postblock WHERE collection_id = %s "
            "GROUP BY space, term ORDER BY 1, 2",
            [kb.pk],
        ),
    }


_TERMS = """
    SELECT c.id, c.space, u.lexeme, coalesce(array_length(u.positions, 1), 1) AS tf
    FROM django_rag_chunk AS c CROSS JOIN LATERAL unnest(c.search_vector) AS u
    WHERE c.collection_id = %s AND c.search_vector IS NOT NULL
"""


def assert_statistics_match_a_recount(collection: str = "notes") -> None:
    """The postings and statistics kept by the triggers equal a from-scratch count over the chunks."""
    kb = rag.collection(collection)
    recount = {
        "postings": execute(
            f"SELECT id, lexeme, tf, sum(tf) OVER (PARTITION BY id) FROM ({_TERMS}) AS t ORDER BY 1, 2",
            [kb.pk],
        ),
        "textstats": execute(
            f"SELECT space, count(DISTINCT id), sum(tf) FROM ({_TERMS}) AS t GROUP BY space ORDER BY 1",
            [kb.pk],
        ),
        "termstats": execute(
            f"SELECT space, lexeme, count(*) FROM ({_TERMS}) AS t GROUP BY space, lexeme ORDER BY 1, 2",
            [kb.pk],
        ),
    }
    kept = state(collection)
    assert recount["postings"], "the recount must see the chunks"
    assert {key: kept[key] for key in recount} == recount


@pytest.fixture
def trigger() -> Iterator[Callable[[str], None]]:
    """``trigger(body)`` runs ``body`` (PL/pgSQL) before every chunk row insert; dropped afterwards."""

    def install(body: str) -> None:
        execute(
            "CREATE OR REPLACE FUNCTION test_faults_chunk() RETURNS trigger LANGUAGE plpgsql AS "
            f"$fn$ BEGIN {body}; RETURN NEW; END $fn$"
        )
        execute(
            "CREATE OR REPLACE TRIGGER test_faults_chunk BEFORE INSERT ON django_rag_chunk "
            "FOR EACH ROW EXECUTE FUNCTION test_faults_chunk()"
        )

    yield install
    with connections["default"].cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS test_faults_chunk ON django_rag_chunk")
        cursor.execute("DROP FUNCTION IF EXISTS test_faults_chunk()")


def reject(paragraph: str, error: str = "RAISE EXCEPTION 'chunk rejected by policy'") -> str:
    """A trigger body raising ``error`` when the chunk of ``paragraph`` is inserted."""
    return f"IF NEW.content LIKE '%{paragraph} %' THEN {error}; END IF"


# --- A database error in the middle of a sync -----------------------------------------------------


def test_a_trigger_failing_on_the_seventh_chunk_leaves_the_old_version_intact(trigger, writes) -> None:
    index(OLD, collection=writes)
    before = state(writes)
    trigger(reject("NEW paragraph 6"))
    with pytest.raises(DatabaseError, match="chunk rejected by policy"):
        index(NEW, collection=writes)
    assert state(writes) == before
    assert (Document.objects.get().status, Document.objects.get().error) == ("indexed", "")


def test_a_constraint_failing_on_the_third_document_rolls_back_the_whole_batch() -> None:
    kb = rag.collection("notes")
    kb.index([rag.RagDocument(f"doc-{n}", version(f"OLD{n}", 3)) for n in range(4)])
    before = state()
    docs = [rag.RagDocument(f"doc-{n}", version(f"NEW{n}", 4)) for n in range(4)]
    docs[2] = rag.RagDocument("doc-2", version("POISON", 4))
    execute(
        "ALTER TABLE django_rag_chunk ADD CONSTRAINT test_faults_clean CHECK (content NOT LIKE '%%POISON%%')"
    )
    try:
        with pytest.raises(DatabaseError, match="test_faults_clean"):
            kb.index(docs)
    finally:
        execute("ALTER TABLE django_rag_chunk DROP CONSTRAINT test_faults_clean")
    assert state() == before


class NaNEmbedder(HashingEmbedder):
    """Returns, for one chunk text, a vector the database cannot store (pgvector holds no NaN)."""

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        vectors = super()._embed(texts, kind)
        return [
            [float("nan")] * len(v) if "paragraph 4 " in t else v for t, v in zip(texts, vectors, strict=True)
        ]


def test_an_embedder_vector_the_database_would_reject_fails_before_anything_is_written(settings) -> None:
    index(OLD)
    before = state()
    nan = {"BACKEND": "tests.test_faults.NaNEmbedder", "DIMENSIONS": 64}  # the hashing space still
    settings.RAG = {**settings.RAG, "EMBEDDERS": {"default": nan}}
    with pytest.raises(EmbedderError, match="not finite"):
        index(NEW)
    assert state() == before


def test_a_registered_row_whose_write_fails_is_recorded_failed_and_keeps_its_old_chunks(
    trigger, inline_ingestion
) -> None:
    note = Note.objects.create(title="Handbook", body=OLD)
    document = document_for(note)
    old_chunks = sorted(Chunk.objects.filter(document=document).values_list("pk", "content_hash"))
    trigger(reject("NEW paragraph 3"))
    Note.objects.filter(pk=note.pk).update(body=NEW)
    result = ingest_instance("mediaapp", "note", note.pk)
    document.refresh_from_db()
    assert (result.status, document.status) == ("failed", "failed")
    assert "chunk rejected by policy" in document.error
    assert sorted(Chunk.objects.filter(document=document).values_list("pk", "content_hash")) == old_chunks


def test_rag_ingest_meeting_a_database_error_exits_with_it_and_keeps_the_old_version(
    trigger, tmp_path: Path
) -> None:
    (tmp_path / "handbook.txt").write_text(OLD)
    ingest(tmp_path)
    before = state()
    (tmp_path / "handbook.txt").write_text(NEW)
    trigger(reject("NEW paragraph 3"))
    with pytest.raises(
        CommandError, match=r"database 'default' refused a write \(chunk rejected by policy\)"
    ):
        ingest(tmp_path)
    assert state() == before


# --- The connection killed in the write phase -----------------------------------------------------


@pytest.fixture
def killer(trigger) -> Callable[[], threading.Thread]:
    """``killer()`` makes the next chunk insert wait, and another connection terminate that
    writer's backend while it waits; returns the thread doing it. ``trigger("NULL")`` disarms."""

    def arm() -> threading.Thread:
        trigger("PERFORM pg_sleep(30)")
        database = connection.settings_dict["NAME"]

        def kill() -> None:
            try:
                with connections["default"].cursor() as cursor:
                    for _ in range(600):
                        cursor.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = %s AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()",
                            [database],
                        )
                        if cursor.fetchall():
                            return
                        time.sleep(0.05)
            finally:
                connections.close_all()

        thread = threading.Thread(target=kill)
        thread.start()
        return thread

    return arm


def test_a_connection_killed_mid_batch_is_a_clear_error_and_writes_nothing(killer, trigger, writes) -> None:
    index(OLD, collection=writes)
    before = state(writes)
    thread = killer()
    with pytest.raises(ConfigurationError, match="connection to the database 'default' was lost") as caught:
        index(NEW, collection=writes)
    thread.join(30)
    assert "nothing of it was written: run it again" in str(caught.value)
    trigger("NULL")
    assert state(writes) == before


def test_the_run_after_a_killed_connection_completes_the_sync(killer, trigger) -> None:
    index(OLD)
    thread = killer()
    with pytest.raises(ConfigurationError):
        index(NEW)
    thread.join(30)
    trigger("NULL")
    result = index(NEW)
    assert (result.added, result.removed) == (len(chunks_of(NEW)), len(chunks_of(OLD)))
    stored = list(Chunk.objects.order_by("index").values_list("index", "content_hash"))
    assert stored == [(c.index, c.content_hash) for c in chunks_of(NEW)]
    assert_statistics_match_a_recount()


def terminate(pid: int) -> None:
    """pg_terminate_backend(pid), from a connection of its own."""
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()


def test_a_connection_killed_between_syncs_is_an_error_and_the_next_sync_in_the_process_completes() -> None:
    index(OLD)
    connection.ensure_connection()
    terminate(connection.connection.info.backend_pid)  # as idle_session_timeout or a failover would
    with pytest.raises(ConfigurationError, match="was lost"):
        index(NEW)
    index(NEW)
    stored = list(Chunk.objects.order_by("index").values_list("index", "content_hash"))
    assert stored == [(c.index, c.content_hash) for c in chunks_of(NEW)]


class TerminatingEmbedder(HashingEmbedder):
    """Ends the session of backend ``victim`` while it embeds: the server dropped an idle connection."""

    victim: int | None = None

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        if TerminatingEmbedder.victim is not None:
            terminate(TerminatingEmbedder.victim)
            TerminatingEmbedder.victim = None
        return super()._embed(texts, kind)


def test_a_connection_dropped_while_the_batch_is_embedded_is_reopened_for_the_write(settings) -> None:
    index(OLD)
    terminating = {"BACKEND": "tests.test_faults.TerminatingEmbedder", "DIMENSIONS": 64}  # the hashing space
    settings.RAG = {**settings.RAG, "EMBEDDERS": {"default": terminating}}
    connection.ensure_connection()
    TerminatingEmbedder.victim = connection.connection.info.backend_pid
    result = index(NEW)
    assert TerminatingEmbedder.victim is None  # the session was ended mid-embedding
    assert (result.added, result.removed, result.embedded) == (
        len(chunks_of(NEW)),
        len(chunks_of(OLD)),
        len(chunks_of(NEW)),
    )
    stored = list(Chunk.objects.order_by("index").values_list("index", "content_hash"))
    assert stored == [(c.index, c.content_hash) for c in chunks_of(NEW)]
    assert_statistics_match_a_recount()


def test_a_reembed_whose_connection_drops_while_embedding_completes_in_the_same_run(settings) -> None:
    index(OLD)
    wider = {"BACKEND": "tests.test_faults.TerminatingEmbedder", "DIMENSIONS": 32}  # space "hashing:32"
    settings.RAG = {**settings.RAG, "EMBEDDERS": {"default": wider}}
    connection.ensure_connection()
    TerminatingEmbedder.victim = connection.connection.info.backend_pid
    reembed(rag.collection("notes"))
    assert TerminatingEmbedder.victim is None
    assert list(Chunk.objects.order_by("index").values_list("space", "content_hash")) == [
        ("hashing:32", c.content_hash) for c in chunks_of(OLD)
    ]


def test_rag_ingest_with_its_connection_killed_exits_with_an_error_and_a_rerun_completes(
    killer, trigger, tmp_path: Path
) -> None:
    (tmp_path / "handbook.txt").write_text(OLD)
    ingest(tmp_path)
    before = state()
    (tmp_path / "handbook.txt").write_text(NEW)
    thread = killer()
    with pytest.raises(CommandError, match="connection to the database 'default' was lost"):
        ingest(tmp_path)
    thread.join(30)
    trigger("NULL")
    assert state() == before
    ingest(tmp_path)
    stored = list(Chunk.objects.order_by("index").values_list("index", "content_hash"))
    assert stored == [(c.index, c.content_hash) for c in chunks_of(NEW)]


def test_a_registered_row_whose_connection_is_killed_is_recorded_failed_and_raised_for_a_retry(
    killer, trigger, inline_ingestion
) -> None:
    note = Note.objects.create(title="Handbook", body=OLD)
    document = document_for(note)
    old_chunks = sorted(Chunk.objects.filter(document=document).values_list("pk", "content_hash"))
    Note.objects.filter(pk=note.pk).update(body=NEW)
    thread = killer()
    with pytest.raises(ConfigurationError, match="was lost") as caught:
        ingest_instance("mediaapp", "note", note.pk, raise_transient=True)  # as the Celery task calls it
    thread.join(30)
    trigger("NULL")
    assert is_transient(caught.value)  # so the task retries it with backoff
    document.refresh_from_db()
    assert (document.status, "was lost" in document.error) == ("failed", True)
    assert sorted(Chunk.objects.filter(document=document).values_list("pk", "content_hash")) == old_chunks
    assert ingest_instance("mediaapp", "note", note.pk).status == "indexed"


# --- The embedder failing, then recovering ------------------------------------------------------------


@pytest.fixture(scope="module")
def openai_server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=64) as server:
        yield server


@pytest.fixture
def remote(openai_server, settings) -> OpenAICompatibleServer:
    """The "notes" embedder: the real openai client against the loopback server, 3 retries, 4 texts a call."""
    openai_server.reset()
    embedder = {
        "BACKEND": "django_rag.embedders.openai.OpenAIEmbedder",
        "MODEL": "hashing",
        "DIMENSIONS": 64,
        "BASE_URL": openai_server.base_url,
        "API_KEY": "test",
        "MAX_RETRIES": 3,
        "BACKOFF_BASE": 0.01,
        "BACKOFF_MAX": 0.05,
        "BATCH_SIZE": 4,
    }
    settings.RAG = {**settings.RAG, "EMBEDDERS": {"default": embedder}}
    return openai_server


def inputs(server: OpenAICompatibleServer, answered: slice = slice(None)) -> list[str]:
    """The texts sent in the server's embedding requests (``answered``: which requests)."""
    requests = [r for r in server.requests if r.path.endswith("/embeddings")][answered]
    return [text for r in requests for text in r.body["input"]]


@pytest.mark.parametrize("status", [500, 429])
def test_an_embedder_failing_then_recovering_is_retried_and_embeds_every_text_once(remote, status) -> None:
    remote.fail_next(2, status=status)
    result = index(NEW)
    texts = [c.content for c in chunks_of(NEW)]
    assert len(remote.requests) == 2 + -(-len(texts) // 4)  # two refusals, then one request per 4 texts
    assert sorted(inputs(remote, slice(2, None))) == sorted(texts)
    assert (result.added, result.embedded) == (len(texts), len(texts))
    assert sorted(Chunk.objects.values_list("content", flat=True)) == sorted(texts)


class OutageAfterFirstBatch(IndexProgress):
    """Once the first batch is committed, the server answers 503 ``count`` times."""

    def __init__(self, server: OpenAICompatibleServer, count: int) -> None:
        self.server, self.count = server, count

    def written(self, result: SyncResult) -> None:
        self.server.fail_next(self.count, status=503)
        self.count = 0


def test_an_embedder_that_stays_down_keeps_the_committed_batches_and_the_rerun_embeds_only_the_rest(
    remote,
) -> None:
    first, second = version("FIRST", 3), version("SECOND", 3)
    docs = [rag.RagDocument("first", first), rag.RagDocument("second", second)]
    with pytest.raises(EmbedderError, match="failed after 4 attempts"):
        index_documents(
            rag.collection("notes"), docs, batch_size=1, progress=OutageAfterFirstBatch(remote, 4)
        )
    assert set(Document.objects.values_list("source_id", flat=True)) == {"first"}
    remote.reset()
    rag.collection("notes").index(docs)
    # Each distinct text of the second document once (its paragraphs' last pieces are the same text).
    assert sorted(inputs(remote)) == sorted({c.embedded_text for c in chunks_of(second)})
    assert sorted(Chunk.objects.values_list("content_hash", flat=True)) == sorted(
        c.content_hash for c in chunks_of(first) + chunks_of(second)
    )


# --- Eight concurrent syncs of one document -----------------------------------------------------------


class BarrierEmbedder(HashingEmbedder):
    """Holds every writer between embedding and writing until all eight are there."""

    barrier = threading.Barrier(8, timeout=60)

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        vectors = super()._embed(texts, kind)
        if kind == "document":
            self.barrier.wait()
        return vectors


@pytest.mark.parametrize("stored", ["new-document", "stored-version"])
def test_eight_concurrent_syncs_of_one_document_leave_exactly_one_complete_version(settings, stored) -> None:
    shared = version("SHARED", 2)  # paragraphs every version has: kept, not rewritten, by each diff
    versions = {f"V{n}": version(f"V{n}", 3 + n) + "\n\n" + shared for n in range(8)}
    if stored == "stored-version":
        index(version("OLD", 5) + "\n\n" + shared)
    barrier = {"BACKEND": "tests.test_faults.BarrierEmbedder", "DIMENSIONS": 64}  # the hashing space still
    settings.RAG = {**settings.RAG, "EMBEDDERS": {"default": barrier}}
    BarrierEmbedder.barrier.reset()
    errors: list[BaseException] = []

    def sync(text: str) -> None:
        try:
            index(text)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sync, args=(text,)) for text in versions.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    document = Document.objects.get()
    winner = next(
        t for t in versions.values() if document.content_hash == hashlib.sha1(t.encode()).hexdigest()
    )
    stored_chunks = list(Chunk.objects.order_by("index").values_list("index", "content_hash"))
    assert stored_chunks == [(c.index, c.content_hash) for c in chunks_of(winner)]
    assert_statistics_match_a_recount()


# --- A read-only or full database ---------------------------------------------------------------------


@pytest.fixture
def read_only() -> Iterator[Callable[[], None]]:
    """``read_only()`` makes every new session of the test database start read-only, as on a hot
    standby or a database an operator locked; undone afterwards."""
    database = connection.settings_dict["NAME"]

    def lock() -> None:
        execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
        connections.close_all()

    yield lock
    with connections["default"].cursor() as cursor:
        cursor.execute("SET default_transaction_read_only = off")
        cursor.execute(f'ALTER DATABASE "{database}" RESET default_transaction_read_only')
    connections.close_all()


def test_a_read_only_database_is_an_error_naming_it_and_nothing_is_written(read_only) -> None:
    index(OLD)
    before = state()
    read_only()
    with pytest.raises(
        ConfigurationError, match=r"the database 'default' is read-only .*nothing was written"
    ):
        index(NEW)
    assert state() == before


def test_rag_ingest_on_a_read_only_database_exits_with_an_error_naming_it(read_only, tmp_path: Path) -> None:
    (tmp_path / "handbook.txt").write_text(OLD)
    ingest(tmp_path)
    before = state()
    (tmp_path / "handbook.txt").write_text(NEW)
    (tmp_path / "blank.txt").write_text(" ")  # a skip record to write as well
    read_only()
    with pytest.raises(CommandError, match="the database 'default' is read-only"):
        ingest(tmp_path)
    assert state() == before


def test_removing_from_a_read_only_database_is_an_error_naming_it(read_only) -> None:
    index(OLD)
    before = state()
    read_only()
    with pytest.raises(ConfigurationError, match="the database 'default' is read-only"):
        rag.collection("notes").remove(source_id="handbook")
    assert state() == before


def test_a_read_only_database_still_answers_searches(read_only) -> None:
    index(OLD)
    read_only()
    hits = rag.collection("notes").search("oldword3 paragraph 2", k=2, mode="hybrid")
    assert hits and all(hit.source_id == "handbook" for hit in hits)


def test_a_read_only_database_still_serves_the_search_pages(read_only, web) -> None:
    backups = rag.RagDocument(
        "acme/backups", "Snapshots are kept for thirty days.", {"title": "Acme backups"}
    )
    rag.collection("docs").index(backups, tenant="acme")
    alice = login("alice")
    read_only()
    data = alice.get("/kb/api/search/", {"q": "snapshots kept"}).json()
    assert data["count"] >= 1 and data["results"][0]["title"] == "Acme backups"
    assert alice.get("/kb/", {"q": "snapshots kept"}).status_code == 200


def test_a_full_disk_mid_batch_is_an_error_naming_it_and_the_old_version_stays(trigger) -> None:
    index(OLD)
    before = state()
    enospc = "RAISE EXCEPTION USING ERRCODE = 'disk_full', MESSAGE = 'could not extend file: No space left'"
    trigger(reject("NEW paragraph 3", enospc))
    with pytest.raises(ConfigurationError, match="the database 'default' is out of disk space"):
        index(NEW)
    assert state() == before
