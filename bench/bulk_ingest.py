"""Bulk ingest on Celery workers (issue 15): ``rag_ingest --async`` on 1, 2 and 4 worker processes.

    .venv/bin/python bench/bulk_ingest.py [--workers 1,2,4] [--batch-size 64] [--limit 0]

The SciFact train corpus (all 5,183 abstracts of ``$BENCH_SCIFACT``, read by
``django_rag.beir.load_beir``) is written as one text file per abstract (title, blank line,
text) into a temporary folder, then ingested with the hashing embedder (384 dims, no model:
the figures are chunking, hashing, the store's writes and the queue, not a model) by:

- ``rag_ingest FOLDER`` in this process: the synchronous path, for reference, run first and
  again last (other work on the machine moves the figures; the two show by how much);
- ``rag_ingest FOLDER --async`` with 1, 2 and 4 worker processes (``celery worker --pool solo``,
  one process each, like one worker per machine) consuming the collection's queue on the Redis
  at 127.0.0.1:6379 (``$BENCH_REDIS_URL``), the command waiting until the job is complete.

Each run writes into a fresh collection of the same scratch database, in the same run. Workers
are started and ready before the clock starts; the clock covers the command: walking the
folder, queueing the batches, and waiting until every batch is counted. chunks/s is the chunks
stored over that time; the ratio is against 1 worker. The embedded PostgreSQL runs on the same
machine and shares its CPUs with the workers, so the worker count past the CPU count cannot
help: on a 2-CPU machine, 4 workers mostly queue for the same 2 cores.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import bulk_celery
from common import ROOT, SCIFACT, bench_database, machine_line

from django_rag.beir import load_beir


def write_corpus(folder: Path, limit: int) -> int:
    """Every abstract of the corpus as ``<folder>/<shard>/<corpus id>.txt`` (title, blank line, text)."""
    documents = list(load_beir(SCIFACT.parent, split="train").documents())
    if limit:
        documents = documents[:limit]
    for number, doc in enumerate(documents):
        shard = folder / f"{number // 500:02d}"  # folders of 500 files, as a real tree would have
        shard.mkdir(exist_ok=True)
        (shard / f"{doc.source_id}.txt").write_text(doc.text + "\n", encoding="utf-8")
    return len(documents)


def start_workers(
    count: int, queues: str, db_url: str, prefix: str, logs: Path
) -> list[subprocess.Popen[bytes]]:
    processes = []
    ready = []
    for number in range(count):
        marker = logs / f"{queues}-{number}.ready"
        env = {
            **os.environ,
            "BENCH_BULK_DB": db_url,
            "BENCH_BULK_PREFIX": prefix,
            "BENCH_BULK_READY": str(marker),
        }
        command = [
            sys.executable, "-m", "celery", "-A", "bench.bulk_celery", "worker",
            "--hostname", f"bench{number}-{uuid.uuid4().hex[:6]}@%h", "--queues", queues,
            "--pool", "solo", "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        log = (logs / f"{queues}-{number}.log").open("wb")
        processes.append(
            subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
        ready.append(marker)
    deadline = time.monotonic() + 120
    while not all(marker.exists() for marker in ready):
        if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
            stop_workers(processes)
            raise SystemExit(f"workers for {queues} did not start; see {logs}")
        time.sleep(0.1)
    return processes


def cpu_seconds(processes: list[subprocess.Popen[bytes]]) -> float:
    """User + system CPU seconds the processes have used so far (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for process in processes:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def stop_workers(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()  # warm shutdown: the job is complete, nothing is running
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="Worker process counts to run (default 1,2,4).")
    parser.add_argument("--batch-size", type=int, default=64, help="Files per task (default 64).")
    parser.add_argument("--limit", type=int, default=0, help="Only the first N abstracts (default all).")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]

    with (
        tempfile.TemporaryDirectory(prefix="django-rag-bulk-") as tmp,
        bench_database("django_rag_bulk") as db,
    ):
        folder = Path(tmp) / "scifact"
        folder.mkdir()
        logs = Path(tmp) / "logs"
        logs.mkdir()
        files = write_corpus(folder, args.limit)
        prefix = f"django_rag_bulk_{os.getpid()}:"

        from common import setup_django

        setup_django(db, bulk_celery.RAG)
        from django.core.management import call_command

        import django_rag as rag
        from django_rag.ingest.jobs import queue_for
        from django_rag.models import Chunk, IngestJob

        app = bulk_celery.make_app(prefix)
        common_args = [str(folder), "--root", str(folder), "--batch-size", str(args.batch_size)]
        warm_args = [str(path) for path in sorted((folder / "00").iterdir())[: max(counts)]] + [
            "--root",
            str(folder),
        ]
        quiet = io.StringIO()
        print(f"SciFact train: {files} abstracts as files; hashing embedder (384 dims); {db.server}")
        print(machine_line())
        rows: list[tuple[str, int, float, float]] = []  # label, chunks, seconds, ingesting CPU s

        rag.collection("bulk-warm")

        def synchronous(name: str, label: str) -> None:
            rag.collection(name)
            started, cpu = time.perf_counter(), time.process_time()
            call_command("rag_ingest", *common_args, "--collection", name, verbosity=0, stdout=quiet)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
            rows.append((label, Chunk.objects.filter(collection__name=name).count(), elapsed, cpu))
            print(f"  {label}: {rows[-1][1]} chunks in {elapsed:.1f}s  (load {os.getloadavg()[0]:.2f})")

        # Warm-up of this process, off the clock (imports, the embedder, connections).
        call_command("rag_ingest", *warm_args, "--collection", "bulk-warm", verbosity=0, stdout=quiet)
        # Before and after the worker runs: how much the machine's load moved meanwhile.
        synchronous("bulk-sync", "synchronous, first")

        for count in counts:
            name = f"bulk-w{count}"
            rag.collection(name)
            queues = f"{queue_for(name)},{queue_for('bulk-warm')}"
            workers = start_workers(count, queues, db.url, prefix, logs)
            try:
                # Warm-up, off the clock: one single-file batch per worker (imports, connections).
                call_command(
                    "rag_ingest", *warm_args, "--collection", "bulk-warm", "--batch-size", "1", "--async",
                    verbosity=0, stdout=quiet,
                )  # fmt: skip
                load_before = os.getloadavg()[0]
                cpu = cpu_seconds(workers)
                started = time.perf_counter()
                call_command(
                    "rag_ingest", *common_args, "--collection", name, "--async", verbosity=0, stdout=quiet
                )
                elapsed = time.perf_counter() - started
                cpu = cpu_seconds(workers) - cpu
                load_after = os.getloadavg()[0]
            finally:
                stop_workers(workers)
            job = IngestJob.objects.get(collection__name=name)  # the bulk-warm jobs are not counted
            stored = Chunk.objects.filter(collection__name=name).count()
            note = (
                f"{job.batches} batches, {job.embedded} embedded; load {load_before:.2f} -> {load_after:.2f}"
            )
            rows.append((f"--async, {count} worker process{'es' if count > 1 else ''}", stored, elapsed, cpu))
            print(f"  {rows[-1][0]}: {stored} chunks in {elapsed:.1f}s  ({note})")
        synchronous("bulk-sync-end", "synchronous, last")
        app.close()

    base = next((r for r in rows if r[0].startswith("--async, 1 ")), None)
    print(f"\n{'path':<34}{'chunks':>8}{'seconds':>9}{'chunks/s':>10}{'vs 1 worker':>13}{'ingest CPU s':>14}")
    for label, chunks, seconds, cpu in rows:
        ratio = f"{(chunks / seconds) / (base[1] / base[2]):.2f}x" if base else "-"
        print(f"{label:<34}{chunks:>8}{seconds:>9.1f}{chunks / seconds:>10.0f}{ratio:>13}{cpu:>14.1f}")
    print(
        "ingest CPU s: CPU time of the ingesting processes (this one when synchronous, the workers "
        "with --async), PostgreSQL's server processes not included"
    )
    print(f"\n{machine_line()}")
    print(
        f"CPUs: {os.cpu_count()}; workers beyond the CPU count (PostgreSQL included) cannot add throughput."
    )


if __name__ == "__main__":
    main()
