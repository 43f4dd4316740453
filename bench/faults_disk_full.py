"""A real full disk under a sync: the chunk table on a tablespace in a tiny tmpfs.

    sudo .venv/bin/python bench/faults_disk_full.py [--size-mb 2] [--chunks 8000]

tests/test_faults.py raises the server's own SQLSTATE for a full disk (53100) from a trigger,
because CI cannot mount a file system. This script fills a real one, where the machine lets
it (root, and a kernel that allows ``mount -t tmpfs``): it mounts a ``--size-mb`` tmpfs, makes
it a tablespace of the bench server, moves a scratch database's chunk table onto it, indexes a
small document, then syncs a version of ``--chunks`` chunks that cannot fit. It prints the
error the caller gets and checks that the stored version (chunks, vectors, statistics) is the
one from before, then moves the table back (space freed) and runs the same sync again.
Everything it creates goes at the end: database, tablespace, mount.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg
from common import BENCH_PGDATA, bench_database, machine_line, setup_django

from django_rag.database import embedded_database_url

RAG = {
    "EMBEDDERS": {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}},
    "COLLECTIONS": {"docs": {"TEXT_CONFIG": "simple", "CHUNK_SIZE": 64, "CHUNK_OVERLAP": 0}},
}


def paragraphs(label: str, count: int) -> str:
    words = " ".join(f"{label}word{n}" for n in range(20))
    return "\n\n".join(f"Version {label} paragraph {i} says {words}." for i in range(count))


def stored_state() -> dict[str, Any]:
    from django.db import connection  # Django is configured by main()

    queries = {
        "chunks": "SELECT id, document_id, index, content_hash, embedding::text FROM django_rag_chunk "
        "ORDER BY id",
        "documents": "SELECT source_id, status, error, content_hash, updated_at FROM django_rag_document",
        "postings": "SELECT chunk_id, term, tf, dl FROM django_rag_posting ORDER BY 1, 2",
        "textstats": "SELECT space, sum(chunks), sum(length) FROM django_rag_textstats GROUP BY space",
        "termstats": "SELECT space, term, sum(n) FROM django_rag_postblock GROUP BY 1, 2 ORDER BY 1, 2",
    }
    with connection.cursor() as cursor:
        state = {}
        for key, query in queries.items():
            cursor.execute(query)
            state[key] = cursor.fetchall()
    return state


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=8000)
    args = parser.parse_args()
    if os.environ.get("DATABASE_URL"):
        raise SystemExit(
            "needs the embedded server (unset DATABASE_URL): the tablespace must be on this machine"
        )
    mount = Path(tempfile.mkdtemp(prefix="django-rag-full-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={args.size_mb}m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        mount.rmdir()
        raise SystemExit(
            f"cannot mount a tmpfs here ({mounted.stderr.strip()}): run as root on a machine that allows it"
        )
    tablespace = f"django_rag_full_{os.getpid()}"
    try:
        with bench_database("django_rag_full") as db:
            owner = Path(BENCH_PGDATA).stat()  # the server's data directory, once it is running
            os.chown(mount, owner.st_uid, owner.st_gid)
            setup_django(db, RAG)
            # Importable only now that Django is configured.
            from django.db import connection

            import django_rag as rag

            kb = rag.collection("docs")
            kb.index([rag.RagDocument("handbook", paragraphs("old", 5))])
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE TABLESPACE {tablespace} LOCATION %s", [str(mount)])
                cursor.execute(f"ALTER TABLE django_rag_chunk SET TABLESPACE {tablespace}")
            before = stored_state()
            print(machine_line())
            print(f"chunk table on a {args.size_mb} MB tmpfs; syncing a {args.chunks}-chunk version")
            try:
                kb.index([rag.RagDocument("handbook", paragraphs("new", args.chunks))])
            except Exception as exc:
                cause = exc.__cause__
                print(f"raised {type(exc).__module__}.{type(exc).__name__}: {exc}")
                sqlstate = getattr(cause, "sqlstate", None)
                print(f"  from {type(cause).__module__}.{type(cause).__name__} (SQLSTATE {sqlstate})")
            else:
                print("the new version fit: raise --chunks or lower --size-mb")
                sys.exit(1)
            intact = stored_state() == before
            print(f"stored version intact (chunks, vectors, postings, statistics): {intact}")
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE django_rag_chunk SET TABLESPACE pg_default")  # space freed
            result = kb.index([rag.RagDocument("handbook", paragraphs("new", args.chunks))])
            print(f"with space again, the same sync: {result.added} added, {result.removed} removed")
            if not intact or result.added != args.chunks:
                sys.exit(1)
    finally:
        with psycopg.connect(embedded_database_url(BENCH_PGDATA), autocommit=True) as admin:
            admin.execute(f"DROP TABLESPACE IF EXISTS {tablespace}")
        subprocess.run(["umount", str(mount)], check=False)
        mount.rmdir()


if __name__ == "__main__":
    main()
