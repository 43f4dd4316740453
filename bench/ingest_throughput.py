"""Ingest throughput (chunks/s, embedding excluded): django-rag vs its peers, one run, one database.

    .venv/bin/python bench/ingest_throughput.py [--chunks 20000] [--dims 384] [--repeat 1]

Every contender writes the same rows: N distinct SciFact chunk texts (abstracts cut to ~1,000
characters), each with the same precomputed seeded random unit vector and the same metadata
``{"doc": <document id>}``, grouped in documents of ``--doc-chunks`` (20) chunks. Calls go in
batches of ``--batch-docs`` (64) documents = 1,280 chunks, django-rag's default batch size:
one ``upsert_many``/``add``/``add_embeddings``/``bulk_create``/COPY call per batch; each
library commits as it does by default.

Contenders (each into a fresh table of the same scratch database on the same server):

- django-rag store: ``PgVectorStore().upsert_many(...)`` with ``ChunkData`` carrying the vectors.
  Per batch: advisory locks, document upsert, hash diff against stored chunks, one
  ``INSERT ... SELECT FROM unnest(...)`` with binary vectors, one transaction.
- django-rag store, TEXT_SEARCH off: the same call into a vector-only collection (no tsvector,
  no BM25 postings or statistics): the same work per row as the peers do.
- django-rag pipeline: ``collection.index(docs)``, one call for all documents, with an embedder
  that looks the precomputed vectors up by text: chunking, SHA-1 hashing, the
  ``vectors_for`` reuse query, the diff and the write are timed; model time is not. Each
  document's text is its 20 chunk texts joined by page breaks (``\\f``), which the chunker
  never crosses, so it yields exactly the same chunks as the other contenders get.
- LangChain ``PGVectorStore`` (langchain-postgres v2, psycopg async driver): ``add_embeddings``.
- LangChain legacy ``langchain_postgres.vectorstores.PGVector`` (psycopg, JSONB): ``add_embeddings``.
- LlamaIndex ``PGVectorStore`` (psycopg2): ``add(nodes)`` with ``TextNode`` objects holding the vectors.
- Django ``bulk_create`` of django-rag's own ``Chunk`` model, ``batch_size=1000``.
- raw psycopg binary ``COPY`` into an equivalent plain table (the ceiling, not a peer).
- raw psycopg binary ``COPY`` computing the same tsvector (issue 14's bar for full-text ingest,
  not a peer): the same plain table plus ``search_vector tsvector GENERATED ALWAYS AS
  (to_tsvector('english', content)) STORED`` and a GIN index on it, django-rag's text index.

Fairness:

- Nothing builds an ANN index: the peers create none by default, and django-rag's HNSW indexes
  come from ``rag_migration`` in the site's app, which this scratch database does not run.
- Inputs are built before the clock starts for every contender (``ChunkData``, ``RagDocument``,
  ``TextNode``, ``Chunk`` instances, lists); the clock covers the library call(s) only.
  ``bulk_create``'s Document rows are inserted before its clock starts, django-rag's own
  document upserts are inside its clock: both choices favour the peer.
- Each contender first writes and discards one warm-up batch (connections, type lookups,
  statement caches), then the table is emptied, ``VACUUM ANALYZE`` + ``CHECKPOINT`` run, and the
  timed load starts.
- django-rag writes more per row than the peers: denormalised collection/tenant/tags/space
  columns, offsets and token counts, a ``to_tsvector`` per chunk (full-text search) and the
  indexes of its migration (GIN on the tsvector, GIN jsonb_path_ops on metadata, GIN on tags,
  three btrees) plus a Document row per document. ``bulk_create`` writes into the same table
  (same indexes) but leaves the tsvector NULL. LangChain legacy has a GIN on its JSONB metadata;
  LlamaIndex a btree on ``metadata->>'ref_doc_id'``; LangChain v2 only its primary key. The
  table printed after the results lists each contender's indexes and on-disk size.

The contenders' order rotates every round (``--repeat``), and every ratio is the median over
rounds of the two rates measured in the same round. The ratio column is django-rag (store
level) over the contender; the headline compares both
django-rag levels with the fastest peer (target >= 5x) and with the COPY ceiling (the plain
binary COPY, named in the line, whatever ``--only`` selects); then issue
14's two bars for the full-text store: >= 2x the fastest peer (all of them are text-less) and
>= 0.7x the COPY that computes the same tsvector, and the BM25 postings it wrote per chunk
(every table named ``django_rag_post*`` or ``django_rag_term*``).
"""

