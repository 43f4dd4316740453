"""Count what crosses the wire between Django and PostgreSQL: a relay on a Unix socket.

``WireCounter`` listens on a Unix socket in a temporary directory and relays every byte to the
real server (its Unix socket or its TCP port), counting on the way:

- ``writes``: the pieces the client sent (each ``send`` of the driver arrives as one piece);
- ``round_trips``: the times the client sent after the server had answered, that is, the times
  the client had to wait for the server before it could go on (the first flight counts too).

``with counted(alias) as wire:`` points a Django connection at the relay for the block (it
reconnects, so the connection's session set-up is not counted: only what the block does).
Benchmarks use it too (bench/search_round_trips.py).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import connections


@dataclass
class Counts:
    writes: int = 0
    round_trips: int = 0
    replies: int = 0  # pieces the server sent
    log: list[tuple[str, int]] = field(default_factory=list)  # ("F" client / "B" server, bytes)

    def reset(self) -> None:
        self.writes = self.round_trips = self.replies = 0
        self.log.clear()


class WireCounter:
    """A relay from ``<directory>/.s.PGSQL.<port>`` to ``upstream`` that counts the traffic."""

    def __init__(self, upstream: str | tuple[str, int], port: int) -> None:
        self.upstream = upstream
        self.port = port
        self.directory = tempfile.mkdtemp(prefix="rag-wire-")
        self.counts = Counts()
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(os.path.join(self.directory, f".s.PGSQL.{port}"))
        self._listener.listen()
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="wire-counter", daemon=True)
        self._thread.start()

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            server = socket.create_connection(self.upstream)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return server
        server.connect(self.upstream)
        return server

    def _serve(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ, None)
        peers: dict[socket.socket, socket.socket] = {}
        last = "B"  # the server "spoke" last before the first client flight
        while not self._stop:
            for key, _ in selector.select(timeout=0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    client, _ = self._listener.accept()
                    server = self._connect_upstream()
                    peers[client], peers[server] = server, client
                    selector.register(client, selectors.EVENT_READ, "F")
                    selector.register(server, selectors.EVENT_READ, "B")
                    continue
                data = sock.recv(1 << 20)
                if not data:
                    other = peers.pop(sock)
                    peers.pop(other, None)
                    for s in (sock, other):
                        selector.unregister(s)
                        s.close()
                    continue
                side = key.data
                with self._lock:
                    if side == "F":
                        self.counts.writes += 1
                        if last == "B":
                            self.counts.round_trips += 1
                    else:
                        self.counts.replies += 1
                    self.counts.log.append((side, len(data)))
                    last = side
                peers[sock].sendall(data)
        for sock in peers:
            sock.close()
        selector.close()

    def snapshot(self) -> Counts:
        with self._lock:
            return Counts(
                self.counts.writes, self.counts.round_trips, self.counts.replies, list(self.counts.log)
            )

    def reset(self) -> None:
        with self._lock:
            self.counts.reset()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self._listener.close()
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.directory, f".s.PGSQL.{self.port}"))
            os.rmdir(self.directory)


def upstream_of(settings: dict[str, object]) -> tuple[str | tuple[str, int], int]:
    """Where a Django ``DATABASES`` entry connects: a Unix socket path or (host, port); and the port."""
    port = int(str(settings.get("PORT") or 5432))
    host = str(settings.get("HOST") or "")
    if not host or host.startswith("/"):
        return os.path.join(host or "/var/run/postgresql", f".s.PGSQL.{port}"), port
    return (host, port), port


@contextlib.contextmanager
def counted(alias: str = "default") -> Iterator[WireCounter]:
    """Django's ``alias`` connection goes through a ``WireCounter`` for the block (then back)."""
    connection = connections[alias]
    upstream, port = upstream_of(connection.settings_dict)
    wire = WireCounter(upstream, port)
    saved = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["HOST"], connection.settings_dict["PORT"] = wire.directory, str(port)
    try:
        connection.ensure_connection()
        wire.reset()  # the connection's own set-up is not what the block is measured on
        yield wire
    finally:
        connection.close()
        connection.settings_dict["HOST"], connection.settings_dict["PORT"] = saved
        wire.close()
