"""The public Python API: collection(), index(), search(), remove() and Chunk.objects.nearest()."""

from __future__ import annotations

import pytest
from django.test import override_settings

import django_rag as rag
from django_rag.models import Chunk, Collection, Document

pytestmark = pytest.mark.django_db

FAQ = [
    rag.RagDocument("faq/backup", "Back up the database every night with pg_dump.", {"section": "ops"}),
    rag.RagDocument(
        "faq/restore", "Restore a dump with pg_restore into an empty database.", {"section": "ops"}
    ),
    rag.RagDocument(
        "faq/billing", "Invoices are sent on the first day of each month.", {"section": "billing"}
    ),
]


def test_a_declared_collection_is_created_on_first_use() -> None:
    kb = rag.collection("notes")
    assert (kb.text_config, kb.chunk_size, kb.chunk_overlap) == ("simple", 64, 8)
    assert rag.collection("notes").pk == kb.pk


def test_an_unknown_collection_is_a_clear_error() -> None:
    with pytest.raises(rag.ConfigurationError, match=r"unknown collection 'nope'.*RAG\['COLLECTIONS'\]"):
        rag.collection("nope")
    assert not Collection.objects.filter(name="nope").exists()


def test_create_true_makes_an_undeclared_collection() -> None:
    kb = rag.collection("scratch", create=True, text_config="simple")
    assert (kb.name, kb.text_config) == ("scratch", "simple")


def test_a_collection_with_an_undefined_embedder_is_refused() -> None:
    with pytest.raises(rag.ConfigurationError, match="embedder 'missing'"):
        rag.collection("scratch", create=True, embedder="missing")


def test_settings_changes_are_written_to_the_collection_row() -> None:
    rag.collection("docs")
    with override_settings(
        RAG={
            "COLLECTIONS": {"docs": {"TEXT_CONFIG": "simple"}},
            "EMBEDDERS": {
                "default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}
            },
        }
    ):
        assert rag.collection("docs").text_config == "simple"


def test_index_then_search_finds_the_relevant_document() -> None:
    kb = rag.collection("docs")
    result = kb.index(FAQ)
    assert (result.added, result.removed, result.unchanged, result.documents) == (3, 0, 0, 3)
    hits = kb.search("how do I back up the database with pg_dump", k=2)
    assert hits[0].source_id == "faq/backup"
    assert hits[0].document.title == "faq/backup"
    assert hits[0].chunk.content.startswith("Back up")
    assert hits[0].score > hits[1].score


def test_reindexing_unchanged_documents_embeds_nothing_and_duplicates_nothing() -> None:
    kb = rag.collection("docs")
    kb.index(FAQ)
    again = kb.index(FAQ)
    assert (again.added, again.removed, again.unchanged, again.embedded) == (0, 0, 3, 0)
    assert Chunk.objects.filter(collection=kb).count() == 3
    assert Document.objects.filter(collection=kb).count() == 3


def test_an_edited_document_re_embeds_only_new_text() -> None:
    kb = rag.collection("notes")  # 64-token chunks, so each paragraph is its own chunk
    paragraphs = [f"Paragraph {i} talks about topic {i} in enough words to stand alone." for i in range(5)]
    kb.index([rag.RagDocument("long", "\n\n".join(paragraphs))])
    before = Chunk.objects.filter(collection=kb).count()
    paragraphs[2] = "A rewritten paragraph about something else entirely, also long enough here."
    result = kb.index([rag.RagDocument("long", "\n\n".join(paragraphs))])
    assert result.removed >= 1 and result.added >= 1
    assert result.embedded == result.added
    assert result.unchanged == before - result.removed


def test_identical_text_in_another_document_is_not_embedded_again() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("a", "A paragraph shared by two documents.")])
    result = kb.index([rag.RagDocument("b", "A paragraph shared by two documents.")])
    assert (result.added, result.embedded) == (1, 0)


def test_index_applies_tags_and_tenant_to_documents_and_chunks() -> None:
    kb = rag.collection("docs")
    kb.index(FAQ[:1], tags=["manual"], tenant="acme")
    document = Document.objects.get(source_id="faq/backup")
    assert (document.tags, document.tenant, document.status) == (["manual"], "acme", "indexed")
    assert list(Chunk.objects.values_list("tenant", "tags")) == [("acme", ["manual"])]
    assert kb.search("pg_dump", tenant="acme", tags=["manual"])
    assert kb.search("pg_dump", tenant="globex") == []


def test_search_filters_by_metadata() -> None:
    kb = rag.collection("docs")
    kb.index(FAQ)
    hits = kb.search("database", filters={"section": "billing"})
    assert [hit.source_id for hit in hits] == ["faq/billing"]


