"""Contextual headers through the store: matched and embedded, never displayed; and the re-sync of a
collection indexed before them (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

import django_rag as rag
from django_rag.embedders.hashing import HashingEmbedder
from django_rag.models import Chunk
from django_rag.stores import get_store
from tests.text_index import assert_text_index_matches_chunks

pytestmark = pytest.mark.django_db

HASHING = {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}}
FILLER = " ".join(f"Sentence {i} says the snapshot is kept safe and sound." for i in range(12))
GUIDE = rag.RagDocument(
    "guide.md",
    f"# Operations guide\n\nHow the service is run.\n\n## Retention policy\n\n{FILLER}"
    "\n\n## Billing\n\nInvoices monthly.",
    metadata={"title": "Operations guide"},
)


def rag_with(**options: Any) -> dict[str, Any]:
    return {"EMBEDDERS": HASHING, "COLLECTIONS": {"kb": {"CHUNK_SIZE": 40, "CHUNK_OVERLAP": 0, **options}}}


def chunks(kb: rag.Collection) -> list[Chunk]:
    return list(Chunk.objects.filter(collection=kb).order_by("index"))


def test_a_chunk_is_found_by_its_heading_words_and_shows_only_its_text() -> None:
    with override_settings(RAG=rag_with()):
        kb = rag.collection("kb")
        kb.index(GUIDE)
        later = [c for c in chunks(kb) if c.metadata["heading_path"][-1:] == ["Retention policy"]][1:]
        assert later and all("etention" not in c.content for c in later)
        assert all(c.header == "Operations guide > Retention policy" for c in later)
        hits = kb.search("retention", k=20, mode="text")
        found = {hit.chunk.pk for hit in hits}
        assert {c.pk for c in later} <= found
        for hit in hits:
            assert "Operations guide >" not in hit.chunk.content and "Operations guide >" not in hit.snippet
        # What was embedded is the header and the text: the vector is the hashing embedder's of both.
        stored = get_store(kb.using).embeddings([h for h in hits if h.chunk.pk == later[0].pk])[0]
        expected = HashingEmbedder(dimensions=64).embed_documents(
            [f"{later[0].header}\n\n{later[0].content}"]
        )[0]
        assert stored == pytest.approx(expected, abs=1e-6)
        assert_text_index_matches_chunks()


def test_without_contextual_headers_only_the_text_is_matched() -> None:
    with override_settings(RAG=rag_with(CONTEXT_HEADERS=False)):
        kb = rag.collection("kb")
        assert kb.context_headers is False
        kb.index(GUIDE)
        assert all(c.header == "" and c.metadata["heading_path"] for c in chunks(kb)[1:])
        hits = kb.search("retention", k=20, mode="text")
        assert [hit.chunk.content.splitlines()[0] for hit in hits] == ["## Retention policy"]


def test_an_existing_collection_is_resynced_by_indexing_its_documents_again() -> None:
    with override_settings(RAG=rag_with(CONTEXT_HEADERS=False)):
        kb = rag.collection("kb")
        first = kb.index(GUIDE)
        before = {c.content_hash for c in chunks(kb)}
    with override_settings(RAG=rag_with()):  # the upgrade: CONTEXT_HEADERS on (the default)
        kb = rag.collection("kb")
        assert kb.context_headers is True
        resynced = kb.index(GUIDE)
        after = chunks(kb)
        # Every chunk now has a header (the document has a title): all are replaced and embedded
        # anew, and the headers' tokens make the chunks a little shorter.
        assert all(c.header for c in after)
        assert resynced.added == resynced.embedded == len(after) >= first.added == resynced.removed
        assert resynced.unchanged == 0 and not before & {c.content_hash for c in after}
        assert len(kb.search("retention", k=20, mode="text")) > 1
        again = kb.index(GUIDE)
        assert (again.added, again.removed, again.embedded, again.unchanged) == (0, 0, 0, len(after))
        assert_text_index_matches_chunks()


def test_a_rebuilt_text_index_keeps_matching_the_headers() -> None:
    with override_settings(RAG=rag_with()):
        kb = rag.collection("kb")
        kb.index(GUIDE)
        found = {h.chunk.pk for h in kb.search("retention", k=20, mode="text")}
    with override_settings(RAG=rag_with(TEXT_CONFIG="simple")):
        kb = rag.collection("kb")  # TEXT_CONFIG changed: the text index is rebuilt from the rows
        assert {h.chunk.pk for h in kb.search("retention", k=20, mode="text")} == found
        assert_text_index_matches_chunks()