from __future__ import annotations

import argparse
import gc
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from common import (
    Database,
    LookupEmbedder,
    Timer,
    bench_database,
    checkpoint,
    chunk_texts,
    machine_line,
    median,
    rag_tables,
    random_unit_vectors,
    setup_django,
    sha1,
    truncate_rag_tables,
)
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb

COLLECTION = "bench"
VECTOR_ONLY = "bench-vector-only"  # TEXT_SEARCH False: no tsvector, no BM25 postings, like the peers
TARGET = 5.0
TARGET_FTS_PEER = 2.0  # issue 14: full-text store over the fastest (text-less) peer
TARGET_FTS_COPY = 0.7  # issue 14: full-text store over a raw COPY computing the same tsvector


@dataclass
class Row:
    doc: str
    index: int
    text: str
    hash: str
    vector: list[float]

    @property
    def metadata(self) -> dict[str, Any]:
        return {"doc": self.doc}


@dataclass
class Doc:
    source_id: str
    rows: list[Row]


Batch = list[Doc]


def make_docs(n: int, dims: int, per_doc: int, *, prefix: str = "doc", seed: int = 0) -> list[Doc]:
    texts = chunk_texts(n)
    vectors = random_unit_vectors(n, dims, seed=seed).tolist()
    docs = []
    for start in range(0, n, per_doc):
        source_id = f"{prefix}-{start // per_doc:05d}"
        rows = [
            Row(source_id, i, text, sha1(text), vectors[start + i])
            for i, (_, text) in enumerate(texts[start : start + per_doc])
        ]
        docs.append(Doc(source_id, rows))
    return docs


def batched(docs: Sequence[Doc], size: int) -> list[Batch]:
    return [list(docs[i : i + size]) for i in range(0, len(docs), size)]


def flat(batch: Batch) -> list[Row]:
    return [row for doc in batch for row in doc.rows]


# -- contenders ---------------------------------------------------------------------------------


