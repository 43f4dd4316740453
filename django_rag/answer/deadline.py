"""One deadline per answer, and no database connection held while a chat model writes it.

A chat server can hang before its headers, or trickle one byte every few seconds: a per-read
timeout never fires on the second, and retries multiply the first. So the chat call runs in a
worker thread and the caller waits for each piece with what is left of the deadline; when it
runs out the caller stops waiting, closes the response it knows of, and raises
``ChatDeadlineError``. The worker ends on its own when its per-attempt timeout (never more than
the time that was left) fires or the server closes the socket.

``release_connections`` closes the request's database connections before the wait (Django opens
them again on the next query), so a slow model never holds one of PostgreSQL's connections.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

from django.db import connections

from ..exceptions import ChatDeadlineError

__all__ = ["Deadline", "release_connections", "within"]

T = TypeVar("T")

_ITEM, _END, _ERROR = "item", "end", "error"


class Deadline:
    """``seconds`` from now: what is left, the timeout an attempt may use, a sleep that stops at it."""

    def __init__(self, seconds: float, *, where: Callable[[], str] = lambda: "the chat model") -> None:
        self.seconds = float(seconds)
        self.ends = time.monotonic() + self.seconds
        self.where = where

    def remaining(self) -> float:
        return max(self.ends - time.monotonic(), 0.0)

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def attempt_timeout(self, cap: float) -> float:
        """The timeout of one HTTP attempt: ``cap``, or what is left of the deadline if that is less."""
        return max(min(cap, self.remaining()), 0.001)

    def sleep(self, delay: float) -> None:
        """Wait ``delay`` between retries, unless the deadline comes first: then raise."""
        if delay >= self.remaining():
            time.sleep(self.remaining())
            raise self.error()
        time.sleep(delay)

    def check(self) -> None:
        if self.expired:
            raise self.error()

    def error(self) -> ChatDeadlineError:
        return ChatDeadlineError(
            f"{self.where()} did not finish its answer within the {self.seconds:g} s deadline "
            "(RAG['CHAT']['DEADLINE'], connection, retries and every token included)"
        )


def within(
    deadline: Deadline, produce: Callable[[], Iterator[T]], *, abort: Callable[[], None] | None = None
) -> Generator[T, None, Any]:
    """Iterate ``produce()`` in a worker thread; each item is awaited for what is left of ``deadline``.

    Returns what ``produce()``'s generator returned. When the deadline passes, or this generator
    is closed early (the client went away), ``abort`` is called (close the HTTP response, so a
    worker blocked in a read wakes up) and the worker stops at its next item.
    """
    items: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()

    def work() -> None:
        try:
            iterator = produce()
            while not stop.is_set():
                try:
                    items.put((_ITEM, next(iterator)))
                except StopIteration as end:
                    items.put((_END, end.value))
                    return
        except BaseException as exc:  # handed to the waiting caller, which re-raises it
            items.put((_ERROR, exc))

    worker = threading.Thread(target=work, name="django-rag-chat", daemon=True)
    worker.start()
    finished = False
    try:
        while True:
            remaining = deadline.remaining()
            try:
                kind, value = items.get(timeout=remaining) if remaining > 0 else items.get_nowait()
            except queue.Empty:
                raise deadline.error() from None
            if kind == _ITEM:
                yield value
            elif kind == _END:
                finished = True
                return value
            else:
                finished = True
                raise value
    finally:
        stop.set()
        if not finished and abort is not None:
            with contextlib.suppress(Exception):
                abort()


def release_connections() -> None:
    """Close this thread's database connections that no transaction needs (reopened on next use).

    A connection inside ``atomic()`` (ATOMIC_REQUESTS, a caller's transaction) cannot be closed
    without losing its work, so it stays: that is the caller's choice.
    """
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not connection.in_atomic_block:
            connection.close()
