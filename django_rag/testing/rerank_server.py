"""Loopback servers that speak the rerank APIs of Cohere, Voyage, Jina and Text Embeddings Inference.

Each server checks requests the way its service does (required fields, unknown fields, the API
key, TEI's batch limit) and scores texts by word overlap with the query, so tests of code that
uses a reranker get a real HTTP exchange, offline and deterministic. Failures, delays and
malformed answers can be injected::

    with RerankServer("voyage", api_key="test") as server:
        reranker = VoyageReranker(url=server.url, api_key="test")
        server.fail_next(1, status=503)
        server.corrupt_next("nan")          # the next answer carries a NaN score
        server.delay_next(seconds=2.0)      # outlasts a TIMEOUT of 1 s
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler
from typing import Any

from .loopback import LoopbackHTTPServer, LoopbackServer

__all__ = ["CORRUPTIONS", "PROVIDERS", "RerankServer", "overlap_scores"]

_WORD = re.compile(r"\w+")

# provider -> (path, fields it accepts, fields it requires)
PROVIDERS: dict[str, tuple[str, frozenset[str], frozenset[str]]] = {
    "cohere": (
        "/v2/rerank",
        frozenset({"model", "query", "documents", "top_n", "max_tokens_per_doc", "return_documents"}),
        frozenset({"model", "query", "documents"}),
    ),
    "voyage": (
        "/v1/rerank",
        frozenset({"model", "query", "documents", "top_k", "return_documents", "truncation"}),
        frozenset({"model", "query", "documents"}),
    ),
    "jina": (
        "/v1/rerank",
        frozenset({"model", "query", "documents", "top_n", "return_documents"}),
        frozenset({"query", "documents"}),
    ),
    "tei": (
        "/rerank",
        frozenset({"query", "texts", "truncate", "raw_scores", "return_text", "truncation_direction"}),
        frozenset({"query", "texts"}),
    ),
}

# What ``corrupt_next`` can do to an answer that is otherwise right.
CORRUPTIONS = (
    "nan",  # one score is NaN (sent as the bare token NaN, as Python's json module writes it)
    "string_score",  # one score is a string
    "index_out_of_range",  # one index points past the texts sent
    "duplicate_index",  # two results carry the same index
    "missing_result",  # one result is left out
    "float_index",  # one index is 1.0 instead of 1
    "not_json",  # the body is not JSON
    "wrong_shape",  # the body is JSON without the results list
)


def overlap_scores(query: str, texts: list[str]) -> list[float]:
    """The share of the query's words found in each text: the servers' toy cross-encoder."""
    words = {word.lower() for word in _WORD.findall(query)}
    if not words:
        return [0.0 for _ in texts]
    return [len(words & {w.lower() for w in _WORD.findall(text)}) / len(words) for text in texts]


class RerankServer(LoopbackServer):
    """A threaded HTTP server on ``127.0.0.1`` (ephemeral port) speaking ``provider``'s rerank API.

    ``api_key``: the only bearer token accepted (hosted providers also refuse requests without
    one); ``max_batch``: the most texts one TEI request may carry (its ``--max-client-batch-size``,
    32 by default).
    """

    def __init__(self, provider: str = "cohere", *, api_key: str | None = None, max_batch: int = 32) -> None:
        if provider not in PROVIDERS:
            raise ValueError(f"unknown provider {provider!r}; one of {sorted(PROVIDERS)}")
        self.provider = provider
        self.api_key = api_key
        self.max_batch = max_batch
        self._corruptions: deque[str] = deque()
        self.thread_name = f"rerank-double-{provider}"
        super().__init__()

    @property
    def url(self) -> str:
        """The endpoint to give the reranker as ``URL``, e.g. ``http://127.0.0.1:54321/v2/rerank``."""
        return f"{self.origin}{PROVIDERS[self.provider][0]}"

    def corrupt_next(self, kind: str, count: int = 1) -> None:
        """Spoil the next ``count`` answers in one of the ``CORRUPTIONS`` ways."""
        if kind not in CORRUPTIONS:
            raise ValueError(f"unknown corruption {kind!r}; one of {CORRUPTIONS}")
        with self._lock:
            self._corruptions.extend([kind] * count)

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._corruptions.clear()

    # request handling (handler threads)

    def _handle(self, handler: _Handler) -> None:
        body, headers = self._record(handler, text_if_not_json=False)
        path, accepted, required = PROVIDERS[self.provider]
        if handler.path.split("?", 1)[0] != path:
            return self._error(handler, 404, f"no route {handler.path}")
        token = headers.get("authorization", "").removeprefix("Bearer ").strip()
        needs_token = self.provider != "tei" or self.api_key is not None
        if needs_token and (not token or (self.api_key is not None and token != self.api_key)):
            return self._error(handler, 401, "invalid api token")
        answer, failure = self._next_injection()
        if not answer:
            return None
        with self._lock:
            corruption = self._corruptions.popleft() if self._corruptions else None
        if failure is not None:
            status, retry_after = failure
            extra = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
            return self._error(handler, status, f"injected failure ({status})", headers=extra)
        problem = _request_problem(body, accepted, required, self.provider)
        if problem or not isinstance(body, dict):
            return self._error(handler, 422 if self.provider == "tei" else 400, problem)
        texts: list[str] = body["texts" if self.provider == "tei" else "documents"]
        if self.provider == "tei" and len(texts) > self.max_batch:
            return self._error(
                handler, 422, f"batch size {len(texts)} > maximum allowed batch size {self.max_batch}"
            )
        return self._answer(handler, body, texts, corruption)

    def _answer(
        self, handler: _Handler, body: dict[str, Any], texts: list[str], corruption: str | None
    ) -> None:
        scores = overlap_scores(body["query"], texts)
        order = sorted(range(len(texts)), key=lambda i: -scores[i])
        top = body.get("top_k" if self.provider == "voyage" else "top_n")
        if top is not None:
            order = order[:top]
        if self.provider == "tei" and body.get("raw_scores"):
            # A logit, as TEI returns with raw_scores: the sigmoid's inverse, clipped.
            scores = [math.log(max(s, 1e-6) / max(1 - s, 1e-6)) for s in scores]
        key = "score" if self.provider == "tei" else "relevance_score"
        results: list[dict[str, Any]] = [{"index": i, key: scores[i]} for i in order]
        if self.provider == "jina" and body.get("return_documents", True):
            for result in results:
                result["document"] = {"text": texts[result["index"]]}
        if corruption == "not_json":
            return self._send(handler, 200, b"<html>upstream error</html>", "text/html")
        if corruption is not None and corruption != "wrong_shape":
            _corrupt(results, corruption, key, len(texts))
        tokens = sum(len(_WORD.findall(t)) for t in texts) + len(_WORD.findall(body["query"])) * len(texts)
        payload: Any
        if self.provider == "cohere":
            payload = {
                "id": str(uuid.uuid4()),
                "results": results,
                "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
            }
        elif self.provider == "voyage":
            payload = {
                "object": "list",
                "data": results,
                "model": body["model"],
                "usage": {"total_tokens": tokens},
            }
        elif self.provider == "jina":
            model = body.get("model", "jina-reranker-v2-base-multilingual")
            payload = {"model": model, "usage": {"total_tokens": tokens}, "results": results}
        else:
            payload = results
        if corruption == "wrong_shape":
            payload = {"scores": [r[key] for r in results]}
        # allow_nan: the "nan" corruption must reach the client as the NaN token.
        self._send(handler, 200, json.dumps(payload, allow_nan=True).encode())

    def _error(
        self, handler: _Handler, status: int, message: str, headers: dict[str, str] | None = None
    ) -> None:
        # Each service words its errors its own way; the clients read all of them.
        if self.provider == "cohere":
            body: dict[str, Any] = {"message": message}
        elif self.provider == "tei":
            kinds = {401: "Unhealthy", 413: "Validation", 422: "Validation", 429: "Overloaded"}
            body = {"error": message, "error_type": kinds.get(status, "Backend")}
        else:
            body = {"detail": message}
        self._send(handler, status, json.dumps(body).encode(), headers=headers)

    @staticmethod
    def _send(
        handler: _Handler,
        status: int,
        data: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)


