"""Text (BM25), hybrid (RRF) and filtered vector search through kb.search()."""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest
from django.db import connection, transaction
from django.utils.safestring import SafeString

import django_rag as rag
from django_rag.sql import K1, B
from tests.plans import build_space_index, explain

pytestmark = pytest.mark.django_db

CORPUS = [
    rag.RagDocument("a", "The cat sat on the mat. The cat is orange."),
    rag.RagDocument("b", "A dog chased the cat across the garden."),
    rag.RagDocument("c", "Quantum chromodynamics describes the strong interaction."),
    rag.RagDocument("d", "Gardening tips: water the garden early in the morning."),
    rag.RagDocument("e", "The orange cat and the grey cat share one mat."),
]


@pytest.fixture
def kb() -> rag.Collection:
    collection = rag.collection("docs")
    collection.index(CORPUS)
    return collection


def lexemes(text: str) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme, coalesce(array_length(positions, 1), 1) FROM unnest(to_tsvector('english', %s))",
            [text],
        )
        return dict(cursor.fetchall())


def expected_bm25(query: str) -> dict[str, float]:
    """BM25 computed here, independently of the SQL, from PostgreSQL's lexemes."""
    docs = {doc.source_id: lexemes(doc.text) for doc in CORPUS}
    n = len(docs)
    avgdl = sum(sum(tf.values()) for tf in docs.values()) / n
    scores: dict[str, float] = {}
    for source_id, tfs in docs.items():
        dl = sum(tfs.values())
        score = 0.0
        for term in lexemes(query):
            df = sum(1 for other in docs.values() if term in other)
            if term in tfs:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tfs[term] * (K1 + 1) / (tfs[term] + K1 * (1 - B + B * dl / avgdl))
        if score:
            scores[source_id] = score
    return scores


def test_text_search_scores_are_bm25_over_postgres_lexemes(kb: rag.Collection) -> None:
    hits = kb.search("orange cats on mats", mode="text", k=10)
    expected = expected_bm25("orange cats on mats")
    assert {hit.source_id: hit.score for hit in hits} == pytest.approx(expected, rel=1e-9)
    assert [hit.source_id for hit in hits] == sorted(expected, key=lambda s: -expected[s])
    assert [hit.text_rank for hit in hits] == list(range(1, len(hits) + 1))
    assert all(hit.vector_rank is None for hit in hits)


def test_text_search_ranks_a_rare_term_above_a_common_one(kb: rag.Collection) -> None:
    hits = kb.search("cat quantum", mode="text", k=5)
    assert hits[0].source_id == "c"


def test_text_search_stems_with_the_collection_config(kb: rag.Collection) -> None:
    assert [hit.source_id for hit in kb.search("gardens watered", mode="text")] == ["d", "b"]


def test_a_query_of_stop_words_finds_nothing_in_text_mode(kb: rag.Collection) -> None:
    assert kb.search("the and on", mode="text") == []


def test_websearch_syntax_excludes_minus_words_and_requires_quoted_phrases(kb: rag.Collection) -> None:
    assert {h.source_id for h in kb.search("cat -dog", mode="text", syntax="websearch")} == {"a", "e"}
    assert [h.source_id for h in kb.search('"orange cat"', mode="text", syntax="websearch")] == ["e"]


def test_phrase_syntax_requires_the_words_in_order(kb: rag.Collection) -> None:
    assert [h.source_id for h in kb.search("grey cat", mode="text", syntax="phrase")] == ["e"]


