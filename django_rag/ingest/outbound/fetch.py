"""guarded_fetch: every hop checked, the connection pinned to the checked address, the body capped,
and the whole fetch held to one deadline."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from http.cookiejar import DefaultCookiePolicy
from typing import Any
from urllib.parse import urldefrag, urljoin

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ...exceptions import LoaderError, OutboundPolicyError
from .policy import Destination, OutboundPolicy, setting, too_slow

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Credentials meant for the first origin must not follow a redirect to another one.
SENSITIVE_HEADERS = ("Authorization", "Cookie", "Proxy-Authorization")


@dataclass
class FetchResult:
    """The final response of a guarded fetch, body already read (and capped)."""

    url: str
    final_url: str
    status: int
    headers: CaseInsensitiveDict[str]
    content: bytes
    address: str = ""  # the checked IP address the final response came from
    redirects: list[str] = field(default_factory=list)  # URLs that redirected, in order

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def content_type(self) -> str:
        """The media type without parameters, lower case (``"text/html"``); ``""`` when absent."""
        return self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()

    @property
    def encoding(self) -> str | None:
        """The ``charset`` parameter of ``Content-Type``, if the server sent one."""
        for param in self.headers.get("Content-Type", "").split(";")[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "charset" and value.strip():
                return value.strip().strip("\"'")
        return None

    @property
    def text(self) -> str:
        """The body decoded with the declared charset (UTF-8 when none or unknown)."""
        try:
            return self.content.decode(self.encoding or "utf-8", errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")


class _Deadline:
    """The one total deadline of a fetch, over every hop: connect, status line, headers, body.

    Socket timeouts bound each read, not their sum, so a server sending a byte now and then (or
    endless ``100 Continue`` lines, or compressed data that never decodes to anything) could hold a
    fetch for ever. When the deadline passes, a timer shuts the fetch's sockets down, which wakes
    the blocked read; the fetch then reports ``total_timeout``.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    @property
    def expired(self) -> bool:
        return self._expired or time.monotonic() >= self.at

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self._expired:
                _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self._expired = True
            for sock in self._sockets:
                _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for TLS sockets: SSLSocket.shutdown would drop the TLS
    # state under the reading thread's feet; this only makes its read return.
    with contextlib.suppress(OSError):  # already closed
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_DEADLINE: ContextVar[_Deadline | None] = ContextVar("django_rag_outbound_deadline", default=None)


def _watched(sock: socket.socket) -> socket.socket:
    deadline = _DEADLINE.get()
    if deadline is not None:
        deadline.watch(sock)
    return sock


# urllib3's _new_conn runs between connect and (for https) the TLS handshake: the socket is watched
# from then on, so a slow handshake is held to the deadline too.
class _WatchedHTTPConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        return _watched(super()._new_conn())


class _WatchedHTTPSConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        return _watched(super()._new_conn())


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _PinnedAdapter(HTTPAdapter):
    """Connects to the URL's host (an IP address) but presents ``server_hostname`` for SNI and TLS."""

    server_hostname: str | None = None

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: bool | str, cert: Any = None
    ) -> Any:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        if host_params["scheme"] == "https" and self.server_hostname:
            # urllib3 takes these pool keys; requests' stubs list only the keys requests sets itself.
            extra: dict[str, Any] = {
                "server_hostname": self.server_hostname,
                "assert_hostname": self.server_hostname,
            }
            pool_kwargs = {**pool_kwargs, **extra}  # type: ignore[typeddict-item]
        return host_params, pool_kwargs


def guarded_fetch(
    url: str,
    *,
    policy: OutboundPolicy | None = None,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
) -> FetchResult:
    """Fetch ``url`` under ``policy`` (default: ``OutboundPolicy.from_settings()``).

    Redirects are followed by hand, each hop checked like the first. Raises OutboundPolicyError
    when the policy refuses a hop, the body is too large or the server is too slow (the whole
    fetch, redirects included, is held to ``total_timeout``), LoaderError when the server cannot
    be reached. Non-2xx responses are returned, not raised.
    """
    policy = policy or OutboundPolicy.from_settings()
    with _Deadline(policy.total_timeout) as deadline:
        token = _DEADLINE.set(deadline)
        try:
            return _fetch(url, policy, method, headers or {}, deadline)
        finally:
            _DEADLINE.reset(token)


