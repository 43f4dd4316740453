"""``rag_ingest ... --async``: batches of files ingested by real Celery workers on Redis (tests/workers.py).

The command walks the folder here and queues batches on ``django_rag.<collection>``; worker
subprocesses read the same files (shared storage: the same machine) and write into the test
database. What they store must be exactly what the synchronous command stores.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from celery import Celery, current_app
from django.core.management import call_command
from django.core.management.base import CommandError

import django_rag as rag
from django_rag.checks import check_bulk
from django_rag.ingest.jobs import count_batch, create_job, plan_batches, queue_for, run_batch
from django_rag.ingest.sources import IngestOptions, targets
from django_rag.models import Chunk, Document, IngestBatch, IngestJob
from tests.workers import Worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TOPICS = ["backups", "restores", "invoices", "holidays", "onboarding", "security", "printers", "travel"]


def write_corpus(folder: Path, files: int = 18) -> Path:
    """Text files of a few chunks each, plus what the sync path skips or fails, in subfolders."""
    for number in range(files):
        topic = TOPICS[number % len(TOPICS)]
        text = "\n\n".join(
            f"Note {number}, part {part}: the {topic} policy says step {part * number} comes after "
            f"step {part + number}, and every {topic} request is answered within {part + 2} days."
            for part in range(40)
        )
        path = folder / topic / f"note-{number:02d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {topic.title()} {number}\n\n{text}\n")
    (folder / "misc").mkdir()
    (folder / "misc" / "diagram.xyz").write_bytes(b"no loader for this")  # skipped: unsupported-type
    (folder / "misc" / "empty.txt").write_text("   \n")  # skipped: empty-text
    (folder / "misc" / "fake.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)  # binary
    os.mkfifo(folder / "misc" / "pipe.txt")  # failed: unreadable (not a regular file)
    return folder


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus")


@pytest.fixture(scope="module")
def bulk_workers(celery_app, django_db_setup, tmp_path_factory):
    """Two worker processes (solo pool, one task at a time each) on the "bulk" collection's queue."""
    directory = tmp_path_factory.mktemp("bulk-workers")
    workers = [Worker(f"bulk{n}", queue_for("bulk"), directory) for n in (1, 2)]
    try:
        yield [worker.start() for worker in workers]
    finally:
        for worker in workers:
            worker.stop()


@pytest.fixture
def workers(bulk_workers, via_celery):
    yield bulk_workers
    for worker in bulk_workers:
        worker.wait_idle()


def ingest(*args: str, **options: object) -> str | CommandError:
    """Run rag_ingest; its output, or the CommandError it ended with (a failed source is one)."""
    out: list[str] = []

    class Out:
        def write(self, text: str) -> None:
            out.append(text)

        def flush(self) -> None:
            pass

    try:
        call_command("rag_ingest", *args, stdout=Out(), stderr=Out(), verbosity=0, **options)
    except CommandError as exc:
        return exc
    return "".join(out)


def documents(name: str) -> list[tuple]:
    fields = (
        "source_id",
        "status",
        "status_reason",
        "error",
        "content_hash",
        "title",
        "source",
        "content_type",
    )
    return sorted(Document.objects.filter(collection__name=name).values_list(*fields))


def chunks(name: str) -> list[tuple]:
    rows = Chunk.objects.filter(collection__name=name).values_list(
        "document__source_id", "index", "content_hash", "content", "space", "embedding"
    )
    return sorted((*row[:5], [round(float(x), 6) for x in row[5]]) for row in rows)


