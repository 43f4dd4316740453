"""Rerankers: re-score search hits with a model that reads the query and each passage together.

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
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import requests
from django.utils.module_loading import import_string

from ..backends import load_backend
from ..conf import on_rag_change, rag_settings
from ..exceptions import ConfigurationError, QueryError, RerankerError
from ..retry import RetryPolicy, TransientFailure, is_transient_status, retry_after_seconds, retry_call
from ..types import Hit
from ..validation import shown

__all__ = ["BaseReranker", "CallableReranker", "HTTPReranker", "Reranker", "get_reranker", "load_reranker"]

ScoreFunction = Callable[[str, list[str]], Sequence[float]]


@runtime_checkable
class Reranker(Protocol):
    """Re-order ``hits`` for ``query``; keep the best ``top_n`` (all when None)."""

    def rerank(self, query: str, hits: Sequence[Hit], top_n: int | None = None) -> list[Hit]: ...


class BaseReranker:
    """Turns per-passage scores into re-ordered hits. Subclasses implement ``scores``."""

    def rerank(self, query: str, hits: Sequence[Hit], top_n: int | None = None) -> list[Hit]:
        if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
            raise QueryError(f"top_n must be a positive integer or None, got {top_n!r}")
        if not hits:
            return []
        scores = self.scores(query, [hit.content for hit in hits], top_n)
        # A stable sort: equal scores keep retrieval's order.
        ranked = sorted(scores.items(), key=lambda item: -item[1])
        return [dataclasses.replace(hits[index], score=score) for index, score in ranked[:top_n]]

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
        return {index: float(value) for index, value in enumerate(values)}


class HTTPReranker(BaseReranker):
    """Rerank through a Cohere-style HTTP API (Cohere, Jina, Infinity, Mixedbread, ...).

    Sends ``POST {"model", "query", "documents": [...], "top_n"}`` to ``URL`` and reads
    ``{"results": [{"index": i, "relevance_score": s}, ...]}``. Options: MODEL, URL, API_KEY
    (sent as a bearer token; omitted when None), TIMEOUT, MAX_RETRIES, BACKOFF_BASE,
    BACKOFF_MAX. Rate limits, 5xx, timeouts and connection errors are retried like the
    OpenAI backends (see ``django_rag.retry``); other refusals fail at once.
    """

    def __init__(
        self,
        *,
        model: str = "rerank-v3.5",
        url: str = "https://api.cohere.com/v2/rerank",
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"HTTPReranker URL must be an http(s) URL, got {url!r}")
        if timeout <= 0:
            raise ConfigurationError("HTTPReranker needs TIMEOUT > 0")
        self.model = model
        self.url = url
        self.api_key = api_key
        self.timeout = float(timeout)
        self.retry_policy = RetryPolicy(int(max_retries), float(backoff_base), float(backoff_max))

    @functools.cached_property
    def session(self) -> requests.Session:
        session = requests.Session()
        session.headers["Content-Type"] = "application/json"
        if self.api_key:
            session.headers["Authorization"] = f"Bearer {self.api_key}"
        return session

    def scores(self, query: str, texts: list[str], top_n: int | None) -> dict[int, float]:
        payload: dict[str, Any] = {"model": self.model, "query": query, "documents": texts}
        if top_n is not None:
            payload["top_n"] = min(top_n, len(texts))
        body = retry_call(
            lambda: self._post(payload), self.retry_policy, where=self._where, error=RerankerError
        )
        try:
            results = [(int(item["index"]), float(item["relevance_score"])) for item in body["results"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise RerankerError(
                f"{self._where()} returned an unusable response (expected results[].index and "
                f".relevance_score): {exc!r}"
            ) from exc
        scores: dict[int, float] = {}
        for index, score in results:
            if not 0 <= index < len(texts) or index in scores:
                raise RerankerError(f"{self._where()} returned an unexpected result index {index}")
            scores[index] = score
        return scores

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
        return f"reranker {self.model!r} at {self.url}"

    def __repr__(self) -> str:
        return f"<HTTPReranker {self.model} {self.url}>"


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