def test_remove_by_source_id_and_by_prefix() -> None:
    kb = rag.collection("docs")
    kb.index([*FAQ, rag.RagDocument("faq2/other", "Another namespace entirely.")])
    assert kb.remove(source_id="faq/billing") == 1
    assert kb.remove(prefix="faq") == 2
    assert list(Document.objects.values_list("source_id", flat=True)) == ["faq2/other"]
    assert Chunk.objects.count() == 1


def test_nearest_is_a_lazy_queryset_annotated_with_distance() -> None:
    kb = rag.collection("docs")
    kb.index(FAQ)
    qs = Chunk.objects.filter(collection__name="docs").nearest("pg_restore a dump", k=2)
    rows = list(qs)
    assert len(rows) == 2
    assert rows[0].document.source_id == "faq/restore"
    assert rows[0].distance <= rows[1].distance
    assert rows[0].score == pytest.approx(1 - rows[0].distance)
    assert "embedding" in rows[0].get_deferred_fields()


def test_filters_added_after_nearest_apply_before_the_top_k_cut() -> None:
    kb = rag.collection("docs")
    kb.index(FAQ[:2], tenant="acme")
    kb.index(FAQ[2:], tenant="globex")
    qs = kb.chunks().nearest("database", k=1).filter(tenant="globex")
    assert [chunk.document.source_id for chunk in qs] == ["faq/billing"]
    assert kb.chunks().nearest("database", k=2).exclude(tenant="acme").count() == 1


def test_nearest_accepts_a_vector_with_its_space() -> None:
    kb = rag.collection("docs")
    kb.index(FAQ)
    vector = kb.get_embedder().embed_query("invoices monthly")
    rows = list(Chunk.objects.nearest(vector, k=1, space=kb.space))
    assert rows[0].document.source_id == "faq/billing"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": ""}, "empty"),
        ({"query": "   "}, "empty"),
        ({"query": "x" * 20_001}, "limit"),
        ({"query": "ok", "k": 0}, "between 1 and"),
        ({"query": "ok", "k": 5000}, "between 1 and"),
        ({"query": "ok", "mode": "fuzzy"}, "unknown search mode"),
        ({"query": "ok", "tags": "manual"}, "list of strings"),
        ({"query": [0.1, 0.2]}, "2 dimensions"),
    ],
)
def test_bad_search_input_is_a_clear_query_error(kwargs: dict, message: str) -> None:
    kb = rag.collection("docs")
    with pytest.raises(rag.QueryError, match=message):
        kb.search(**kwargs)


def test_searching_a_space_the_store_does_not_hold_names_the_fix() -> None:
    kb = rag.collection("docs")
    kb.index(FAQ)
    other = {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "MODEL": "bigger", "DIMENSIONS": 128}
    # The alias redefined in place: the collection keeps searching its complete 64-dim space
    # (an embedder switch opens), which needs the old embedder to embed the query.
    with (
        override_settings(RAG={"EMBEDDERS": {"default": other}, "COLLECTIONS": {"docs": {}}}),
        pytest.raises(rag.ConfigurationError, match=r"'hashing:64'.*keep the old embedder.*rag_reindex docs"),
    ):
        rag.collection("docs").search("database")
    previous = {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}
    with override_settings(
        RAG={"EMBEDDERS": {"default": other, "previous": previous}, "COLLECTIONS": {"docs": {}}}
    ):
        hits = rag.collection("docs").search("database")
    assert hits and {hit.chunk.space for hit in hits} == {"hashing:64"}


def test_public_api_imports_without_side_effects() -> None:
    assert set(rag.__all__) >= {"collection", "RagDocument", "Hit", "SyncResult", "RagError", "Chunk"}
    assert rag.Chunk is Chunk


def test_reembed_moves_a_collection_to_its_new_embedder_without_losing_documents() -> None:
    from django.core.management import call_command

    kb = rag.collection("docs")
    kb.index(FAQ, tags=["faq"], tenant="acme")
    bigger = {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "MODEL": "bigger", "DIMENSIONS": 128}
    with override_settings(RAG={"EMBEDDERS": {"default": bigger}, "COLLECTIONS": {"docs": {}}}):
        call_command("rag_reindex", "docs", "--drop-old", verbosity=0)
        assert set(Chunk.objects.values_list("space", flat=True)) == {"bigger:128"}
        hits = rag.collection("docs").search("pg_restore a dump", tenant="acme", tags=["faq"])
        assert hits[0].source_id == "faq/restore"
        assert hits[0].document.metadata == {"section": "ops"}
        call_command("rag_reindex", "docs", verbosity=0)  # nothing left to move
        assert Chunk.objects.count() == 3
