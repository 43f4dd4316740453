"""The chunker streams: every character is counted a bounded number of times, in bounded calls.

Time and memory are measured in bench/chunking.py; here the same properties are checked exactly,
by counting what the chunker asks its token counter, which a slow machine cannot make flaky.
"""

from __future__ import annotations

import random

import pytest

from django_rag.embedders.local import LocalEmbedder
from django_rag.ingest.chunking import MAX_COUNT_CHARS, iter_chunks, split_text


def words(text: str) -> int:
    return len(text.split())


class Metered:
    """A batch word counter that records how many characters it was asked to count, and the largest."""

    def __init__(self) -> None:
        self.chars = 0
        self.largest = 0

    def __call__(self, texts: list[str]) -> list[int]:
        for text in texts:
            self.chars += len(text)
            self.largest = max(self.largest, len(text))
        return [words(t) for t in texts]


def article(paragraphs: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    vocabulary = [f"word{i}" for i in range(500)]

    def sentence() -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(4, 30))) + "."

    blocks = []
    for _ in range(paragraphs):
        lines = [" ".join(sentence() for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


@pytest.mark.parametrize("additive", [True, False])
def test_counting_work_is_linear_in_the_text_and_no_call_is_unbounded(additive: bool) -> None:
    ratios = []
    for paragraphs in (200, 2000):
        text = article(paragraphs)
        meter = Metered()
        chunks = list(
            iter_chunks(
                text,
                chunk_size=64,
                chunk_overlap=8,
                token_counter=words,
                batch_counter=meter,
                additive=additive,
            )
        )
        assert all(0 < c.token_count == words(c.content) <= 64 for c in chunks)
        ratios.append(meter.chars / len(text))
        assert meter.largest <= MAX_COUNT_CHARS
    # Characters counted per character of text: the same for 10x the text (no quadratic term).
    assert ratios[1] < ratios[0] * 1.2
    assert ratios[1] < (3.5 if additive else 6)


def test_the_first_chunk_comes_before_the_text_is_counted() -> None:
    text = article(20_000)  # about 4 MB
    meter = Metered()
    stream = iter_chunks(
        text, chunk_size=64, chunk_overlap=8, token_counter=words, batch_counter=meter, additive=True
    )
    first = next(stream)
    assert first.index == 0 and meter.chars < 4 * MAX_COUNT_CHARS < len(text) / 10


def test_one_giant_paragraph_and_a_giant_word_are_cut_before_they_are_counted() -> None:
    text = ("lorem ipsum dolor " * 100_000) + ("x" * 300_000)
    meter = Metered()
    chunks = list(iter_chunks(text, chunk_size=50, chunk_overlap=5, token_counter=words, batch_counter=meter))
    assert meter.largest <= MAX_COUNT_CHARS
    assert all(c.token_count <= 50 for c in chunks)
    assert sum(c.content.count("x") for c in chunks) == 300_000


def test_an_additive_counter_gives_the_chunks_the_recounting_path_gives() -> None:
    text = article(300) + "\f" + article(50, seed=9)
    assert split_text(text, chunk_size=40, chunk_overlap=6, token_counter=words, additive=True) == split_text(
        text, chunk_size=40, chunk_overlap=6, token_counter=words
    )


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder()


TRICKY = [
    "",
    " ",
    "[CLS] a literal special token",
    "control\x01char",
    "next\x85line",
    "café au lait",
    "日本語の文です。次の文です\uff01",
    "zero\u200bwidth space",
    "x" * 300,
    "don't stop-believing!!",
    "\u00a0nbsp\u3000ideographic space",
    "Ünïcödé TEST",
    "tab\there\nnew\rline",
    "emoji 😀 ok",
    "line\u2028separator",
    "MCM2\u20137 hexamers (\u2265 3.5 \u00b5m)",
    "The THE tHe the. DNA-binding, NF-\u03baB (p<0.05); 3.5\u00b5m",
    "K\u212a \u0130stanbul caf\u00e9;\u0301x (\u00b5) a\u00a0b Greek\u037equestion",
    "\uff08\u5168\u89d2\uff09\u3002\u201cquoted\u201d \u2014 dash\u2026 end.",
    "\u00e9" * 120 + " " + "Ab" * 80 + " " + "x1" * 50 + " " + "qzxv" * 5,
    "unaffable ##able telecommunications 1234567890123 xylophonist deoxyribonucleic zzzzqqq",
    # Control characters, looked for in the encoded batch: those bytes.split takes for spaces
    # (BERT deletes them, joining the words), next to U+0080-U+00BF, which share their lead
    # byte, NUL (what the batch's texts are joined by), DEL; an added token across two texts.
    "vertical\x0btab and form\x0cfeed",
    "\u00b1 2 \u00b0C \u00bf \u0080\u009f\u00a0 end",
    "nul\x00byte del\x7f",
    "half an added token [CL",
    "S] and the other half",
]


def test_the_batch_counter_agrees_with_the_tokenizer_exactly(local: LocalEmbedder) -> None:
    texts = [*TRICKY, article(30)]
    texts += [" ".join(random.Random(i).sample(TRICKY + article(3).split(), 12)) for i in range(50)]
    expected = [local.count_tokens(t) for t in texts]
    assert local.count_tokens_batch(texts) == expected
    assert local.count_tokens_batch(texts) == expected  # again, every word remembered
    assert [local.count_tokens_batch([t])[0] for t in texts] == expected
    assert local.tokens_add_up


def test_a_batch_of_new_non_ascii_words_is_counted_as_the_tokenizer_counts_it(local: LocalEmbedder) -> None:
    # Many new non-ASCII words in one batch are normalized and pre-tokenized together (invalid
    # UTF-8 read as Latin-1, random symbols): accents, CJK, combining marks, a no-break space,
    # a final sigma, a dotted capital I, emoji with a skin tone, a zero-width space.
    alphabet = (
        "aAz09\u00e9\u00c9\u00fc\u00df\u0130\u0131\u03a3\u03c3\u03c2\u0391\u03ac\u00f1\u4e2d\u6587\ud55c"
        "\u0301\u200b\u00a0\u20ac\u00a9\u2122\u00bf\u00ab\u2014\u2026\U0001f600\U0001f3fd\uff46\ufffd\u00ff\u00c3\u00e2"
    )
    rng = random.Random(24)
    texts = [
        " ".join("".join(rng.choices(alphabet, k=rng.randint(1, 14))) for _ in range(rng.randint(1, 60)))
        for _ in range(200)
    ]
    assert local.count_tokens_batch(texts) == [local.count_tokens(t) for t in texts]


def varied_text() -> str:
    """Paragraphs short and long, of one line and of several, in English, French and Japanese,
    some in title case, with odd sentence ends, over three pages."""
    rng = random.Random(11)
    english = article(12, seed=5).split("\n\n")
    french = [
        "Le caf\u00e9 \u00e9tait fort\u2026 \u00ab Vraiment ? \u00bb Oui !",
        "L\u2019\u00e9t\u00e9 finit.",
    ]
    odd = ['He said "stop." Then left.)', "Wait... what?! (Really.) Yes.", "v1.2.3 is out.Next line"]
    japanese = ["\u65e5\u672c\u8a9e\u306e\u6587\u3067\u3059\u3002\u6b21\u306e\u6587\uff01" * 9]
    blocks = []
    for _ in range(45):
        kind = rng.choice([english, english, french, odd, japanese])
        lines = [" ".join(rng.choices(kind, k=rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        block = "\n".join(lines)
        blocks.append(block.title() if rng.random() < 0.2 else block)
    pages = ["\n\n".join(blocks[i : i + 15]) for i in range(0, 45, 15)]
    return "\f".join(pages)


@pytest.mark.parametrize(("size", "overlap"), [(128, 16), (256, 32), (64, 40)])
def test_summing_the_local_counts_gives_the_chunks_counting_every_chunk_gives(
    local: LocalEmbedder, size: int, overlap: int
) -> None:
    # The fast path (pieces counted once, in batches, and summed) against the plain one (every
    # piece and every chunk counted by the tokenizer itself): the same chunks, the same counts.
    text = varied_text()
    fast = split_text(
        text,
        chunk_size=size,
        chunk_overlap=overlap,
        token_counter=local.count_tokens,
        batch_counter=local.count_tokens_batch,
        additive=local.tokens_add_up,
    )
    assert fast == split_text(text, chunk_size=size, chunk_overlap=overlap, token_counter=local.count_tokens)
    assert all(c.token_count == local.count_tokens(c.content) for c in fast)


def test_chunks_counted_with_the_local_tokenizer_fit_the_model(local: LocalEmbedder) -> None:
    text = article(400) + "\f" + "日本語の文です。" * 300 + "\n\n" + "y" * 5000
    chunks = split_text(
        text,
        chunk_size=128,
        chunk_overlap=16,
        token_counter=local.count_tokens,
        batch_counter=local.count_tokens_batch,
        additive=local.tokens_add_up,
    )
    assert all(0 < c.token_count == local.count_tokens(c.content) <= 128 for c in chunks)
    assert all(text[c.char_start : c.char_end] == c.content for c in chunks)


def test_the_overlap_of_one_line_paragraphs_is_not_counted_again() -> None:
    sentence = "one two three four five six seven eight. "
    paragraphs = [" ".join([sentence] * random.Random(i).randint(2, 6)).strip() for i in range(40)]
    text = "\n\n".join(paragraphs)
    counted: list[str] = []

    def batch(texts: list[str]) -> list[int]:
        counted.extend(texts)
        return [words(t) for t in texts]

    chunks = split_text(
        text, chunk_size=64, chunk_overlap=16, token_counter=words, batch_counter=batch, additive=True
    )
    assert len(chunks) > 10 and all(c.token_count <= 64 for c in chunks)
    # Every sentence counted once (the paragraph breaks between them at most), the overlap too.
    assert len(text) - 2 * text.count("\n\n") <= sum(map(len, counted)) <= len(text)
