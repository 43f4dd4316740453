"""Concurrent HTTP clients on loopback, for tests/test_load.py and bench/load.py.

``run_load`` starts ``clients`` threads together; each sends its own list of ``Call``s one after
the other (a new connection per request, as a browser tab without keep-alive would), until the
list ends or the deadline passes. A call counts as an error when the request fails, the status
is not 200, or the call's ``check`` finds something wrong in the body. A sampler thread counts
the database's connections (``pg_stat_activity``) while the clients run.
"""

from __future__ import annotations

import http.client
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.db import connection, connections

__all__ = ["Call", "LoadResult", "count_connections", "endpoint_calls", "percentile", "run_load", "serve"]

HOST = "127.0.0.1"  # loopback only: the load never leaves the machine


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the figures


@contextmanager
def serve() -> Iterator[int]:
    """The site on ``127.0.0.1`` (an ephemeral port, yielded): Django's threaded WSGI server, as
    ``runserver`` and ``LiveServerTestCase`` run it, one thread per request, each closing its
    database connections when it ends."""
    server = ThreadedWSGIServer((HOST, 0), _QuietHandler, allow_reuse_address=False)
    server.set_app(WSGIHandler())
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="load-site", daemon=True
    )
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass(frozen=True)
class Call:
    """One request: ``endpoint`` is the name its latency is reported under."""

    endpoint: str
    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    check: Callable[[bytes], str | None] | None = None  # an error description, or None when fine


def endpoint_calls(question: str, session: str, *, mine: str, theirs: str) -> list[Call]:
    """One question on the search page, the search JSON endpoint and the ask JSON endpoint.

    ``session`` is the caller's session cookie; every title the caller may see starts with
    ``mine`` and every title of another scope with ``theirs``: a response with no result, or
    with a title of another scope, is an error.
    """
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={session}"}
    query = urlencode({"q": question})

    def titles_in_scope(titles: list[str]) -> str | None:
        if not titles:
            return "no result"
        strangers = [title for title in titles if not title.startswith(mine)]
        return f"outside the scope: {strangers}" if strangers else None

    def page(body: bytes) -> str | None:
        text = body.decode()
        if mine not in text:
            return "no result on the page"
        return "another scope's document on the page" if theirs in text else None

    def search(body: bytes) -> str | None:
        return titles_in_scope([hit["title"] for hit in json.loads(body)["results"]])

    def ask(body: bytes) -> str | None:
        data = json.loads(body)
        if not data["answer"] or not set(data["citations"]) <= set(range(1, len(data["sources"]) + 1)):
            return f"bad answer {data['answer']!r} citing {data['citations']}"
        return titles_in_scope([source["title"] for source in data["sources"]])

    form = {**headers, "Content-Type": "application/x-www-form-urlencoded"}
    return [
        Call("search page", "GET", f"/kb/?{query}", headers=headers, check=page),
        Call("search JSON", "GET", f"/kb/api/search/?{query}", headers=headers, check=search),
        Call("ask JSON", "POST", "/kb/api/ask/", body=query.encode(), headers=form, check=ask),
    ]


@dataclass
class LoadResult:
    clients: int
    planned: int
    latencies: dict[str, list[float]]  # seconds, per endpoint
    errors: list[str]
    not_sent: int  # calls left when the deadline passed
    elapsed: float
    max_connections: int
    connections_after: int  # once the clients are done: the connections of the caller alone

    @property
    def sent(self) -> int:
        return sum(len(values) for values in self.latencies.values()) + len(self.errors)

    def lines(self) -> list[str]:
        """The figures, one line per endpoint, then the totals."""
        lines = []
        for endpoint, values in sorted(self.latencies.items()):
            lines.append(
                f"{endpoint}: {len(values)} ok, p50 {percentile(values, 50) * 1000:.0f} ms, "
                f"p99 {percentile(values, 99) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms"
            )
        lines.append(
            f"{self.clients} clients, {self.sent}/{self.planned} requests in {self.elapsed:.1f} s "
            f"({self.sent / self.elapsed:.1f}/s), {len(self.errors)} errors, {self.not_sent} not sent; "
            f"DB connections max {self.max_connections} during, {self.connections_after} after"
        )
        return lines


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def count_connections() -> int:
    """Connections to this database (on this thread's own connection, which counts itself)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


class _Sampler(threading.Thread):
    def __init__(self, interval: float) -> None:
        super().__init__(name="load-db-sampler", daemon=True)
        self.interval = interval
        self.maximum = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while True:
                self.maximum = max(self.maximum, count_connections())
                if self.stopping.wait(self.interval):
                    break
        finally:
            connections.close_all()  # this thread's own connection


def run_load(
    port: int,
    plans: Sequence[Sequence[Call]],
    *,
    seconds: float,
    timeout: float = 10.0,
    sample_every: float = 0.01,
) -> LoadResult:
    """One client thread per plan, all started together, stopped at ``seconds`` (not mid-request)."""
    latencies: dict[str, list[float]] = {}
    errors: list[str] = []
    not_sent = 0
    lock = threading.Lock()
    start = threading.Barrier(len(plans) + 1)
    deadline = 0.0

    def client(plan: Sequence[Call]) -> None:
        nonlocal not_sent
        start.wait()
        for index, call in enumerate(plan):
            if time.monotonic() > deadline:
                with lock:
                    not_sent += len(plan) - index
                return
            began = time.perf_counter()
            error = _send(port, call, timeout)
            took = time.perf_counter() - began
            with lock:
                if error is None:
                    latencies.setdefault(call.endpoint, []).append(took)
                else:
                    errors.append(f"{call.endpoint} {call.method} {call.path}: {error}")

    baseline = count_connections()
    sampler = _Sampler(sample_every)
    sampler.start()
    threads = [
        threading.Thread(target=client, args=(plan,), name=f"load-client-{n}") for n, plan in enumerate(plans)
    ]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline = time.monotonic() + seconds
    start.wait()
    for thread in threads:
        thread.join(seconds + timeout + 5)
    elapsed = time.perf_counter() - began
    sampler.stopping.set()
    sampler.join(5)
    # A request thread closes its connection just after its response: give the last ones a moment.
    settle = time.monotonic() + 2.0
    after = count_connections()
    while after > baseline and time.monotonic() < settle:
        time.sleep(0.05)
        after = count_connections()
    return LoadResult(
        clients=len(plans),
        planned=sum(len(plan) for plan in plans),
        latencies=latencies,
        errors=errors,
        not_sent=not_sent,
        elapsed=elapsed,
        max_connections=sampler.maximum,
        connections_after=after,
    )


def _send(port: int, call: Call, timeout: float) -> str | None:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(call.method, call.path, body=call.body, headers=call.headers)
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    if response.status != 200:
        return f"HTTP {response.status}: {body[:200]!r}"
    return call.check(body) if call.check is not None else None
