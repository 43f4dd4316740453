"""Switching a collection's embedder with no downtime (issue 15): fill, flip, abort, drop, status.

Real PostgreSQL throughout; the reindex worker is a real ``manage.py rag_reindex`` subprocess
killed with SIGKILL, and ``--async`` runs on a real Celery worker. Two hashing embedders of
different widths stand for the old and the new model; the new one logs every text it embeds
(tests/doubles.py), so "nothing embedded twice" is counted, not assumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

import django_rag as rag
from django_rag.ddl import IndexSpec
from django_rag.ingest import switch
from django_rag.models import Chunk, Collection, EmbeddingSwitch
from tests.settings import RAG as SUITE_RAG
from tests.workers import ROOT, Worker, _forget_embedded_server_user, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

HASHING = "django_rag.embedders.hashing.HashingEmbedder"
OLD = {"BACKEND": HASHING, "DIMENSIONS": 32}  # space hashing:32
WORDS = [
    "backup",
    "restore",
    "invoice",
    "snapshot",
    "ledger",
    "archive",
    "tariff",
    "harbour",
    "lantern",
    "meadow",
    "orchard",
    "quartz",
]


def rag_config(embedder: str, log: Path, *, third: bool = True) -> dict[str, Any]:
    embedders: dict[str, Any] = {
        "old": OLD,
        # Another width than the old one: the vector column is untyped, both live side by side.
        "new": {
            "BACKEND": "tests.doubles.LoggingEmbedder",
            "MODEL": "logged",
            "DIMENSIONS": 48,
            "LOG": str(log),
        },
    }
    if third:
        embedders["third"] = {"BACKEND": HASHING, "MODEL": "third", "DIMENSIONS": 16}
    return {
        "EMBEDDERS": embedders,
        # The suite's other collections (registered models use them) use the "old" embedder too.
        "COLLECTIONS": {
            **{name: {**options, "EMBEDDER": "old"} for name, options in SUITE_RAG["COLLECTIONS"].items()},
            "docs": {"EMBEDDER": embedder, "TEXT_CONFIG": "english"},
        },
    }


def documents(count: int, prefix: str = "doc") -> list[rag.RagDocument]:
    # Every text unique (its number), all sharing the common words every search looks for.
    return [
        rag.RagDocument(
            f"{prefix}/{n}",
            f"{prefix} number {n} mentions {WORDS[n % len(WORDS)]} and {WORDS[(n * 7) % len(WORDS)]}; "
            "the common words of every document: backup restore invoice.",
        )
        for n in range(count)
    ]


def logged(log: Path) -> Counter[str]:
    if not log.exists():
        return Counter()
    return Counter(json.loads(line) for line in log.read_text().splitlines())


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def command(log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``manage.py``-style command in a subprocess working in this test's database and settings."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DJANGO_RAG_TEST_WORKER": "1",
        "DJANGO_RAG_TEST_RAG": json.dumps(rag_config("new", log)),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "embedded.jsonl"


@pytest.fixture
def old_settings(settings: Any, log: Path) -> Any:
    settings.RAG = {**settings.RAG, **rag_config("old", log)}
    return settings


def switch_to(settings: Any, embedder: str, log: Path) -> rag.KnowledgeBase:
    settings.RAG = {**settings.RAG, **rag_config(embedder, log)}
    return rag.collection("docs")


class Searcher(threading.Thread):
    """Searches the collection continuously, recording each result's size and its hits' spaces."""

    def __init__(self, k: int) -> None:
        super().__init__(daemon=True)
        self.k = k
        self.results: list[tuple[int, frozenset[str]]] = []
        self.errors: list[BaseException] = []
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                hits = rag.collection("docs").search("backup restore invoice", k=self.k)
                ids = [hit.chunk.pk for hit in hits]
                spaces = frozenset(Chunk.objects.filter(pk__in=ids).values_list("space", flat=True))
                self.results.append((len(hits), spaces))
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            connection.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


def test_a_switch_under_continuous_search_killed_and_restarted_embeds_nothing_twice(
    old_settings: Any, log: Path
) -> None:
    kb = rag.collection("docs")
    kb.index(documents(60))
    assert kb.space == "hashing:32"

    kb = switch_to(old_settings, "new", log)
    assert kb.space == "hashing:32"  # searches stay on the complete space
    pending = EmbeddingSwitch.objects.get(collection=kb)
    assert (pending.source_space, pending.space) == ("hashing:32", "logged:48")

    searcher = Searcher(k=5)
    searcher.start()
    # A real worker, killed with SIGKILL right after its fifth committed batch (in its pause).
    first = command(log, "rag_reindex", "docs", "--batch-size", "5", "--pause", "3")
    try:

        def five_batches() -> bool:
            if first.poll() is not None:
                raise AssertionError(f"rag_reindex exited early: {first.communicate()[1].decode()}")
            return EmbeddingSwitch.objects.filter(collection=kb, run_documents__gte=25).exists()

        wait_for(five_batches, 60, "five batches to commit")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        _forget_embedded_server_user(first.pid)
    done_before_restart = Chunk.objects.filter(collection=kb, space="logged:48").values("document").distinct()
    assert 25 <= done_before_restart.count() < 60
    assert rag.collection("docs").space == "hashing:32"  # not flipped

    # Written while the switch is half done: into both spaces.
    kb.index(documents(3, prefix="late"))
    kb.index([rag.RagDocument("doc/1", "doc number 1 now speaks of a zeppelin; backup restore invoice.")])
    kb.remove(source_id="doc/2")

    second = command(log, "rag_reindex", "docs", "--batch-size", "5")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err.decode()
    assert "switched from hashing:32 to logged:48" in out.decode()
    searcher.stop()

    assert not searcher.errors, searcher.errors
    assert len(searcher.results) > 20
    assert all(size == 5 for size, _ in searcher.results)  # never empty, never short
    assert all(len(spaces) == 1 for _, spaces in searcher.results)  # never mixed
    seen = [next(iter(spaces)) for _, spaces in searcher.results]
    assert seen[0] == "hashing:32" and seen[-1] == "logged:48"
    assert seen == sorted(seen, key=lambda space: space == "logged:48")  # one flip, never back

    kb = rag.collection("docs")
    assert kb.space == "logged:48" and not EmbeddingSwitch.objects.filter(collection=kb).exists()
    assert [hit.source_id for hit in kb.search("zeppelin", k=3, mode="text")] == ["doc/1"]
    assert kb.search("zeppelin", k=1)[0].source_id == "doc/1"  # its new text's vector, in the new space
    assert {hit.source_id for hit in kb.search("late", k=5, mode="text")} == {"late/0", "late/1", "late/2"}
    assert not Chunk.objects.filter(document__source_id="doc/2").exists()
    held = Chunk.objects.filter(collection=kb, space="logged:48").values("document").distinct().count()
    assert held == 60 - 1 + 3

    # Every text of the new space embedded exactly once, across the killed run, the writes
    # made during the switch and the restarted run.
    texts = logged(log)
    assert max(texts.values()) == 1, [t for t, n in texts.items() if n > 1]
    stored = set(Chunk.objects.filter(collection=kb, space="logged:48").values_list("content", flat=True))
    assert stored <= set(texts)
    # The old space stays until asked: a later --drop-old deletes it.
    assert Chunk.objects.filter(collection=kb, space="hashing:32").exists()
    out, _ = run("rag_reindex", "docs", "--drop-old")
    assert "chunks of hashing:32 deleted" in out
    assert set(Chunk.objects.filter(collection=kb).values_list("space", flat=True)) == {"logged:48"}


def test_a_crash_between_batches_resumes_without_embedding_again(old_settings: Any, log: Path) -> None:
    kb = rag.collection("docs")
    kb.index(documents(20))
    kb = switch_to(old_settings, "new", log)
    pending = EmbeddingSwitch.objects.get(collection=kb)
    embedder = switch.target_embedder(pending, kb)
    partial = switch.fill(kb, "logged:48", embedder, batch_size=4, max_batches=2)
    assert (partial.documents, partial.complete) == (8, False)
    rest = switch.fill(kb, "logged:48", embedder, batch_size=4)
    assert (rest.documents, rest.complete) == (12, True)
    assert sum(logged(log).values()) == len(logged(log)) == 20
    assert switch.flip(kb)
    assert rag.collection("docs").space == "logged:48"


def test_switching_to_another_dimension_needs_nothing_but_the_untyped_column(
    old_settings: Any, log: Path
) -> None:
    rag.collection("docs").index(documents(6))
    switch_to(old_settings, "new", log)
    run("rag_reindex", "docs")
    dims = set(Chunk.objects.extra(select={"d": "vector_dims(embedding)"}).values_list("space", "d"))
    assert dims == {("hashing:32", 32), ("logged:48", 48)}
    assert rag.collection("docs").search("backup", k=3)


def test_an_empty_collection_moves_to_its_new_embedder_at_once(old_settings: Any, log: Path) -> None:
    rag.collection("docs")
    kb = switch_to(old_settings, "new", log)
    assert kb.space == "logged:48" and not EmbeddingSwitch.objects.exists()


def test_no_flip_keeps_searching_the_old_space_until_a_later_run(old_settings: Any, log: Path) -> None:
    rag.collection("docs").index(documents(6))
    switch_to(old_settings, "new", log)
    out, _ = run("rag_reindex", "docs", "--no-flip")
    assert "logged:48 is complete; searches keep using hashing:32" in out
    assert rag.collection("docs").space == "hashing:32"
    out, _ = run("rag_reindex", "docs")
    assert "0 documents embedded" in out and "switched from hashing:32 to logged:48" in out


def test_abort_drops_the_partial_space_and_keeps_the_active_one(old_settings: Any, log: Path) -> None:
    rag.collection("docs").index(documents(10))
    kb = switch_to(old_settings, "new", log)
    switch.fill(
        kb,
        "logged:48",
        switch.target_embedder(EmbeddingSwitch.objects.get(), kb),
        max_batches=1,
        batch_size=4,
    )
    assert Chunk.objects.filter(space="logged:48").count() == 4
    out, _ = run("rag_reindex", "docs", "--abort")
    assert "aborted, 4 of its chunks deleted; searches keep using hashing:32" in out
    assert "Set EMBEDDER back to 'old'" in out
    assert set(Chunk.objects.values_list("space", flat=True)) == {"hashing:32"}
    assert not EmbeddingSwitch.objects.exists()
    old_settings.RAG = {**old_settings.RAG, **rag_config("old", log)}
    assert rag.collection("docs").search("backup", k=3)
    assert not EmbeddingSwitch.objects.exists()
    with pytest.raises(CommandError):
        run("rag_reindex", "docs", "--abort")  # nothing left to abort


def test_a_second_switch_while_one_is_in_progress_is_refused_naming_abort(
    old_settings: Any, log: Path
) -> None:
    rag.collection("docs").index(documents(6))
    switch_to(old_settings, "new", log)
    kb = switch_to(old_settings, "third", log)
    assert kb.space == "hashing:32"  # searches unaffected
    assert EmbeddingSwitch.objects.get().space == "logged:48"
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError):
        call_command("rag_reindex", "docs", stdout=out, stderr=err)
    assert "one switch at a time" in err.getvalue() and "rag_reindex docs --abort" in err.getvalue()
    messages = [m for m in run_checks(databases=["default"]) if m.id == "django_rag.W020"]
    assert len(messages) == 1 and "--abort" in messages[0].hint
    run("rag_reindex", "docs", "--abort")
    rag.collection("docs")  # the third embedder's switch opens now
    assert EmbeddingSwitch.objects.get().space == "third:16"
    out, _ = run("rag_reindex", "docs")
    assert "switched from hashing:32 to third:16" in out


def test_an_unknown_embedder_is_a_clear_error_and_a_system_check(old_settings: Any, log: Path) -> None:
    rag.collection("docs").index(documents(3))
    config = rag_config("nosuch", log)
    old_settings.RAG = {**old_settings.RAG, **config}
    with pytest.raises(rag.ConfigurationError, match=r"embedder 'nosuch'.*does not define"):
        rag.collection("docs")
    errors = [m for m in run_checks() if m.id == "django_rag.E005"]
    assert len(errors) == 1 and "'nosuch'" in errors[0].msg and "'new', 'old', 'third'" in errors[0].hint
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError):
        call_command("rag_reindex", "docs", stdout=out, stderr=err)
    assert "nosuch" in err.getvalue()


def test_the_old_embedder_gone_from_settings_mid_switch_is_a_check_with_a_hint(
    old_settings: Any, log: Path
) -> None:
    rag.collection("docs").index(documents(3))
    switch_to(old_settings, "new", log)
    config = rag_config("new", log)
    del config["EMBEDDERS"]["old"]
    old_settings.RAG = {**old_settings.RAG, **config}
    messages = [m for m in run_checks(databases=["default"]) if m.id == "django_rag.W021"]
    assert len(messages) == 1
    assert "hashing:32" in messages[0].msg and "'previous'" in messages[0].hint
    with pytest.raises(rag.ConfigurationError, match=r"keep the old embedder under an alias"):
        rag.collection("docs").search("backup")
    run("rag_reindex", "docs")  # finishing the switch is the other way out
    assert rag.collection("docs").search("backup", k=1)


def test_two_reindex_runs_on_one_collection_the_second_exits_clearly(old_settings: Any, log: Path) -> None:
    rag.collection("docs").index(documents(3))
    kb = switch_to(old_settings, "new", log)
    # Another run's session, as a raw connection: closing it (from a timer thread) ends that run.
    holder = connection.get_new_connection(connection.get_connection_params())
    try:
        holder.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [f"django_rag.reindex:{kb.pk}"])
        out, err = StringIO(), StringIO()
        with pytest.raises(CommandError):
            call_command("rag_reindex", "docs", stdout=out, stderr=err)
        assert "another `rag_reindex docs` is running" in err.getvalue() and "--wait" in err.getvalue()
        threading.Timer(1.0, holder.close).start()
        started = time.monotonic()
        out, _ = run("rag_reindex", "docs", "--wait")
        assert time.monotonic() - started >= 0.9
        assert "switched from hashing:32 to logged:48" in out
    finally:
        holder.close()


def test_the_flip_waits_for_the_ann_index_the_active_space_has(old_settings: Any, log: Path) -> None:
    rag.collection("docs").index(documents(4))
    with connection.cursor() as cursor:
        cursor.execute(IndexSpec("hashing:32", 32).create_sql())
    switch_to(old_settings, "new", log)
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError):
        call_command("rag_reindex", "docs", stdout=out, stderr=err)
    assert "no ANN index" in err.getvalue() and "rag_migration" in err.getvalue()
    assert rag.collection("docs").space == "hashing:32"
    out, _ = run("rag_reindex", "docs", "--build-index")
    assert "ANN index" in out and "switched from hashing:32 to logged:48" in out
    assert switch.has_index("logged:48", "default")


def test_rag_status_shows_each_space_and_the_switch_progress_rate_and_eta(
    old_settings: Any, log: Path
) -> None:
    rag.collection("docs").index(documents(12))
    kb = switch_to(old_settings, "new", log)
    switch.start_run(kb, using="default")
    switch.fill(
        kb,
        "logged:48",
        switch.target_embedder(EmbeddingSwitch.objects.get(), kb),
        batch_size=3,
        max_batches=2,
    )
    out, _ = run("rag_status", "docs")
    assert "docs: switching from hashing:32 (old) to logged:48 (new)" in out
    assert "6/12 documents (50.0%)" in out
    assert "rate" in out and "ETA" in out
    assert "hashing:32" in out and "12 chunks" in out
    data = json.loads(run("rag_status", "docs", "--json")[0])
    assert data[0]["documents_done"] == 6 and data[0]["documents_total"] == 12
    assert data[0]["rate"] > 0 and data[0]["eta_seconds"] >= 0
    run("rag_reindex", "docs")
    out, _ = run("rag_status")
    assert "docs: active logged:48 (new), no switch in progress" in out


def test_the_admin_collection_page_shows_the_switch_progress(
    old_settings: Any, log: Path, admin_client: Any
) -> None:
    old_settings.ROOT_URLCONF = "tests.web_urls"
    rag.collection("docs").index(documents(4))
    kb = switch_to(old_settings, "new", log)
    page = admin_client.get(f"/admin/django_rag/collection/{kb.pk}/change/").content.decode()
    assert "logged:48" in page and "0/4 documents" in page


def test_rag_reindex_async_fills_and_flips_on_a_real_celery_worker(
    old_settings: Any, log: Path, celery_app: Any, tmp_path: Path
) -> None:
    rag.collection("docs").index(documents(30))
    switch_to(old_settings, "new", log)
    old_settings.RAG = {**old_settings.RAG, "ASYNC": True}
    queue = f"{old_settings.CELERY_TASK_DEFAULT_QUEUE}-switch"
    worker = Worker(
        "switch", queue, tmp_path, pool="prefork", concurrency=2,
        env={"DJANGO_RAG_TEST_RAG": json.dumps(rag_config("new", log))},
    )  # fmt: skip
    worker.start()
    try:
        out, _ = run("rag_reindex", "docs", "--async", "--batch-size", "7", "--queue", queue, "--drop-old")
        assert f"5 batches for logged:48 enqueued on queue {queue!r}" in out
        wait_for(
            lambda: Collection.objects.get(name="docs").active_space == "logged:48", 60, "the flip", worker
        )
        wait_for(
            lambda: not Chunk.objects.filter(space="hashing:32").exists(), 30, "the old space to go", worker
        )
        worker.wait_idle()
    finally:
        worker.stop()
    assert "django_rag.switch_fill" in worker.log_text() and "django_rag.switch_flip" in worker.log_text()
    assert Chunk.objects.filter(space="logged:48").values("document").distinct().count() == 30
    texts = logged(log)
    assert len(texts) == 30 and max(texts.values()) == 1


def test_switching_back_before_drop_old_refills_the_old_space_with_current_texts(
    old_settings: Any, log: Path
) -> None:
    rag.collection("docs").index(documents(6))
    switch_to(old_settings, "new", log)
    run("rag_reindex", "docs")
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("doc/3", "doc number 3 is about a walrus now.")])  # new space only
    kb = switch_to(old_settings, "old", log)
    assert kb.space == "logged:48"
    assert not Chunk.objects.filter(space="hashing:32").exists()  # the stale leftovers went
    run("rag_reindex", "docs")
    kb = rag.collection("docs")
    assert kb.space == "hashing:32"
    assert [hit.source_id for hit in kb.search("walrus", k=3, mode="text")] == ["doc/3"]
    assert Chunk.objects.filter(space="hashing:32", content__contains="walrus").count() == 1