def _fetch(
    url: str, policy: OutboundPolicy, method: str, headers: Mapping[str, str], deadline: _Deadline
) -> FetchResult:
    request_headers: CaseInsensitiveDict[str] = CaseInsensitiveDict(headers)
    request_headers.pop("Host", None)  # always the checked host's; never the caller's
    request_headers.setdefault("User-Agent", policy.user_agent)
    adapter = _PinnedAdapter()
    redirects: list[str] = []
    origin = None
    previous = ""  # the scheme of the hop before, for the downgrade check
    with requests.Session() as session:
        session.trust_env = False  # no environment proxies (they would bypass the checks), no .netrc
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # the jar is keyed by IP
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        current = url
        while True:
            destination = policy.check(current, timeout=deadline.remaining())
            if previous == "https" and destination.scheme == "http" and not policy.allow_downgrade:
                raise OutboundPolicyError(
                    f"refused {url!r}: a redirect from https to plain http ({current}); "
                    f"allow it with {setting('ALLOW_DOWNGRADE')}"
                )
            previous = destination.scheme
            origin = origin or destination.origin
            if destination.origin != origin:
                for name in SENSITIVE_HEADERS:
                    request_headers.pop(name, None)
            adapter.server_hostname = None if destination.ip_literal else destination.host
            response, address = _send(session, destination, method, request_headers, policy, deadline)
            location = response.headers.get("Location")
            if response.status_code not in REDIRECT_STATUSES or not location:
                content = _read_capped(response, policy, deadline, current)
                received = CaseInsensitiveDict(response.headers)
                return FetchResult(url, current, response.status_code, received, content, address, redirects)
            response.close()
            redirects.append(current)
            current = urldefrag(urljoin(current, location.strip())).url
            if current in redirects:
                chain = " -> ".join([*redirects, current])
                raise OutboundPolicyError(f"refused {url!r}: redirect loop ({chain})")
            if len(redirects) > policy.max_redirects:
                raise OutboundPolicyError(
                    f"refused {url!r}: more than {policy.max_redirects} redirects (max_redirects; "
                    f"{setting('MAX_REDIRECTS')})"
                )
            if response.status_code == 303 or (response.status_code in (301, 302) and method == "POST"):
                method = "GET"  # what browsers do; the body (we never send one) is dropped


def _send(
    session: requests.Session,
    destination: Destination,
    method: str,
    headers: Mapping[str, str],
    policy: OutboundPolicy,
    deadline: _Deadline,
) -> tuple[requests.Response, str]:
    """Send to the first checked address that accepts a connection."""
    error: Exception | None = None
    for address in destination.addresses:
        if deadline.expired:
            raise too_slow(destination.url, policy)
        remaining = deadline.remaining()
        try:
            response = session.request(
                method,
                destination.pinned_url(address),
                headers={**headers, "Host": destination.host_header},
                allow_redirects=False,
                stream=True,
                timeout=(min(policy.connect_timeout, remaining), min(policy.read_timeout, remaining)),
                verify=policy.verify,
            )
            return response, address
        except requests.exceptions.RequestException as exc:
            if deadline.expired:  # the deadline's timer cut the connection, whatever the error says
                raise too_slow(destination.url, policy) from exc
            if _header_limit(exc):
                raise OutboundPolicyError(
                    f"refused {destination.url!r}: the response headers are too large ({_header_limit(exc)}; "
                    "a fixed limit of Python's http.client, not a setting)"
                ) from exc
            if isinstance(exc, requests.exceptions.SSLError):
                raise OutboundPolicyError(
                    f"TLS verification failed for {destination.host!r} ({address}): {exc}"
                ) from exc
            if isinstance(exc, requests.exceptions.Timeout):
                raise OutboundPolicyError(
                    f"{destination.url!r} timed out (connect_timeout={policy.connect_timeout}s, "
                    f"read_timeout={policy.read_timeout}s; "
                    f"{setting('CONNECT_TIMEOUT')}, {setting('READ_TIMEOUT')})"
                ) from exc
            if not isinstance(exc, requests.exceptions.ConnectionError):
                raise LoaderError(f"request to {destination.url!r} failed: {exc}") from exc
            error = exc  # another checked address of the same host may answer
    raise LoaderError(f"could not connect to {destination.host!r} at {list(destination.addresses)}: {error}")


def _header_limit(exc: BaseException) -> str | None:
    """http.client's refusal of an oversized header block, wherever it sits in the error's chain."""
    seen: BaseException | None = exc
    while seen is not None:
        for arg in seen.args:
            if isinstance(arg, BaseException) and arg is not seen:
                found = _header_limit(arg)
                if found:
                    return found
        if isinstance(seen, http.client.LineTooLong) or (
            isinstance(seen, http.client.HTTPException) and "more than" in str(seen)
        ):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


def _read_capped(response: requests.Response, policy: OutboundPolicy, deadline: _Deadline, url: str) -> bytes:
    """Read the decoded body, refusing it once it passes ``max_bytes`` or the total deadline."""
    too_big = (
        f"refused {url!r}: the response is larger than max_bytes={policy.max_bytes} ({setting('MAX_BYTES')})"
    )
    body = bytearray()
    with response:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > policy.max_bytes:
            raise OutboundPolicyError(f"{too_big} (Content-Length: {declared})")
        try:
            # read1 returns what one socket read brings (iter_content would block until a whole
            # chunk arrived), decompressed with a bounded output size, so a gzip bomb is capped on
            # what it expands to. A read that outlives the deadline is cut by its timer.
            while chunk := response.raw.read1(64 * 1024, decode_content=True):
                body += chunk
                if len(body) > policy.max_bytes:
                    raise OutboundPolicyError(too_big)
                if deadline.expired:
                    raise too_slow(url, policy)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if deadline.expired:
                raise too_slow(url, policy) from exc
            if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
                raise OutboundPolicyError(
                    f"{url!r} timed out (read_timeout={policy.read_timeout}s; {setting('READ_TIMEOUT')})"
                ) from exc
            raise LoaderError(f"reading {url!r} failed: {exc}") from exc
        if deadline.expired:  # the timer's shutdown looks like the end of the body: it is not
            raise too_slow(url, policy)
    return bytes(body)
