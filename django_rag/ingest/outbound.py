"""OutboundPolicy and guarded_fetch: the only way django-rag touches the network.

Fetching a URL a user typed is a server-side request forgery risk, so every hop is checked
before a byte is sent: scheme, host allow/deny lists, and every address the host resolves to.
The host is resolved once and the connection is made to the checked address (the ``Host``
header, TLS SNI and certificate check still use the hostname), so a DNS answer that changes
between check and connect cannot smuggle the request somewhere else.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from http.cookiejar import DefaultCookiePolicy
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import requests
import urllib3
from django.utils.module_loading import import_string
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ..conf import rag_settings
from ..exceptions import ConfigurationError, LoaderError, OutboundPolicyError

__all__ = ["Destination", "FetchResult", "OutboundPolicy", "Resolver", "guarded_fetch", "system_resolver"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Iterable[str]]
"""``resolver(host, port)`` returns the host's addresses as strings."""


def setting(name: str) -> str:
    """How a refusal names the setting that allows it: ``RAG["OUTBOUND"]["ALLOW_NETWORKS"]``."""
    return f'RAG["OUTBOUND"]["{name}"]'


REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Credentials meant for the first origin must not follow a redirect to another one.
SENSITIVE_HEADERS = ("Authorization", "Cookie", "Proxy-Authorization")

