"""What the loopback test servers share: a threaded HTTP server on ``127.0.0.1`` (ephemeral port)
in a daemon thread, every request recorded, failures and delays injected on demand.

``OpenAICompatibleServer`` and ``RerankServer`` subclass ``LoopbackServer`` and add their wire
format; a handler calls ``_record`` and then ``_next_injection`` and acts on what it returns.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple, Self

__all__ = ["LoopbackServer", "RecordedRequest"]


class RecordedRequest(NamedTuple):
    """One request as the server received it; headers have lower-case names."""

    path: str
    body: Any
    headers: dict[str, str]


class LoopbackHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: Any  # the LoopbackServer subclass whose handler class this server runs

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out closes its socket before a delayed answer; that is expected here.
        pass


class LoopbackServer:
    """Start with ``start()`` or ``with``; ``stop()`` wakes handlers held by ``delay_next``."""

    # Set by each subclass's module, below its handler class.
    handler_class: type[BaseHTTPRequestHandler]
    server_class: type[LoopbackHTTPServer] = LoopbackHTTPServer
    thread_name = "loopback-double"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._failures: deque[tuple[int, float | None]] = deque()
        self._delays: deque[float] = deque()
        self._stopping = threading.Event()
        self._httpd: LoopbackHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._httpd is None:
            self._stopping.clear()
            self._httpd = self.server_class(("127.0.0.1", 0), self.handler_class)
            self._httpd.owner = self
            # A short poll interval keeps stop() (and so each test's teardown) fast.
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.02},
                name=self.thread_name,
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # wakes handlers held by delay_next()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``."""
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # test controls

    def fail_next(self, count: int = 1, status: int = 503, retry_after: float | None = None) -> None:
        """Answer the next ``count`` authorised requests with ``status`` (and ``Retry-After``)."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * count)

    def delay_next(self, count: int = 1, seconds: float = 1.0) -> None:
        """Hold the next ``count`` authorised requests for ``seconds`` before answering them."""
        with self._lock:
            self._delays.extend([seconds] * count)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        """Forget recorded requests and pending failures and delays."""
        with self._lock:
            self._requests.clear()
            self._failures.clear()
            self._delays.clear()

    # request handling (called from handler threads)

    def _record(
        self, handler: BaseHTTPRequestHandler, *, text_if_not_json: bool
    ) -> tuple[Any, dict[str, str]]:
        """Read and record the request; its body as JSON (else its text, or None) and its headers."""
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace") if text_if_not_json else None
        headers = {name.lower(): value for name, value in handler.headers.items()}
        with self._lock:
            self._requests.append(RecordedRequest(handler.path, body, headers))
        return body, headers

    def _next_injection(self) -> tuple[bool, tuple[int, float | None] | None]:
        """Wait out an injected delay, then the injected failure (status, Retry-After) or None.

        The first value is False when the server stopped during the delay: send nothing.
        """
        with self._lock:
            delay = self._delays.popleft() if self._delays else 0.0
            failure = self._failures.popleft() if self._failures else None
        if delay and self._stopping.wait(delay):
            return False, None
        return True, failure
