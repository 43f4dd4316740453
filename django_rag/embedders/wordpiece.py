"""Exact token counts for BERT-style tokenizers, many texts at a time, without encoding them whole.

Counting is what the chunker does most: every character of a document is counted at least once.
A ``tokenizers`` encode builds ids, offsets, masks and strings for every token, about 1-3 MB/s
on the project's 2-core machines, slower than the chunker has to be. A BERT tokenizer
(``BertNormalizer`` that lowercases, ``BertPreTokenizer``, ``WordPiece``: MiniLM, BGE, e5...)
splits text at whitespace and around every punctuation character before WordPiece sees it, so
a text's count is the number of its ASCII punctuation characters plus, for each run of other
characters between ASCII whitespace and punctuation, that word's count, which repeats: words
are counted once and remembered, ASCII ones by WordPiece on the model's vocabulary (here, much
faster than a call), others by the tokenizer itself (in batches). A word may hold any other
character (an accent, CJK, a symbol, a non-ASCII space or punctuation mark): the tokenizer
counts it as written, splitting it further where it must, and nothing it does inside a word
(lowercasing, stripping accents, deleting a zero-width space) reaches across ASCII whitespace
or punctuation.

Only what this shortcut is exact for takes it: texts without control characters (which BERT
deletes, joining what they separate) or the tokenizer's added tokens (``[CLS]`` typed in a
document is one token to the tokenizer); those are counted by the tokenizer whole, in one batch
per call.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["WordPieceCounter"]

# What BERT's pre-tokenizer makes of text, in UTF-8 bytes (counted and translated in C): each
# ASCII punctuation character (every printable one but letters and digits) is a token; blanked
# out, with ASCII letters lowercased (as BertNormalizer does, so "The" and "the" are one word),
# what is left splits at ASCII whitespace into the words.
_PUNCTUATION = bytes(c for c in range(0x21, 0x7F) if not chr(c).isalnum())
_WORDS_ONLY = bytes.maketrans(
    string.ascii_uppercase.encode() + _PUNCTUATION, string.ascii_lowercase.encode() + b" " * len(_PUNCTUATION)
)
# Characters BertNormalizer deletes (control characters but \t \n \r) that Python may treat as
# whitespace: leave texts holding one to the tokenizer.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# The same in UTF-8, looked for in the encoded batch by scans that run at memory speed (``re``
# takes a nanosecond or more per character, even for a literal): the ASCII ones made NULs by
# the translation to words, then counted (``bytes.count``) with the NULs the texts are joined
# by; U+0080-U+009F (0xC2 then 0x80-0x9F) found by ``bytes.find`` from their 0xC2, which
# nothing but U+0080-U+00BF starts (a few signs such as "\u00b1" in most text).
_ASCII_CONTROL = bytes(c for c in range(0x20) if c not in b"\t\n\r") + b"\x7f"
_WORDS_AND_NULS = bytes.maketrans(
    string.ascii_uppercase.encode() + _PUNCTUATION + _ASCII_CONTROL,
    string.ascii_lowercase.encode() + b" " * len(_PUNCTUATION) + b"\x00" * len(_ASCII_CONTROL),
)
_C1_LEAD, _C1_END = b"\xc2", 0xA0
_WORDPIECE_OPTIONS = ("vocab", "continuing_subword_prefix", "max_input_chars_per_word")
_CACHE_LIMIT = 500_000  # words remembered, about 60 MB at most
_LONGEST_CACHED = 100  # bytes
# New non-ASCII words in a batch below which each is counted by its own tokenizer call.
_FEW_NEW_WORDS = 8


def _units(text: str) -> tuple[int, list[bytes]]:
    """The number of ASCII punctuation characters of ``text``, and its words (see the module)."""
    raw = text.encode("utf-8", "surrogatepass")
    return len(raw) - len(raw.translate(None, _PUNCTUATION)), raw.translate(_WORDS_ONLY).split()


def _units_many(raw: bytes, words: bytes) -> tuple[list[int], Iterable[list[bytes]]]:
    """``_units`` of every text of ``raw``, texts without a control character encoded joined by
    NULs, and ``words``, ``raw`` translated by ``_WORDS_AND_NULS``: translated together, the
    per-text work left is a split, in C."""
    lengths = map(len, raw.split(b"\x00"))
    without = map(len, raw.translate(None, _PUNCTUATION).split(b"\x00"))
    punctuation = list(map(operator.sub, lengths, without))
    # Each text's words made when they are summed and dropped after, not all the batch's at once.
    return punctuation, map(bytes.split, words.split(b"\x00"))


class _WordCounts(dict[bytes, int]):
    """Counts of the words seen; a word not seen yet is counted and remembered when looked up
    (``dict.__getitem__`` calls ``__missing__``: a lookup of a known word costs what a plain
    dict's does). At most ``_CACHE_LIMIT`` words, none longer than ``_LONGEST_CACHED`` bytes."""

    def __init__(self, learn: Callable[[bytes], int]) -> None:
        super().__init__()
        self.learn = learn

    def __missing__(self, word: bytes) -> int:
        count = self.learn(word)
        if len(word) <= _LONGEST_CACHED:
            if len(self) >= _CACHE_LIMIT:
                self.clear()  # bounded memory; the words met next are learned again
            self[word] = count
        return count


class WordPieceCounter:
    """Content-token counts (no special tokens) of a BERT-style ``tokenizers.Tokenizer``."""

    def __init__(self, tokenizer: Any, model: Mapping[str, Any]) -> None:
        self.tokenizer = tokenizer
        # The WordPiece model (tokenizer.json's "model"), to count new ASCII words without it.
        vocab = frozenset(model["vocab"])
        self.prefix: str = model["continuing_subword_prefix"]
        # Every prefix of an entry, starting ones and continuing ones (the prefix taken off) apart:
        # WordPiece's longest match is found growing a piece while it still starts an entry,
        # a few tries per piece where trying every length down from the longest entry's took up
        # to 18 (random text with no space ran at 0.6 MB/s).
        prefix = self.prefix
        self.starts = self._prefixes(e for e in vocab if not (prefix and e.startswith(prefix)))
        self.continues = self._prefixes(e[len(prefix) :] for e in vocab if e.startswith(prefix))
        self.max_chars: int = model["max_input_chars_per_word"]
        self.added = [
            token.content for token in tokenizer.get_added_tokens_decoder().values() if token.content
        ]
        self.added_starts = sorted({token[0] for token in self.added})  # "[" for BERT's [CLS], [SEP]...
        self.added_bytes = [token.encode("utf-8", "surrogatepass") for token in self.added]
        self.added_byte_starts = sorted({token[:1] for token in self.added_bytes})
        self.words = _WordCounts(self._learn)  # UTF-8, ASCII letters lowercased
        self.normalize: Callable[[str], str] = tokenizer.normalizer.normalize_str
        self.pre_tokenize: Callable[[str], list[tuple[str, Any]]] = tokenizer.pre_tokenizer.pre_tokenize_str

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> WordPieceCounter | None:
        """A counter for ``tokenizer`` when it is BERT-style (see the module), else None."""
        try:
            config = json.loads(tokenizer.to_str())
        except Exception:  # a tokenizer that cannot describe itself gets no shortcut
            return None
        normalizer = config.get("normalizer") or {}
        model = config.get("model") or {}
        bert = (
            normalizer.get("type") == "BertNormalizer"
            and normalizer.get("lowercase") is True
            and normalizer.get("clean_text") is True
            and (config.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
            and model.get("type") == "WordPiece"
            and all(key in model for key in _WORDPIECE_OPTIONS)
        )
        return cls(tokenizer, model) if bert else None

    def count_many(self, texts: Sequence[str]) -> list[int]:
        raw = "\x00".join(texts).encode("utf-8", "surrogatepass")
        words = raw.translate(_WORDS_AND_NULS)
        # No NUL but the separators: no ASCII control character.
        if words.count(b"\x00") == len(texts) - 1 and self._plain(raw):
            if not raw.isascii():
                self._learn_new(words)
            return self._count_units(*_units_many(raw, words))  # the common case
        # Texts the shortcut is not exact for are counted by the tokenizer whole, the rest here.
        slow = {i for i, text in enumerate(texts) if _CONTROL.search(text) or self._has_added_token(text)}
        units = [(0, []) if i in slow else _units(text) for i, text in enumerate(texts)]
        counts = self._count_units([p for p, _ in units], [words for _, words in units])
        if slow:
            order = sorted(slow)
            for i in order:
                counts[i] += self._encoded(texts[i])
        return counts

    def _count_units(self, punctuation: list[int], words: Iterable[list[bytes]]) -> list[int]:
        """Per text, its punctuation plus its words' counts (each text's words in a list): map
        over maps, the loops over texts and over their words both run in C; a word not seen yet
        is counted where it is met (``_WordCounts.__missing__``), with no pass of its own."""
        sums = map(sum, map(map, itertools.repeat(self.words.__getitem__), words))
        return list(map(operator.add, punctuation, sums))

    def _learn(self, word: bytes) -> int:
        """The count of a new word: ASCII ones (lowercase letters and digits, which the
        normalizer leaves alone) by WordPiece here, ten times faster than a call; others by the
        tokenizer."""
        if word.isascii():
            return self._wordpiece(word.decode())
        return self._encoded(word.decode("utf-8", "surrogatepass"))

    def _learn_new(self, words: bytes) -> None:
        """Learn the new non-ASCII words of a batch (``words``: translated, NUL-separated) at once.

        One tokenizer call per new word costs about 10 us, most of it the call: text where nearly
        every word is new (invalid UTF-8 decoded, random symbols) ran at 0.8 MB/s. The batch's new
        words are normalized and pre-tokenized in one call each, joined by "|" (ASCII punctuation:
        left alone by the normalizer, a piece of its own, in no word), and their pieces counted by
        WordPiece here: what ``encode`` does, without its added-token pass (no word holds one)."""
        known = self.words
        new = [
            word
            for word in set(words.replace(b"\x00", b" ").split())
            if len(word) <= _LONGEST_CACHED and not word.isascii() and word not in known
        ]
        if len(new) < _FEW_NEW_WORDS:
            return  # learned one by one where the sum meets them
        joined = "|".join(word.decode("utf-8", "surrogatepass") for word in new)
        pieces = self.pre_tokenize(self.normalize(joined))
        counts: list[int] = []
        count = 0
        piece_counts: dict[str, int] = {}
        for piece, _ in pieces:
            if piece == "|":
                counts.append(count)
                count = 0
                continue
            tokens = piece_counts.get(piece)
            if tokens is None:
                tokens = piece_counts[piece] = self._wordpiece(piece)
            count += tokens
        counts.append(count)
        if len(counts) != len(new):  # cannot happen (see above); learn them one by one instead
            return
        if len(known) + len(new) > _CACHE_LIMIT:
            known.clear()
        known.update(zip(new, counts, strict=True))

    def _encoded(self, text: str) -> int:
        # One text at a time: a few words or texts per call, where encode_batch costs more in
        # waking its thread pool (CPU time its threads spin, on a shared machine) than it saves.
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def _wordpiece(self, word: str) -> int:
        """Tokens of ``word`` by WordPiece's greedy longest-match-first, as ``tokenizers`` does it."""
        if len(word) > self.max_chars:
            return 1  # [UNK]
        start = count = 0
        length = len(word)
        prefixes = self.starts
        while start < length:
            matched = 0
            end = start + 1
            # Grow the piece while it starts an entry; the longest that is an entry is the match.
            while end <= length:
                state = prefixes.get(word[start:end])
                if state is None:
                    break
                if state:
                    matched = end
                end += 1
            if not matched:
                return 1  # a part no entry matches: the whole word is [UNK]
            start = matched
            count += 1
            prefixes = self.continues
        return count

    @staticmethod
    def _prefixes(entries: Iterable[str]) -> dict[str, bool]:
        """Every prefix of ``entries``, mapped to whether it is an entry itself."""
        entries = list(entries)
        prefixes = {entry[:end]: False for entry in entries for end in range(1, len(entry))}
        prefixes.update(dict.fromkeys(entries, True))
        return prefixes

    def _plain(self, raw: bytes) -> bool:
        """Whether UTF-8 ``raw`` holds no C1 control character and no added token (each looked
        for in C, most often at memory speed)."""
        lead = raw.find(_C1_LEAD)
        while lead >= 0:
            if raw[lead + 1] < _C1_END:
                return False
            lead = raw.find(_C1_LEAD, lead + 2)
        starts = any(map(raw.__contains__, self.added_byte_starts))
        return not (starts and any(map(raw.__contains__, self.added_bytes)))

    def _has_added_token(self, text: str) -> bool:
        # A character test first: most texts hold no "[" at all.
        return any(c in text for c in self.added_starts) and any(token in text for token in self.added)
