"""The reranker protocol, the base class that turns scores into hits, and the checks on scores.

``django_rag.search.rerank`` re-exports everything here; import from there.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..exceptions import QueryError, RerankerError
from ..types import Hit

__all__ = ["ON_ERROR", "BaseReranker", "OptionProblem", "Reranker", "ScoreFunction", "checked_scores"]

# The name the documentation gives for the fallback's warning (the public module's).
logger = logging.getLogger("django_rag.search.rerank")

ScoreFunction = Callable[[str, list[str]], Sequence[float]]

# What a reranker does when it fails: "raise" a RerankerError, or "fallback": log a warning and
# return the hits in retrieval order (the search still answers, unreranked).
ON_ERROR = ("raise", "fallback")


@dataclass(frozen=True)
class OptionProblem:
    """One thing wrong with a backend's options, as ``check_options`` reports it (no backend built).

    ``warning`` problems do not stop the backend from being built (a missing API key: ``migrate``
    must run on machines that hold no secrets); the others would raise ``ConfigurationError``.
    """

    message: str
    hint: str = ""
    warning: bool = False


@runtime_checkable
class Reranker(Protocol):
    """Re-order ``hits`` for ``query``; keep the best ``top_n`` (all when None)."""

    def rerank(self, query: str, hits: Sequence[Hit], top_n: int | None = None) -> list[Hit]: ...


class BaseReranker:
    """Turns per-passage scores into re-ordered hits. Subclasses implement ``scores``.

    ``on_error`` ("raise" or "fallback", ``ON_ERROR`` in settings) says what a failed reranker
    does: raise its ``RerankerError``, or log it and return the first ``top_n`` hits in retrieval
    order with their retrieval scores. A partial or malformed answer is a failure, never a ranking.
    """

    on_error: str = "raise"

    def rerank(self, query: str, hits: Sequence[Hit], top_n: int | None = None) -> list[Hit]:
        if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
            raise QueryError(f"top_n must be a positive integer or None, got {top_n!r}")
        if not hits:
            return []
        try:
            scores = self.scores(query, [hit.content for hit in hits], top_n)
        except RerankerError as exc:
            if self.on_error != "fallback":
                raise
            logger.warning("%r failed; returning the hits in retrieval order: %s", self, exc)
            return list(hits[:top_n])
        # A stable sort: equal scores keep retrieval's order.
        ranked = sorted(scores.items(), key=lambda item: -item[1])
        return [dataclasses.replace(hits[index], score=score) for index, score in ranked[:top_n]]

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[OptionProblem]:
        """What is wrong with ``options`` (settings keys, any case), without building the backend.

        System checks call this for every ``RAG["RERANKERS"]`` entry; a backend that has nothing
        to check returns no problem.
        """
        return []

    def scores(self, query: str, texts: list[str], top_n: int | None) -> dict[int, float]:
        """Relevance of ``texts[i]`` to ``query`` by index; may leave out texts below the ``top_n``."""
        raise NotImplementedError


def checked_scores(
    results: Sequence[tuple[Any, Any]], count: int, expected: int, where: str
) -> dict[int, float]:
    """``{index: score}`` from a reranker's ``(index, score)`` pairs, or a ``RerankerError``.

    Each index must be an int in ``range(count)`` given once, each score a finite number, and
    there must be ``expected`` of them: a missing, repeated or made-up index, a NaN or a string
    would otherwise become a plausible but wrong ranking.
    """
    scores: dict[int, float] = {}
    for index, score in results:
        # numbers.Integral: a numpy integer from a local model is an index too; 1.0 or True is not.
        if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not 0 <= int(index) < count:
            raise RerankerError(f"{where} returned an unexpected result index {index!r} for {count} texts")
        if int(index) in scores:
            raise RerankerError(f"{where} returned result index {index} twice")
        if isinstance(score, bool) or not isinstance(score, numbers.Real) or not math.isfinite(score):
            raise RerankerError(f"{where} returned a score that is not a finite number: {score!r}")
        scores[int(index)] = float(score)
    if len(scores) != expected:
        raise RerankerError(f"{where} returned {len(scores)} results; expected {expected}")
    return scores