def test_a_folder_ingested_on_two_workers_equals_the_synchronous_run(workers, corpus) -> None:
    rag.collection("bulk", create=True)
    rag.collection("bulk-sync", create=True)
    root = str(corpus.parent)
    synchronous = ingest(str(corpus), "--root", root, "--collection", "bulk-sync", "--batch-size", "3")
    on_workers = ingest(str(corpus), "--root", root, "--collection", "bulk", "--batch-size", "3", "--async")

    # The FIFO fails on both paths, and both exit non-zero naming it.
    assert isinstance(synchronous, CommandError) and isinstance(on_workers, CommandError)
    assert "corpus/misc/pipe.txt" in str(synchronous) and "corpus/misc/pipe.txt" in str(on_workers)
    assert documents("bulk") == documents("bulk-sync")
    assert chunks("bulk") == chunks("bulk-sync")
    stored = Chunk.objects.filter(collection__name="bulk")
    assert stored.count() > 18 * 2  # several chunks per note
    failed = Document.objects.get(collection__name="bulk", source_id="corpus/misc/pipe.txt")
    assert (failed.status, failed.status_reason, "not a regular file" in failed.error) == (
        "failed",
        "unreadable",
        True,
    )
    # Both worker processes took batches: 22 sources in 8 batches of 3.
    for worker in workers:
        assert "django_rag.ingest_batch" in worker.log_text() and "succeeded in" in worker.log_text()


def test_the_job_counts_every_source_and_chunk_once(workers, corpus) -> None:
    rag.collection("bulk", create=True)
    args = (str(corpus), "--root", str(corpus.parent), "--collection", "bulk", "--batch-size", "4", "--async")
    ingest(*args)
    job = IngestJob.objects.get()
    distinct = Chunk.objects.filter(collection__name="bulk").values("content_hash").distinct().count()
    counted = sorted(IngestBatch.objects.filter(job=job).values_list("number", flat=True))
    assert (job.total, job.batches, job.batches_done, counted) == (22, 6, 6, list(range(6)))
    assert (job.loaded, job.skipped, job.failed, job.failed_batches) == (18, 3, 1, 0)
    assert job.chunks_added == Chunk.objects.filter(collection__name="bulk").count()
    assert (job.embedded, job.chunks_removed, job.chunks_unchanged) == (distinct, 0, 0)
    assert job.finished_at is not None and job.queue == "django_rag.bulk"


def test_running_the_same_job_again_embeds_nothing(workers, corpus) -> None:
    rag.collection("bulk", create=True)
    args = (str(corpus), "--root", str(corpus.parent), "--collection", "bulk", "--async")
    ingest(*args)
    before = chunks("bulk")
    ingest(*args)
    again = IngestJob.objects.order_by("created_at").last()
    assert again is not None
    assert (again.embedded, again.chunks_added, again.chunks_unchanged) == (0, 0, len(before))
    assert chunks("bulk") == before


def test_two_jobs_of_one_folder_at_once_leave_one_copy_of_each_document(workers, corpus) -> None:
    rag.collection("bulk", create=True)
    rag.collection("bulk-sync", create=True)
    root = str(corpus.parent)
    ingest(str(corpus), "--root", root, "--collection", "bulk-sync", "--batch-size", "100")
    before = [worker.log_text().count("django_rag.ingest_batch") for worker in workers]
    # Each job is one batch of the whole folder and both are queued at once: each worker takes
    # one, and both write the same documents at the same time (the advisory locks take turns).
    for _ in range(2):
        args = ("--root", root, "--collection", "bulk", "--batch-size", "100", "--async", "--no-wait")
        ingest(str(corpus), *args)
    wait_for(lambda: IngestJob.objects.filter(finished_at__isnull=False).count() == 2, 60, "both jobs")
    ran = [
        worker.log_text().count("django_rag.ingest_batch") - n
        for worker, n in zip(workers, before, strict=True)
    ]
    assert all(ran), ran
    assert not IngestJob.objects.filter(failed_batches__gt=0).exists()
    assert documents("bulk") == documents("bulk-sync")
    assert chunks("bulk") == chunks("bulk-sync")


def test_no_wait_prints_the_job_and_the_workers_finish_it(workers, corpus) -> None:
    rag.collection("bulk", create=True)
    out = ingest(
        str(corpus / "backups"), "--root", str(corpus), "--collection", "bulk", "--async", "--no-wait"
    )
    assert isinstance(out, str)
    job_id = re.search(r"job ([0-9a-f-]{36}): 3 sources in 1 batches queued on 'django_rag.bulk'; watch", out)
    assert job_id, out
    job = wait_for(
        lambda: IngestJob.objects.filter(pk=job_id.group(1), finished_at__isnull=False).first(), 30, "the job"
    )
    assert (job.done, job.loaded) == (3, 3)
    assert sorted(Document.objects.values_list("source_id", flat=True)) == [
        "backups/note-00.md",
        "backups/note-08.md",
        "backups/note-16.md",
    ]