@dataclass
class Contender:
    """One way of loading the rows. ``prepare`` is untimed, ``load`` is the timed part."""

    name: str
    is_peer: bool
    tables: tuple[str, ...]  # first one holds the chunks: content/embedding columns below
    text_column: str = "content"
    # The plain binary COPY that every ratio "of the COPY ceiling" divides by: named, not found
    # by class, because RawCopyTsvector subclasses RawCopy and --only can put it first.
    is_ceiling: ClassVar[bool] = False

    def setup(self, db: Database, dims: int) -> None:
        pass

    def prepare(self, batches: list[Batch]) -> Any:
        raise NotImplementedError

    def load(self, prepared: Any) -> None:
        raise NotImplementedError

    def reset(self, db: Database) -> None:
        with db.connect(autocommit=True) as conn:
            conn.execute(f"TRUNCATE {', '.join(self.tables)}")

    def teardown(self, db: Database) -> None:
        with db.connect(autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {', '.join(self.tables)} CASCADE")


class DjangoRagStore(Contender):
    def __init__(self, name: str = "django-rag store (upsert_many)", collection: str = COLLECTION) -> None:
        super().__init__(name, False, ("django_rag_chunk",))
        self.collection = collection

    def setup(self, db: Database, dims: int) -> None:
        # Every table the app writes on ingest (chunks first): sizes and indexes cover them all.
        self.tables = ("django_rag_chunk", *(t for t in rag_tables() if t != "django_rag_chunk"))

    def prepare(self, batches: list[Batch]) -> Any:
        from django_rag.stores.base import DocumentInfo
        from django_rag.types import ChunkData

        return [
            [
                (
                    DocumentInfo(doc.source_id, title=doc.source_id, metadata={"doc": doc.source_id}),
                    [
                        ChunkData(
                            index=row.index,
                            content=row.text,
                            content_hash=row.hash,
                            token_count=len(row.text) // 4,
                            char_start=0,
                            char_end=len(row.text),
                            metadata=row.metadata,
                            embedding=row.vector,
                        )
                        for row in doc.rows
                    ],
                )
                for doc in batch
            ]
            for batch in batches
        ]

    def load(self, prepared: Any) -> None:
        import django_rag as rag
        from django_rag.embedders import get_embedder
        from django_rag.stores.pgvector import PgVectorStore

        store, space, coll = PgVectorStore(), get_embedder().space, rag.collection(self.collection)
        for items in prepared:
            store.upsert_many(coll, items, space=space)

    def reset(self, db: Database) -> None:
        truncate_rag_tables()

    def teardown(self, db: Database) -> None:
        truncate_rag_tables()


class DjangoRagPipeline(DjangoRagStore):
    def __init__(self, batch_docs: int) -> None:
        super().__init__("django-rag pipeline (collection.index)")
        self.batch_docs = batch_docs
        self.result: Any = None

    def prepare(self, batches: list[Batch]) -> Any:
        from django_rag.ingest.chunking import chunk_document
        from django_rag.types import RagDocument

        docs = []
        for batch in batches:
            for doc in batch:
                text = "\f".join(row.text for row in doc.rows)
                docs.append(RagDocument(doc.source_id, text, metadata={"doc": doc.source_id}))
                for row in doc.rows:
                    LookupEmbedder.TABLE[row.text] = row.vector
                # The page breaks must give back exactly the rows the other contenders write.
                chunks = chunk_document(docs[-1], chunk_size=1024, chunk_overlap=32)
                if [c.content for c in chunks] != [row.text for row in doc.rows]:
                    raise SystemExit(f"chunking {doc.source_id} does not give back its rows")
        return docs

    def load(self, prepared: Any) -> None:
        import django_rag as rag

        self.result = rag.collection(COLLECTION).index(prepared, batch_size=self.batch_docs)


class LangChainV2(Contender):
    def __init__(self) -> None:
        super().__init__("LangChain PGVectorStore (v2)", True, ("bench_lc_v2",))

    def setup(self, db: Database, dims: int) -> None:
        from langchain_postgres import PGEngine, PGVectorStore

        self.engine = PGEngine.from_connection_string(db.sqlalchemy_url("psycopg"))
        self.engine.init_vectorstore_table(self.tables[0], dims)
        self.store = PGVectorStore.create_sync(self.engine, no_embeddings(), self.tables[0])

    def prepare(self, batches: list[Batch]) -> Any:
        return [
            ([r.text for r in rows], [r.vector for r in rows], [r.metadata for r in rows])
            for rows in map(flat, batches)
        ]

    def load(self, prepared: Any) -> None:
        for texts, vectors, metadatas in prepared:
            self.store.add_embeddings(texts, vectors, metadatas)

    def teardown(self, db: Database) -> None:
        self.engine._run_as_sync(self.engine.close())
        super().teardown(db)


class LangChainLegacy(Contender):
    def __init__(self) -> None:
        super().__init__(
            "LangChain PGVector (legacy)",
            True,
            ("langchain_pg_embedding", "langchain_pg_collection"),
            text_column="document",
        )

    def setup(self, db: Database, dims: int) -> None:
        from langchain_postgres.vectorstores import PGVector

        self.store = PGVector(
            no_embeddings(),
            connection=db.sqlalchemy_url("psycopg"),
            embedding_length=dims,
            collection_name="bench",
            use_jsonb=True,
            create_extension=False,
        )

    prepare = LangChainV2.prepare

    def load(self, prepared: Any) -> None:
        for texts, vectors, metadatas in prepared:
            self.store.add_embeddings(texts, vectors, metadatas)

    def reset(self, db: Database) -> None:
        with db.connect(autocommit=True) as conn:
            conn.execute("TRUNCATE langchain_pg_embedding")

    def teardown(self, db: Database) -> None:
        self.store._engine.dispose()
        super().teardown(db)


class LlamaIndex(Contender):
    def __init__(self) -> None:
        super().__init__("LlamaIndex PGVectorStore", True, ("data_bench_llama",), text_column="text")

    def setup(self, db: Database, dims: int) -> None:
        from llama_index.vector_stores.postgres import PGVectorStore

        self.store = PGVectorStore(
            connection_string=db.sqlalchemy_url("psycopg2"),
            async_connection_string=db.sqlalchemy_url("asyncpg"),
            table_name="bench_llama",
            embed_dim=dims,
        )
        self.store.add([])  # creates the table outside the clock

    def prepare(self, batches: list[Batch]) -> Any:
        from llama_index.core.schema import TextNode

        return [
            [
                TextNode(id_=str(uuid.uuid4()), text=r.text, embedding=r.vector, metadata=r.metadata)
                for r in rows
            ]
            for rows in map(flat, batches)
        ]

    def load(self, prepared: Any) -> None:
        for nodes in prepared:
            self.store.add(nodes)

    def teardown(self, db: Database) -> None:
        self.store._engine.dispose()
        super().teardown(db)


class Diagnostic(DjangoRagStore):
    """Not a contender of the issue (``--diagnose``): the store with the chunk table's user
    triggers (text postings and statistics) disabled in this scratch database, re-enabled after.
    """

    def __init__(self, name: str = "diag: store, chunk triggers off") -> None:
        super().__init__(name)

    def setup(self, db: Database, dims: int) -> None:
        super().setup(db, dims)
        with db.connect(autocommit=True) as conn:
            conn.execute("ALTER TABLE django_rag_chunk DISABLE TRIGGER USER")

    def teardown(self, db: Database) -> None:
        with db.connect(autocommit=True) as conn:
            conn.execute("ALTER TABLE django_rag_chunk ENABLE TRIGGER USER")
        super().teardown(db)


class DiagnosticPending(Diagnostic):
    """The synchronous part of a deferred posting build (``--diagnose``): the chunk table's
    triggers replaced by one statement trigger that only queues the new chunks' ids in a
    pending table, as a pending list merged later would. The merge is not built or timed.
    """

    def __init__(self) -> None:
        super().__init__("diag: store, postings deferred to a pending list")

    def setup(self, db: Database, dims: int) -> None:
        super().setup(db, dims)
        with db.connect(autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE bench_pending (chunk_id bigint PRIMARY KEY, collection_id bigint NOT NULL, "
                "space varchar NOT NULL)"
            )
            conn.execute(
                "CREATE FUNCTION bench_queue() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN "
                "INSERT INTO bench_pending SELECT id, collection_id, space FROM new_rows "
                "WHERE search_vector IS NOT NULL; RETURN NULL; END $fn$"
            )
            conn.execute(
                "CREATE TRIGGER bench_queue AFTER INSERT ON django_rag_chunk REFERENCING NEW TABLE AS "
                "new_rows FOR EACH STATEMENT EXECUTE FUNCTION bench_queue()"
            )

    def reset(self, db: Database) -> None:
        super().reset(db)
        with db.connect(autocommit=True) as conn:
            conn.execute("TRUNCATE bench_pending")

    def teardown(self, db: Database) -> None:
        with db.connect(autocommit=True) as conn:
            conn.execute("DROP TRIGGER bench_queue ON django_rag_chunk")
            conn.execute("DROP FUNCTION bench_queue()")
            conn.execute("DROP TABLE bench_pending")
        super().teardown(db)


def diagnostics(db: Database) -> list[Contender]:
    triggers = chunk_triggers(db)
    if not triggers:
        return []
    print(f"diagnostics: django_rag_chunk has triggers {', '.join(triggers)}")
    return [Diagnostic(), DiagnosticPending()]


def chunk_triggers(db: Database) -> list[str]:
    with db.connect() as conn:
        rows = conn.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'django_rag_chunk'::regclass AND NOT tgisinternal"
        ).fetchall()
    return [row[0] for row in rows]


class DjangoBulkCreate(Contender):
    def __init__(self) -> None:
        super().__init__("Django bulk_create (Chunk model)", True, ("django_rag_chunk",))

    def prepare(self, batches: list[Batch]) -> Any:
        import django_rag as rag
        from django_rag.embedders import get_embedder
        from django_rag.models import Chunk, Document

        coll = rag.collection(COLLECTION)
        space = get_embedder().space
        docs = [doc for batch in batches for doc in batch]
        created = Document.objects.bulk_create(
            Document(collection=coll, source_id=d.source_id, title=d.source_id, metadata={"doc": d.source_id})
            for d in docs
        )
        ids = {d.source_id: d.pk for d in created}
        return [
            [
                Chunk(
                    document_id=ids[row.doc],
                    collection_id=coll.pk,
                    space=space,
                    index=row.index,
                    content=row.text,
                    content_hash=row.hash,
                    token_count=len(row.text) // 4,
                    char_end=len(row.text),
                    metadata=row.metadata,
                    embedding=row.vector,
                )
                for row in flat(batch)
            ]
            for batch in batches
        ]

    def load(self, prepared: Any) -> None:
        from django_rag.models import Chunk

        for objs in prepared:
            Chunk.objects.bulk_create(objs, batch_size=1000)

    setup = DjangoRagStore.setup
    reset = DjangoRagStore.reset
    teardown = DjangoRagStore.teardown


class RawCopy(Contender):
    is_ceiling = True

    def __init__(self) -> None:
        super().__init__("psycopg binary COPY (ceiling)", False, ("bench_copy",))

    def setup(self, db: Database, dims: int) -> None:
        self.conn = db.connect()
        register_vector(self.conn)
        self.conn.execute(
            f"CREATE TABLE bench_copy (id bigserial PRIMARY KEY, content text NOT NULL, metadata jsonb, "
            f"embedding vector({dims}) NOT NULL)"
        )
        self.conn.commit()

    def prepare(self, batches: list[Batch]) -> Any:
        return [[(r.text, r.metadata, r.vector) for r in flat(batch)] for batch in batches]

    def load(self, prepared: Any) -> None:
        table = self.tables[0]
        statement = f"COPY {table} (content, metadata, embedding) FROM STDIN (FORMAT BINARY)"
        with self.conn.cursor() as cur:
            for rows in prepared:
                with cur.copy(statement) as copy:
                    copy.set_types(["text", "jsonb", "vector"])
                    for text, metadata, vector in rows:
                        copy.write_row((text, Jsonb(metadata), vector))
                self.conn.commit()

    def teardown(self, db: Database) -> None:
        self.conn.close()
        super().teardown(db)


class RawCopyTsvector(RawCopy):
    """The COPY of ``RawCopy`` into a table that also computes django-rag's tsvector and GIN index."""

    is_ceiling = False

    def __init__(self) -> None:
        Contender.__init__(self, "psycopg binary COPY + generated tsvector + GIN", False, ("bench_copy_fts",))

    def setup(self, db: Database, dims: int) -> None:
        self.conn = db.connect()
        register_vector(self.conn)
        self.conn.execute(
            f"CREATE TABLE bench_copy_fts (id bigserial PRIMARY KEY, content text NOT NULL, metadata jsonb, "
            f"embedding vector({dims}) NOT NULL, search_vector tsvector GENERATED ALWAYS AS "
            "(to_tsvector('english'::regconfig, content)) STORED)"
        )
        self.conn.execute("CREATE INDEX bench_copy_fts_search ON bench_copy_fts USING gin (search_vector)")
        self.conn.commit()


def postings_bytes(db: Database) -> int:
    """Bytes of every table named django_rag_post* / django_rag_term* (heap, indexes, TOAST)."""
    with db.connect() as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(quote_ident(tablename))), 0) FROM pg_tables "
            "WHERE schemaname = current_schema() AND (tablename LIKE 'django\\_rag\\_post%' "
            "OR tablename LIKE 'django\\_rag\\_term%')"
        ).fetchone()
    return int(row[0]) if row else 0


