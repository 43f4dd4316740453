"""Chunks that read like text: sentence and heading boundaries, whole-sentence overlap, heading
paths and contextual headers (issue 21). No database."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from itertools import pairwise

from django_rag.ingest.chunking import Chunker, context_header, split_text
from django_rag.ingest.segments import Heading, Sentence, scan_page
from django_rag.ingest.tokens import counting
from django_rag.types import RagDocument


def words(text: str) -> int:
    return len(text.split())


def sentence(i: int) -> str:
    return f"Sentence {i} tells a short thing about backups."


def paragraph(first: int, n: int) -> str:
    return " ".join(sentence(i) for i in range(first, first + n))


def sentences_of(text: str) -> list[str]:
    return [text[s.start : s.end].strip() for s in scan_page(text, 0, len(text)) if isinstance(s, Sentence)]


def test_every_chunk_starts_and_ends_on_a_sentence_boundary():
    text = "\n\n".join(paragraph(p * 9, 9) for p in range(6))
    chunks = split_text(text, chunk_size=40, chunk_overlap=8, token_counter=words)
    assert len(chunks) > 6
    for chunk in chunks:
        assert chunk.content.startswith("Sentence") and chunk.content.endswith("backups."), chunk.content
        assert words(chunk.content) <= 40


def test_hard_wrapped_lines_do_not_end_a_chunk_mid_sentence():
    # PDF and e-mail text breaks lines inside sentences: a line is no boundary.
    wrapped = re.sub(r"(\S+ \S+ \S+ \S+) ", r"\1\n", paragraph(0, 12))
    chunks = split_text(wrapped, chunk_size=30, chunk_overlap=0, token_counter=words)
    assert len(chunks) > 2
    assert all(c.content.endswith("backups.") for c in chunks)


def test_only_a_sentence_longer_than_a_chunk_is_cut_inside():
    long_one = "This sentence " + "goes on and on " * 40 + "until it ends."
    text = f"{sentence(0)} {sentence(1)} {long_one} {sentence(2)} {sentence(3)}"
    chunks = split_text(text, chunk_size=30, chunk_overlap=0, token_counter=words)
    inside = [c for c in chunks if "goes on" in c.content]
    outside = [c for c in chunks if "goes on" not in c.content]
    assert len(inside) >= 4 and all(words(c.content) <= 30 for c in chunks)
    assert inside[0].content.startswith("This sentence")  # the long sentence opens a chunk
    assert all(c.content.startswith("Sentence") and c.content.endswith("backups.") for c in outside)


def test_abbreviations_initials_and_lowercase_continuations_do_not_end_a_sentence():
    text = (
        "Dr. Smith met J. R. Doe, e.g. at noon. It broke... and then it worked. "
        "See fig. 3 for the U.S. data. Is it ready? Yes! 日本語の文です。次の文です。"
    )
    assert sentences_of(text) == [
        "Dr. Smith met J. R. Doe, e.g. at noon.",
        "It broke... and then it worked.",
        "See fig. 3 for the U.S. data.",
        "Is it ready?",
        "Yes!",
        "日本語の文です。",
        "次の文です。",
    ]


def test_list_items_are_boundaries_even_without_punctuation():
    text = "Plans:\n- Free tier\n- Pro tier\n1. first step\n2. second step"
    assert sentences_of(text) == ["Plans:", "- Free tier", "- Pro tier", "1. first step", "2. second step"]


def test_a_paragraph_that_fits_is_never_split_across_chunks():
    text = "\n\n".join(paragraph(p * 3, 3) for p in range(5))
    chunks = split_text(text, chunk_size=50, chunk_overlap=0, token_counter=words)
    paragraphs = text.split("\n\n")
    for chunk in chunks:
        # Every paragraph the chunk touches is in it whole.
        assert all(part in paragraphs for part in chunk.content.split("\n\n"))


def test_overlap_is_whole_sentences_and_never_a_piece_of_a_long_sentence():
    long_one = "Long " + "word " * 80 + "end."
    text = f"{paragraph(0, 8)} {long_one} {paragraph(8, 8)}"
    chunks = split_text(text, chunk_size=30, chunk_overlap=10, token_counter=words)
    for previous, chunk in pairwise(chunks):
        if chunk.char_start < previous.char_end:
            shared = text[chunk.char_start : previous.char_end].strip()
            assert shared.startswith("Sentence") and shared.endswith("backups."), shared
            assert words(shared) <= 10
            assert "word word" not in shared


MARKDOWN = """# Lumen handbook

Lumen keeps your team's notes.

## Backups

Lumen takes a snapshot every night. It keeps it for 35 days.

### Restores

An owner restores a snapshot to a new workspace.

```
# not a heading: a comment in a code block
```

## Billing

