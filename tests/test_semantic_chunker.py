"""The semantic chunker: chunks end where adjacent sentences stop being alike, at headings and pages,
and within the chunk size; selectable per collection."""

from __future__ import annotations

import pytest
from django.test import override_settings

import django_rag as rag
from django_rag.checks import check_settings
from django_rag.conf import rag_settings
from django_rag.embedders.hashing import HashingEmbedder
from django_rag.exceptions import ConfigurationError
from django_rag.ingest.chunking import Chunker
from django_rag.ingest.semantic import SemanticChunker, make_chunker

# The hashing embedder's vectors are bags of words: sentences sharing words are alike.
CATS = "Cats sleep in the sun. Cats sleep on the sofa. Cats sleep all day long."
BILLS = "Invoices are sent every month. Invoices are paid every month. Invoices are listed every month."
TEXT = f"{CATS} {BILLS}"


def chunker(**options: object) -> SemanticChunker:
    return SemanticChunker(embedder=HashingEmbedder(dimensions=256), **options)  # type: ignore[arg-type]


def test_a_chunk_ends_where_the_subject_changes() -> None:
    chunks = chunker(threshold=0.3, chunk_size=200).split_text(TEXT)

    assert [chunk.content for chunk in chunks] == [CATS, BILLS]


def test_offsets_hold_and_chunks_are_whole_sentences() -> None:
    chunks = chunker(threshold=0.3, chunk_size=200).split_text(TEXT)

    for chunk in chunks:
        assert chunk.content == TEXT[chunk.char_start : chunk.char_end]
        assert chunk.content.endswith(".")
    assert [chunk.index for chunk in chunks] == [0, 1]


def test_a_high_threshold_splits_every_sentence() -> None:
    chunks = chunker(threshold=0.99, chunk_size=200).split_text(TEXT)

    assert len(chunks) == 6


def test_the_chunk_size_bounds_a_chunk_of_alike_sentences() -> None:
    chunks = chunker(threshold=-1, chunk_size=12, chunk_overlap=0).split_text(TEXT)

    assert len(chunks) > 2
    assert all(0 < chunk.token_count <= 12 for chunk in chunks)


def test_a_sentence_longer_than_a_chunk_is_cut() -> None:
    long = " ".join(["word"] * 100) + "."

    chunks = chunker(threshold=0.3, chunk_size=20, chunk_overlap=0).split_text(long)

    assert len(chunks) >= 5 and all(chunk.token_count <= 20 for chunk in chunks)
    assert all(chunk.content == long[chunk.char_start : chunk.char_end] for chunk in chunks)


def test_headings_and_pages_end_chunks_and_name_their_section() -> None:
    text = f"# Pets\n\n{CATS}\n\n# Money\n\nCats pay invoices.\fCats sleep at night."

    chunks = chunker(threshold=-1, chunk_size=200).split_text(text)

    assert [c.content for c in chunks] == [
        f"# Pets\n\n{CATS}",
        "# Money\n\nCats pay invoices.",
        "Cats sleep at night.",
    ]
    assert [c.metadata.get("heading_path") for c in chunks] == [["Pets"], ["Money"], ["Money"]]
    assert [c.page for c in chunks] == [1, 1, 2]


def test_context_headers_carry_the_title_and_path() -> None:
    doc = rag.RagDocument("d", f"# Pets\n\n{CATS}", {"title": "Handbook"})

    [chunk] = chunker(threshold=-1, chunk_size=200, context_headers=True).chunk_document(doc)

    assert chunk.header == "Handbook > Pets" or chunk.header.startswith("Handbook")


@pytest.mark.parametrize("threshold", [1.5, -2, "high", True])
def test_a_bad_threshold_is_a_configuration_error(threshold: object) -> None:
    with pytest.raises(ConfigurationError, match="SEMANTIC_THRESHOLD"):
        chunker(threshold=threshold)


def test_make_chunker_reads_the_collection_options() -> None:
    embedder = HashingEmbedder(dimensions=64)
    assert type(make_chunker({"chunk_size": 64, "chunk_overlap": 8}, embedder)) is Chunker
    semantic = make_chunker({"chunker": "semantic", "semantic_threshold": 0.7, "chunk_size": 64}, embedder)
    assert isinstance(semantic, SemanticChunker) and semantic.threshold == 0.7
    with pytest.raises(ConfigurationError, match="unknown CHUNKER 'clever'"):
        make_chunker({"chunker": "clever"}, embedder)


@pytest.mark.django_db
def test_a_collection_selects_the_semantic_chunker_in_settings() -> None:
    options = rag_settings._load()
    semantic = {"CHUNKER": "semantic", "SEMANTIC_THRESHOLD": 0.3, "CHUNK_SIZE": 200, "CHUNK_OVERLAP": 0}
    with override_settings(RAG={**options, "COLLECTIONS": {**options["COLLECTIONS"], "semantic": semantic}}):
        kb = rag.collection("semantic")
        kb.index([rag.RagDocument("d", TEXT)])
        contents = list(kb.chunks().order_by("index").values_list("content", flat=True))

    assert contents == [CATS, BILLS]


@pytest.mark.django_db
def test_the_default_chunker_keeps_alike_and_unlike_sentences_together() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("d", TEXT)])

    assert list(kb.chunks().values_list("content", flat=True)) == [TEXT]


@pytest.mark.parametrize(
    ("options", "check_id"),
    [
        ({"CHUNKER": "clever"}, "django_rag.E160"),
        ({"CHUNKER": "semantic", "SEMANTIC_THRESHOLD": 2}, "django_rag.E160"),
        ({"PARENT_CHUNK_SIZE": 0}, "django_rag.E161"),
        ({"PARENT_CHUNK_SIZE": "1k"}, "django_rag.E161"),
    ],
)
def test_bad_chunker_and_parent_options_are_system_check_errors(
    options: dict[str, object], check_id: str
) -> None:
    hashing = {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}}
    with override_settings(RAG={"EMBEDDERS": hashing, "COLLECTIONS": {"docs": options}}):
        [message] = check_settings()
    assert message.id == check_id and "collection 'docs'" in message.msg


def test_good_chunker_and_parent_options_pass_the_checks() -> None:
    hashing = {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}}
    options = {"CHUNKER": "semantic", "SEMANTIC_THRESHOLD": 0.4, "PARENT_CHUNK_SIZE": 512}
    with override_settings(RAG={"EMBEDDERS": hashing, "COLLECTIONS": {"docs": options}}):
        assert check_settings() == []
