"""The recursive splitter: budgets, overlap, offsets, pages, hashes. No database."""

from __future__ import annotations

import hashlib
import sys
from itertools import pairwise

import pytest

from django_rag.exceptions import ConfigurationError
from django_rag.ingest.chunking import (
    Chunker,
    chunk_document,
    default_token_counter,
    estimate_tokens,
    split_text,
)
from django_rag.types import RagDocument


def words(text: str) -> int:
    """A subadditive counter that makes budgets easy to reason about: one token per word."""
    return len(text.split())


def sentences(n: int, start: int = 0) -> str:
    return " ".join(f"Sentence number {i} says something short." for i in range(start, start + n))


ARTICLE = "\n\n".join(sentences(6, start=p * 6) for p in range(8))


def test_empty_or_blank_text_gives_no_chunks():
    assert split_text("") == []
    assert split_text(" \n\n \t ") == []
    assert split_text("\f \f\n\f") == []


def test_short_text_is_one_chunk_with_its_stripped_content():
    [chunk] = split_text("  Hello there.\n")
    assert chunk.content == "Hello there."
    assert (chunk.index, chunk.char_start, chunk.char_end, chunk.page) == (0, 2, 14, None)


@pytest.mark.parametrize("size,overlap", [(16, 0), (40, 8), (100, 20), (256, 32)])
def test_every_chunk_stays_within_the_token_budget(size, overlap):
    chunks = split_text(ARTICLE, chunk_size=size, chunk_overlap=overlap)
    assert len(chunks) > 1
    assert all(0 < c.token_count <= size for c in chunks)
    assert all(default_token_counter()(c.content) == c.token_count for c in chunks)


def test_token_counter_sets_the_budget_and_the_token_count():
    chunks = split_text(ARTICLE, chunk_size=30, chunk_overlap=5, token_counter=words)
    assert all(c.token_count == words(c.content) <= 30 for c in chunks)
    # Chunks are filled: the budget is used, not just respected.
    assert max(c.token_count for c in chunks) >= 25


def test_consecutive_chunks_share_an_overlap_of_whole_sentences():
    chunks = split_text(ARTICLE, chunk_size=30, chunk_overlap=8, token_counter=words)
    for previous, chunk in pairwise(chunks):
        assert chunk.char_start < previous.char_end
        shared = ARTICLE[chunk.char_start : previous.char_end]
        assert 0 < words(shared) <= 8
        assert shared.startswith("Sentence") and shared.rstrip().endswith(".")


def test_overlap_comes_from_the_last_sentences_of_a_paragraph():
    text = sentences(5) + "\n\n" + sentences(5, start=5)
    first, second = split_text(text, chunk_size=40, chunk_overlap=7, token_counter=words)
    assert first.content == sentences(5)
    assert second.content.startswith("Sentence number 4 says something short.\n\nSentence number 5")


def test_zero_overlap_gives_disjoint_chunks():
    chunks = split_text(ARTICLE, chunk_size=30, chunk_overlap=0, token_counter=words)
    assert all(a.char_end <= b.char_start for a, b in pairwise(chunks))


def test_offsets_slice_the_original_text_exactly():
    text = "  Intro line\n\n" + ARTICLE + "\fsecond page\n\n\n  " + "x" * 500 + "  \n"
    for chunk in split_text(text, chunk_size=25, chunk_overlap=5):
        assert text[chunk.char_start : chunk.char_end] == chunk.content
        assert chunk.content == chunk.content.strip() != ""


def test_chunks_cover_every_non_blank_character():
    text = ARTICLE + "\f" + "word " * 300
    covered = [False] * len(text)
    for chunk in split_text(text, chunk_size=20, chunk_overlap=4):
        covered[chunk.char_start : chunk.char_end] = [True] * (chunk.char_end - chunk.char_start)
    assert all(covered[i] for i, char in enumerate(text) if not char.isspace())


def test_chunk_indexes_count_from_zero():
    chunks = split_text(ARTICLE, chunk_size=20, chunk_overlap=4)
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_paragraph_breaks_are_preferred_to_sentence_breaks():
    text = sentences(3) + "\n\n" + sentences(3, start=3)
    chunks = split_text(text, chunk_size=25, chunk_overlap=0, token_counter=words)
    assert [c.content for c in chunks] == [sentences(3), sentences(3, start=3)]


def test_sentence_punctuation_stays_with_its_sentence():
    text = "Is it ready? Yes! It shipped on Monday. Then it broke..."
    chunks = split_text(text, chunk_size=4, chunk_overlap=0, token_counter=words)
    assert [c.content for c in chunks] == ["Is it ready? Yes!", "It shipped on Monday.", "Then it broke..."]


