"""BM25 posting blocks stay exactly what the chunks' text vectors say, whatever writes the chunks.

Random inserts, edits and deletes, one writer and several at once: after each round every
posting, every document frequency and the collection totals equal a from-scratch rebuild
(``tests.text_index``), and searches score as BM25 computed from the chunks.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from django.contrib.postgres.search import SearchVector
from django.db import connections
from django.db.models import Value
from django.test import override_settings

import django_rag as rag
from django_rag.models import POSTING_BUCKET_BITS, Chunk, PostingBlock
from tests.text_index import assert_text_index_matches_chunks

HASHING = {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 32}}
WORDS = [f"w{i}" for i in range(300)]


def rag_settings(**bm25: Any) -> dict[str, Any]:
    options = {"TEXT_CONFIG": "simple", "CHUNK_SIZE": 64, "CHUNK_OVERLAP": 0}
    return {"EMBEDDERS": HASHING, "COLLECTIONS": {"a": options, "b": options}, "BM25": bm25}


def random_text(rng: random.Random) -> str:
    # Zipf-like: a few words in most chunks, most words in few.
    words = rng.choices(WORDS, weights=[1 / (i + 1) for i in range(len(WORDS))], k=rng.randint(1, 40))
    return " ".join(words)


def random_round(rng: random.Random, kb: rag.Collection, live: set[str], prefix: str) -> None:
    """Add, edit and delete a few documents of ``kb`` (ids under ``prefix``)."""
    added = [f"{prefix}{rng.randrange(10_000)}" for _ in range(rng.randint(1, 6))]
    kb.index([rag.RagDocument(source_id, random_text(rng)) for source_id in added])
    live.update(added)
    for source_id in rng.sample(sorted(live), min(len(live), rng.randint(0, 3))):
        if rng.random() < 0.5:
            kb.index([rag.RagDocument(source_id, random_text(rng))])  # an edit
        else:
            kb.remove(source_id=source_id)
            live.discard(source_id)


@pytest.mark.django_db
def test_random_inserts_edits_and_deletes_keep_blocks_equal_to_a_rebuild() -> None:
    rng = random.Random(14)
    with override_settings(RAG=rag_settings()):
        collections = [rag.collection("a"), rag.collection("b")]
        live: dict[str, set[str]] = {"a": set(), "b": set()}
        for _ in range(12):
            kb = rng.choice(collections)
            random_round(rng, kb, live[kb.name], "d/")
            assert_text_index_matches_chunks()
        # In-place rewrites of the text vector (what a TEXT_CONFIG change does), then of one chunk.
        Chunk.objects.filter(collection=collections[0]).update(search_vector=None)
        assert_text_index_matches_chunks()
        collections[0].refresh_text_index()
        assert_text_index_matches_chunks()
        chunk = Chunk.objects.filter(collection=collections[1]).first()
        assert chunk is not None
        Chunk.objects.filter(pk=chunk.pk).update(content="w1 w1 w299", search_vector=rag_vector("w1 w1 w299"))
        assert_text_index_matches_chunks()
        # Everything removed: no block is left behind, and the statistics sum to zero.
        for kb in collections:
            kb.remove(prefix="d/")
        assert_text_index_matches_chunks()
        assert not PostingBlock.objects.exists()


def rag_vector(text: str) -> SearchVector:
    return SearchVector(Value(text), config="simple")


@pytest.mark.django_db
def test_a_block_holds_one_term_of_one_bucket_of_chunk_ids() -> None:
    with override_settings(RAG=rag_settings()):
        kb = rag.collection("a")
        kb.index([rag.RagDocument(f"d{i}", f"w1 w2 w{3 + i % 2}") for i in range(20)])
        chunk_ids = list(Chunk.objects.filter(collection=kb).values_list("pk", flat=True))
        buckets = {pk >> POSTING_BUCKET_BITS for pk in chunk_ids}
        rows = PostingBlock.objects.filter(collection=kb, term="w1")
        # 20 chunks written in one statement: one row per bucket they span, not 20 rows.
        assert rows.count() == len(buckets)
        assert sorted(pk for row in rows for pk in row.chunks) == sorted(chunk_ids)
        assert sum(len(row.chunks) for row in PostingBlock.objects.filter(collection=kb, term="w3")) == 10


@pytest.mark.django_db
def test_later_batches_append_to_a_block_with_room_and_common_terms_get_rows_of_their_own() -> None:
    with override_settings(RAG=rag_settings()):
        kb = rag.collection("a")
        unmerged = 0  # rows one block per statement and bucket would take
        for batch in range(3):  # three statements of 300 chunks
            kb.index(
                [
                    rag.RagDocument(f"b{batch}-{i}", f"w7 w{100 + batch} " + "w1 " * (i % 3))
                    for i in range(300)
                ]
            )
            ids = Chunk.objects.filter(collection=kb, document__source_id__startswith=f"b{batch}-")
            unmerged += len({pk >> POSTING_BUCKET_BITS for pk in ids.values_list("pk", flat=True)})
        buckets = {pk >> POSTING_BUCKET_BITS for pk in Chunk.objects.values_list("pk", flat=True)}
        # w7 is in every chunk: appended to while its block holds under 512 postings.
        common = PostingBlock.objects.filter(collection=kb, term="w7")
        assert len(buckets) <= common.count() < unmerged
        assert sum(row.n for row in common) == 900
        assert_text_index_matches_chunks()


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_into_one_collection_keep_blocks_equal_to_a_rebuild() -> None:
    """Four threads (four database sessions, so several statistics shards and shared buckets)
    add, edit and delete documents of one collection at once."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer(seed: int) -> None:
        try:
            rng = random.Random(seed)
            kb = rag.collection("a")
            live: set[str] = set()
            for _ in range(6):
                barrier.wait(30)
                random_round(rng, kb, live, f"t{seed}/")
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    with override_settings(RAG=rag_settings()):
        rag.collection("a")
        threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        assert Chunk.objects.filter(collection__name="a").exists()
        assert_text_index_matches_chunks()


@pytest.mark.django_db
def test_the_trigger_is_planned_on_every_call_and_never_scans_the_block_table() -> None:
    """A session caches the trigger's plans. After five calls it may switch to a generic plan,
    which took 22 s instead of 1 s per 1,280 chunks, and a plan that scans the block table grows
    with the collection: the function plans every call and turns sequential scans off."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT proconfig FROM pg_proc WHERE proname = 'django_rag_chunk_text_sync'")
        settings = cursor.fetchone()[0]
    assert "plan_cache_mode=force_custom_plan" in settings
    assert "enable_seqscan=off" in settings
