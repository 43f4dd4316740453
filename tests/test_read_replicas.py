"""Reads on a streaming replica, writes on the primary: two real PostgreSQL servers on loopback.

One primary and one hot standby (``pg_basebackup -R``) for the module (tests/replication.py).
``RAG["DATABASE"]`` names the primary and ``RAG["READ_DATABASE"]`` the standby. Every test closes
both connections first, so the ones open afterwards are the ones the code used: a read must leave
the primary's connection closed and the replica's open, and that very connection must answer
``pg_is_in_recovery()`` with true (a write: the other way round).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

import django_rag as rag
from django_rag.answer import answer_prompt, prepare
from django_rag.answer.chat import OpenAIChat
from django_rag.models import Chunk, Collection, Document
from django_rag.testing import OpenAICompatibleServer
from tests.replication import ReplicationPair, replication_pair

PRIMARY = "rag_primary"
REPLICA = "rag_replica"
DOWN = "rag_down"  # as tests/settings.py's "unreachable": a port nothing listens on

DOCS = [
    rag.RagDocument("manual/backup", "Backups run nightly and are kept for thirty days."),
    rag.RagDocument("manual/restore", "Restores take ten minutes from the latest backup."),
]


pytestmark = pytest.mark.django_db(transaction=True, databases=[PRIMARY, REPLICA, DOWN])


@pytest.fixture(scope="module", autouse=True)
def pair(django_db_setup: None, django_db_blocker: Any) -> Iterator[ReplicationPair]:
    """The servers, migrated, as the aliases PRIMARY and REPLICA for the whole module.

    The tests are transactional (writes must commit to replicate) and the aliases are marked as
    test mirrors, so that pytest-django does not flush them after each test (each test starts
    from a fresh "docs" collection instead, and the servers are thrown away with the module).
    """
    with replication_pair() as running:
        databases = connections.settings
        databases[PRIMARY] = {**running.primary.database(), "TEST": {"MIRROR": "default"}}
        databases[REPLICA] = {**running.standby.database(), "TEST": {"MIRROR": PRIMARY}}
        databases[DOWN] = {**running.primary.database(), "PORT": "1", "TEST": {"MIRROR": PRIMARY}}
        connections.configure_settings(databases)
        try:
            # The schema reaches the standby the way everything else does: by replication.
            with django_db_blocker.unblock():
                call_command("migrate", "django_rag", database=PRIMARY, verbosity=0)
            running.wait_for_replay()
            yield running
        finally:
            for alias in (PRIMARY, REPLICA, DOWN):
                connections[alias].close()
                del connections[alias]
                del databases[alias]


@pytest.fixture
def replicated(pair: ReplicationPair) -> Iterator[ReplicationPair]:
    """``RAG`` writing to the primary and reading from the standby, with nothing indexed yet."""
    with override_settings(RAG={**settings.RAG, "DATABASE": PRIMARY, "READ_DATABASE": REPLICA}):
        for alias in (PRIMARY, REPLICA):
            # A standby restarted by an earlier test may have left a broken connection behind.
            connections[alias].close()
        # A fresh "docs" per test: deleting the row cascades to its documents and chunks.
        Collection.objects.using(PRIMARY).filter(name="docs").delete()
        pair.wait_for_replay()
        yield pair


def in_recovery(alias: str) -> bool:
    """``pg_is_in_recovery()`` on the connection the code under test left open for ``alias``."""
    assert connections[alias].connection is not None, f"nothing ran on {alias!r}"
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery()")
        return bool(cursor.fetchone()[0])


def last_statement(pair: ReplicationPair, alias: str) -> str:
    """What the server last ran for ``alias``'s connection, read from another connection."""
    pid = connections[alias].connection.info.backend_pid
    server = pair.standby if alias == REPLICA else pair.primary
    return str(server.execute(f"SELECT query FROM pg_stat_activity WHERE pid = {int(pid)}"))


@contextmanager
def served_by(alias: str, pair: ReplicationPair, last: str = "django_rag_") -> Iterator[None]:
    """Everything in the block runs on ``alias`` alone; checked on the connections themselves.

    ``last``: what the server's last statement on that connection contains (a read of a
    django_rag table, or the COMMIT of a write).
    """
    for name in (PRIMARY, REPLICA):
        connections[name].close()
    yield
    other = REPLICA if alias == PRIMARY else PRIMARY
    assert connections[other].connection is None, f"the block also queried {other!r}"
    assert last in last_statement(pair, alias)
    assert in_recovery(alias) is (alias == REPLICA)


