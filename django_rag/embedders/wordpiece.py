"""Exact token counts for BERT-style tokenizers, many texts at a time, without encoding them whole.

Counting is what the chunker does most: every character of a document is counted at least once.
A ``tokenizers`` encode builds ids, offsets, masks and strings for every token, about 1-3 MB/s
on the project's 2-core machines, slower than the chunker has to be. A BERT tokenizer
(``BertNormalizer`` that lowercases, ``BertPreTokenizer``, ``WordPiece``: MiniLM, BGE, e5...)
splits text at whitespace and around every punctuation character before WordPiece sees it, so
a text's count is the number of its punctuation characters plus, for each run of letters and
digits, that word's WordPiece count, which repeats: words are counted once by the tokenizer
itself (in batches) and remembered.

Only what this shortcut is exact for takes it: ASCII words of text without control characters
or the tokenizer's added tokens (``[CLS]`` typed in a document is one token to the tokenizer).
Everything else (words with accents, CJK, a text holding a control character) is counted by the
tokenizer, in one batch per call.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["WordPieceCounter"]

# What BERT's pre-tokenizer makes of lowercased ASCII: runs of letters and digits, and each
# punctuation character (every printable character but letters and digits) on its own.
_UNIT = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
# Characters BertNormalizer deletes (control characters but \t \n \r) that Python may treat as
# whitespace or as part of a word, so the shortcut would split differently: leave such texts
# to the tokenizer.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# A whitespace-separated run holding a non-ASCII character (whitespace as Python and BERT both
# see it, once the control characters above are ruled out).
_NON_ASCII_RUN = re.compile(r"\S*[^\x00-\x7f]\S*")
_CACHE_LIMIT = 500_000  # distinct words remembered, about 60 MB at most
_LONGEST_CACHED = 100


class WordPieceCounter:
    """Content-token counts (no special tokens) of a BERT-style ``tokenizers.Tokenizer``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.added = [
            token.content for token in tokenizer.get_added_tokens_decoder().values() if token.content
        ]
        self.added_starts = sorted({token[0] for token in self.added})  # "[" for BERT's [CLS], [SEP]...
        self.words: dict[str, int] = {}

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> WordPieceCounter | None:
        """A counter for ``tokenizer`` when it is BERT-style (see the module), else None."""
        try:
            config = json.loads(tokenizer.to_str())
        except Exception:  # a tokenizer that cannot describe itself gets no shortcut
            return None
        normalizer = config.get("normalizer") or {}
        bert = (
            normalizer.get("type") == "BertNormalizer"
            and normalizer.get("lowercase") is True
            and normalizer.get("clean_text") is True
            and (config.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
            and (config.get("model") or {}).get("type") == "WordPiece"
        )
        return cls(tokenizer) if bert else None

    def count_many(self, texts: Sequence[str]) -> list[int]:
        slow: list[str] = []  # texts or whitespace-separated runs the tokenizer counts itself
        slow_owner: list[int] = []
        blob = "".join(texts)
        if blob.isascii() and not _CONTROL.search(blob) and not self._has_added_token(blob):
            found = [_UNIT.findall(text.lower()) for text in texts]  # the common case, at C speed
        else:
            found = []
            suspect = bool(_CONTROL.search(blob)) or self._has_added_token(blob)
            for i, text in enumerate(texts):
                if suspect and (_CONTROL.search(text) or self._has_added_token(text)):
                    slow.append(text)
                    slow_owner.append(i)
                    found.append([])
                    continue
                if not text.isascii():
                    # Words with a non-ASCII character go to the tokenizer; the rest stays here.
                    runs = _NON_ASCII_RUN.findall(text)
                    slow += runs
                    slow_owner += [i] * len(runs)
                    text = _NON_ASCII_RUN.sub(" ", text)
                found.append(_UNIT.findall(text.lower()))
        get = self.words.__getitem__
        try:
            counts = [sum(map(get, words)) for words in found]
        except KeyError:  # words not seen yet: learn the batch's, in one call to the tokenizer
            self._learn(set(itertools.chain.from_iterable(found)).difference(self.words))
            try:
                counts = [sum(map(get, words)) for words in found]
            except KeyError:  # a word too long to remember
                counts = [sum(self.words.get(w) or self._count_long(w) for w in words) for words in found]
        if slow:
            for i, encoding in zip(
                slow_owner, self.tokenizer.encode_batch(slow, add_special_tokens=False), strict=True
            ):
                counts[i] += len(encoding.ids)
        return counts

    def _has_added_token(self, text: str) -> bool:
        # A character test first: most texts hold no "[" at all.
        return any(c in text for c in self.added_starts) and any(token in text for token in self.added)

    def _learn(self, unknown: set[str]) -> None:
        fresh = [word for word in unknown if len(word) <= _LONGEST_CACHED]
        if not fresh:
            return
        if len(self.words) + len(fresh) > _CACHE_LIMIT:
            self.words.clear()  # bounded memory; the next batches learn the common words again
        encodings = self.tokenizer.encode_batch(fresh, add_special_tokens=False)
        self.words.update(zip(fresh, (len(e.ids) for e in encodings), strict=True))

    def _count_long(self, word: str) -> int:
        return len(self.tokenizer.encode(word, add_special_tokens=False).ids)
