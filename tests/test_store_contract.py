"""One contract, two stores: the pgvector ORM store and the memory store behave the same."""

from __future__ import annotations

import hashlib

import pytest

import django_rag as rag
from django_rag.embedders.hashing import HashingEmbedder
from django_rag.exceptions import ConfigurationError, QueryError
from django_rag.models import Collection
from django_rag.stores import ALL_TENANTS, VectorStore
from django_rag.stores.base import DocumentInfo, QueryScope, SearchRequest
from django_rag.stores.memory import MemoryStore
from django_rag.stores.pgvector import PgVectorStore
from django_rag.types import ChunkData, SyncResult

EMBEDDER = HashingEmbedder(dimensions=64)
SPACE = EMBEDDER.space


def chunks(*texts: str, metadata: dict | None = None) -> list[ChunkData]:
    vectors = EMBEDDER.embed_documents(list(texts))
    return [
        ChunkData(
            index=i,
            content=text,
            content_hash=hashlib.sha1(text.encode()).hexdigest(),
            char_start=0,
            char_end=len(text),
            metadata=dict(metadata or {}),
            embedding=vector,
        )
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ]


def doc(source_id: str, **kwargs: object) -> DocumentInfo:
    return DocumentInfo(source_id=source_id, title=source_id, **kwargs)


@pytest.fixture(params=["memory", pytest.param("pgvector", marks=pytest.mark.django_db)])
def store(request: pytest.FixtureRequest) -> VectorStore:
    return MemoryStore() if request.param == "memory" else PgVectorStore()


def ids(hits: list) -> list[str]:
    return [hit.source_id for hit in hits]


def coll(store: VectorStore, name: str) -> Collection:
    """The collection row the store is given: in the database for the ORM store, unsaved for memory."""
    return Collection(name=name) if isinstance(store, MemoryStore) else rag.collection(name)


def upsert(store: VectorStore, name: str, document: DocumentInfo, items: list[ChunkData]) -> SyncResult:
    return store.upsert_many(coll(store, name), [(document, items)], space=SPACE)


def query(
    store: VectorStore, name: str, vector: list[float], k: int, space: str = SPACE, **scope: object
) -> list:
    request = SearchRequest(mode="vector", k=k, space=space, vector=vector, scope=QueryScope(**scope))
    return store.search(coll(store, name), request)


def search(store: VectorStore, text: str, k: int = 10, **scope: object) -> list:
    return query(store, "docs", EMBEDDER.embed_query(text), k, **scope)


def test_both_stores_satisfy_the_protocol(store: VectorStore) -> None:
    assert isinstance(store, VectorStore)


def test_upsert_then_query_returns_the_nearest_chunk_first(store: VectorStore) -> None:
    upsert(store, "docs", doc("a"), chunks("postgres backups with pg_dump", "the cat sat on the mat"))
    upsert(store, "docs", doc("b"), chunks("weather in lisbon is sunny"))
    hits = search(store, "pg_dump backups", k=2)
    assert hits[0].content == "postgres backups with pg_dump"
    assert hits[0].score == pytest.approx(1.0 - 0.0, abs=0.5)
    assert hits[0].score > hits[1].score
    assert [hit.vector_rank for hit in hits] == [1, 2]


def test_query_caps_results_at_k(store: VectorStore) -> None:
    upsert(store, "docs", doc("a"), chunks(*[f"note number {i}" for i in range(7)]))
    assert len(search(store, "note", k=3)) == 3


def test_reupsert_of_same_chunks_changes_nothing(store: VectorStore) -> None:
    first = upsert(store, "docs", doc("a"), chunks("one", "two", "three"))
    again = upsert(store, "docs", doc("a"), chunks("one", "two", "three"))
    assert (first.added, first.removed, first.unchanged) == (3, 0, 0)
    assert (again.added, again.removed, again.unchanged) == (0, 0, 3)
    assert len(search(store, "one two three")) == 3