@contextmanager
def replay_paused(pair: ReplicationPair) -> Iterator[None]:
    pair.standby.execute("SELECT pg_wal_replay_pause()")
    try:
        yield
    finally:
        pair.standby.execute("SELECT pg_wal_replay_resume()")


def indexed(pair: ReplicationPair) -> rag.KnowledgeBase:
    kb = rag.collection("docs")
    kb.index(DOCS)
    pair.wait_for_replay()
    return kb


def sources(hits: list[rag.Hit]) -> set[str]:
    return {hit.document.source_id for hit in hits}


def test_the_standby_streams_from_the_primary(pair: ReplicationPair, report: Any) -> None:
    assert pair.standby.execute("SELECT pg_is_in_recovery()") is True
    assert pair.primary.execute("SELECT pg_is_in_recovery()") is False
    assert pair.primary.execute("SELECT state FROM pg_stat_replication") == "streaming"
    report(
        f"replication pair (initdb + start + pg_basebackup -R + standby) ready in {pair.setup_seconds:.1f} s"
    )


def test_writes_go_to_the_primary_and_reach_the_replica_by_replay(replicated: ReplicationPair) -> None:
    kb = rag.collection("docs")
    with replay_paused(replicated):
        with served_by(PRIMARY, replicated, last="COMMIT"):
            result = kb.index(DOCS)
        assert result.added == 2
        # Committed on the primary, not yet replayed: the replica does not have it.
        assert kb.search("backups", k=5) == []
    replicated.wait_for_replay()
    assert sources(kb.search("backups", k=5)) == {"manual/backup", "manual/restore"}


def test_remove_and_rescope_go_to_the_primary(replicated: ReplicationPair) -> None:
    kb = indexed(replicated)
    with served_by(PRIMARY, replicated, last="COMMIT"):
        kb.index(DOCS[:1], tenant="acme")  # moves the document to another tenant: a rescope
        removed = kb.remove(source_id="manual/restore")
    assert removed == 1


@pytest.mark.parametrize(
    "options",
    [
        {"mode": "vector"},
        {"mode": "text"},
        {"mode": "hybrid"},
        {"mode": "hybrid", "rerank": lambda query, texts: [len(text) for text in texts]},
        {"mode": "vector", "mmr": True},
    ],
    ids=["vector", "text", "hybrid", "rerank", "mmr"],
)
def test_searches_are_served_by_the_replica(replicated: ReplicationPair, options: dict[str, Any]) -> None:
    kb = indexed(replicated)
    with served_by(REPLICA, replicated):
        hits = kb.search("backups", k=2, **options)
    assert sources(hits) <= {"manual/backup", "manual/restore"} and hits
    assert all(hit.chunk._state.db == REPLICA for hit in hits)


def test_ask_is_served_by_the_replica(replicated: ReplicationPair) -> None:
    kb = indexed(replicated)
    with OpenAICompatibleServer(dimensions=64) as server:
        chat = OpenAIChat(base_url=server.base_url, api_key="test", max_retries=0)
        # ask's search (prepare) runs on the replica; the chat call then closes the connection
        # (no connection is held while a model writes), so it is checked before that.
        with served_by(REPLICA, replicated):
            prompt = prepare(kb, "how often do backups run?")
        answer = answer_prompt(prompt, chat=chat)
    assert answer.citations and all(hit.document._state.db == REPLICA for hit in answer.citations)


def test_the_chunk_querysets_are_served_by_the_replica(replicated: ReplicationPair) -> None:
    kb = indexed(replicated)
    with served_by(REPLICA, replicated):
        nearest = list(kb.chunks().nearest("backups", k=2))
    with served_by(REPLICA, replicated):
        text = list(kb.chunks().text_search("backups", k=2))
    assert nearest and text
    assert {chunk._state.db for chunk in [*nearest, *text]} == {REPLICA}


def test_the_router_sends_the_sites_chunk_queries_to_the_replica(replicated: ReplicationPair) -> None:
    kb = indexed(replicated)
    with override_settings(DATABASE_ROUTERS=["django_rag.routers.RagRouter"]):
        with served_by(REPLICA, replicated):
            found = list(Chunk.objects.filter(collection_id=kb.pk).nearest("backups", k=2, collection=kb))
        assert Chunk.objects.all().db == REPLICA
        # Rows django-rag writes through the alias they were read from stay on the primary...
        assert Document.objects.all().db == PRIMARY and Collection.objects.all().db == PRIMARY
        # ...except the rows related to an instance, which come from the instance's database.
        chunk = Chunk.objects.get(pk=found[0].pk)
        assert (chunk._state.db, chunk.document._state.db) == (REPLICA, REPLICA)
    assert found and {chunk._state.db for chunk in found} == {REPLICA}


