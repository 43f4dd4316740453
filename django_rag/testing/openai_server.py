"""An OpenAI-compatible HTTP server on loopback, for tests that run the real ``openai`` client.

Embeddings are the ``HashingEmbedder``'s (deterministic, offline); chat answers are canned but
cite ``[1]`` when the prompt holds numbered context. Failures and delays can be injected to
exercise retry and timeout paths, and a server can hang or trickle to exercise deadlines::

    with OpenAICompatibleServer() as server:
        server.fail_next(2, status=429, retry_after=0.1)
        server.reply_next("first answer", "second answer")  # scripted chat replies, in order
        embedder = OpenAIEmbedder(base_url=server.base_url, api_key="test", dimensions=64)
        embedder.embed_documents(["a", "b"])
        assert len(server.requests) == 3

        server.hang_next()                 # accept the next request and never answer it
        server.trickle_next(interval=2.0)  # answer it with one byte every 2 s, forever
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
from collections import deque
from http.server import BaseHTTPRequestHandler
from typing import Any

from ..embedders.hashing import HashingEmbedder
from .loopback import LoopbackHTTPServer, LoopbackServer, RecordedRequest

__all__ = ["OpenAICompatibleServer", "RecordedRequest"]

_WORD = re.compile(r"\w+")
_NUMBERED_CONTEXT = re.compile(r"^\s*\[(\d+)\]\s*(.*)$", re.MULTILINE)
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}
_MODELS = ["text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002", "gpt-4o-mini"]


class OpenAICompatibleServer(LoopbackServer):
    """A threaded HTTP server on ``127.0.0.1`` with an ephemeral port.

    ``dimensions`` is used when a request does not send its own; ``api_key`` (if given) is the
    only bearer token accepted, otherwise any non-empty one is; ``out_of_order`` returns the
    embeddings in reverse order (each still tagged with its ``index``), as the API allows.
    """

    thread_name = "openai-double"

    def __init__(
        self, *, dimensions: int = 1536, api_key: str | None = None, out_of_order: bool = False
    ) -> None:
        self.dimensions = dimensions
        self.api_key = api_key
        self.out_of_order = out_of_order
        self.chat_reply: str | None = None  # set to force the chat answer's text
        self._replies: deque[str] = deque()
        self._stalls: deque[tuple[str, float]] = deque()
        super().__init__()

    # lifecycle

    @property
    def base_url(self) -> str:
        """The URL to give the client as ``base_url``, e.g. ``http://127.0.0.1:54321/v1``."""
        return f"{self.origin}/v1"

    # test controls

    def fail_next(self, count: int = 1, status: int = 429, retry_after: float | None = None) -> None:
        """Answer the next ``count`` authorised requests with ``status`` (and ``Retry-After``)."""
        super().fail_next(count, status, retry_after)

    def reply_next(self, *replies: str) -> None:
        """Answer the next chat completions with these texts, one each, in order (then as before)."""
        with self._lock:
            self._replies.extend(replies)

    def hang_next(self, count: int = 1) -> None:
        """Accept the next ``count`` authorised requests and send nothing back until ``stop()``."""
        with self._lock:
            self._stalls.extend([("hang", 0.0)] * count)

    def trickle_next(self, count: int = 1, interval: float = 2.0) -> None:
        """Answer the next ``count`` authorised requests with a 200 and then one byte every
        ``interval`` seconds, never finishing (a per-read timeout never fires on such a server)."""
        with self._lock:
            self._stalls.extend([("trickle", interval)] * count)

    def reset(self) -> None:
        """Forget recorded requests and pending failures, delays, stalls and replies."""
        super().reset()
        with self._lock:
            self._stalls.clear()
            self._replies.clear()

    # request handling (called from handler threads)

    def _handle(self, handler: _Handler, method: str) -> None:
        body, headers = self._record(handler, text_if_not_json=True)

        token = headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not headers.get("authorization", "").startswith("Bearer ") or not token:
            return _error(handler, 401, "You didn't provide an API key.", code="missing_api_key")
        if self.api_key is not None and token != self.api_key:
            return _error(handler, 401, "Incorrect API key provided.", code="invalid_api_key")

        answer, failure = self._next_injection()
        if not answer:
            return None
        with self._lock:
            stall = self._stalls.popleft() if self._stalls else None
        if stall is not None:
            return self._stall(handler, *stall)
        if failure is not None:
            status, retry_after = failure
            extra = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
            return _error(handler, status, f"Injected failure ({status}).", headers=extra)

        route = (method, handler.path.split("?", 1)[0].rstrip("/"))
        if route == ("POST", "/v1/embeddings"):
            return self._embeddings(handler, body)
        if route == ("POST", "/v1/chat/completions"):
            return self._chat(handler, body)
        if route == ("GET", "/v1/models"):
            data = [
                {"id": name, "object": "model", "created": 0, "owned_by": "django-rag"} for name in _MODELS
            ]
            return _json(handler, 200, {"object": "list", "data": data})
        return _error(handler, 404, f"Unknown request URL: {method} {handler.path}.", code="unknown_url")

    def _stall(self, handler: _Handler, mode: str, interval: float) -> None:
        if mode == "hang":
            self._stopping.wait()
            return None
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        handler.wfile.flush()
        # An SSE comment line, one byte at a time: valid, endless, never a complete event.
        payload = b": still thinking" * 1000
        for byte in payload:
            if self._stopping.wait(interval):
                return None
            try:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            except OSError:  # the client gave up and closed the socket
                return None
        return None

    def _embeddings(self, handler: _Handler, body: Any) -> None:
        if not isinstance(body, dict) or "model" not in body or "input" not in body:
            return _error(handler, 400, "'model' and 'input' are required.")
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        if not isinstance(texts, list) or not all(isinstance(text, str) and text for text in texts):
            # OpenAI refuses empty strings (and this double does not speak token arrays).
            return _error(handler, 400, "'$.input' is invalid: expected non-empty strings.", param="input")
        dimensions = body.get("dimensions", self.dimensions)
        if not isinstance(dimensions, int) or dimensions <= 0:
            return _error(handler, 400, "'dimensions' must be a positive integer.", param="dimensions")
        vectors = HashingEmbedder(dimensions=dimensions).embed_documents(texts)
        data = []
        for index, vector in enumerate(vectors):
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                # What the openai client asks for by default: little-endian float32, base64.
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        if self.out_of_order:
            data.reverse()
        tokens = sum(_count_tokens(text) for text in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return _json(handler, 200, {"object": "list", "data": data, "model": body["model"], "usage": usage})

    def _chat(self, handler: _Handler, body: Any) -> None:
        if not isinstance(body, dict) or "model" not in body or not isinstance(body.get("messages"), list):
            return _error(handler, 400, "'model' and 'messages' are required.")
        prompt = "\n".join(_content_text(message.get("content")) for message in body["messages"])
        with self._lock:
            scripted = self._replies.popleft() if self._replies else None
        if scripted is None:
            scripted = self.chat_reply
        answer = scripted if scripted is not None else _fake_answer(prompt)
        prompt_tokens, completion_tokens = _count_tokens(prompt), _count_tokens(answer)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        with self._lock:
            completion_id = f"chatcmpl-double-{len(self._requests)}"
        base = {"id": completion_id, "created": int(time.time()), "model": body["model"]}
        if not body.get("stream"):
            message = {"role": "assistant", "content": answer, "refusal": None}
            choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            return _json(
                handler, 200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            )

        chunk = {**base, "object": "chat.completion.chunk"}
        deltas = [{"role": "assistant", "content": ""}] + [{"content": piece} for piece in _pieces(answer)]
        events = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas
        ]
        events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**chunk, "choices": [], "usage": usage})
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()
        for event in events:
            handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            handler.wfile.flush()
        handler.wfile.write(b"data: [DONE]\n\n")
        return None


