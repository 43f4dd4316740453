"""OutboundPolicy: what a fetch may reach, checked before a byte is sent."""

from __future__ import annotations

import ipaddress
import queue
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from django.utils.module_loading import import_string

from ...conf import rag_settings
from ...exceptions import ConfigurationError, LoaderError, OutboundPolicyError
from .addresses import Network, blocked_reason, match_host, normalise_host, parse_ip

Resolver = Callable[[str, int], Iterable[str]]
"""``resolver(host, port)`` returns the host's addresses as strings."""


def setting(name: str) -> str:
    """How a refusal names the setting that allows it: ``RAG["OUTBOUND"]["ALLOW_NETWORKS"]``."""
    return f'RAG["OUTBOUND"]["{name}"]'


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
        host = normalise_host(parts.hostname or "", url)
        denied = match_host(host, self.host_denylist)
        if denied:
            raise OutboundPolicyError(
                f"refused {url!r}: host {host!r} matches host_denylist entry {denied!r} "
                f"({setting('HOST_DENYLIST')})"
            )
        if self.host_allowlist and not match_host(host, self.host_allowlist):
            raise OutboundPolicyError(
                f"refused {url!r}: host {host!r} is not in host_allowlist {list(self.host_allowlist)}; "
                f"add it to {setting('HOST_ALLOWLIST')}"
            )
        literal = parse_ip(host)
        addresses = [str(literal)] if literal else self._resolve(host, port, url, timeout)
        for address in addresses:
            ip = parse_ip(address)
            reason = f"not an IP address ({address!r})" if ip is None else blocked_reason(ip, self.networks)
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
                raise too_slow(url, self) from None
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


def too_slow(url: str, policy: OutboundPolicy) -> OutboundPolicyError:
    return OutboundPolicyError(
        f"refused {url!r}: took longer than total_timeout={policy.total_timeout}s, redirects included "
        f"({setting('TOTAL_TIMEOUT')})"
    )