def no_embeddings() -> Any:
    """LangChain wants an embedding model even for ``add_embeddings``; this one must never run."""
    from langchain_core.embeddings import Embeddings

    class NoEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise AssertionError("the benchmark passes precomputed vectors")

        def embed_query(self, text: str) -> list[float]:
            raise AssertionError("the benchmark passes precomputed vectors")

    return NoEmbeddings()


# -- running ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    seconds: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    rows: int = 0
    size: int = 0
    postings: int = 0  # bytes of the BM25 postings and term statistics after the load
    indexes: list[str] = field(default_factory=list)

    def rate(self, n: int) -> float:
        return n / median(self.seconds)


def round_ratio(numerator: Outcome, denominator: Outcome) -> float:
    """Median over rounds of numerator's chunks/s over denominator's, each pair timed in one round.

    Two contenders of one round ran minutes apart at most, under the same drift of the machine's
    load; the median of those per-round ratios is steadier than a ratio of two medians.
    """
    return median([d / n for n, d in zip(numerator.seconds, denominator.seconds, strict=True)])


def table_facts(db: Database, contender: Contender) -> tuple[int, list[str]]:
    with db.connect() as conn:
        size = sum(
            conn.execute("SELECT pg_total_relation_size(%s)", [t]).fetchone()[0]  # type: ignore[index]
            for t in contender.tables
        )
        indexes = [
            f"{table}: {definition.split(' USING ', 1)[1]}"
            for table, definition in conn.execute(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indrelid WHERE c.relname = ANY(%s) ORDER BY 1, 2",
                [list(contender.tables)],
            )
        ]
    return size, indexes


