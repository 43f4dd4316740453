"""OutboundPolicy and guarded_fetch: the only way django-rag touches the network.

Fetching a URL a user typed is a server-side request forgery risk, so every hop is checked
before a byte is sent: scheme, host allow/deny lists, and every address the host resolves to.
The host is resolved once and the connection is made to the checked address (the ``Host``
header, TLS SNI and certificate check still use the hostname), so a DNS answer that changes
between check and connect cannot smuggle the request somewhere else.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from http.cookiejar import DefaultCookiePolicy
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

import requests
import urllib3
from django.utils.module_loading import import_string
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

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
        ("fc00::/7", "unique local, i.e. private (fc00::/7)"),
        ("fe80::/10", "link-local (fe80::/10)"),
        ("fec0::/10", "site-local (fec0::/10)"),
        ("ff00::/8", "multicast (ff00::/8)"),
    )
]
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


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

    def check(self, url: str) -> Destination:
        """Check ``url`` (scheme, host, every resolved address) and say where to connect."""
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
            raise OutboundPolicyError(f"refused {url!r}: credentials in the URL are not allowed")
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
        addresses = [str(literal)] if literal else self._resolve(host, port)
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

    def _resolve(self, host: str, port: int) -> list[str]:
        resolver = self.resolver or system_resolver
        try:
            addresses = list(dict.fromkeys(resolver(host, port)))
        except OSError as exc:
            raise LoaderError(f"could not resolve host {host!r}: {exc}") from exc
        if not addresses:
            raise LoaderError(f"host {host!r} resolved to no address")
        return addresses


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


class _PinnedAdapter(HTTPAdapter):
    """Connects to the URL's host (an IP address) but presents ``server_hostname`` for SNI and TLS."""

    server_hostname: str | None = None

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
    when the policy refuses a hop, the body is too large or the server is too slow, LoaderError
    when the server cannot be reached. Non-2xx responses are returned, not raised.
    """
    policy = policy or OutboundPolicy.from_settings()
    request_headers: CaseInsensitiveDict[str] = CaseInsensitiveDict(headers or {})
    request_headers.pop("Host", None)  # always the checked host's; never the caller's
    request_headers.setdefault("User-Agent", policy.user_agent)
    deadline = time.monotonic() + policy.total_timeout
    adapter = _PinnedAdapter()
    redirects: list[str] = []
    origin = None
    with requests.Session() as session:
        session.trust_env = False  # no environment proxies (they would bypass the checks), no .netrc
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # the jar is keyed by IP
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        current = url
        while True:
            destination = policy.check(current)
            origin = origin or destination.origin
            if destination.origin != origin:
                for name in SENSITIVE_HEADERS:
                    request_headers.pop(name, None)
            adapter.server_hostname = None if destination.ip_literal else destination.host
            response, address = _send(session, destination, method, request_headers, policy)
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
) -> tuple[requests.Response, str]:
    """Send to the first checked address that accepts a connection."""
    error: Exception | None = None
    for address in destination.addresses:
        try:
            response = session.request(
                method,
                destination.pinned_url(address),
                headers={**headers, "Host": destination.host_header},
                allow_redirects=False,
                stream=True,
                timeout=(policy.connect_timeout, policy.read_timeout),
                verify=policy.verify,
            )
            return response, address
        except requests.exceptions.SSLError as exc:
            raise OutboundPolicyError(
                f"TLS verification failed for {destination.host!r} ({address}): {exc}"
            ) from exc
        except requests.exceptions.Timeout as exc:
            raise OutboundPolicyError(
                f"{destination.url!r} timed out (connect_timeout={policy.connect_timeout}s, "
                f"read_timeout={policy.read_timeout}s; "
                f"{setting('CONNECT_TIMEOUT')}, {setting('READ_TIMEOUT')})"
            ) from exc
        except requests.exceptions.ConnectionError as exc:
            error = exc  # another checked address of the same host may answer
        except requests.exceptions.RequestException as exc:
            raise LoaderError(f"request to {destination.url!r} failed: {exc}") from exc
    raise LoaderError(f"could not connect to {destination.host!r} at {list(destination.addresses)}: {error}")


def _read_capped(response: requests.Response, policy: OutboundPolicy, deadline: float, url: str) -> bytes:
    """Read the decoded body, refusing it once it passes ``max_bytes`` or the total timeout."""
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
            # chunk arrived, so a trickling server could outlive total_timeout), decompressed with
            # a bounded output size, so a gzip bomb is capped on what it expands to.
            while chunk := response.raw.read1(64 * 1024, decode_content=True):
                body += chunk
                if len(body) > policy.max_bytes:
                    raise OutboundPolicyError(too_big)
                if time.monotonic() > deadline:
                    raise OutboundPolicyError(
                        f"refused {url!r}: took longer than total_timeout={policy.total_timeout}s "
                        f"({setting('TOTAL_TIMEOUT')})"
                    )
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise OutboundPolicyError(
                f"{url!r} timed out (read_timeout={policy.read_timeout}s; {setting('READ_TIMEOUT')})"
            ) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise LoaderError(f"reading {url!r} failed: {exc}") from exc
    return bytes(body)


def _normalise_host(host: str, url: str) -> str:
    host = host.split("%", 1)[0].rstrip(".").lower()  # zone ids and a trailing dot would dodge the lists
    if not host:
        raise OutboundPolicyError(f"refused {url!r}: no host")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise OutboundPolicyError(f"refused {url!r}: invalid host name {host!r}") from exc
    return host


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
        if embedded and embedded[0][0] in ("IPv4-mapped", "NAT64", "IPv4-compatible"):
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
    if any(ip in network for network in _NAT64):
        return [("NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))]
    if ip.sixtofour:
        return [("6to4", ip.sixtofour)]
    if ip.teredo:
        return [("Teredo", ip.teredo[0]), ("Teredo", ip.teredo[1])]
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:
        return [("IPv4-compatible", ipaddress.IPv4Address(int(ip)))]
    return []