def test_watch_follows_a_job_queued_without_waiting_and_fails_like_it(workers, corpus) -> None:
    rag.collection("bulk", create=True)
    args = ("--root", str(corpus), "--collection", "bulk", "--async", "--no-wait", "--json")
    queued = ingest(str(corpus / "misc"), str(corpus / "travel"), *args)
    assert isinstance(queued, str)
    watched = ingest("--watch", json.loads(queued)["job"])
    assert isinstance(watched, CommandError)  # the FIFO failed: exit 1, as the synchronous run
    assert "1 source(s) failed: misc/pipe.txt: not a regular file" in str(watched)
    job = IngestJob.objects.get()
    assert (job.done, job.loaded, job.skipped, job.failed) == (6, 2, 3, 1)


def test_watch_of_an_unknown_job_is_an_error(db) -> None:
    result = ingest("--watch", "not-a-job")
    assert isinstance(result, CommandError) and "no such ingest job" in str(result)


def test_json_output_of_an_async_run(workers, corpus) -> None:
    rag.collection("bulk", create=True)
    out = ingest(str(corpus / "travel"), "--root", str(corpus), "--collection", "bulk", "--async", "--json")
    assert isinstance(out, str)
    summary = json.loads(out)
    assert summary["sources"] == {"total": 2, "loaded": 2, "skipped": 0, "failed": 0}
    assert summary["queue"] == "django_rag.bulk" and summary["chunks"]["added"] > 0


@pytest.fixture
def unreachable_broker():
    """A current Celery app whose broker nobody listens on (port 1)."""
    previous = current_app._get_current_object()
    Celery("django_rag_unreachable", set_as_current=True).conf.update(broker_url="redis://127.0.0.1:1/0")
    yield
    previous.set_current()


def test_no_reachable_broker_is_an_error_naming_the_setting_before_anything_is_queued(
    unreachable_broker, corpus
) -> None:
    rag.collection("bulk", create=True)
    result = ingest(str(corpus), "--root", str(corpus.parent), "--collection", "bulk", "--async")
    assert isinstance(result, CommandError)
    assert "cannot reach the Celery broker at redis://127.0.0.1:1/0" in str(result)
    assert "CELERY_BROKER_URL" in str(result)
    assert not IngestJob.objects.exists() and not Document.objects.exists()


def test_an_unknown_collection_is_an_error_and_queues_nothing(via_celery, corpus) -> None:
    result = ingest(str(corpus), "--root", str(corpus.parent), "--collection", "nowhere", "--async")
    assert isinstance(result, CommandError) and "nowhere" in str(result)
    assert not IngestJob.objects.exists()


@pytest.mark.parametrize("flag", ["--dry-run", "--prune", "--fail-fast"])
def test_options_that_need_one_process_are_refused_with_async(via_celery, corpus, flag) -> None:
    rag.collection("bulk", create=True)
    result = ingest(str(corpus), "--root", str(corpus.parent), "--collection", "bulk", "--async", flag)
    assert isinstance(result, CommandError) and f"{flag} cannot go with --async" in str(result)
    assert not IngestJob.objects.exists()


def recording(log: Path) -> dict[str, str]:
    embedder = {"BACKEND": "tests.doubles.RecordingEmbedder", "DIMENSIONS": 64, "LOG": str(log)}
    return {"DJANGO_RAG_TEST_RAG": json.dumps({"EMBEDDERS": {"default": embedder}})}


def embedded_hashes(*logs: Path) -> list[str]:
    return [line.split()[1] for log in logs if log.exists() for line in log.read_text().splitlines()]