def _request_problem(body: Any, accepted: frozenset[str], required: frozenset[str], provider: str) -> str:
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if unknown := sorted(set(body) - accepted):
        return f"unknown fields {unknown}"
    if missing := sorted(required - set(body)):
        return f"missing required fields {missing}"
    texts = body["texts" if provider == "tei" else "documents"]
    if not isinstance(body["query"], str) or not body["query"]:
        return "query must be a non-empty string"
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return "documents must be a non-empty list of strings"
    for name in ("top_n", "top_k", "max_tokens_per_doc"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f"{name} must be a positive integer"
    return ""


def _corrupt(results: list[dict[str, Any]], kind: str, key: str, count: int) -> None:
    if kind == "nan":
        results[0][key] = float("nan")
    elif kind == "string_score":
        results[0][key] = str(results[0][key])
    elif kind == "index_out_of_range":
        results[-1]["index"] = count
    elif kind == "duplicate_index" and len(results) > 1:
        results[-1]["index"] = results[0]["index"]
    elif kind == "missing_result":
        results.pop()
    elif kind == "float_index":
        results[0]["index"] = float(results[0]["index"])


class _HTTPServer(LoopbackHTTPServer):
    owner: RerankServer


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.server.owner._handle(self)

    def do_GET(self) -> None:
        self.server.owner._error(self, 405, "method not allowed")

    def log_message(self, format: str, *args: Any) -> None:
        pass


RerankServer.handler_class = _Handler
RerankServer.server_class = _HTTPServer