def test_hybrid_fuses_both_rankings_with_reciprocal_rank_fusion(kb: rag.Collection) -> None:
    vector = {h.source_id: h.vector_rank for h in kb.search("orange cat", mode="vector", k=5)}
    text = {h.source_id: h.text_rank for h in kb.search("orange cat", mode="text", k=5)}
    hits = kb.search("orange cat", mode="hybrid", k=5)
    for hit in hits:
        assert hit.vector_rank == vector.get(hit.source_id)
        assert hit.text_rank == text.get(hit.source_id)
        expected = sum(1 / (60 + rank) for rank in (hit.vector_rank, hit.text_rank) if rank)
        assert hit.score == pytest.approx(expected)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_hybrid_with_zero_vector_weight_orders_like_the_text_leg(kb: rag.Collection) -> None:
    text = [h.source_id for h in kb.search("garden cat", mode="text", k=5)]
    hybrid = kb.search("garden cat", mode="hybrid", k=5, weights=(0.0, 1.0))
    assert [h.source_id for h in hybrid][: len(text)] == text


def test_every_mode_keeps_to_the_tenant(kb: rag.Collection) -> None:
    kb.index([rag.RagDocument("other", "The orange cat of another tenant.")], tenant="globex")
    for mode in ("vector", "text", "hybrid"):
        assert "other" not in {h.source_id for h in kb.search("orange cat", mode=mode, tenant="")}
        assert {h.source_id for h in kb.search("orange cat", mode=mode, tenant="globex")} == {"other"}


def test_snippets_highlight_query_words_and_escape_html() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("x", 'Backups & "restores" < nightly')])
    snippet = kb.search("backups", mode="text")[0].snippet
    assert snippet.startswith("<mark>Backups</mark>")
    assert "&amp;" in snippet and "&quot;restores&quot;" in snippet and "&lt;" in snippet


def test_hits_carry_documents_without_extra_queries(kb: rag.Collection, django_assert_num_queries) -> None:
    hits = kb.search("cat", mode="hybrid", k=3)
    with django_assert_num_queries(0):
        assert all(hit.chunk.document.source_id == hit.source_id for hit in hits)
        assert all(hit.document.title for hit in hits)


def test_a_text_search_on_a_vector_is_refused(kb: rag.Collection) -> None:
    with pytest.raises(rag.QueryError, match="needs the query text"):
        kb.search([0.0] * 64, mode="hybrid")


def _dims(kb: rag.Collection) -> int:
    return kb.get_embedder().dimensions


@pytest.mark.parametrize(
    ("component", "message"),
    [
        (float("nan"), "NaN or infinite"),
        (float("inf"), "NaN or infinite"),
        (float("-inf"), "NaN or infinite"),
        (1e39, "beyond float4"),
        (0.0, "all zeros"),
        ("a", "sequence of numbers"),
        (None, "sequence of numbers"),
        ([1.0], "sequence of numbers"),
    ],
)
def test_unusable_query_vectors_are_refused_before_the_database(
    kb: rag.Collection, component: object, message: str
) -> None:
    vector = [component] * _dims(kb)
    with pytest.raises(rag.QueryError, match=message):
        kb.search(vector, mode="vector")
    with pytest.raises(rag.QueryError, match=message):
        list(kb.chunks().nearest(vector, k=3))
    with pytest.raises(rag.QueryError, match="empty"):
        kb.search([], mode="vector")


@pytest.mark.parametrize("query", ["a & b", "!!!", "'unbalanced", "(x | y", "foo:*", "\\"])
def test_query_syntax_characters_are_plain_text_in_every_syntax(kb: rag.Collection, query: str) -> None:
    for syntax in ("plain", "phrase", "websearch"):
        assert isinstance(kb.search(query, mode="hybrid", syntax=syntax), list)


def test_a_one_percent_filter_on_an_hnsw_index_still_returns_k_rows() -> None:
    kb = rag.collection("docs")
    docs = [
        rag.RagDocument(f"n/{i}", f"note {i} about subject {i % 50} and detail {i * 13 % 97}")
        for i in range(2000)
    ]
    kb.index(docs[:1980], tenant="big")
    kb.index(docs[1980:], tenant="rare")  # 1% of the rows
    build_space_index(kb, analyze="django_rag_chunk")
    assert "Index Scan using" in explain(kb, tenant="rare")
    hits = kb.search("subject 7 detail", k=10, tenant="rare")
    assert len(hits) == 10
    assert {h.document.tenant for h in hits} == {"rare"}