@pytest.mark.parametrize("moment", ["while-embedding", "after-writing"])
def test_a_worker_killed_mid_batch_is_redelivered_and_nothing_is_embedded_twice(
    moment, via_celery, tmp_path, django_db_setup, report
) -> None:
    corpus = write_corpus(tmp_path / "corpus", files=8)
    rag.collection("bulk-kill", create=True)
    queue = queue_for("bulk-kill")
    marker, doomed_log, survivor_log = tmp_path / "paused", tmp_path / "doomed.log", tmp_path / "survivor.log"
    if moment == "while-embedding":
        pausing = {"BACKEND": "tests.doubles.PausingEmbedder", "DIMENSIONS": 64, "MARKER": str(marker)}
        env = {"DJANGO_RAG_TEST_RAG": json.dumps({"EMBEDDERS": {"default": pausing}})}
    else:  # the batch's chunks are committed, the task has not been acknowledged
        env = {**recording(doomed_log), "DJANGO_RAG_TEST_PAUSE_AFTER_WRITE": str(marker)}
    doomed = Worker("doomed", queue, tmp_path, env=env).start()
    try:
        args = (str(corpus), "--root", str(corpus.parent), "--collection", "bulk-kill", "--batch-size", "6")
        out = ingest(*args, "--async", "--no-wait")
        assert isinstance(out, str), out
        wait_for(marker.exists, 30, "the worker to be mid-batch", doomed)
        written_before_kill = Chunk.objects.filter(collection__name="bulk-kill").count()
        doomed.kill()
    finally:
        doomed.stop()
    survivor = Worker("survivor", queue, tmp_path, env=recording(survivor_log)).start()
    try:
        job = wait_for(
            lambda: IngestJob.objects.filter(finished_at__isnull=False).first(), 60, "the job", survivor
        )
    finally:
        survivor.stop()
    stored = list(Chunk.objects.filter(collection__name="bulk-kill").values_list("content_hash", flat=True))
    embedded = embedded_hashes(doomed_log, survivor_log)
    report(
        f"bulk ingest, worker killed {moment}: {written_before_kill} chunks committed before the kill, "
        f"{len(embedded_hashes(survivor_log))} texts embedded by the survivor, {len(stored)} chunks stored"
    )
    assert (job.total, job.batches, job.loaded, job.failed) == (12, 2, 8, 1)  # the FIFO fails
    assert sorted(embedded) == sorted(set(embedded))  # no text embedded twice, across both workers
    assert set(embedded) == set(stored)  # and every stored chunk was embedded by one of them
    assert len(stored) == len(set(Chunk.objects.values_list("document_id", "index")))  # one copy each
    if moment == "after-writing":
        assert written_before_kill > 0
        assert Document.objects.filter(collection__name="bulk-kill", status="indexed").count() == 8


def test_bulk_settings_are_checked(settings) -> None:
    settings.RAG = {**settings.RAG, "BULK": {"QUEUES": "x", "QUEUE": "", "ROOT": 3}}
    messages = {(m.id, m.msg) for m in check_bulk()}
    assert ("django_rag.E130", "RAG['BULK'] has an unknown key 'QUEUES'") in messages
    assert ("django_rag.E131", "RAG['BULK']['QUEUE'] is '', not a queue name") in messages
    assert ("django_rag.E131", "RAG['BULK']['ROOT'] is 3, not a path") in messages


def test_the_queue_setting_names_a_collection_s_queue(settings) -> None:
    assert queue_for("docs") == "django_rag.docs"
    settings.RAG = {**settings.RAG, "BULK": {"QUEUE": "rag-{collection}-bulk"}}
    assert queue_for("docs") == "rag-docs-bulk"


def test_a_batch_is_counted_once_however_often_it_runs(corpus) -> None:
    kb = rag.collection("bulk", create=True)
    found = list(targets([str(corpus / "travel")], IngestOptions(root=str(corpus))))
    batches = plan_batches(found, 1)
    job = create_job(kb, IngestOptions(root=str(corpus)), batches)
    first = run_batch(str(job.pk), 0, batches[0].items)
    assert first is not None and first.count("loaded") == 1
    assert run_batch(str(job.pk), 0, batches[0].items) is None  # a redelivery: already counted
    assert not count_batch(str(job.pk), 0, first)
    job.refresh_from_db()
    assert (job.loaded, job.batches_done, job.complete, job.finished_at) == (1, 1, False, None)
    run_batch(str(job.pk), 1, batches[1].items)
    job.refresh_from_db()
    assert (job.loaded, job.batches_done, job.complete, job.finished_at is not None) == (2, 2, True, True)
