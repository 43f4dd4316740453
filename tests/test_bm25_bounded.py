"""The bounded BM25 leg (``RAG["BM25"]["MODE"] = "bounded"``, the default) against the exhaustive one.

The bounded leg reads the rarest terms' postings up to a budget and scores a pool of chunks
exactly from their text vectors. These tests hold it to: the same scores, bit for bit, for every
chunk it returns; the exhaustive ranking whenever every term fits the budget; a ranking close
to it when the budget forces common terms out; far fewer postings read; the exhaustive answer
when filters leave too few hits; and no error on degenerate queries and collections.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

import django_rag as rag
from django_rag.bm25 import bm25_options
from django_rag.checks import check_settings
from django_rag.exceptions import ConfigurationError
from django_rag.stores.base import QueryScope, SearchRequest
from django_rag.stores.pgsearch import build_sql

pytestmark = pytest.mark.django_db

HASHING = {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 32}}
VOCABULARY = [f"t{i}" for i in range(2000)]
ZIPF = [1 / (i + 1) for i in range(len(VOCABULARY))]


def rag_settings(mode: str = "bounded", **bm25: Any) -> dict[str, Any]:
    options = {"TEXT_CONFIG": "simple", "CHUNK_SIZE": 512, "CHUNK_OVERLAP": 0}
    # MIN_SCORE None: these tests compare the legs' rankings, not the relevance cutoff.
    bm25_settings = {"MODE": mode, **bm25}
    return {"EMBEDDERS": HASHING, "COLLECTIONS": {"z": options}, "BM25": bm25_settings, "MIN_SCORE": None}


def zipf_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(VOCABULARY, weights=ZIPF, k=words))


@pytest.fixture
def corpus() -> list[str]:
    """1,500 one-chunk documents of Zipf-distributed words (a few words in most chunks, most in few)."""
    rng = random.Random(7)
    texts = [zipf_text(rng, rng.randint(5, 60)) for _ in range(1500)]
    with override_settings(RAG=rag_settings()):
        rag.collection("z").index([rag.RagDocument(f"d{i}", text) for i, text in enumerate(texts)])
    return texts


def queries(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [zipf_text(rng, rng.randint(2, 8)) for _ in range(count)]


def ranked(
    query: str, mode: str, k: int = 10, scope: dict[str, Any] | None = None, **options: Any
) -> list[tuple[str, float]]:
    with override_settings(RAG=rag_settings(mode, **options)):
        hits = rag.collection("z").search(query, k=k, mode="text", snippets=False, **(scope or {}))
    return [(hit.document.source_id, hit.score) for hit in hits]


def test_every_term_within_the_budget_ranks_exactly_as_the_exhaustive_leg(corpus: list[str]) -> None:
    for query in queries(40):
        assert ranked(query, "bounded") == ranked(query, "exact"), query


def test_a_tight_budget_keeps_scores_exact_and_the_ranking_close(corpus: list[str]) -> None:
    """With a budget of 150 postings the common terms (in up to ~40% of the chunks) are never read:
    every returned score is still the chunk's exhaustive BM25, and the top 10 stay mostly the same."""
    overlaps = []
    for query in queries(40):
        exact = ranked(query, "exact", k=1000)
        everything = dict(exact)
        bounded = ranked(query, "bounded", BUDGET=150, POOL=30)
        for source_id, score in bounded:
            assert score == everything[source_id], (query, source_id)
        top = {source_id for source_id, _ in exact[:10]}
        overlaps.append(len(top & {source_id for source_id, _ in bounded}) / max(len(top), 1))
    assert sum(overlaps) / len(overlaps) >= 0.8, overlaps


def postings_read(query: str, mode: str, **options: Any) -> int:
    """Array elements the statement unnested from posting blocks (EXPLAIN ANALYZE)."""
    with override_settings(RAG=rag_settings(mode, **options)):
        kb = rag.collection("z")
        request = SearchRequest(mode="text", space=kb.space, k=10, text=query, scope=QueryScope())
        sql, params = build_sql(kb, request)
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    def walk(node: dict[str, Any]) -> int:
        # "e" is the alias of unnest(p.chunks, p.tfs, p.dls) wherever the statement reads blocks.
        own = 0
        if node.get("Node Type") == "Function Scan" and node.get("Alias") == "e":
            # Rows per loop, which PostgreSQL 18 prints with two decimals.
            own = node["Actual Rows"] * node["Actual Loops"]
        return own + sum(walk(child) for child in node.get("Plans", []))

    return round(walk(plan[0]["Plan"]))