def test_the_hybrid_vector_leg_uses_the_space_index_and_the_text_leg_the_posting_blocks_key() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument(f"n/{i}", f"note {i} about subject {i % 50}") for i in range(3000)], tenant="t")
    index = build_space_index(kb)
    for scope, generic in (({}, False), ({"tenant": "t"}, False), ({}, True), ({"tenant": "t"}, True)):
        plan = explain(kb, generic=generic, **scope)
        assert f"Index Scan using {index}" in plan, plan
        assert "django_rag_postblock_pkey" in plan, plan


def test_orm_text_search_matches_kb_search_and_composes_with_filters(kb: rag.Collection) -> None:
    kb.index([rag.RagDocument("g", "The orange cat of globex.")], tenant="globex")
    expected = [(h.source_id, h.score) for h in kb.search("orange cat", mode="text", k=3, tenant="")]
    qs = kb.chunks().text_search("orange cat", k=3).filter(tenant="").select_related("document")
    got = [(chunk.document.source_id, chunk.text_score) for chunk in qs]
    assert [source for source, _ in got] == [source for source, _ in expected]
    assert [score for _, score in got] == pytest.approx([score for _, score in expected], rel=1e-9)


def test_orm_text_search_needs_a_collection() -> None:
    from django_rag.models import Chunk

    with pytest.raises(rag.ConfigurationError, match="needs a collection"):
        Chunk.objects.text_search("cat")


def test_orm_nearest_keeps_k_rows_under_a_selective_filter() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument(f"n/{i}", f"entry {i} on theme {i % 40}") for i in range(1500)], tenant="big")
    kb.index([rag.RagDocument(f"r/{i}", f"entry rare {i}") for i in range(15)], tenant="rare")
    build_space_index(kb, analyze="django_rag_chunk")
    rows = list(kb.chunks().nearest("entry theme 3", k=10).filter(tenant="rare"))
    assert len(rows) == 10
    assert [r.distance for r in rows] == sorted(r.distance for r in rows)


def test_rerank_reorders_the_widened_candidates_and_keeps_k(kb: rag.Collection) -> None:
    def prefer_gardens(query: str, texts: list[str]) -> list[float]:
        return [1.0 if "garden" in text.lower() else 0.0 for text in texts]

    hits = kb.search("cat", mode="hybrid", k=2, rerank=prefer_gardens)
    assert len(hits) == 2
    assert {h.source_id for h in hits} <= {"b", "d"} and hits[0].score == 1.0


def test_mmr_trades_a_near_duplicate_for_a_different_chunk() -> None:
    kb = rag.collection("docs")
    kb.index(
        [
            rag.RagDocument("x1", "orange cat sleeps on the mat"),
            rag.RagDocument("x2", "orange cat sleeps on the mat today"),
            rag.RagDocument("y", "orange juice recipe"),
        ]
    )
    plain = [h.source_id for h in kb.search("orange cat sleeps", k=2)]
    diverse = [h.source_id for h in kb.search("orange cat sleeps", k=2, mmr=True, mmr_lambda=0.3)]
    assert set(plain) == {"x1", "x2"}
    assert "y" in diverse and len(diverse) == 2


def test_collection_ask_answers_with_citations_from_a_loopback_model(kb: rag.Collection) -> None:
    from django.test import override_settings

    from django_rag.testing import OpenAICompatibleServer

    with OpenAICompatibleServer() as server:
        chat = {
            "BACKEND": "django_rag.answer.chat.OpenAIChat",
            "MODEL": "m",
            "BASE_URL": server.base_url,
            "API_KEY": "k",
        }
        with override_settings(
            RAG={
                "CHAT": chat,
                "COLLECTIONS": {"docs": {}},
                "EMBEDDERS": {
                    "default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}
                },
            }
        ):
            answer = rag.collection("docs").ask("what does the cat sit on?", mode="hybrid")
    assert "[1]" in answer.text
    assert answer.citations and answer.citations[0].document is not None