Invoices are issued monthly.
"""


def test_each_chunk_knows_its_heading_path_and_a_heading_starts_a_chunk():
    chunks = split_text(MARKDOWN, chunk_size=200, chunk_overlap=10, token_counter=words)
    paths = [(c.content.splitlines()[0], c.metadata["heading_path"]) for c in chunks]
    assert paths == [
        ("# Lumen handbook", ["Lumen handbook"]),
        ("## Backups", ["Lumen handbook", "Backups"]),
        ("### Restores", ["Lumen handbook", "Backups", "Restores"]),
        ("## Billing", ["Lumen handbook", "Billing"]),
    ]
    assert "# not a heading" in chunks[2].content


def test_the_heading_path_continues_across_chunks_and_pages_and_overlap_stays_in_its_section():
    setup = "# Guide\n\n## Setup\n\n" + paragraph(0, 12) + "\f" + paragraph(12, 4)
    text = setup + "\n\n## Use\n\n" + paragraph(20, 6)
    chunks = split_text(text, chunk_size=30, chunk_overlap=8, token_counter=words)
    for chunk in chunks:
        expected = ["Guide", "Use"] if chunk.char_start > text.index("## Use") - 1 else ["Guide", "Setup"]
        assert chunk.metadata["heading_path"] == expected, chunk.content
    first_of_use = next(c for c in chunks if c.metadata["heading_path"] == ["Guide", "Use"])
    assert first_of_use.content.startswith("## Use")  # nothing of Setup carried over
    assert all("\f" not in c.content for c in chunks)


def test_the_contextual_header_is_embedded_and_counted_but_not_in_the_content():
    doc = RagDocument("handbook.md", MARKDOWN, metadata={"title": "Lumen handbook"})
    chunker = Chunker(chunk_size=40, chunk_overlap=4, token_counter=words, context_headers=True)
    chunks = chunker.chunk_document(doc)
    restores = next(c for c in chunks if "restores a snapshot" in c.content)
    # The title is the first heading here: said once.
    assert restores.header == "Lumen handbook > Backups > Restores"
    assert "Backups" not in restores.content.replace("# Restores", "")
    assert restores.embedded_text == f"{restores.header}\n\n{restores.content}"
    assert restores.content_hash == hashlib.sha1(restores.embedded_text.encode()).hexdigest()
    assert all(c.token_count == words(c.embedded_text) <= 40 for c in chunks)
    assert all(MARKDOWN[c.char_start : c.char_end] == c.content for c in chunks)


def test_without_contextual_headers_the_hash_is_the_contents_as_before():
    doc = RagDocument("handbook.md", MARKDOWN, metadata={"title": "Lumen handbook"})
    for chunk in Chunker(chunk_size=40, chunk_overlap=4, token_counter=words).chunk_document(doc):
        assert chunk.header == ""
        assert chunk.content_hash == hashlib.sha1(chunk.content.encode()).hexdigest()


def test_a_title_that_is_only_the_source_id_is_left_out_of_the_header():
    doc = RagDocument("4380635", "Plain passage. No headings.", metadata={"title": "4380635"})
    [chunk] = Chunker(context_headers=True).chunk_document(doc)
    assert chunk.header == ""
    assert context_header("Manual", ["Manual", "Install"]) == "Manual > Install"
    assert context_header("Manual", ["Install"]) == "Manual > Install"


def test_a_huge_heading_keeps_the_header_within_a_quarter_of_the_chunk():
    text = "# " + "word " * 500 + "\n\nBody sentence here."
    chunks = split_text(text, chunk_size=40, chunk_overlap=0, token_counter=words, title="T")
    assert all(c.token_count <= 40 for c in chunks)
    assert all(words(c.header) <= 10 for c in chunks)


def test_headings_and_sentences_tile_the_page():
    items = list(scan_page(MARKDOWN, 0, len(MARKDOWN)))
    titles = [i.title for i in items if isinstance(i, Heading)]
    assert titles == ["Lumen handbook", "Backups", "Restores", "Billing"]
    covered = "".join(MARKDOWN[i.start : i.end] for i in items)
    assert re.sub(r"\s", "", covered) == re.sub(r"\s", "", MARKDOWN)


class Embedderish:
    """An object with ``count_tokens`` and a batch counter, like ``LocalEmbedder``."""

    def __init__(self) -> None:
        self.single = 0
        self.batches = 0

    def count_tokens(self, text: str) -> int:
        self.single += 1
        return words(text) + 2

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        self.batches += 1
        return [words(t) + 2 for t in texts]

    tokens_add_up = True


def test_a_count_tokens_method_alone_gets_its_batch_counter():
    embedder = Embedderish()
    text = "\n\n".join(paragraph(p * 9, 9) for p in range(40))
    fast = split_text(text, chunk_size=64, chunk_overlap=8, token_counter=embedder.count_tokens)
    assert embedder.single == 0 and embedder.batches > 0
    assert counting(embedder.count_tokens).additive
    slow = split_text(text, chunk_size=64, chunk_overlap=8, token_counter=lambda t: words(t) + 2)
    assert fast == slow
    assert all(c.token_count == words(c.content) + 2 <= 64 for c in fast)
