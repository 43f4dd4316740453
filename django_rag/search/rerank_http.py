"""Rerankers behind an HTTP API: the Cohere-style ``HTTPReranker`` every provider backend builds on.

``django_rag.search.rerank`` re-exports ``HTTPReranker``; the providers are in
``django_rag.search.rerankers``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import requests

from ..exceptions import ConfigurationError, RerankerError
from ..retry import RetryPolicy, TransientFailure, is_transient_status, retry_after_seconds, retry_call
from .rerank_base import ON_ERROR, BaseReranker, OptionProblem, checked_scores

__all__ = ["HTTPReranker"]


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