def test_reupsert_replaces_vanished_chunks_and_keeps_the_rest(store: VectorStore) -> None:
    upsert(store, "docs", doc("a"), chunks("one", "two", "three"))
    result = upsert(store, "docs", doc("a"), chunks("one", "three", "four"))
    assert (result.added, result.removed, result.unchanged) == (1, 1, 2)
    assert sorted(hit.content for hit in search(store, "one")) == ["four", "one", "three"]


def test_duplicate_texts_in_a_document_are_each_kept(store: VectorStore) -> None:
    result = upsert(store, "docs", doc("a"), chunks("same", "same", "other"))
    assert result.added == 3
    assert sorted(hit.content for hit in search(store, "same")) == ["other", "same", "same"]


def test_vectors_for_returns_stored_vectors_by_hash(store: VectorStore) -> None:
    stored = chunks("alpha beta")
    upsert(store, "docs", doc("a"), stored)
    found = store.vectors_for(coll(store, "docs"), SPACE, [stored[0].content_hash, "0" * 40], tenant="")
    assert list(found) == [stored[0].content_hash]
    assert found[stored[0].content_hash] == pytest.approx(stored[0].embedding, abs=1e-6)
    assert store.vectors_for(coll(store, "docs"), "other-model:64", [stored[0].content_hash], tenant="") == {}


def test_delete_by_source_id_is_exact(store: VectorStore) -> None:
    upsert(store, "docs", doc("manual"), chunks("manual text"))
    upsert(store, "docs", doc("manual2"), chunks("manual two text"))
    assert store.delete(coll(store, "docs"), source_id="manual") == 1
    assert ids(search(store, "manual text")) == ["manual2"]


def test_delete_by_prefix_never_touches_a_longer_sibling(store: VectorStore) -> None:
    for source_id in ("docs", "docs/a", "docs/b/c", "docs#p2", "docs2", "docs2/a", "docsx"):
        upsert(store, "docs", doc(source_id), chunks(f"text of {source_id}"))
    assert store.delete(coll(store, "docs"), prefix="docs") == 4
    assert sorted(ids(search(store, "text of"))) == ["docs2", "docs2/a", "docsx"]


def test_delete_by_prefix_with_trailing_separator_matches_children_only(store: VectorStore) -> None:
    for source_id in ("guide", "guide/intro", "guide/setup"):
        upsert(store, "docs", doc(source_id), chunks(f"text of {source_id}"))
    assert store.delete(coll(store, "docs"), prefix="guide/") == 2
    assert ids(search(store, "text of")) == ["guide"]


@pytest.mark.parametrize(
    ("prefix", "survivor"), [("a_b", "axb/1"), ("50%", "50x/1"), ("back\\slash", "back/1")]
)
def test_delete_by_prefix_treats_like_wildcards_literally(
    store: VectorStore, prefix: str, survivor: str
) -> None:
    upsert(store, "docs", doc(f"{prefix}/1"), chunks("literal match"))
    upsert(store, "docs", doc(survivor), chunks("wildcard bait"))
    assert store.delete(coll(store, "docs"), prefix=prefix) == 1
    assert ids(search(store, "literal wildcard")) == [survivor]


def test_delete_needs_exactly_one_selector(store: VectorStore) -> None:
    with pytest.raises(QueryError):
        store.delete(coll(store, "docs"))
    with pytest.raises(QueryError):
        store.delete(coll(store, "docs"), source_id="a", prefix="b")
    with pytest.raises(QueryError, match="empty prefix"):
        store.delete(coll(store, "docs"), prefix="")


def test_query_never_crosses_tenant(store: VectorStore) -> None:
    upsert(store, "docs", doc("acme-doc", tenant="acme"), chunks("shared words here"))
    upsert(store, "docs", doc("globex-doc", tenant="globex"), chunks("shared words here"))
    assert ids(search(store, "shared words", tenant="acme")) == ["acme-doc"]


