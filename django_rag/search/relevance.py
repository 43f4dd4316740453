"""One calibrated relevance per hit, in [0, 1], that means the same across queries and modes.

Raw scores do not: a cosine of 0.35 is a strong match for one query and noise for another
(some queries sit close to everything), BM25 grows with the query's length and its words'
rarity, and a hybrid score is a sum of reciprocal ranks, which every query has whether or not
anything matches. Two pieces of evidence are calibrated here instead:

- **Meaning** (vector and hybrid): how far a hit's cosine similarity rises above the query's
  similarity to text that does not answer it. That background is measured per embedding space
  on ``REFERENCE_TEXTS`` (sentences on many subjects, embedded once per space and cached in the
  process): its centre for this query is the query's similarity to their mean vector, its
  spread the standard deviation of the similarities between unrelated reference texts. The
  rise is counted in those standard deviations (``z``). The best of N unrelated chunks rises
  by chance to about ``chance_peak(N)`` deviations (the expected maximum of N normal draws), so
  a collection's size is allowed for: ``z - chance_peak(N)`` becomes a relevance through a
  logistic curve, 0.5 at that peak: a hit is shown when it beats what chance alone would put
  at the top. N is the collection's number of chunks in the space (``space_counts``, cached
  ``SIZE_TTL`` seconds per process).
- **Words** (text and hybrid): the share of the query's IDF-weighted terms the chunk holds
  (``Hit.text_match``, a BM25 score divided by what a chunk holding each query term once would
  score). It becomes a relevance through a logistic curve centred on ``TEXT_MIDPOINT``.

A hybrid hit combines the two as independent evidence (``combined``: a noisy-OR, 1 - (1 - m)(1 - w)):
either a strong match in meaning or most of the query's words is a reason to show it, and a hit
with some of each is surer than with either alone. The default cutoff ``RAG["MIN_SCORE"]`` (0.5: the
midpoint of both curves) drops hits no better than chance; ``min_score`` overrides it per
search, on the same scale in every mode (0 keeps every hit).
"""

from __future__ import annotations

import hashlib
import math
import operator
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from django.core.cache import DEFAULT_CACHE_ALIAS, caches

from ..conf import on_rag_change, rag_settings
from ..embedders.base import Embedder
from ..exceptions import ConfigurationError
from ..models import Collection
from ..stores import VectorStore
from ..types import Hit
from .reference import REFERENCE_TEXTS

__all__ = [
    "DEFAULT_MIN_SCORE",
    "TEXT_MIDPOINT",
    "Background",
    "apply_relevance",
    "background_for",
    "chance_peak",
    "collection_size",
    "default_min_score",
    "text_relevance",
    "unit_vector",
    "vector_relevance",
]

DEFAULT_MIN_SCORE = 0.5
# A hit exactly as far above the query's background as the best chance match of its collection
# is as likely relevant as not (relevance 0.5); VECTOR_SLOPE deviations more or less move the
# odds by a factor e.
VECTOR_SLOPE = 0.75
SIZE_TTL = 300.0
# The share of the query's weighted words a chunk must hold for relevance 0.5: most of them.
# Sharing words is weaker evidence than sharing meaning (questions on other subjects share
# common words with many chunks), so words alone count only when nearly all are there.
TEXT_MIDPOINT = 0.8
TEXT_SLOPE = 0.05
# Each reference text is compared with this many next ones (wrapping round) for the spread.
_PAIRS_PER_TEXT = 16
_MIN_SPREAD = 1e-6
# Another reference set is another background: the cache key changes with the texts.
_REFERENCE_KEY = hashlib.sha1("\n".join(REFERENCE_TEXTS).encode()).hexdigest()[:12]
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Background:
    """An embedding space's unrelated text: its mean (unit) vector and the spread of similarities."""

    space: str
    mean: tuple[float, ...]
    spread: float

    def centre(self, query: Sequence[float]) -> float:
        """The similarity ``query`` has to unrelated text, on average."""
        return _dot(query, self.mean)


_cache: dict[str, Background] = {}
_lock = threading.Lock()


@on_rag_change
def _forget() -> None:
    _cache.clear()
    _sizes.clear()


def background_for(embedder: Embedder) -> Background:
    """The space's background, embedded on first use and kept for the life of the process, and
    in Django's default cache so that other processes of the site (with a shared cache) skip it."""
    found = _cache.get(embedder.space)
    if found is not None:
        return found
    with _lock:
        found = _cache.get(embedder.space)
        if found is None:
            key = f"django_rag:relevance:{_REFERENCE_KEY}:{embedder.space}"
            shared = caches[DEFAULT_CACHE_ALIAS].get(key)
            if isinstance(shared, Background) and shared.space == embedder.space:
                found = shared
            else:
                found = _measure(embedder)
                caches[DEFAULT_CACHE_ALIAS].set(key, found, timeout=None)
            _cache[embedder.space] = found
    return found