class _HTTPServer(LoopbackHTTPServer):
    owner: OpenAICompatibleServer


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    # HTTP/1.0: one request per connection, and a stream simply ends when the socket closes.
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        self.server.owner._handle(self, "GET")

    def do_POST(self) -> None:
        self.server.owner._handle(self, "POST")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean; the request log is on the server object


def _json(
    handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: dict[str, str] | None = None
) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def _error(
    handler: BaseHTTPRequestHandler,
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    error = {
        "message": message,
        "type": _ERROR_TYPES.get(status, "server_error"),
        "param": param,
        "code": code,
    }
    _json(handler, status, {"error": error}, headers)


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _fake_answer(prompt: str) -> str:
    """Quote the first numbered context passage and cite it, or admit there is nothing to cite."""
    match = _NUMBERED_CONTEXT.search(prompt)
    if match is None:
        return "I could not find that in the provided context."
    passage = match.group(2).strip() or "the first source"
    return f"According to the context, {passage[:200]} [{match.group(1)}]"


def _pieces(text: str) -> list[str]:
    """Split ``text`` into word-sized stream deltas that join back to it exactly."""
    return re.findall(r"\S+\s*|\s+", text) or [text]


def _count_tokens(text: str) -> int:
    return len(_WORD.findall(text))


OpenAICompatibleServer.handler_class = _Handler
OpenAICompatibleServer.server_class = _HTTPServer