def test_query_filters_tags_by_overlap(store: VectorStore) -> None:
    upsert(store, "docs", doc("a", tags=["faq", "billing"]), chunks("invoice question"))
    upsert(store, "docs", doc("b", tags=["manual"]), chunks("invoice manual"))
    assert ids(search(store, "invoice", tags=["billing", "other"])) == ["a"]


def test_query_filters_metadata_by_equality(store: VectorStore) -> None:
    upsert(store, "docs", doc("a"), chunks("refund policy", metadata={"section": "billing"}))
    upsert(store, "docs", doc("b"), chunks("refund policy", metadata={"section": "legal"}))
    assert ids(search(store, "refund", filters={"section": "legal"})) == ["b"]


def test_query_filters_source_prefix_by_segment(store: VectorStore) -> None:
    upsert(store, "docs", doc("kb/a"), chunks("same text"))
    upsert(store, "docs", doc("kb2/a"), chunks("same text"))
    assert ids(search(store, "same text", source_prefix="kb")) == ["kb/a"]


def test_query_drops_hits_below_min_score(store: VectorStore) -> None:
    upsert(store, "docs", doc("a"), chunks("exact phrase match", "unrelated zebra content"))
    hits = search(store, "exact phrase match", min_score=0.9)
    assert [hit.content for hit in hits] == ["exact phrase match"]


def test_query_stays_within_its_space_and_collection(store: VectorStore) -> None:
    upsert(store, "docs", doc("a"), chunks("hello world"))
    other = HashingEmbedder(model="other", dimensions=64)
    with pytest.raises(ConfigurationError, match="rag_reindex docs"):
        query(store, "docs", other.embed_query("hello world"), 5, space=other.space)
    upsert(store, "notes", doc("n"), chunks("hello world"))
    assert ids(search(store, "hello world")) == ["a"]


def test_upsert_many_syncs_a_batch_of_documents_at_once(store: VectorStore) -> None:
    upsert(store, "docs", doc("a"), chunks("one", "two"))
    result = store.upsert_many(
        coll(store, "docs"), [(doc("a"), chunks("one", "three")), (doc("b"), chunks("four"))], space=SPACE
    )
    assert (result.added, result.removed, result.unchanged, result.documents) == (2, 1, 1, 2)
    assert sorted(hit.content for hit in search(store, "one")) == ["four", "one", "three"]


def test_upsert_many_keeps_the_last_version_of_a_document_named_twice(store: VectorStore) -> None:
    store.upsert_many(
        coll(store, "docs"), [(doc("a"), chunks("old text")), (doc("a"), chunks("new text"))], space=SPACE
    )
    assert [hit.content for hit in search(store, "text")] == ["new text"]


@pytest.mark.django_db
def test_pgvector_writes_send_vectors_in_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    # Float-to-text conversion was over half of bulk_create's cost: the store must never do it.
    from pgvector import Vector

    def refuse(self: Vector) -> str:
        raise AssertionError("a vector was converted to text for a write")

    monkeypatch.setattr(Vector, "to_text", refuse)
    result = upsert(PgVectorStore(), "docs", doc("a"), chunks("binary please", "and again"))
    assert result.added == 2


def test_a_tenant_indexing_another_tenants_source_id_keeps_both_documents(store: VectorStore) -> None:
    upsert(store, "docs", doc("https://example.com/a", tenant="acme"), chunks("acme notes on the page"))
    upsert(store, "docs", doc("https://example.com/a", tenant="globex"), chunks("globex notes on the page"))
    assert [h.content for h in search(store, "notes on the page", tenant="acme")] == [
        "acme notes on the page"
    ]
    assert [h.content for h in search(store, "notes on the page", tenant="globex")] == [
        "globex notes on the page"
    ]
    assert store.delete(coll(store, "docs"), source_id="https://example.com/a", tenant="globex") == 1
    assert [h.content for h in search(store, "notes on the page")] == ["acme notes on the page"]


