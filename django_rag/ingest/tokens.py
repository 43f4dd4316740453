"""Token counting for the chunker: one fast path, whatever the caller passes.

The chunker counts every character of a document at least once, so how it counts sets its speed.
Every caller goes through :func:`counting`: many texts per call (a batch counter such as
``LocalEmbedder.count_tokens_batch``), and the counter's per-text overhead (special tokens)
taken off once. A caller that passes only ``token_counter=embedder.count_tokens`` gets the
embedder's batch counter too (and its ``tokens_add_up``): the same counts, about 15 times faster
than one tokenizer call per text.

Without a counter, tiktoken's ``cl100k_base`` when it is installed and its data loads
(offline: from tiktoken's cache), else :func:`estimate_tokens`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "BatchCounter",
    "TokenCounter",
    "TokenCounting",
    "counting",
    "default_token_counter",
    "estimate_tokens",
]

TokenCounter = Callable[[str], int]
BatchCounter = Callable[[Sequence[str]], list[int]]


def estimate_tokens(text: str) -> int:
    """Estimate tokens without a tokenizer: ceil(ASCII chars / 4) + one per non-ASCII char.

    English averages about four characters per token in cl100k_base; CJK and other scripts
    take about one token per character or more, so counting them singly keeps chunks of such
    text within a model's context instead of four times over it.
    """
    if text.isascii():
        return math.ceil(len(text) / 4)
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 4) + len(text) - ascii_chars


def _estimate_many(texts: Sequence[str]) -> list[int]:
    return [estimate_tokens(text) for text in texts]


@functools.cache
def default_token_counter() -> TokenCounter:
    """tiktoken's cl100k_base when importable and loadable, else :func:`estimate_tokens`."""
    try:
        import tiktoken  # optional: the estimate serves without it

        encoding = tiktoken.get_encoding("cl100k_base")
    except Exception:  # not installed, or its data is neither cached nor downloadable
        return estimate_tokens

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return count


@dataclass(frozen=True)
class TokenCounting:
    """How the chunker counts: ``many`` texts per call, in content tokens (``overhead`` off).

    ``additive``: counts add up where texts are cut after whitespace (WordPiece, word counts), so
    a chunk's count is the sum of its pieces' and needs no second count.
    """

    batch: BatchCounter
    overhead: int
    additive: bool

    def many(self, texts: Sequence[str]) -> list[int]:
        overhead = self.overhead
        return [n - overhead for n in self.batch(texts)] if texts else []

    def one(self, text: str) -> int:
        return self.batch([text])[0] - self.overhead


def counting(
    token_counter: TokenCounter | None = None,
    batch_counter: BatchCounter | None = None,
    additive: bool = False,
) -> TokenCounting:
    """The one way the chunker counts, from whatever the caller gave.

    ``batch_counter`` wins; else the batch counter of the object ``token_counter`` is a method of
    (an embedder's ``count_tokens`` brings its ``count_tokens_batch`` and ``tokens_add_up``);
    else ``token_counter`` once per text; else the default counter.
    """
    owner = getattr(token_counter, "__self__", None)
    if batch_counter is None and owner is not None:
        batch_method = getattr(owner, "count_tokens_batch", None)
        if callable(batch_method) and getattr(token_counter, "__name__", "") == "count_tokens":
            batch_counter = batch_method
            additive = additive or bool(getattr(owner, "tokens_add_up", False))
    if batch_counter is None:
        count = token_counter or default_token_counter()
        batch_counter = _estimate_many if count is estimate_tokens else functools.partial(_each, count)
    overhead = batch_counter([""])[0]  # special tokens every counted text carries ([CLS], [SEP])
    return TokenCounting(batch_counter, overhead, additive)


def _each(count: TokenCounter, texts: Sequence[str]) -> list[int]:
    return [count(text) for text in texts]
