"""The local embedder's ONNX Runtime threads (count, spinning), idle and beside a busy PostgreSQL.

    .venv/bin/python bench/embedder_threads.py [--texts 64] [--rounds 5] [--hogs 2]

ONNX Runtime's intra-op thread pool spins (busy-waits) between work items by default. On a
machine shared with PostgreSQL and Celery workers the spinning threads compete for the cores
the other threads of the same inference need. Each configuration is a ``LocalEmbedder`` with
``THREADS`` (None = ONNX Runtime's default, one per core) and ``SPIN`` (True is ONNX Runtime's
own default; django-rag's is False since this benchmark's run of 2026-12-03, docs/design.md). The
baseline of the ratios is ONNX Runtime's default (one thread per core, spinning). Two measures
per configuration:

- ingest: ``embed_documents`` of ``--texts`` SciFact abstracts cut to ~1,000 characters
  (texts per second);
- query: ``embed_query`` of one short claim (milliseconds, median of 10).

Two conditions: ``idle`` (nothing started by this script) and ``busy PostgreSQL``: ``--hogs``
client processes each running CPU-bound SQL (``count(*)`` over ``generate_series``) in a loop
against the bench server. In each round the configurations run in a rotated order, and the
table reports the median over rounds of each configuration's time over the default's in the
same round. The 1-minute load average is printed per condition: this machine is shared.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from common import Database, Timer, bench_database, chunk_texts, machine_line, median

from django_rag.embedders.local import LocalEmbedder

CONFIGS: list[tuple[int | None, bool]] = [
    (None, True),
    (None, False),
    (1, True),
    (1, False),
    (2, True),
    (2, False),
]
QUERY = "Vitamin D deficiency is associated with a higher risk of respiratory infection."


def label(threads: int | None, spin: bool) -> str:
    t = "default" if threads is None else str(threads)
    s = "on" if spin else "off (django-rag's default)" if threads is None else "off"
    return f"threads {t:<7} spin {s}"


@dataclass
class Result:
    ingest: list[float] = field(default_factory=list)  # seconds per round
    query: list[float] = field(default_factory=list)  # median ms per round


def hog(url: str, stop_at: float) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < stop_at:
            conn.execute("SELECT count(*) FROM generate_series(1, 3000000)")


def measure(embedders: dict[str, LocalEmbedder], texts: list[str], rounds: int) -> dict[str, Result]:
    results = {name: Result() for name in embedders}
    names = list(embedders)
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            embedder = embedders[name]
            with Timer() as timer:
                embedder.embed_documents(texts)
            results[name].ingest.append(timer.seconds)
            query_ms = []
            for _ in range(10):
                with Timer() as timer:
                    embedder.embed_query(QUERY)
                query_ms.append(timer.seconds * 1000)
            results[name].query.append(median(query_ms))
    return results


def report(condition: str, results: dict[str, Result], n: int, load: float) -> None:
    base = results[label(None, True)]
    print(f"\n{condition} (1-minute load average {load:.2f} at the end)")
    print(f"{'configuration':<32} {'texts/s':>8} {'vs default':>10} {'query ms':>9} {'vs default':>10}")
    for name, r in results.items():
        ingest_ratio = median([b / s for s, b in zip(r.ingest, base.ingest, strict=True)])
        query_ratio = median([b / q for q, b in zip(r.query, base.query, strict=True)])
        print(
            f"{name:<32} {n / median(r.ingest):8.1f} {ingest_ratio:9.2f}x {median(r.query):9.2f} "
            f"{query_ratio:9.2f}x"
        )
    print("(vs default: median over rounds of the default's time over this one's; above 1 is faster)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound SQL clients in the busy condition")
    args = parser.parse_args(argv)

    texts = [text for _, text in chunk_texts(args.texts)]
    embedders = {label(t, s): LocalEmbedder(threads=t, spin=s) for t, s in CONFIGS}
    for embedder in embedders.values():  # load and warm every session before any timing
        embedder.embed_documents(texts[:4])
    print(f"local embedder threads: {len(texts)} texts, {args.rounds} rounds, {os.cpu_count()} CPUs")
    report("idle", measure(embedders, texts, args.rounds), len(texts), os.getloadavg()[0])

    with bench_database() as db:
        busy(db, embedders, texts, args)
    print(machine_line())


def busy(
    db: Database, embedders: dict[str, LocalEmbedder], texts: list[str], args: argparse.Namespace
) -> None:
    stop_at = time.monotonic() + 3600
    context = multiprocessing.get_context("spawn")
    hogs = [context.Process(target=hog, args=(db.url, stop_at), daemon=True) for _ in range(args.hogs)]
    for process in hogs:
        process.start()
    try:
        time.sleep(2)
        results = measure(embedders, texts, args.rounds)
        report(
            f"beside a busy PostgreSQL ({args.hogs} CPU-bound SQL clients)",
            results,
            len(texts),
            os.getloadavg()[0],
        )
    finally:
        for process in hogs:
            process.terminate()
            process.join()


if __name__ == "__main__":
    main()