def verify(db: Database, contender: Contender, rows: list[Row]) -> int:
    """Row count, and the first and last rows' vectors read back equal to what went in."""
    table, text = contender.tables[0], contender.text_column
    with db.connect() as conn:
        register_vector(conn)
        count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
        for row in (rows[0], rows[-1]):
            got = conn.execute(f"SELECT embedding FROM {table} WHERE {text} = %s", [row.text]).fetchone()
            if got is None or not np.allclose(got[0].to_numpy(), row.vector, atol=1e-6):
                raise SystemExit(f"{contender.name}: the vector of {row.doc}#{row.index} did not round-trip")
    return count


def run_one(db: Database, contender: Contender, batches: list[Batch], warm: list[Batch], dims: int) -> float:
    contender.setup(db, dims)
    contender.load(contender.prepare(warm))
    contender.reset(db)
    prepared = contender.prepare(batches)
    checkpoint(db)
    gc.collect()
    with Timer() as timer:
        contender.load(prepared)
    return timer.seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=1, help="timed loads per contender (median shown)")
    parser.add_argument("--doc-chunks", type=int, default=20, help="chunks per document")
    parser.add_argument("--batch-docs", type=int, default=64, help="documents per call (django-rag default)")
    parser.add_argument(
        "--only", default="", help="comma-separated contender numbers to run (1-9, 10+ diag.)"
    )
    parser.add_argument("--diagnose", action="store_true", help="also run the store with costs taken away")
    args = parser.parse_args(argv)

    docs = make_docs(args.chunks, args.dims, args.doc_chunks)
    warm = batched(make_docs(args.doc_chunks * 2, args.dims, args.doc_chunks, prefix="warm", seed=1), 2)
    batches = batched(docs, args.batch_docs)
    rows = [row for doc in docs for row in doc.rows]
    n = len(rows)
    LookupEmbedder.dimensions = args.dims
    rag_settings = {
        "EMBEDDERS": {"default": {"BACKEND": "common.LookupEmbedder", "DIMENSIONS": args.dims}},
        # Chunks of up to 1,024 tokens: each ~1,000-character page is one chunk.
        "COLLECTIONS": {
            COLLECTION: {"TEXT_CONFIG": "english", "CHUNK_SIZE": 1024, "CHUNK_OVERLAP": 32},
            VECTOR_ONLY: {"TEXT_SEARCH": False, "CHUNK_SIZE": 1024, "CHUNK_OVERLAP": 32},
        },
    }
    contenders: list[Contender] = [
        RawCopy(),
        DjangoRagStore(),
        DjangoRagPipeline(args.batch_docs),
        DjangoBulkCreate(),
        LangChainLegacy(),
        LlamaIndex(),
        LangChainV2(),
        DjangoRagStore("django-rag store, TEXT_SEARCH off (vector only)", VECTOR_ONLY),
        RawCopyTsvector(),
    ]
    outcomes: dict[str, Outcome] = {}

    print(
        f"ingest throughput: {n} chunks x {args.dims} dims, {len(docs)} documents of {args.doc_chunks} "
        f"chunks, {len(batches)} calls of {args.batch_docs} documents; repeat {args.repeat}"
    )
    with bench_database() as db:
        print(f"server: {db.server}; scratch database {db.name}")
        setup_django(db, rag_settings)
        if args.diagnose:
            contenders += diagnostics(db)
        if args.only:
            contenders = [contenders[int(i) - 1] for i in args.only.split(",")]
        outcomes.update((c.name, Outcome()) for c in contenders)
        for round_ in range(args.repeat):
            # A different contender goes first each round: on a machine whose load drifts, a fixed
            # order charges the drift to the same contenders every round.
            shift = round_ % len(contenders)
            for contender in contenders[shift:] + contenders[:shift]:
                seconds = run_one(db, contender, batches, warm, args.dims)
                outcome = outcomes[contender.name]
                outcome.seconds.append(seconds)
                outcome.loads.append(os.getloadavg()[0])
                outcome.rows = verify(db, contender, rows)
                if outcome.rows != n:
                    raise SystemExit(f"{contender.name} stored {outcome.rows} rows, expected {n}")
                if isinstance(contender, DjangoRagPipeline) and contender.result.embedded != n:
                    raise SystemExit(f"pipeline embedded {contender.result.embedded} texts, expected {n}")
                outcome.size, outcome.indexes = table_facts(db, contender)
                outcome.postings = postings_bytes(db) if isinstance(contender, DjangoRagStore) else 0
                contender.teardown(db)
                print(
                    f"  round {round_ + 1}: {contender.name:<50} {seconds:8.2f} s "
                    f"{n / seconds:9,.0f} chunks/s",
                    flush=True,
                )
    report(contenders, outcomes, n)
    print(machine_line())


