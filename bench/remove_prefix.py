"""Removing a prefix of 1,000,000 documents with PostgreSQL's default lock settings (issue 24).

    .venv/bin/python bench/remove_prefix.py [--documents 1000000] [--batch-size 500]

Before: ``kb.remove(prefix=...)`` took one advisory lock per document in one transaction, and
failed past PostgreSQL's lock table (``max_locks_per_transaction * max_connections``, 6,400 by
default) with "out of shared memory". Now it removes committed batches of ``--batch-size``.

The collection holds ``--documents`` documents under ``bulk/`` and 1,000 others (which must stay),
one chunk each with a short text (a shared lexeme, a mid-frequency one, a unique one), written
in SQL statements of 1,000 documents, as ingestion batches do, so the BM25 triggers build the
postings as for any write. The removal is timed with ``kb.remove(prefix="bulk", progress=...)``.

Reported: wall time and rate; the peak memory of this Python process (tracemalloc's peak of
Python allocations, and the growth of its resident set); the peak resident set of the server
backend that ran the removal (``VmHWM`` of its process, the embedded server being local); the
most advisory locks held at once (sampled from ``pg_locks`` every 0.2 s by another session);
the server's lock settings; and a check that the other documents and the text index are intact.
"""

from __future__ import annotations

import argparse
import resource
import threading
import time
import tracemalloc
from pathlib import Path

from common import Timer, bench_database, checkpoint, machine_line, setup_django

RAG = {
    "EMBEDDERS": {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}},
    "COLLECTIONS": {"bench": {"TEXT_CONFIG": "english"}},
}

_BULK = """
WITH d AS (
    INSERT INTO django_rag_document (collection_id, source_id, title, source, content_type, loader,
        metadata, tags, tenant, status, status_reason, error, content_hash, created_at, updated_at)
    SELECT %(c)s, %(prefix)s || i, '', '', 'text/plain', '', '{}', '{}', '', 'indexed', '', '',
           md5(i::text), now(), now()
    FROM generate_series(%(first)s, %(last)s) AS i
    RETURNING id, source_id
), t AS (
    SELECT d.id, d.source_id,
           'backup note ' || (ARRAY['nightly', 'weekly', 'restore', 'billing', 'invoice', 'archive',
                                    'replica', 'snapshot'])[d.id %% 8 + 1] || ' ' || d.source_id AS text
    FROM d
)
INSERT INTO django_rag_chunk (document_id, collection_id, tenant, tags, "index", content, content_hash,
    token_count, char_start, char_end, metadata, search_vector, space, embedding)
SELECT t.id, %(c)s, '', '{}', 0, t.text, md5(t.text), 5, 0, length(t.text), '{}',
       to_tsvector('english', t.text), %(space)s, array_fill(0.125, ARRAY[64])::vector
FROM t
"""


def fill(kb: object, prefix: str, count: int, step: int = 1000) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for first in range(0, count, step):
            last = min(first + step, count) - 1
            values = {"c": kb.pk, "prefix": prefix, "space": kb.space}  # type: ignore[attr-defined]
            cursor.execute(_BULK, {**values, "first": first, "last": last})


class LockSampler(threading.Thread):
    """Another session counting the advisory locks the removal's backend holds, every 0.2 s."""

    def __init__(self, url: str, backend: int) -> None:
        super().__init__(daemon=True)
        self.url, self.backend = url, backend
        self.most = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.done.wait(0.2):
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory'", [self.backend]
                ).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)


def resident(pid: int | str, field: str) -> int:
    """A /proc status memory figure in bytes (0 where the process is not readable here)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=500, help="Documents per removal transaction.")
    args = parser.parse_args()

    with bench_database("django_rag_remove") as db:
        setup_django(db, RAG)
        from django.db import connection

        import django_rag as rag
        from django_rag.models import Chunk, Document
        from django_rag.stores import get_store

        kb = rag.collection("bench")
        with Timer() as filling:
            fill(kb, "bulk/", args.documents)
            fill(kb, "other/", 1_000)
        checkpoint(db)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('max_locks_per_transaction'), current_setting('max_connections'), "
                "current_setting('max_prepared_transactions'), pg_backend_pid(), "
                "pg_size_pretty(pg_database_size(current_database()))"
            )
            locks, connections_, prepared, backend, size = cursor.fetchone()
        print(machine_line())
        print(
            f"server: {db.server}; max_locks_per_transaction {locks}, max_connections {connections_}, "
            f"max_prepared_transactions {prepared} (PostgreSQL's defaults are 64, 100, 0)"
        )
        print(
            f"filled {args.documents + 1000:,} documents and chunks in {filling.seconds:.0f} s; "
            f"database {size}"
        )

        done = [0]
        started = time.perf_counter()

        def progress(n: int) -> None:
            before = done[0] * 10 // args.documents
            done[0] += n
            if done[0] * 10 // args.documents > before:
                rate = done[0] / (time.perf_counter() - started)
                print(f"  {done[0]:>9,} removed, {rate:,.0f} documents/s", flush=True)

        sampler = LockSampler(db.url, backend)
        sampler.start()
        rss_before = resident("self", "VmRSS")
        server_before = resident(backend, "VmHWM")
        tracemalloc.start()
        with Timer() as removing:
            removed = get_store(kb.using).delete(
                kb, prefix="bulk", progress=progress, batch_size=args.batch_size
            )
        _, python_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        sampler.done.set()
        sampler.join()
        rss_growth = resident("self", "VmHWM") - rss_before
        server_peak = resident(backend, "VmHWM")
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

        left = set(Document.objects.values_list("source_id", flat=True))
        assert removed == args.documents, removed
        assert len(left) == 1000 and all(s.startswith("other/") for s in left)
        assert Chunk.objects.count() == 1000
        with connection.cursor() as cursor:
            cursor.execute("SELECT sum(chunks) FROM django_rag_textstats WHERE collection_id = %s", [kb.pk])
            assert int(cursor.fetchone()[0]) == 1000
        print(
            f"removed {removed:,} documents (and their chunks and postings) in {removing.seconds:.0f} s, "
            f"{removed / removing.seconds:,.0f} documents/s, {args.batch_size} per transaction"
        )
        print(
            f"python: tracemalloc peak {python_peak / 2**20:.1f} MiB, resident set growth "
            f"{max(rss_growth, 0) / 2**20:.1f} MiB (process peak {maxrss / 2**20:.0f} MiB)"
        )
        if server_peak:
            print(
                f"server backend: peak resident set {server_peak / 2**20:.0f} MiB "
                f"({server_before / 2**20:.0f} MiB before the removal; the shared buffers it touched "
                "count in it)"
            )
        print(f"advisory locks held at once: at most {sampler.most} (sampled every 0.2 s)")
        print("the 1,000 other documents, their chunks and the collection's text statistics are intact")


if __name__ == "__main__":
    main()