def test_nul_bytes_in_a_query_are_dropped_not_sent_to_postgres(kb: rag.Collection) -> None:
    for mode in ("vector", "text", "hybrid"):
        assert kb.search("orange\x00 cat", mode=mode, k=3)[0].source_id in {"a", "e"}
    with pytest.raises(rag.QueryError, match="empty"):
        kb.search("\x00\x00", mode="text")


def test_vector_hits_get_the_escaped_opening_of_their_chunk_as_snippet() -> None:
    kb = rag.collection("docs")
    words = " ".join(f"w{i}" for i in range(60))
    kb.index([rag.RagDocument("v", f"<b>Bold</b> & {words}")])
    snippet = kb.search("bold", mode="vector", k=1)[0].snippet
    assert snippet.startswith("&lt;b&gt;Bold&lt;/b&gt; &amp; w0 w1")
    assert snippet.endswith("w37 …")
    assert kb.search("bold", mode="vector", k=1, snippets=False)[0].snippet == ""


def test_a_vector_hit_snippet_is_made_on_first_read_and_then_kept() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("v", "<i>Tape</i> backups rotate weekly.")])
    hit = kb.search("tape", mode="vector", k=1)[0]
    assert vars(hit)["snippet"] is None  # not made yet
    assert hit.snippet == "&lt;i&gt;Tape&lt;/i&gt; backups rotate weekly."
    assert isinstance(hit.snippet, SafeString)
    assert hit.snippet is hit.snippet
    hit.snippet = "mine"  # an ordinary field otherwise: assignable, copied, pickled, compared
    assert dataclasses.replace(hit, score=0.5).snippet == "mine"
    again = pickle.loads(pickle.dumps(kb.search("tape", mode="vector", k=1)[0]))
    assert again.snippet.startswith("&lt;i&gt;Tape") and again.chunk.content.startswith("<i>Tape")
    assert type(hit) is rag.Hit and dataclasses.asdict(hit)["snippet"] == "mine"
    # The same for any Hit: None stands for the chunk's opening, "" (the default) for none.
    made = rag.Hit(chunk=rag.ChunkData(0, "a <b> c"), document=None, score=1.0, snippet=None)
    assert made.snippet == "a &lt;b&gt; c"
    assert rag.Hit(chunk=made.chunk, document=None, score=1.0).snippet == ""


def test_identical_chunks_score_alike_and_tie_by_id_in_both_text_paths() -> None:
    kb = rag.collection("docs")
    words = [f"w{i}" for i in range(400)]
    clone = " ".join(f"{w} alpha{i % 7}" for i, w in enumerate(words[:60]))  # many query terms
    docs = [rag.RagDocument(f"other/{i}", " ".join(words[i : i + 80])) for i in range(0, 320, 4)]
    docs += [rag.RagDocument(f"clone/{i}", clone) for i in range(30)]
    kb.index(docs)
    query = " ".join(words[:60:3]) + " alpha1 alpha3"
    # One plan per way of aggregating: every one must add a chunk's terms up in the same order.
    for setting in ("", "SET LOCAL enable_hashagg = off", "SET LOCAL enable_sort = off"):
        with transaction.atomic():
            if setting:
                with connection.cursor() as cursor:
                    cursor.execute(setting)
            hits = kb.search(query, mode="text", k=40, snippets=False)
            orm = list(kb.chunks().text_search(query, k=40))
        clones = [hit for hit in hits if hit.source_id.startswith("clone/")]
        assert len(clones) == 30, setting
        assert len({hit.score for hit in clones}) == 1, (setting, sorted({hit.score for hit in clones}))
        assert [hit.chunk.pk for hit in clones] == sorted(hit.chunk.pk for hit in clones), setting
        assert [c.pk for c in orm] == [hit.chunk.pk for hit in hits], setting
        assert [c.text_score for c in orm] == [hit.score for hit in hits], setting