def _measure(embedder: Embedder) -> Background:
    vectors = [unit_vector(v) for v in embedder.embed_documents(list(REFERENCE_TEXTS))]
    n = len(vectors)
    similarities = [
        _dot(vectors[i], vectors[(i + step) % n]) for i in range(n) for step in range(1, _PAIRS_PER_TEXT + 1)
    ]
    mean = sum(similarities) / len(similarities)
    spread = math.sqrt(sum((s - mean) ** 2 for s in similarities) / len(similarities))
    if spread < _MIN_SPREAD:
        raise ConfigurationError(
            f"embedder {embedder.space!r} gives the same vector to unrelated texts; relevance "
            "cannot be calibrated: check its MODEL and MODEL_PATH"
        )
    centre = [sum(column) / n for column in zip(*vectors, strict=True)]
    return Background(space=embedder.space, mean=tuple(centre), spread=spread)


def chance_peak(chunks: int) -> float:
    """How many deviations above its background the best of ``chunks`` unrelated chunks reaches,
    on average: the expected maximum of that many standard normal draws (Blom's approximation)."""
    if chunks < 2:
        return 0.0
    return _NORMAL.inv_cdf((chunks - 0.375) / (chunks + 0.25))


def vector_relevance(similarity: float, centre: float, spread: float, chunks: int) -> float:
    """The relevance of a cosine ``similarity`` for a query whose background is ``centre``,
    ``spread``, among ``chunks`` chunks."""
    z = (similarity - centre) / spread
    return _logistic((z - chance_peak(chunks)) / VECTOR_SLOPE)


_sizes: dict[tuple[str, int, str], tuple[float, int]] = {}


def collection_size(store: VectorStore, collection: Collection, space: str) -> int:
    """The collection's chunks in ``space``, counted at most every ``SIZE_TTL`` seconds."""
    key = (store.using, collection.pk, space)
    now = time.monotonic()
    found = _sizes.get(key)
    if found is None or now - found[0] > SIZE_TTL:
        found = _sizes[key] = (now, store.space_counts(collection).get(space, (0, 0))[0])
    return found[1]


def combined(meaning: float, words: float) -> float:
    """A hybrid hit's relevance from its meaning and words relevances, as independent evidence.

    The larger of the two (the rule before) treats them as one piece of evidence counted twice;
    a passage that matches the query's meaning somewhat and holds many of its words is a better
    match than either alone says. Each alone still gives its own value (the other is 0).
    """
    return 1.0 - (1.0 - meaning) * (1.0 - words)


def text_relevance(text_match: float) -> float:
    """The relevance of holding ``text_match`` (0 to 1) of the query's weighted words."""
    if text_match <= 0.0:
        return 0.0
    return _logistic((text_match - TEXT_MIDPOINT) / TEXT_SLOPE)


def default_min_score() -> float:
    """``RAG["MIN_SCORE"]``: the cutoff when a search gives no ``min_score`` (None: no cutoff)."""
    value = rag_settings.MIN_SCORE
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ConfigurationError(f"RAG['MIN_SCORE'] must be a number between 0 and 1 or None, got {value!r}")
    return float(value)


def apply_relevance(
    hits: list[Hit],
    query: Sequence[float] | None,
    embedder: Embedder,
    min_score: float | None,
    *,
    chunks: int = 0,
) -> list[Hit]:
    """Set each hit's ``relevance``; keep those at or above ``min_score`` (default: ``RAG["MIN_SCORE"]``).

    ``chunks`` is the number of chunks searched (the collection's, in the embedder's space).
    """
    floor = default_min_score() if min_score is None else min_score
    centre = spread = 0.0
    if query is not None and any(hit.similarity is not None for hit in hits):
        background = background_for(embedder)
        centre, spread = background.centre(unit_vector(query)), background.spread
    kept = []
    for hit in hits:
        relevance = 0.0
        if hit.similarity is not None and spread:
            relevance = vector_relevance(hit.similarity, centre, spread, chunks)
        if hit.text_match is not None:
            relevance = combined(relevance, text_relevance(hit.text_match))
        hit.relevance = relevance
        if relevance >= floor:
            kept.append(hit)
    return kept


def _logistic(x: float) -> float:
    if x < -60.0:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(map(operator.mul, a, b)))


def unit_vector(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector as it is)."""
    norm = math.sqrt(_dot(vector, vector))
    return [x / norm for x in vector] if norm else list(vector)