def test_a_word_longer_than_the_budget_is_hard_split():
    word = "x" * 1000
    chunks = split_text(f"short start {word} short end", chunk_size=50, chunk_overlap=10)
    assert all(c.token_count <= 50 for c in chunks)
    assert sum(c.content.count("x") for c in chunks) == len(word)  # hard pieces are not repeated
    assert len([c for c in chunks if "x" in c.content]) >= 5


def test_hard_split_never_makes_empty_progress_with_a_greedy_counter():
    chunks = split_text("abcdefghij", chunk_size=1, chunk_overlap=0, token_counter=len)
    assert [c.content for c in chunks] == list("abcdefghij")


def test_pages_are_numbered_by_form_feeds():
    text = "page one\fpage two\f\fpage four"
    assert [(c.content, c.page) for c in split_text(text)] == [
        ("page one", 1),
        ("page two", 2),
        ("page four", 4),
    ]


def test_chunks_never_cross_a_page_break():
    text = "\f".join(sentences(3, start=p) for p in range(5))
    for chunk in split_text(text, chunk_size=200, chunk_overlap=20):
        assert "\f" not in chunk.content
        assert chunk.page == text.count("\f", 0, chunk.char_start) + 1


def test_page_is_none_for_text_without_page_breaks():
    assert {c.page for c in split_text(ARTICLE, chunk_size=30, chunk_overlap=5)} == {None}


def test_page_comes_from_document_metadata():
    doc = RagDocument("manual#p7", "Text of one PDF page.", metadata={"page": 7})
    assert [c.page for c in chunk_document(doc)] == [7]


def test_metadata_page_numbers_the_first_of_several_pages():
    doc = RagDocument("manual", "page seven\fpage eight", metadata={"page": 7})
    assert [c.page for c in chunk_document(doc)] == [7, 8]


def test_splitting_is_deterministic():
    text = ARTICLE + "\f" + "é " * 400 + "日本語の文です。" * 50
    first, second = (split_text(text, chunk_size=33, chunk_overlap=7) for _ in range(2))
    assert first == second


def test_content_hash_is_the_sha1_of_the_content():
    for chunk in split_text(ARTICLE + "\fcafé ünïcode", chunk_size=30, chunk_overlap=5):
        assert chunk.content_hash == hashlib.sha1(chunk.content.encode("utf-8")).hexdigest()


def test_chunks_of_identical_text_share_a_hash():
    first, second = split_text("Same words.\fSame words.")
    assert first.content_hash == second.content_hash


def test_text_without_spaces_splits_at_cjk_sentence_marks():
    text = "これは最初の文です。" * 3 + "二番目の文です。" * 3
    chunks = split_text(text, chunk_size=40, chunk_overlap=0)
    assert all(c.content.endswith("。") and c.token_count <= 40 for c in chunks)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"chunk_size": 100, "chunk_overlap": 100}, "must be smaller than chunk_size"),
        ({"chunk_size": 100, "chunk_overlap": 150}, "must be smaller than chunk_size"),
        ({"chunk_size": 100, "chunk_overlap": -1}, "0 or more"),
        ({"chunk_size": 0, "chunk_overlap": 0}, "positive"),
        ({"chunk_size": -5, "chunk_overlap": 0}, "positive"),
        ({"chunk_size": "256", "chunk_overlap": 32}, "integer"),
        ({"chunk_size": 256, "chunk_overlap": 3.5}, "integer"),
    ],
)
def test_bad_options_raise_configuration_error(options, message):
    with pytest.raises(ConfigurationError, match=message):
        split_text("some text", **options)
    with pytest.raises(ConfigurationError, match=message):
        Chunker(**options)


def test_chunker_reads_collection_options():
    chunker = Chunker.from_options({"CHUNK_SIZE": 40, "CHUNK_OVERLAP": 4})
    assert (chunker.chunk_size, chunker.chunk_overlap) == (40, 4)
    assert chunker.split_text(ARTICLE) == split_text(ARTICLE, chunk_size=40, chunk_overlap=4)
    assert Chunker.from_options({}) == Chunker(256, 32)


def test_chunk_document_keeps_chunk_metadata_small():
    # The document's own metadata is added by the pipeline; a chunk holds only its heading path,
    # and none when its text comes before any heading (ARTICLE has no heading).
    doc = RagDocument("d", ARTICLE, metadata={"title": "T", "source": "s"}, tags=["x"])
    assert all(c.metadata == {} for c in chunk_document(doc, chunk_size=40, chunk_overlap=4))


def test_estimate_counts_four_ascii_characters_or_one_other_character_per_token():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("日本語") == 3
    assert estimate_tokens("café") == 1 + 1


def test_default_counter_is_the_estimate_without_tiktoken(monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    default_token_counter.cache_clear()
    try:
        assert default_token_counter() is estimate_tokens
    finally:
        default_token_counter.cache_clear()