def test_delete_in_every_tenant_spares_the_kept_keys(store: VectorStore) -> None:
    for tenant in ("a", "b"):
        upsert(store, "docs", doc("row:1", tenant=tenant), chunks(f"row one of {tenant}"))
        upsert(store, "docs", doc("row:1#p2", tenant=tenant), chunks(f"row one part two of {tenant}"))
    kb = coll(store, "docs")
    assert store.delete(kb, prefix="row:1", tenant=ALL_TENANTS, keep={("b", "row:1")}) == 3
    assert store.source_ids(kb, prefix="row:1") == [("b", "row:1")]


def test_vectors_for_stays_within_the_tenant(store: VectorStore) -> None:
    stored = chunks("a secret sentence")
    upsert(store, "docs", doc("a", tenant="acme"), stored)
    kb = coll(store, "docs")
    assert store.vectors_for(kb, SPACE, [stored[0].content_hash], tenant="globex") == {}
    assert set(store.vectors_for(kb, SPACE, [stored[0].content_hash], tenant="acme")) == {
        stored[0].content_hash
    }


def test_the_space_check_names_the_collection_row(store: VectorStore) -> None:
    upsert(store, "docs", doc("a"), chunks("hello world"))
    with pytest.raises(ConfigurationError, match=r"collection 'docs'.*rag_reindex docs"):
        store.check_space(coll(store, "docs"), "other:64")


def test_a_skip_record_drops_the_chunks_and_a_failure_keeps_them(store: VectorStore) -> None:
    kb = coll(store, "docs")
    upsert(store, "docs", doc("a"), chunks("kept on failure"))
    store.record(kb, doc("a"), status="failed", error="boom", drop_chunks=False)
    assert ids(search(store, "kept on failure")) == ["a"]
    store.record(kb, doc("a"), status="skipped", reason="empty-text", drop_chunks=True)
    assert search(store, "kept on failure") == []


def test_missing_from_space_lists_documents_to_move_with_their_chunks(store: VectorStore) -> None:
    kb = coll(store, "docs")
    other = HashingEmbedder(model="other", dimensions=64)
    old = chunks("moving text")
    store.upsert_many(kb, [(doc("a"), old)], space=other.space)
    [stored] = store.missing_from_space(kb, SPACE, other.space, limit=10)
    assert (stored.info.source_id, stored.space, [c.content for c in stored.chunks]) == (
        "a",
        other.space,
        ["moving text"],
    )
    store.upsert_many(kb, [(stored.info, chunks("moving text"))], space=SPACE)
    assert store.missing_from_space(kb, SPACE, other.space, limit=10) == []
    assert store.holding_space(kb, [("", "a"), ("", "b")], SPACE) == {("", "a")}
    assert store.space_counts(kb) == {other.space: (1, 1), SPACE: (1, 1)}
    assert store.drop_space(kb, other.space) == 1
    assert store.space_counts(kb) == {SPACE: (1, 1)}


def test_rescope_moves_a_rows_documents_and_chunks_to_the_new_tenant(store: VectorStore) -> None:
    kb = coll(store, "docs")
    upsert(store, "docs", doc("row:1", tenant="acme", tags=["a"]), chunks("row one text"))
    upsert(store, "docs", doc("row:1#p2", tenant="acme", tags=["a"]), chunks("row one page two"))
    upsert(store, "docs", doc("row:1", tenant="globex"), chunks("a stale copy"))
    upsert(store, "docs", doc("row:10", tenant="acme"), chunks("another row"))
    assert store.rescope(kb, prefix="row:1", tenant="globex", tags=["b"]) == 2  # the stale copy goes
    assert store.source_ids(kb, prefix="row:1") == [("globex", "row:1"), ("globex", "row:1#p2")]
    assert ids(search(store, "row one", tenant="acme")) == ["row:10"]
    assert sorted(h.content for h in search(store, "row one", tenant="globex", tags=["b"])) == [
        "row one page two",
        "row one text",
    ]
    assert ids(search(store, "another row", tenant="acme")) == ["row:10"]
    assert store.rescope(kb, prefix="row:1", tenant="globex", tags=["b"]) == 0
