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

import dataclasses
import functools
import logging
import math
import numbers
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import requests
from django.utils.module_loading import import_string

from ..backends import load_backend
from ..conf import on_rag_change, rag_settings
from ..exceptions import ConfigurationError, QueryError, RerankerError
from ..retry import RetryPolicy, TransientFailure, is_transient_status, retry_after_seconds, retry_call
from ..types import Hit
from ..validation import shown

__all__ = [
    "ON_ERROR",
    "BaseReranker",
    "CallableReranker",
    "HTTPReranker",
    "OptionProblem",
    "Reranker",
    "checked_scores",
    "get_reranker",
    "load_reranker",
    "resolve_reranker",
]

logger = logging.getLogger(__name__)

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


class HTTPReranker(BaseReranker):
    """Rerank through a Cohere-style HTTP API (Cohere, Jina, Infinity, Mixedbread, ...).

    Sends ``POST {"model", "query", "documents": [...], "top_n"}`` to ``URL`` and reads
    ``{"results": [{"index": i, "relevance_score": s}, ...]}``. Options: MODEL, URL, API_KEY
    (sent as a bearer token; omitted when None), TIMEOUT, MAX_RETRIES, BACKOFF_BASE,
    BACKOFF_MAX, ON_ERROR ("raise" or "fallback"). Rate limits, 5xx, timeouts and connection
    errors are retried like the OpenAI backends (see ``django_rag.retry``); other refusals fail
    at once. The provider backends of ``django_rag.search.rerankers`` subclass it, each with its
    own wire format (``_payload`` and ``_results``).
    """

    default_model: ClassVar[str | None] = "rerank-v3.5"
    default_url: ClassVar[str] = "https://api.cohere.com/v2/rerank"
    # Environment variables read, in order, when API_KEY is not set (none for the generic backend).
    key_variables: ClassVar[tuple[str, ...]] = ()
    # Whether the service refuses requests without a key (a system check warns when none is set).
    needs_key: ClassVar[bool] = False
    # The most texts one request may carry; longer lists are sent in several requests.
    max_batch: ClassVar[int | None] = None
    _options: ClassVar[frozenset[str]] = frozenset(
        {"model", "url", "api_key", "timeout", "max_retries", "backoff_base", "backoff_max", "on_error"}
    )

    def __init__(
        self,
        *,
        model: str | None = None,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        on_error: str = "raise",
    ) -> None:
        options = {"model": model, "url": url, "timeout": timeout, "on_error": on_error}
        options.update(max_retries=max_retries, backoff_base=backoff_base, backoff_max=backoff_max)
        errors = [p for p in self.check_options(options) if not p.warning]
        if errors:
            raise ConfigurationError(f"{type(self).__name__}: {errors[0].message}")
        self.model = model if model is not None else self.default_model
        self.url = url or self.default_url
        self.api_key = api_key or next(
            (os.environ[name] for name in self.key_variables if os.environ.get(name)), None
        )
        self.timeout = float(timeout)
        self.on_error = on_error
        self.retry_policy = RetryPolicy(int(max_retries), float(backoff_base), float(backoff_max))

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[OptionProblem]:
        given = {str(key).lower(): value for key, value in options.items()}
        name = cls.__name__
        problems = [
            OptionProblem(
                f"{name} has no option {key.upper()!r}",
                f"Its options are {', '.join(sorted(o.upper() for o in cls._options))}.",
            )
            for key in sorted(set(given) - cls._options - {"backend"})
        ]
        url = given.get("url") or cls.default_url
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            problems.append(
                OptionProblem(f"{name} URL must be an http(s) URL, got {url!r}", "e.g. " + cls.default_url)
            )
        model = given.get("model")
        if model is not None and (not isinstance(model, str) or not model.strip()):
            problems.append(OptionProblem(f"{name} MODEL must be a non-empty string, got {model!r}"))
        timeout = given.get("timeout", 30.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            problems.append(OptionProblem(f"{name} needs TIMEOUT > 0 (seconds), got {timeout!r}"))
        for key in ("max_retries", "backoff_base", "backoff_max"):
            value = given.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                problems.append(OptionProblem(f"{name} {key.upper()} must be a number >= 0, got {value!r}"))
        on_error = given.get("on_error", "raise")
        if on_error not in ON_ERROR:
            problems.append(
                OptionProblem(
                    f"{name} ON_ERROR must be 'raise' or 'fallback', got {on_error!r}",
                    "'fallback' returns the hits unreranked, in retrieval order, when the reranker fails.",
                )
            )
        if (
            cls.needs_key
            and not given.get("api_key")
            and not any(os.environ.get(v) for v in cls.key_variables)
        ):
            problems.append(
                OptionProblem(
                    f"{name} has no API key: set API_KEY or {' or '.join(cls.key_variables)}",
                    "Until then every reranked search fails (or falls back with ON_ERROR 'fallback').",
                    warning=True,
                )
            )
        return problems

    @functools.cached_property
    def session(self) -> requests.Session:
        session = requests.Session()
        session.headers["Content-Type"] = "application/json"
        if self.api_key:
            session.headers["Authorization"] = f"Bearer {self.api_key}"
        return session

    def scores(self, query: str, texts: list[str], top_n: int | None) -> dict[int, float]:
        if self.needs_key and not self.api_key:
            raise RerankerError(
                f"{self._where()} has no API key; set API_KEY in RAG['RERANKERS'] or "
                f"{' or '.join(self.key_variables)}"
            )
        size = self._batch() or len(texts)
        if size >= len(texts):
            return self._scores(query, texts, top_n)
        # A server with a batch limit scores every text in slices; top_n is applied afterwards.
        scores: dict[int, float] = {}
        for start in range(0, len(texts), size):
            part = self._scores(query, texts[start : start + size], None)
            scores.update((start + index, score) for index, score in part.items())
        return scores

    def _batch(self) -> int | None:
        """The most texts one request may carry (None: no limit)."""
        return self.max_batch

    def _scores(self, query: str, texts: list[str], top_n: int | None) -> dict[int, float]:
        wanted = len(texts) if top_n is None else min(top_n, len(texts))
        payload = self._payload(query, texts, None if top_n is None else wanted)
        body = retry_call(
            lambda: self._post(payload), self.retry_policy, where=self._where, error=RerankerError
        )
        try:
            results = self._results(body)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RerankerError(
                f"{self._where()} returned an unusable response ({self._shape}): {exc!r}"
            ) from exc
        return checked_scores(results, len(texts), wanted, self._where())

    _shape = "expected results[].index and .relevance_score"

    def _payload(self, query: str, texts: list[str], top_n: int | None) -> dict[str, Any]:
        """The request body (Cohere's /v2/rerank and the many servers that copy it)."""
        payload: dict[str, Any] = {"model": self.model, "query": query, "documents": texts}
        if top_n is not None:
            payload["top_n"] = top_n
        return payload

    def _results(self, body: Any) -> list[tuple[Any, Any]]:
        """``(index, score)`` pairs from the response body, unchecked (``checked_scores`` checks)."""
        return [(item["index"], item["relevance_score"]) for item in body["results"]]

    def _post(self, payload: dict[str, Any]) -> Any:
        try:
            response = self.session.post(self.url, json=payload, timeout=self.timeout)
        except requests.Timeout as exc:
            raise TransientFailure(f"timed out after {self.timeout:g}s") from exc
        except requests.ConnectionError as exc:
            raise TransientFailure(f"connection error: {exc}") from exc
        if response.status_code >= 400:
            detail = _detail(response)
            if is_transient_status(response.status_code):
                raise TransientFailure(
                    f"HTTP {response.status_code}: {detail}",
                    retry_after=retry_after_seconds(response.headers),
                )
            if response.status_code in (401, 403):
                raise RerankerError(
                    f"{self._where()} refused the API key ({response.status_code}: {detail}); "
                    "check API_KEY in RAG['RERANKERS']"
                )
            raise RerankerError(
                f"{self._where()} rejected the request (HTTP {response.status_code}: {detail})"
            )
        try:
            return response.json()
        except ValueError as exc:
            raise RerankerError(f"{self._where()} returned a body that is not JSON") from exc

    def _where(self) -> str:
        return f"reranker {self.model!r} at {self.url}" if self.model else f"reranker at {self.url}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.model or ''} {self.url}>"


def _detail(response: requests.Response) -> str:
    """The server's message from ``{"message": ...}`` or ``{"error": {"message": ...}}``, else the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):  # Text Embeddings Inference: {"error": "...", "error_type": ...}
            return error
        for key in ("message", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return str(body)[:200]


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
