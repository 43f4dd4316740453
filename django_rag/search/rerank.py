"""Rerankers: re-score search hits with a model that reads the query and each passage together.

Ready backends: ``django_rag.search.rerankers`` (Cohere, Voyage, Jina, Text Embeddings
Inference) and ``django_rag.search.crossencoder`` (a local ONNX cross-encoder).

A reranker has one method, ``rerank(query, hits, top_n=None) -> list[Hit]``. It returns *new*
``Hit`` objects (``dataclasses.replace``), best first, whose ``score`` is the reranker's score;
``vector_rank`` and ``text_rank`` still tell where retrieval put each hit, and the hits passed
in are left untouched (keep that list if you need the retrieval scores). Configure rerankers in
``RAG["RERANKERS"]`` and fetch one with ``get_reranker``::

    RAG = {"RERANKERS": {
        "default": {"BACKEND": "django_rag.search.rerank.HTTPReranker", "MODEL": "rerank-v3.5",
                    "API_KEY": os.environ["COHERE_API_KEY"]},
        "local": {"BACKEND": "django_rag.search.rerank.CallableReranker", "FUNCTION": "myapp.scoring.score"},
    }}
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

from ..backends import load_backend
from ..conf import on_rag_change, rag_settings
from ..exceptions import ConfigurationError, QueryError, RerankerError
from ..validation import shown
from .rerank_base import ON_ERROR, BaseReranker, OptionProblem, Reranker, ScoreFunction, checked_scores
from .rerank_http import HTTPReranker

__all__ = [
    "ON_ERROR",
    "BaseReranker",
    "CallableReranker",
    "HTTPReranker",
    "OptionProblem",
    "Reranker",
    "ScoreFunction",
    "checked_scores",
    "get_reranker",
    "load_reranker",
    "resolve_reranker",
]


class CallableReranker(BaseReranker):
    """Rerank with a plain function ``func(query, texts) -> [score, ...]`` (higher is better).

    ``function`` may be the callable or its dotted path (``"FUNCTION"`` in settings), so a
    cross-encoder already loaded by the site can serve as the reranker.
    """

    def __init__(self, function: ScoreFunction | str) -> None:
        if isinstance(function, str):
            try:
                function = import_string(function)
            except ImportError as exc:
                raise ConfigurationError(f"cannot import reranker function {function!r}: {exc}") from exc
        if not callable(function):
            raise ConfigurationError(f"CallableReranker needs a callable, got {function!r}")
        self.function: ScoreFunction = function

    def scores(self, query: str, texts: list[str], top_n: int | None) -> dict[int, float]:
        values = list(self.function(query, texts))
        if len(values) != len(texts):
            raise RerankerError(
                f"reranker function {_name(self.function)} returned {len(values)} scores "
                f"for {len(texts)} texts"
            )
        return checked_scores(
            list(enumerate(values)), len(texts), len(texts), f"reranker function {_name(self.function)}"
        )


def _name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or repr(function)


def load_reranker(config: dict[str, Any]) -> Reranker:
    """Build a reranker from ``{"BACKEND": "dotted.path", **options}`` (option names lower-cased)."""
    reranker: Reranker = load_backend(config, "reranker")
    return reranker


@functools.cache
def _cached_reranker(alias: str) -> Reranker:
    rerankers = rag_settings.RERANKERS
    if alias not in rerankers:
        raise ConfigurationError(
            f"no reranker named {alias!r}; RAG['RERANKERS'] defines {sorted(rerankers) or 'none'}"
        )
    return load_reranker(rerankers[alias])


on_rag_change(_cached_reranker.cache_clear)


def get_reranker(reranker: str | dict[str, Any] | Reranker | ScoreFunction = "default") -> Reranker:
    """A reranker from an alias in ``RAG["RERANKERS"]``, a config dict, an instance or a score function.

    This is what a ``rerank=`` option should accept: ``"default"``, ``{"BACKEND": ...}``, a
    ``Reranker``, or ``func(query, texts) -> scores`` (wrapped in ``CallableReranker``).
    """
    if isinstance(reranker, str):
        return _cached_reranker(reranker)
    if isinstance(reranker, dict):
        return load_reranker(reranker)
    if isinstance(reranker, Reranker):
        return reranker
    if callable(reranker):
        return CallableReranker(reranker)
    # A call argument of the wrong kind, not a setting: a QueryError like any other bad search option.
    raise QueryError(
        "rerank must be an alias in RAG['RERANKERS'], a config dict, a Reranker or a score function; "
        f"got {shown(reranker)}"
    )


def resolve_reranker(
    option: str | dict[str, Any] | Reranker | ScoreFunction | bool | None, collection: str | None = None
) -> Reranker | None:
    """The reranker a search runs with, from its ``rerank=`` option and its collection's settings.

    ``None`` (not given): the collection's ``RERANKER`` (an alias of ``RAG["RERANKERS"]``), or
    none. ``False``: none, whatever the collection says (the seed's ``rerank: false``). ``True``:
    the collection's ``RERANKER``, else ``"default"``. Anything else goes to ``get_reranker``.
    """
    if option is False:
        return None
    if option is None or option is True:
        declared = rag_settings.collection_options(collection) if collection else None
        alias = (declared or {}).get("RERANKER")
        if alias is None:
            return get_reranker("default") if option is True else None
        return get_reranker(alias)
    return get_reranker(option)