_BLOCKED_NETWORKS = [
    (ipaddress.ip_network(network), rule)
    for network, rule in (
        ("0.0.0.0/8", "unspecified ('this network', 0.0.0.0/8)"),
        ("10.0.0.0/8", "private (10.0.0.0/8)"),
        ("100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10)"),
        ("127.0.0.0/8", "loopback (127.0.0.0/8)"),
        ("169.254.169.254/32", "the cloud metadata endpoint (link-local 169.254.169.254)"),
        ("169.254.0.0/16", "link-local (169.254.0.0/16)"),
        ("172.16.0.0/12", "private (172.16.0.0/12)"),
        ("192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)"),
        ("192.0.2.0/24", "documentation (192.0.2.0/24)"),
        ("192.168.0.0/16", "private (192.168.0.0/16)"),
        ("198.18.0.0/15", "benchmarking (198.18.0.0/15)"),
        ("198.51.100.0/24", "documentation (198.51.100.0/24)"),
        ("203.0.113.0/24", "documentation (203.0.113.0/24)"),
        ("224.0.0.0/4", "multicast (224.0.0.0/4)"),
        ("240.0.0.0/4", "reserved (240.0.0.0/4)"),
        ("::/128", "unspecified (::)"),
        ("::1/128", "loopback (::1)"),
        ("100::/64", "discard-only (100::/64)"),
        ("2001:db8::/32", "documentation (2001:db8::/32)"),
        # RFC 8215: the IPv4 address sits where the site's own prefix length puts it (/48 to /96),
        # so it cannot be read from the address alone; the well-known 64:ff9b::/96 is judged below.
        ("64:ff9b:1::/48", "local-use NAT64 (64:ff9b:1::/48)"),
        ("fc00::/7", "unique local, i.e. private (fc00::/7)"),
        ("fe80::/10", "link-local (fe80::/10)"),
        ("fec0::/10", "site-local (fec0::/10)"),
        ("ff00::/8", "multicast (ff00::/8)"),
    )
]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT (RFC 2765): a translator's view of IPv4


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the operating system (``socket.getaddrinfo``), each address once."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class OutboundPolicy:
    """What outbound requests may do. The defaults are strict; loosen them per call or in settings.

    ``host_allowlist``/``host_denylist`` take exact hosts or ``"*.example.com"`` (any subdomain,
    not the apex). ``allow_networks`` lists CIDRs that are reachable even though they are
    normally refused (e.g. ``["127.0.0.0/8"]`` for a service on loopback).
    """

    allowed_schemes: tuple[str, ...] = ("https",)
    host_allowlist: tuple[str, ...] = ()
    host_denylist: tuple[str, ...] = ()
    allow_networks: tuple[str, ...] = ()
    max_redirects: int = 5
    allow_downgrade: bool = False  # follow a redirect from https to plain http
    max_bytes: int = 10 * 1024 * 1024
    connect_timeout: float = 5.0
    read_timeout: float = 15.0  # per socket read
    total_timeout: float = 60.0  # for the whole fetch, so a server trickling bytes cannot hold us
    user_agent: str = "django-rag"
    verify: bool | str = True  # TLS verification, or the path of a CA bundle
    resolver: Resolver | None = None  # None: system_resolver
    networks: tuple[Network, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Accept lists from settings and tests, but keep the (frozen) policy hashable.
        for name in ("allowed_schemes", "host_allowlist", "host_denylist", "allow_networks"):
            value = getattr(self, name)
            value = (value,) if isinstance(value, str) else tuple(value)
            if name == "allowed_schemes":
                value = tuple(scheme.lower() for scheme in value)
            object.__setattr__(self, name, value)
        try:
            networks = tuple(ipaddress.ip_network(cidr, strict=False) for cidr in self.allow_networks)
        except ValueError as exc:
            raise ConfigurationError(f"OutboundPolicy.allow_networks: {exc}") from exc
        object.__setattr__(self, "networks", networks)

    @classmethod
    def from_settings(cls, **overrides: Any) -> OutboundPolicy:
        """The site's default policy: ``RAG["OUTBOUND"]`` (keys like ``"MAX_BYTES"``) plus ``overrides``."""
        names = {f.name for f in fields(cls) if f.init}
        options: dict[str, Any] = {}
        for key, value in {**(rag_settings.OUTBOUND or {}), **overrides}.items():
            name = key.lower()
            if name not in names:
                raise ConfigurationError(
                    f"RAG['OUTBOUND'] has an unknown key {key!r}; "
                    f"use one of {sorted(n.upper() for n in names)}"
                )
            options[name] = import_string(value) if name == "resolver" and isinstance(value, str) else value
        return cls(**options)

    def check(self, url: str, *, timeout: float | None = None) -> Destination:
        """Check ``url`` (scheme, host, every resolved address) and say where to connect.

        ``timeout`` bounds the DNS lookup (guarded_fetch passes what is left of total_timeout).
        """
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:  # "[::1", "host:99999"...
            raise OutboundPolicyError(f"refused {url!r}: not a valid URL ({exc})") from exc
        scheme = parts.scheme.lower()
        if scheme not in self.allowed_schemes:
            raise OutboundPolicyError(
                f"refused {url!r}: scheme {scheme!r} is not allowed "
                f"(allowed_schemes={self.allowed_schemes}); allow it with {setting('ALLOWED_SCHEMES')}"
            )
        default_port = 443 if scheme == "https" else 80
        port = port or default_port
        if parts.username is not None or parts.password is not None:
            # http://trusted.example@10.0.0.1/ reads as a trusted host to people and log scanners.
            raise OutboundPolicyError(
                f"refused {url!r}: credentials in the URL are not allowed (no setting allows them; "
                "send them in a header: guarded_fetch(url, headers={'Authorization': ...}))"
            )
        host = _normalise_host(parts.hostname or "", url)
        denied = _match_host(host, self.host_denylist)
        if denied:
            raise OutboundPolicyError(
                f"refused {url!r}: host {host!r} matches host_denylist entry {denied!r} "
                f"({setting('HOST_DENYLIST')})"
            )
        if self.host_allowlist and not _match_host(host, self.host_allowlist):
            raise OutboundPolicyError(
                f"refused {url!r}: host {host!r} is not in host_allowlist {list(self.host_allowlist)}; "
                f"add it to {setting('HOST_ALLOWLIST')}"
            )
        literal = _parse_ip(host)
        addresses = [str(literal)] if literal else self._resolve(host, port, url, timeout)
        for address in addresses:
            ip = _parse_ip(address)
            reason = f"not an IP address ({address!r})" if ip is None else _blocked_reason(ip, self.networks)
            if reason:
                raise OutboundPolicyError(
                    f"refused {url!r}: host {host!r} resolves to {address}, which is {reason}; to reach it "
                    f"deliberately, add its network to {setting('ALLOW_NETWORKS')} "
                    "(or pass OutboundPolicy(allow_networks=[...]) for one call)"
                )
        bracketed = f"[{host}]" if ":" in host else host
        host_header = bracketed if port == default_port else f"{bracketed}:{port}"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Destination(url, scheme, host, port, host_header, path, tuple(addresses), literal is not None)

    def _resolve(self, host: str, port: int, url: str, timeout: float | None) -> list[str]:
        resolver = self.resolver or system_resolver
        if timeout is None:
            found = _lookup(resolver, host, port)
        else:
            # A lookup cannot be interrupted (a slow DNS server can hold getaddrinfo for tens of
            # seconds): it runs in a daemon thread, left to finish alone if it outlives the deadline.
            answers: queue.SimpleQueue[list[str] | Exception] = queue.SimpleQueue()
            threading.Thread(target=lambda: answers.put(_lookup(resolver, host, port)), daemon=True).start()
            try:
                found = answers.get(timeout=max(timeout, 0.0))
            except queue.Empty:
                raise _too_slow(url, self) from None
        if isinstance(found, OSError):
            raise LoaderError(f"could not resolve host {host!r}: {found}") from found
        if isinstance(found, Exception):
            raise found
        addresses = list(dict.fromkeys(found))
        if not addresses:
            raise LoaderError(f"host {host!r} resolved to no address")
        return addresses


def _lookup(resolver: Resolver, host: str, port: int) -> list[str] | Exception:
    try:
        return [str(address) for address in resolver(host, port)]
    except Exception as exc:  # handed to the caller, which may be another thread
        return exc


@dataclass(frozen=True)
class Destination:
    """A URL that passed the policy, with the checked addresses to connect to."""

    url: str
    scheme: str
    host: str
    port: int
    host_header: str
    path: str
    addresses: tuple[str, ...]
    ip_literal: bool

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    def pinned_url(self, address: str) -> str:
        return f"{self.scheme}://{'[' + address + ']' if ':' in address else address}:{self.port}{self.path}"


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


def _too_slow(url: str, policy: OutboundPolicy) -> OutboundPolicyError:
    return OutboundPolicyError(
        f"refused {url!r}: took longer than total_timeout={policy.total_timeout}s, redirects included "
        f"({setting('TOTAL_TIMEOUT')})"
    )


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
            raise _too_slow(destination.url, policy)
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
                raise _too_slow(destination.url, policy) from exc
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
                    raise _too_slow(url, policy)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if deadline.expired:
                raise _too_slow(url, policy) from exc
            if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
                raise OutboundPolicyError(
                    f"{url!r} timed out (read_timeout={policy.read_timeout}s; {setting('READ_TIMEOUT')})"
                ) from exc
            raise LoaderError(f"reading {url!r} failed: {exc}") from exc
        if deadline.expired:  # the timer's shutdown looks like the end of the body: it is not
            raise _too_slow(url, policy)
    return bytes(body)


# What a host name may not hold once percent-decoded (the WHATWG URL standard's forbidden code points).
_FORBIDDEN_HOST_CHARACTERS = frozenset("\0\t\n\r #/:<>?@[\\]^|%")


def _normalise_host(hostname: str, url: str) -> str:
    """The host the way a browser reads it, so the lists and the address checks see the real target.

    Percent-escapes are decoded (``%31%32%37.0.0.1`` is 127.0.0.1), IDNA applied (fullwidth digits
    become ASCII ones), a trailing dot dropped, and a name that ends in a number is an IPv4 address
    in any of its historic spellings (``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``127.1``), so it
    is checked as one instead of going to the resolver.
    """
    if ":" in hostname:  # an IPv6 literal; a zone id ("%25eth0") names an interface, not a host
        return hostname.split("%", 1)[0].lower()
    invalid = f"refused {url!r}: invalid host name {hostname!r}"
    try:
        host = unquote(hostname, errors="strict").rstrip(".").lower()
        if not host:
            raise OutboundPolicyError(f"refused {url!r}: no host")
        if not host.isascii():
            host = host.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise OutboundPolicyError(invalid) from exc
    if _FORBIDDEN_HOST_CHARACTERS.intersection(host) or not host.strip("."):
        raise OutboundPolicyError(invalid)
    if _ends_in_number(host):
        address = _legacy_ipv4(host)
        if address is None:
            raise OutboundPolicyError(f"{invalid}: it ends in a number but is not an IPv4 address")
        return str(address)
    return host


def _ends_in_number(host: str) -> bool:
    last = host.rsplit(".", 1)[-1]
    if last.isdigit():
        return True
    return last.startswith("0x") and all(c in "0123456789abcdef" for c in last[2:])


def _legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """``host`` read as inet_aton and browsers do: 1 to 4 parts, each decimal, 0x-hex or 0-octal."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        if part.startswith("0x"):
            base, digits = 16, part[2:]
        elif part.startswith("0"):
            base, digits = 8, part[1:]
        else:
            base, digits = 10, part
        # Checked digit by digit: int() would also take "1_0", "+1" and Arabic-Indic digits.
        if not part or not all(c in "0123456789abcdef"[:base] for c in digits):
            return None
        numbers.append(int(digits, base) if digits else 0)
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        return None
    return ipaddress.IPv4Address(last + sum(n << (8 * (3 - i)) for i, n in enumerate(leading)))


def _match_host(host: str, patterns: Iterable[str]) -> str | None:
    for pattern in patterns:
        wanted = pattern.lower().rstrip(".")
        if (wanted.startswith("*.") and host.endswith(wanted[1:])) or host == wanted:
            return pattern
    return None


def _parse_ip(value: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return None


def _blocked_reason(ip: IPAddress, allowed: Iterable[Network]) -> str | None:
    """Why ``ip`` must not be contacted, or None. ``allowed`` networks are exempt."""
    allowed = tuple(allowed)
    if any(ip.version == network.version and ip in network for network in allowed):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        for kind, inner in embedded:
            reason = _blocked_reason(inner, allowed)
            if reason:
                return f"{kind} address embedding {inner}, {reason}"
        if embedded and embedded[0][0] in ("IPv4-mapped", "IPv4-translated", "NAT64", "IPv4-compatible"):
            return None  # a pure translation of an address that passed: judge it by that address
    for network, rule in _BLOCKED_NETWORKS:
        if ip.version == network.version and ip in network:
            return rule
    if not ip.is_global:
        return "not a globally routable address"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """IPv4 addresses an IPv6 address carries, which a stack or gateway may connect to instead."""
    if ip.ipv4_mapped:
        return [("IPv4-mapped", ip.ipv4_mapped)]
    if ip in _IPV4_TRANSLATED:
        return [("IPv4-translated", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))]
    if ip in _NAT64:
        return [("NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))]
    if ip.sixtofour:
        return [("6to4", ip.sixtofour)]
    if ip.teredo:
        return [("Teredo", ip.teredo[0]), ("Teredo", ip.teredo[1])]
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:
        return [("IPv4-compatible", ipaddress.IPv4Address(int(ip)))]
    return []
