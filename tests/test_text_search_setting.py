"""Per-collection TEXT_SEARCH and TEXT_CONFIG: what is written, and what a change rebuilds."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

import django_rag as rag
from django_rag.models import Chunk, Posting
from tests.text_index import assert_text_index_matches_chunks

pytestmark = pytest.mark.django_db

HASHING = {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}}
DOCS = [
    rag.RagDocument("ops/backup", "Back up the database every night with pg_dump."),
    rag.RagDocument("ops/restore", "Restore the dump with pg_restore into an empty database."),
]


def rag_with(**options: Any) -> dict[str, Any]:
    return {"EMBEDDERS": HASHING, "COLLECTIONS": {"kb": options}}


def text_stats(collection_id: int) -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(chunks), 0), coalesce(sum(length), 0) FROM django_rag_textstats "
            "WHERE collection_id = %s",
            [collection_id],
        )
        chunks, length = cursor.fetchone()
    return int(chunks), int(length)


def test_a_vector_only_collection_writes_no_text_index_and_still_searches_by_vector() -> None:
    with override_settings(RAG=rag_with(TEXT_SEARCH=False)):
        kb = rag.collection("kb")
        assert kb.text_search is False
        assert kb.index(DOCS).added == 2
        assert Chunk.objects.filter(collection=kb, search_vector__isnull=True).count() == 2
        assert not Posting.objects.filter(collection=kb).exists()
        assert text_stats(kb.pk) == (0, 0)
        hits = kb.search("back up the database every night with pg_dump", k=1)
        assert hits[0].source_id == "ops/backup"


@pytest.mark.parametrize("mode", ["text", "hybrid"])
def test_text_and_hybrid_search_on_a_vector_only_collection_name_the_setting(mode: str) -> None:
    with override_settings(RAG=rag_with(TEXT_SEARCH=False)):
        kb = rag.collection("kb")
        kb.index(DOCS)
        with pytest.raises(rag.QueryError, match=r"collection 'kb' has TEXT_SEARCH off.*mode='vector'"):
            kb.search("backup", mode=mode)
        with pytest.raises(rag.QueryError, match="TEXT_SEARCH off"):
            list(kb.chunks().text_search("backup"))


def test_turning_text_search_off_and_on_rebuilds_the_index_of_stored_chunks() -> None:
    with override_settings(RAG=rag_with()):
        kb = rag.collection("kb")
        kb.index(DOCS)
        postings = Posting.objects.filter(collection=kb).count()
        stats = text_stats(kb.pk)
        assert postings > 0 and stats[0] == 2
    with override_settings(RAG=rag_with(TEXT_SEARCH=False)):
        kb = rag.collection("kb")
        assert not Chunk.objects.filter(collection=kb, search_vector__isnull=False).exists()
        assert not Posting.objects.filter(collection=kb).exists()
        assert text_stats(kb.pk) == (0, 0)
    with override_settings(RAG=rag_with(TEXT_SEARCH=True)):
        kb = rag.collection("kb")
        assert Posting.objects.filter(collection=kb).count() == postings
        assert text_stats(kb.pk) == stats
        assert kb.search("pg_restore", mode="text", k=1)[0].source_id == "ops/restore"


def test_a_new_text_config_rebuilds_lexemes_with_it() -> None:
    with override_settings(RAG=rag_with(TEXT_CONFIG="english")):
        kb = rag.collection("kb")
        kb.index(DOCS)
        # 'english' drops stop words and stems: no posting for "the", "every" is stemmed to "everi".
        assert not Posting.objects.filter(collection=kb, term="the").exists()
        assert Posting.objects.filter(collection=kb, term="everi").exists()
    with override_settings(RAG=rag_with(TEXT_CONFIG="simple")):
        kb = rag.collection("kb")
        assert kb.text_config == "simple"
        assert Posting.objects.filter(collection=kb, term="the").count() == 2
        assert Posting.objects.filter(collection=kb, term="every").exists()
        assert not Posting.objects.filter(collection=kb, term="everi").exists()
        # New chunks are written with the new config too.
        kb.index([rag.RagDocument("ops/more", "the other night")])
        assert Posting.objects.filter(collection=kb, term="the").count() == 3


def test_an_unchanged_setting_rewrites_nothing() -> None:
    with override_settings(RAG=rag_with()):
        kb = rag.collection("kb")
        kb.index(DOCS)
        before = list(Chunk.objects.filter(collection=kb).values_list("pk", "search_vector"))
        updates = "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'django_rag_chunk'"
        with connection.cursor() as cursor:
            cursor.execute(updates)
            before_updates = cursor.fetchone()[0]
            rag.collection("kb")
            cursor.execute(updates)
            assert cursor.fetchone()[0] == before_updates
        assert list(Chunk.objects.filter(collection=kb).values_list("pk", "search_vector")) == before


def test_postings_and_statistics_follow_every_kind_of_chunk_write() -> None:
    with override_settings(RAG=rag_with()):
        kb = rag.collection("kb")
        long_text = "Nightly backups. " * 40 + "Restores are tested weekly."
        kb.index([*DOCS, rag.RagDocument("ops/long", long_text)])
        assert_text_index_matches_chunks()
        # An edit: one chunk replaced, the others kept.
        kb.index([rag.RagDocument("ops/backup", "Back up the database every hour with pg_dump.")])
        assert_text_index_matches_chunks()
        kb.remove(source_id="ops/restore")
        assert_text_index_matches_chunks()
        # ORM writes: an update of the text vector, a cascade from the document.
        chunk = Chunk.objects.filter(collection=kb).first()
        assert chunk is not None
        Chunk.objects.filter(pk=chunk.pk).update(content="Point in time recovery", search_vector=None)
        assert_text_index_matches_chunks()
        kb.documents.filter(source_id="ops/long").delete()
        assert_text_index_matches_chunks()
    with override_settings(RAG=rag_with(TEXT_CONFIG="simple")):
        rag.collection("kb")
        assert_text_index_matches_chunks()
        assert Posting.objects.filter(collection=kb).exists()


def test_rag_reindex_applies_a_changed_text_config_to_stored_chunks() -> None:
    from django.core.management import call_command

    with override_settings(RAG=rag_with(TEXT_CONFIG="english")):
        kb = rag.collection("kb")
        kb.index(DOCS)
    with override_settings(RAG=rag_with(TEXT_CONFIG="simple")):
        call_command("rag_reindex", "kb", verbosity=0)
        assert Posting.objects.filter(collection=kb, term="the").count() == 2


def _same_shard_pair() -> tuple[psycopg.Connection, psycopg.Connection]:
    """Two connections to the test database whose backends share a statistics shard (pid % 8)."""
    settings = connection.settings_dict
    conninfo = psycopg.conninfo.make_conninfo(
        dbname=settings["NAME"],
        user=settings["USER"],
        password=settings["PASSWORD"],
        host=settings["HOST"],
        port=settings["PORT"] or None,
    )
    by_shard: dict[int, psycopg.Connection] = {}
    for _ in range(9):  # nine backends over eight shards: two must share one
        conn = psycopg.connect(conninfo)
        shard = conn.info.backend_pid % 8
        if shard in by_shard:
            pair = by_shard.pop(shard), conn
            for other in by_shard.values():
                other.close()
            return pair
        by_shard[shard] = conn
    raise AssertionError("unreachable")


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_sharing_a_statistics_shard_end_consistent() -> None:
    words = [f"word{i}" for i in range(120)]
    with override_settings(RAG=rag_with(TEXT_CONFIG="simple", CHUNK_SIZE=16, CHUNK_OVERLAP=0)):
        kb = rag.collection("kb")
        kb.index(
            [
                rag.RagDocument(f"d{n}", "\n\n".join(" ".join(words[i : i + 12]) for i in range(0, 120, 12)))
                for n in range(2)
            ]
        )
        chunk_ids = [
            list(Chunk.objects.filter(document__source_id=f"d{n}").values_list("pk", flat=True))
            for n in range(2)
        ]
        first, second = _same_shard_pair()
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def writer(conn: psycopg.Connection, ids: list[int], order: list[str]) -> None:
            try:
                for round_ in range(8):
                    barrier.wait(10)
                    with conn.transaction():
                        # Two statements, each rewriting the lexemes of one chunk: between them the
                        # transaction holds statistic rows of the first set and wants the second's.
                        for chunk_id, part in zip(ids[:2], (order[:60], order[60:]), strict=True):
                            conn.execute(
                                "UPDATE django_rag_chunk SET search_vector = to_tsvector('simple', %s) "
                                "WHERE id = %s",
                                [" ".join(part) + f" round{round_}", chunk_id],
                            )
            except BaseException as exc:
                errors.append(exc)
                barrier.abort()

        threads = [
            threading.Thread(target=writer, args=(first, chunk_ids[0], words)),
            threading.Thread(target=writer, args=(second, chunk_ids[1], words[::-1])),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        first.close()
        second.close()
        assert errors == []
        assert_text_index_matches_chunks()