def test_the_bounded_leg_reads_a_fraction_of_the_postings_of_common_terms(corpus: list[str]) -> None:
    query = "t0 t1 t2 t3 t200"  # four of the most common terms and a rarer one (in ~30 chunks)
    exhaustive = postings_read(query, "exact")
    # The rare term only: no common one fits the budget beside it.
    bounded = postings_read(query, "bounded", BUDGET=150, POOL=10)
    assert exhaustive > 1500  # t0 alone is in most chunks
    assert 0 < bounded <= 150 < exhaustive, (bounded, exhaustive)
    # The rarest term is read whatever its length: a query of common terms still finds chunks.
    assert postings_read("t0 t1", "bounded", BUDGET=150, POOL=10) > 150


def test_rare_terms_in_fewer_chunks_than_the_pool_bring_in_the_next_term_not_the_exhaustive_leg(
    corpus: list[str],
) -> None:
    query = "t1999 t1998 t2 t0"  # two terms in a few chunks at most, then two common ones
    exhaustive = postings_read(query, "exact")
    bounded = postings_read(query, "bounded", BUDGET=20, POOL=20)
    # t2 is read (the rare terms name fewer than 20 chunks), t0 is not, nor does the statement
    # fall back to the exhaustive leg: ten hits from the pool.
    assert 20 < bounded < exhaustive / 2, (bounded, exhaustive)
    assert len(ranked(query, "bounded", BUDGET=20, POOL=20)) == 10


def test_filters_that_leave_too_few_hits_fall_back_to_the_exhaustive_leg(corpus: list[str]) -> None:
    with override_settings(RAG=rag_settings()):
        kb = rag.collection("z")
        # A small tenant whose chunks hold only common words: the pool (best on the rare terms)
        # never reaches them.
        kb.index([rag.RagDocument(f"r{i}", "t0 t1 t2 t3 t4") for i in range(12)], tenant="rare")
    query = "t0 t1 t1800 t1900"
    exact = ranked(query, "exact", scope={"tenant": "rare"})
    assert len(exact) == 10
    assert ranked(query, "bounded", BUDGET=20, POOL=20, scope={"tenant": "rare"}) == exact


@pytest.mark.parametrize("mode", ["bounded", "exact"])
@pytest.mark.parametrize("search_mode", ["text", "hybrid"])
def test_degenerate_queries_return_correct_results_without_error(
    corpus: list[str], mode: str, search_mode: str
) -> None:
    rng = random.Random(3)
    long_query = " ".join(rng.choice([*VOCABULARY, "absentword"]) for _ in range(200))
    with override_settings(RAG=rag_settings(mode)):
        kb = rag.collection("z")
        assert len(kb.search("t5", k=10, mode=search_mode)) == 10
        assert len(kb.search(long_query, k=10, mode=search_mode)) == 10
        absent = kb.search("nosuchterm anothermissingterm", k=10, mode=search_mode)
        stop_words = kb.search("the and of", k=10, mode=search_mode)
    if search_mode == "text":
        assert absent == [] and stop_words == []
    else:  # the vector leg still answers
        assert len(absent) == 10 and all(hit.text_rank is None for hit in absent)
    assert ranked(long_query, mode) == ranked(long_query, "exact")


@pytest.mark.parametrize("mode", ["bounded", "exact"])
def test_an_empty_and_a_one_chunk_collection_answer_without_error(mode: str) -> None:
    with override_settings(RAG=rag_settings(mode)):
        kb = rag.collection("z")
        assert kb.search("t1 t2", k=10, mode="text") == []
        assert kb.search("t1 t2", k=10, mode="hybrid") == []
        kb.index([rag.RagDocument("only", "t1 t7 t7")])
        assert [h.document.source_id for h in kb.search("t7", k=10, mode="text")] == ["only"]
        assert [h.document.source_id for h in kb.search("t7 t999", k=10, mode="hybrid")] == ["only"]
        assert kb.search("t999", k=10, mode="text") == []


@pytest.mark.parametrize(
    ("bm25", "message"),
    [
        ({"MODE": "fast"}, "RAG['BM25']['MODE'] must be one of ['bounded', 'exact']"),
        ({"BUDGET": 0}, "RAG['BM25']['BUDGET'] must be a positive integer"),
        ({"POOL": "200"}, "RAG['BM25']['POOL'] must be a positive integer"),
        ({"BUDGETS": 10}, "RAG['BM25'] has unknown keys ['BUDGETS']"),
    ],
)
def test_bad_bm25_settings_name_the_setting(bm25: dict[str, Any], message: str) -> None:
    with (
        override_settings(RAG={"BM25": bm25}),
        pytest.raises(ConfigurationError, match=message.replace("[", r"\[")),
    ):
        bm25_options()


def test_bm25_settings_default_to_the_bounded_leg() -> None:
    options = bm25_options()
    assert (options.mode, options.budget, options.pool) == ("bounded", 20_000, 200)


def test_a_bad_bm25_setting_is_a_system_check_error() -> None:
    with override_settings(RAG={"BM25": {"MODE": "fast"}}):
        errors = [e for e in check_settings() if e.id == "django_rag.E016"]
    assert len(errors) == 1 and "MODE" in errors[0].msg