def test_read_from_primary_also_routes_and_decorates(replicated: ReplicationPair) -> None:
    @rag.read_from_primary()
    def routed() -> str:
        return Chunk.objects.all().db

    with override_settings(DATABASE_ROUTERS=["django_rag.routers.RagRouter"]):
        assert (routed(), Chunk.objects.all().db) == (PRIMARY, REPLICA)


def test_read_from_primary_sees_a_write_the_replica_has_not_replayed(replicated: ReplicationPair) -> None:
    kb = rag.collection("docs")
    with replay_paused(replicated):
        kb.index(DOCS)
        with served_by(PRIMARY, replicated), rag.read_from_primary():
            hits = kb.search("backups", k=5)
            chunks = list(kb.chunks().nearest("backups", k=5))
        assert kb.search("backups", k=5) == []  # outside the block: the replica again
    assert sources(hits) == {"manual/backup", "manual/restore"} and len(chunks) == 2


def test_an_explicit_using_wins_over_the_replica(replicated: ReplicationPair) -> None:
    kb = rag.collection("docs")
    with replay_paused(replicated):
        kb.index(DOCS)
        with served_by(PRIMARY, replicated):
            hits = kb.search("backups", k=5, using=PRIMARY)
    assert sources(hits) == {"manual/backup", "manual/restore"}


# --- A replica that is down ---------------------------------------------------------------------


@pytest.fixture
def replica_stopped(replicated: ReplicationPair) -> Iterator[rag.KnowledgeBase]:
    """The standby stopped the hard way after a search opened a connection to it, then restarted."""
    kb = indexed(replicated)
    assert kb.search("backups", k=1)  # the replica's connection is open and now goes stale
    replicated.standby.stop()
    try:
        yield kb
    finally:
        replicated.standby.start()
        deadline = time.monotonic() + 20
        while not replicated.standby.execute("SELECT pg_is_in_recovery()"):
            assert time.monotonic() < deadline, "the standby did not come back in recovery"
            time.sleep(0.05)


def test_a_stopped_replica_falls_back_to_the_primary_with_a_warning(
    replica_stopped: rag.KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="django_rag.replicas"):
        hits = replica_stopped.search("backups", k=5)
        chunks = list(replica_stopped.chunks().nearest("backups", k=5))
    assert sources(hits) == {"manual/backup", "manual/restore"} and len(chunks) == 2
    assert {chunk._state.db for chunk in chunks} == {PRIMARY}
    warnings = [record.getMessage() for record in caplog.records if record.name == "django_rag.replicas"]
    assert warnings and all(f"read replica {REPLICA!r}" in message for message in warnings)
    assert f"reading from {PRIMARY!r}" in warnings[0]


def test_a_stopped_replica_without_fallback_is_a_clear_error(replica_stopped: rag.KnowledgeBase) -> None:
    with override_settings(RAG={**settings.RAG, "READ_FALLBACK": False}):
        with pytest.raises(
            rag.ConfigurationError, match=rf"read replica '{REPLICA}' \(RAG\['READ_DATABASE'\]\)"
        ):
            replica_stopped.search("backups", k=5)
        with pytest.raises(rag.ConfigurationError, match=r"RAG\['READ_FALLBACK'\] = True"):
            replica_stopped.chunks()


@pytest.mark.parametrize("fallback", [True, False], ids=["fallback", "error"])
def test_an_unreachable_replica_alias_follows_the_fallback_setting(
    replicated: ReplicationPair, fallback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    kb = indexed(replicated)
    with override_settings(RAG={**settings.RAG, "READ_DATABASE": DOWN, "READ_FALLBACK": fallback}):
        if fallback:
            with caplog.at_level(logging.WARNING, logger="django_rag.replicas"):
                assert sources(kb.search("backups", k=5, mode="hybrid")) == {
                    "manual/backup",
                    "manual/restore",
                }
            assert f"read replica {DOWN!r}" in caplog.text
        else:
            with pytest.raises(rag.ConfigurationError, match=rf"{DOWN!r} \(RAG\['READ_DATABASE'\]\)"):
                kb.search("backups", k=5, mode="hybrid")