def report(contenders: list[Contender], outcomes: dict[str, Outcome], n: int) -> None:
    def rate(c: Contender) -> float:
        return outcomes[c.name].rate(n)

    def ratio(a: Contender, b: Contender) -> float:
        return round_ratio(outcomes[a.name], outcomes[b.name])

    store = next((c for c in contenders if type(c) is DjangoRagStore), None)
    width = max(len(c.name) for c in contenders)
    print()
    print(
        f"{'contender':<{width}} {'seconds':>8} {'chunks/s':>9} {'store/this':>10} {'MB on disk':>10} "
        f"{'load avg':>8}"
    )
    for c in contenders:
        o = outcomes[c.name]
        cell = f"{ratio(store, c):9.2f}x" if store else f"{'-':>10}"
        print(
            f"{c.name:<{width}} {median(o.seconds):8.2f} {rate(c):9,.0f} {cell} {o.size / 2**20:10.1f} "
            f"{median(o.loads):8.2f}"
        )
    print("(store/this: median over rounds of django-rag store-level chunks/s over the contender's in")
    print(" the same round; load avg: the 1-minute load average when the contender's timed load ended;")
    print(" the contenders' order rotates every round)")
    print()
    peers = [c for c in contenders if c.is_peer]
    ceiling = next((c for c in contenders if c.is_ceiling), None)
    fastest = max(peers, key=rate) if peers else None
    if fastest:
        print(f"fastest peer: {fastest.name}, {rate(fastest):,.0f} chunks/s")
    for c in contenders:
        if not isinstance(c, DjangoRagStore):
            continue
        line = f"{c.name}: {rate(c):,.0f} chunks/s"
        if fastest:
            line += f" = {ratio(c, fastest):.2f}x the fastest peer"
            if not isinstance(c, Diagnostic):
                verdict = "meets" if ratio(c, fastest) >= TARGET else "MISSES"
                line += f" ({verdict} the {TARGET:g}x target)"
        if ceiling:
            line += f", {ratio(c, ceiling):.0%} of the COPY ceiling ({ceiling.name})"
        print(line)
    fts = next((c for c in contenders if type(c) is DjangoRagStore and c.collection == COLLECTION), None)
    fts_copy = next((c for c in contenders if isinstance(c, RawCopyTsvector)), None)
    if fts:
        print()
        print(f"issue 14, full-text ingest: {fts.name} {rate(fts):,.0f} chunks/s")
        if fastest:
            peer_ratio = ratio(fts, fastest)
            verdict = "met" if peer_ratio >= TARGET_FTS_PEER else "MISSED"
            print(
                f"  / fastest text-less peer ({fastest.name}): {peer_ratio:.2f}x "
                f"(target >= {TARGET_FTS_PEER:g}x: {verdict})"
            )
        if fts_copy:
            copy_ratio = ratio(fts, fts_copy)
            verdict = "met" if copy_ratio >= TARGET_FTS_COPY else "MISSED"
            print(f"  / {fts_copy.name}: {copy_ratio:.2f}x (target >= {TARGET_FTS_COPY:g}x: {verdict})")
        postings = outcomes[fts.name].postings
        print(
            f"  BM25 postings + term statistics written: {postings / 2**20:,.1f} MB = "
            f"{postings / n / 2**20:.4f} MB ({postings / n:,.0f} bytes) per chunk"
        )
    print()
    print("indexes (no ANN index anywhere):")
    groups: dict[tuple[str, ...], list[str]] = {}
    for c in contenders:
        groups.setdefault(tuple(outcomes[c.name].indexes), []).append(c.name)
    for indexes, names in groups.items():
        print(f"  {'; '.join(names)}:")
        for line in indexes:
            print(f"    {line}")


if __name__ == "__main__":
    main()
