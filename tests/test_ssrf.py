"""SSRF corpus: every way a URL can point guarded_fetch, load_web or ``rag_ingest URL`` inward.

"Internal hosts" are simulated: servers this file starts on loopback, and an injected resolver
that maps test names to addresses. Nothing here connects to any address but 127.0.0.1 (and one
127.0.0.2 listener that must never be reached): a refused request is refused before any socket
connects, which a ``sys`` audit hook records and the tests assert. Each refusal names the
``RAG["OUTBOUND"]`` setting that would allow it. Timing cases use deadlines under a second.

tests/test_outbound.py holds the policy's own tests (pinning, TLS, host lists, credentials on
redirects); this file is the corpus of hostile requests and the limits that bound them.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import ipaddress
import json
import socket
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_rag.exceptions import LoaderError, OutboundPolicyError
from django_rag.ingest.loaders import load_web
from django_rag.ingest.outbound import OutboundPolicy, guarded_fetch
from django_rag.models import Document
from tests.test_outbound import FakeDNS, LoopbackServer, _serve_tls, loopback_policy, redirect, reply

ALLOW_NETWORKS = 'RAG["OUTBOUND"]["ALLOW_NETWORKS"]'
ALLOWED_SCHEMES = 'RAG["OUTBOUND"]["ALLOWED_SCHEMES"]'
ALLOW_DOWNGRADE = 'RAG["OUTBOUND"]["ALLOW_DOWNGRADE"]'
HOST_DENYLIST = 'RAG["OUTBOUND"]["HOST_DENYLIST"]'
MAX_BYTES = 'RAG["OUTBOUND"]["MAX_BYTES"]'
MAX_REDIRECTS = 'RAG["OUTBOUND"]["MAX_REDIRECTS"]'
TOTAL_TIMEOUT = 'RAG["OUTBOUND"]["TOTAL_TIMEOUT"]'
DEADLINE = 0.6  # seconds: every timing case is held to this, whatever the server does
LATE = DEADLINE + 1.2  # the latest a timed-out fetch may return on a loaded machine


# --- watching the network --------------------------------------------------------------------
# An audit hook sees every socket connect and system DNS lookup. Hooks cannot be removed, so this
# one records only for threads that asked (network_log) and costs two comparisons otherwise.

_RECORDING: dict[int, list[tuple[str, Any]]] = {}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect" or event == "socket.getaddrinfo":
        log = _RECORDING.get(threading.get_ident())
        if log is not None:
            log.append((event, args[1] if event == "socket.connect" else args[0]))


sys.addaudithook(_audit)


@contextmanager
def network_log() -> Iterator[list[tuple[str, Any]]]:
    """Every ``("socket.connect", address)`` and ``("socket.getaddrinfo", host)`` of this thread."""
    log: list[tuple[str, Any]] = []
    _RECORDING[threading.get_ident()] = log
    try:
        yield log
    finally:
        del _RECORDING[threading.get_ident()]


def connected_to(log: list[tuple[str, Any]]) -> list[str]:
    return [address[0] for event, address in log if event == "socket.connect"]


def refused(url: str, policy: OutboundPolicy, *, names: str) -> str:
    """Fetch ``url``; it must be refused before any connect or system lookup, naming ``names``."""
    with network_log() as log, pytest.raises(OutboundPolicyError) as caught:
        guarded_fetch(url, policy=policy)
    assert log == [], f"{url} touched the network before being refused: {log}"
    message = str(caught.value)
    assert names in message, message
    return message


def open_policy(dns: FakeDNS | None = None, **options: Any) -> OutboundPolicy:
    """http and https allowed, no network opened: only the address rules can refuse."""
    return OutboundPolicy(allowed_schemes=("http", "https"), resolver=dns or FakeDNS({}), **options)


# --- servers that misbehave ------------------------------------------------------------------


class RawServer:
    """A TCP server on loopback that answers each connection with ``behaviour(connection)``,
    for replies http.server cannot send: slow, endless, malformed."""

    def __init__(self, behaviour: Callable[[socket.socket], None], host: str = "127.0.0.1", port: int = 0):
        self.behaviour = behaviour
        self.listener = socket.create_server((host, port))
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.connections += 1
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            try:
                connection.settimeout(10)
                connection.recv(65536)  # the request; its content does not matter here
                self.behaviour(connection)
            except OSError:
                pass  # the client gave up: what these servers are for

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def raw() -> Iterator[Callable[[Callable[[socket.socket], None]], RawServer]]:
    servers: list[RawServer] = []

    def start(behaviour: Callable[[socket.socket], None]) -> RawServer:
        servers.append(RawServer(behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def site() -> Iterator[LoopbackServer]:
    server = LoopbackServer().start()
    yield server
    server.stop()


def drip(data: bytes, every: float = 0.2) -> Callable[[socket.socket], None]:
    """Send ``data`` one byte per ``every`` seconds: each read succeeds, the whole never ends."""

    def behaviour(connection: socket.socket) -> None:
        for i in range(len(data)):
            connection.sendall(data[i : i + 1])
            time.sleep(every)

    return behaviour


def headers_then(head: bytes, body: Callable[[socket.socket], None]) -> Callable[[socket.socket], None]:
    def behaviour(connection: socket.socket) -> None:
        connection.sendall(head)
        body(connection)

    return behaviour


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def local(port: int, path: str = "/", host: str = "h.test") -> str:
    return f"http://{host}:{port}{path}"


def local_policy(**options: Any) -> OutboundPolicy:
    return loopback_policy(FakeDNS({"h.test": ["127.0.0.1"]}), **options)


# --- address ranges: refused by address, before any connect ------------------------------------


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.255.255.254", "loopback"),
        ("127.0.0.53", "loopback"),  # systemd-resolved's stub
        ("10.255.255.255", "private (10.0.0.0/8)"),
        ("172.31.255.255", "private (172.16.0.0/12)"),
        ("192.168.255.255", "private (192.168.0.0/16)"),
        ("169.254.0.1", "link-local"),
        ("169.254.170.2", "link-local"),  # the ECS task metadata endpoint
        ("100.64.0.0", "carrier-grade NAT"),
        ("100.127.255.255", "carrier-grade NAT"),
        ("100.100.100.200", "carrier-grade NAT"),  # Alibaba Cloud's metadata endpoint
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("192.0.0.8", "IETF protocol assignments"),
        ("198.51.100.1", "documentation"),
        ("203.0.113.5", "documentation"),
        ("0.1.2.3", "unspecified"),
        ("239.255.255.250", "multicast"),  # SSDP
        ("250.1.2.3", "reserved"),
        ("fd00:ec2::254", "unique local"),  # the AWS metadata endpoint over IPv6
        ("fe80::a9fe:a9fe", "link-local"),
        ("fec0::1", "site-local"),
        ("ff05::1:3", "multicast"),
        ("100::1", "discard-only"),
        ("2001:db8::1", "documentation"),
    ],
)
def test_internal_address_literal_is_refused_before_any_connect(address: str, rule: str) -> None:
    host = f"[{address}]" if ":" in address else address
    message = refused(f"http://{host}/latest/meta-data/", open_policy(), names=ALLOW_NETWORKS)
    assert rule in message


@pytest.mark.parametrize("address", ["172.32.0.1", "100.128.0.1", "198.20.0.1", "11.0.0.1", "2606:4700::1"])
def test_public_address_just_outside_a_refused_range_passes_the_check(address: str) -> None:
    # Only checked (Destination returned), never fetched: no test sends traffic off loopback.
    policy = open_policy(FakeDNS({"edge.test": [address]}))
    assert policy.check("https://edge.test/").addresses == (address,)


# --- IPv6 forms that carry an IPv4 address -------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind", "inner"),
    [
        ("::ffff:10.0.0.1", "IPv4-mapped", "10.0.0.1"),
        ("::ffff:a9fe:a9fe", "IPv4-mapped", "169.254.169.254"),
        ("0:0:0:0:0:ffff:192.168.0.1", "IPv4-mapped", "192.168.0.1"),
        ("::127.0.0.1", "IPv4-compatible", "127.0.0.1"),
        ("::a9fe:a9fe", "IPv4-compatible", "169.254.169.254"),
        ("::ffff:0:7f00:1", "IPv4-translated", "127.0.0.1"),
        ("::ffff:0:a9fe:a9fe", "IPv4-translated", "169.254.169.254"),
        ("64:ff9b::127.0.0.1", "NAT64", "127.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "NAT64", "169.254.169.254"),
        ("2002:a9fe:a9fe::", "6to4", "169.254.169.254"),
        ("2002:c0a8:101::1", "6to4", "192.168.1.1"),
        ("2002:a00:1::", "6to4", "10.0.0.1"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo", "127.0.0.1"),  # client, bits inverted
        ("2001:0:4136:e378:8000:63bf:5601:5601", "Teredo", "169.254.169.254"),
        ("2001:0:a9fe:a9fe::", "Teredo", "169.254.169.254"),  # the Teredo server field
    ],
)
def test_ipv6_embedding_of_an_internal_ipv4_address_is_refused(address: str, kind: str, inner: str) -> None:
    message = refused(f"http://[{address}]/", open_policy(), names=ALLOW_NETWORKS)
    assert f"{kind} address embedding {inner}" in message


@pytest.mark.parametrize("address", ["64:ff9b:1::a9fe:a9fe", "64:ff9b:1:a00:0:100:5db8:d822"])
def test_local_use_nat64_is_refused_whatever_ipv4_address_it_seems_to_end_with(address: str) -> None:
    # RFC 8215: the site picks the prefix length (/48../96), so the last 32 bits prove nothing; the
    # second address is 10.0.0.1 behind a /48 translator although it ends in 93.184.216.34.
    message = refused(f"http://[{address}]/", open_policy(), names=ALLOW_NETWORKS)
    assert "local-use NAT64" in message


def test_ipv6_embedding_in_a_dns_answer_is_refused_like_a_literal() -> None:
    dns = FakeDNS({"v6.test": ["2002:7f00:1::"]})
    message = refused("https://v6.test/", open_policy(dns), names=ALLOW_NETWORKS)
    assert "6to4 address embedding 127.0.0.1" in message and dns.calls == ["v6.test"]


def test_mapped_form_of_an_allowed_network_is_judged_by_its_ipv4_address() -> None:
    policy = open_policy(allow_networks=["127.0.0.0/8"])
    (address,) = policy.check("http://[::ffff:127.0.0.1]:8000/").addresses
    # Compared as addresses: Python 3.13 spells a mapped address ::ffff:127.0.0.1, older ones ::ffff:7f00:1.
    assert ipaddress.ip_address(address) == ipaddress.IPv6Address("::ffff:7f00:1")


# --- spellings: numeric forms, case, dots, escapes, IDNA ----------------------------------------


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0X7F.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0.0.0.0", "0.0.0.0"),
        ("2852039166", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("0x0a.0.0.1", "10.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("%31%32%37.0.0.1", "127.0.0.1"),
        ("127%2e0%2e0%2e1", "127.0.0.1"),
        ("\uff11\uff12\uff17.\uff10.\uff10.\uff11", "127.0.0.1"),  # fullwidth digits
        ("127\u30020\u30020\u30021", "127.0.0.1"),  # ideographic full stops
        ("[::]", "::"),
    ],
)
def test_other_spelling_of_an_internal_address_is_checked_as_that_address(host: str, address: str) -> None:
    dns = FakeDNS({})
    message = refused(f"http://{host}/", open_policy(dns), names=ALLOW_NETWORKS)
    assert f"resolves to {address}," in message
    assert dns.calls == []  # read as an address, never sent to a resolver


@pytest.mark.parametrize(
    "host",
    [
        "1.2.3.4.5",
        "256.0.0.1",
        "0x7g.1",
        "1..1",
        "1_27.0.0.1",
        "08.0.0.1",
        "%00evil.test",
        "evil%2ftest",
        "%ff.test",
    ],
)
def test_host_that_is_neither_a_name_nor_an_address_is_refused(host: str) -> None:
    dns = FakeDNS({})
    with pytest.raises(OutboundPolicyError, match="invalid host name"):
        guarded_fetch(f"http://{host}/", policy=open_policy(dns))
    assert dns.calls == []


@pytest.mark.parametrize("host", ["LOCALHOST.", "LocalHost", "%6c%6f%63%61%6c%68%6f%73%74", "localhost.."])
def test_odd_case_trailing_dots_and_escapes_reach_the_resolver_as_one_plain_name(host: str) -> None:
    dns = FakeDNS({"localhost": ["127.0.0.1"]})
    refused(f"http://{host}/", open_policy(dns), names=ALLOW_NETWORKS)
    assert dns.calls == ["localhost"]


def test_arabic_indic_digits_are_a_name_for_the_resolver_not_an_address() -> None:
    # IDNA leaves these digits alone: the host is an IDN whose address the resolver gives.
    dns = FakeDNS({"xn--9hbcp.xn--8hb.xn--8hb.xn--9hb": ["127.0.0.1"]})
    refused("http://\u0661\u0662\u0667.\u0660.\u0660.\u0661/", open_policy(dns), names=ALLOW_NETWORKS)
    assert dns.calls == ["xn--9hbcp.xn--8hb.xn--8hb.xn--9hb"]


def test_escaped_dot_cannot_hide_a_denied_domain() -> None:
    dns = FakeDNS({"docs.test.evil.test": ["93.184.216.34"]})
    refused(
        "https://docs.test%2eevil.test/", open_policy(dns, host_denylist=["*.evil.test"]), names=HOST_DENYLIST
    )
    assert dns.calls == []


@pytest.mark.parametrize(
    "url",
    [
        "http://allowed.test@127.0.0.1/",
        "http://allowed.test:80@169.254.169.254/",
        "http://allowed.test\\@127.0.0.1/",
        "http://:@127.0.0.1/",
        "http://allowed.test%40127.0.0.1@127.0.0.1/",
    ],
)
def test_userinfo_in_the_url_is_refused(url: str) -> None:
    with (
        network_log() as log,
        pytest.raises(OutboundPolicyError, match="credentials in the URL are not allowed"),
    ):
        guarded_fetch(url, policy=open_policy(FakeDNS({"allowed.test": ["93.184.216.34"]})))
    assert log == []


def test_a_fragment_that_looks_like_userinfo_leaves_the_real_host_checked() -> None:
    message = refused("http://127.0.0.1#@allowed.test/", open_policy(), names=ALLOW_NETWORKS)
    assert "host '127.0.0.1'" in message


def test_a_query_that_looks_like_a_host_is_sent_to_the_checked_host(site: LoopbackServer) -> None:
    site.routes["/?@169.254.169.254/"] = reply(b"from the allowed host")
    policy = loopback_policy(FakeDNS({"allowed.test": ["127.0.0.1"]}), host_allowlist=["allowed.test"])
    with network_log() as log:
        result = guarded_fetch(f"http://allowed.test:{site.port}?@169.254.169.254/", policy=policy)
    assert result.content == b"from the allowed host"
    assert connected_to(log) == ["127.0.0.1"]


# --- redirects -----------------------------------------------------------------------------------

INTERNAL_TARGETS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://metadata.test/computeMetadata/v1/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://2852039166/admin",  # 169.254.169.254 as one decimal number
    "http://10.0.0.1:6379/",
]


@pytest.mark.parametrize("hop", [1, 2, 3, 4, 5])
def test_redirect_to_an_internal_address_is_refused_on_every_hop(site: LoopbackServer, hop: int) -> None:
    for n in range(1, hop):
        site.routes[f"/r{n}"] = redirect(f"/r{n + 1}")
    site.routes[f"/r{hop}"] = redirect(INTERNAL_TARGETS[hop - 1])
    dns = FakeDNS({"h.test": ["127.0.0.1"], "metadata.test": ["169.254.169.254"]})
    with network_log() as log, pytest.raises(OutboundPolicyError, match=r"ALLOW_NETWORKS") as caught:
        guarded_fetch(local(site.port, "/r1"), policy=loopback_policy(dns, max_redirects=5))
    assert len(site.seen) == hop  # every hop before the internal one was served, none after
    assert set(connected_to(log)) == {"127.0.0.1"}
    assert "refused" in str(caught.value)


def test_redirect_from_https_to_http_is_refused(site: LoopbackServer, tmp_path: Path) -> None:
    ca, _ = _serve_tls(site, tmp_path, "h.test")
    site.routes["/secure"] = redirect("http://h.test:1/plain")
    with pytest.raises(OutboundPolicyError, match="from https to plain http") as caught:
        guarded_fetch(f"https://h.test:{site.port}/secure", policy=local_policy(verify=str(ca)))
    assert ALLOW_DOWNGRADE in str(caught.value)


def test_redirect_from_https_to_http_is_refused_by_the_default_schemes(
    site: LoopbackServer, tmp_path: Path
) -> None:
    ca, _ = _serve_tls(site, tmp_path, "h.test")
    site.routes["/secure"] = redirect("http://h.test/plain")
    policy = OutboundPolicy(
        allow_networks=["127.0.0.0/8"], resolver=FakeDNS({"h.test": ["127.0.0.1"]}), verify=str(ca)
    )
    with pytest.raises(OutboundPolicyError, match=r"scheme 'http' is not allowed") as caught:
        guarded_fetch(f"https://h.test:{site.port}/secure", policy=policy)
    assert ALLOWED_SCHEMES in str(caught.value)


@pytest.mark.parametrize(
    "location",
    ["gopher://h.test:70/_stats", "file:///etc/passwd", "data:text/html,<h1>x</h1>", "ftp://h.test/"],
)
def test_redirect_to_a_non_http_scheme_is_refused(site: LoopbackServer, location: str) -> None:
    site.routes["/start"] = redirect(location)
    with pytest.raises(OutboundPolicyError, match=r"scheme '\w+' is not allowed") as caught:
        guarded_fetch(local(site.port, "/start"), policy=local_policy())
    assert ALLOWED_SCHEMES in str(caught.value)


def test_redirect_with_userinfo_is_refused(site: LoopbackServer) -> None:
    site.routes["/start"] = redirect(f"http://h.test@127.0.0.1:{site.port}/next")
    with pytest.raises(OutboundPolicyError, match="credentials in the URL"):
        guarded_fetch(local(site.port, "/start"), policy=local_policy())
    assert site.paths() == ["/start"]


def test_one_redirect_more_than_max_redirects_is_refused_naming_the_setting(site: LoopbackServer) -> None:
    for n in range(6):
        site.routes[f"/r{n}"] = redirect(f"/r{n + 1}")
    with pytest.raises(OutboundPolicyError, match="more than 5 redirects") as caught:
        guarded_fetch(local(site.port, "/r0"), policy=local_policy())
    assert MAX_REDIRECTS in str(caught.value)


# --- DNS answers that change between the check and the connect --------------------------------


class Rebinding:
    """A resolver whose answer changes after the first question (a TTL-0 rebinding attack)."""

    def __init__(self, first: str, then: str) -> None:
        self.answers = [first, then]
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return [self.answers[min(len(self.calls), 2) - 1]]


def test_rebinding_answer_is_never_used_the_connection_goes_to_the_checked_address(
    site: LoopbackServer,
) -> None:
    site.routes["/"] = reply(b"checked")
    internal = RawServer(
        lambda c: c.sendall(b"HTTP/1.1 200 OK\r\n\r\ninternal"), host="127.0.0.2", port=site.port
    )
    try:
        dns = Rebinding("127.0.0.1", "127.0.0.2")
        policy = OutboundPolicy(allowed_schemes=("http",), allow_networks=["127.0.0.1/32"], resolver=dns)
        with network_log() as log:
            result = guarded_fetch(f"http://rebind.test:{site.port}/", policy=policy)
        assert (result.content, result.address) == (b"checked", "127.0.0.1")
        assert dns.calls == ["rebind.test"]  # asked once: nothing resolves the name again to connect
        assert connected_to(log) == ["127.0.0.1"]
        assert all(host != "rebind.test" for event, host in log if event == "socket.getaddrinfo")
        assert internal.connections == 0
    finally:
        internal.close()


def test_rebinding_between_redirect_hops_is_caught_by_the_next_check(site: LoopbackServer) -> None:
    site.routes["/start"] = redirect("/next")
    internal = RawServer(
        lambda c: c.sendall(b"HTTP/1.1 200 OK\r\n\r\ninternal"), host="127.0.0.2", port=site.port
    )
    try:
        dns = Rebinding("127.0.0.1", "127.0.0.2")
        policy = OutboundPolicy(allowed_schemes=("http",), allow_networks=["127.0.0.1/32"], resolver=dns)
        with pytest.raises(
            OutboundPolicyError, match=r"resolves to 127\.0\.0\.2, which is loopback"
        ) as caught:
            guarded_fetch(f"http://rebind.test:{site.port}/start", policy=policy)
        assert ALLOW_NETWORKS in str(caught.value)
        assert dns.calls == ["rebind.test", "rebind.test"] and internal.connections == 0
    finally:
        internal.close()


def test_resolver_answer_that_is_not_an_address_is_refused() -> None:
    # A name in the answer would be resolved again at connect time, unchecked.
    refused("https://cname.test/", open_policy(FakeDNS({"cname.test": ["localhost"]})), names=ALLOW_NETWORKS)


def test_every_answer_is_checked_not_only_the_first() -> None:
    dns = FakeDNS({"round-robin.test": ["93.184.216.34", "2606:4700::1", "::ffff:169.254.169.254"]})
    refused("https://round-robin.test/", open_policy(dns), names=ALLOW_NETWORKS)


# --- schemes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "file://localhost/etc/passwd",
        "ftp://files.test/pub/",
        "gopher://h.test:70/_INFO",
        "data:text/plain;base64,aGk=",
        "javascript:alert(document.domain)",
        "dict://h.test:11211/stats",
        "ldap://h.test/",
        "ws://h.test/socket",
        "//h.test/scheme-relative",
    ],
)
def test_non_http_scheme_is_refused_before_resolving(url: str) -> None:
    dns = FakeDNS({"h.test": ["93.184.216.34"], "files.test": ["93.184.216.34"]})
    refused(url, open_policy(dns), names=ALLOWED_SCHEMES)
    assert dns.calls == []


def test_scheme_is_matched_without_regard_to_case(site: LoopbackServer) -> None:
    site.routes["/"] = reply(b"upper")
    assert guarded_fetch(f"HTTP://h.test:{site.port}/", policy=local_policy()).content == b"upper"


# --- bodies ------------------------------------------------------------------------------------


def test_chunked_body_without_a_length_is_cut_at_max_bytes(raw: Any) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = raw(headers_then(head, lambda c: c.sendall(chunk(b"x" * 40_000) * 10 + b"0\r\n\r\n")))
    with pytest.raises(OutboundPolicyError, match="larger than max_bytes=100000") as caught:
        guarded_fetch(local(server.port), policy=local_policy(max_bytes=100_000))
    assert MAX_BYTES in str(caught.value)


def endless(piece: bytes, framing: Callable[[bytes], bytes] = lambda b: b) -> Callable[[socket.socket], None]:
    def behaviour(connection: socket.socket) -> None:
        while True:
            connection.sendall(framing(piece))

    return behaviour


@pytest.mark.parametrize(
    ("head", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", endless(b"x" * 65536)),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", endless(b"x" * 65536, chunk)),
    ],
    ids=["until-close", "chunked"],
)
def test_never_ending_body_stops_at_max_bytes(raw: Any, head: bytes, body: Any) -> None:
    server = raw(headers_then(head, body))
    started = time.monotonic()
    with pytest.raises(OutboundPolicyError, match="larger than max_bytes") as caught:
        guarded_fetch(local(server.port), policy=local_policy(max_bytes=1_000_000))
    assert MAX_BYTES in str(caught.value) and time.monotonic() - started < LATE


def _nested_gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    zeros = b"\0" * 1_000_000
    inner = b"".join(compressor.compress(zeros) for _ in range(50)) + compressor.flush()
    return gzip.compress(inner, 9)  # 50 MB of zeros twice gzipped: a few hundred bytes


@pytest.mark.parametrize(
    ("encoding", "payload"),
    [
        ("gzip, gzip", _nested_gzip_bomb),
        ("deflate", lambda: zlib.compress(b"\0" * 30_000_000, 9)),
    ],
    ids=["nested-gzip", "deflate"],
)
def test_compression_bomb_is_cut_at_max_bytes_without_expanding_in_memory(
    site: LoopbackServer, encoding: str, payload: Callable[[], bytes]
) -> None:
    bomb = payload()
    site.routes["/bomb"] = reply(
        bomb, headers={"Content-Encoding": encoding, "Content-Length": str(len(bomb))}
    )
    tracemalloc.start()
    try:
        with pytest.raises(OutboundPolicyError, match="larger than max_bytes=1000000") as caught:
            guarded_fetch(local(site.port, "/bomb"), policy=local_policy(max_bytes=1_000_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert MAX_BYTES in str(caught.value)
    assert peak < 8_000_000  # decoded a bounded piece at a time, not the whole bomb


def test_long_chain_of_content_encodings_is_a_loader_error(site: LoopbackServer) -> None:
    body = b"hello"
    for _ in range(10):
        body = gzip.compress(body)
    site.routes["/"] = reply(body, headers={"Content-Encoding": ", ".join(["gzip"] * 10)})
    with pytest.raises(LoaderError, match="Too many content encodings"):
        guarded_fetch(local(site.port), policy=local_policy())


def test_load_web_refuses_a_gzip_bomb_with_the_policy_error(site: LoopbackServer) -> None:
    bomb = gzip.compress(b"<p>" + b"a" * 5_000_000)
    site.routes["/page"] = reply(bomb, headers={"Content-Type": "text/html", "Content-Encoding": "gzip"})
    with pytest.raises(OutboundPolicyError, match="max_bytes"):
        load_web(local(site.port, "/page"), policy=local_policy(max_bytes=500_000))


# --- slow servers: one total deadline over everything ----------------------------------------


def continue_flood(connection: socket.socket) -> None:
    while True:
        connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        time.sleep(0.005)


def silent_deflate(connection: socket.socket) -> None:
    """A compressed body that keeps coming and never decodes to a single byte."""
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nTransfer-Encoding: chunked\r\n\r\n")
    compressor = zlib.compressobj()
    connection.sendall(chunk(compressor.compress(b"") + compressor.flush(zlib.Z_SYNC_FLUSH)))
    empty_block = compressor.flush(zlib.Z_FULL_FLUSH)  # a stored block of length 0
    while True:
        connection.sendall(chunk(empty_block * 100))
        time.sleep(0.01)


SLOW_SERVERS = {
    "status-line": drip(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
    "headers": headers_then(b"HTTP/1.1 200 OK\r\n", drip(b"X-Slow: " + b"s" * 50 + b"\r\n\r\n")),
    "body": headers_then(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", drip(b"y" * 100)),
    "interim-100-flood": continue_flood,
    "compressed-no-output": silent_deflate,
    "silent": lambda c: time.sleep(5),
    "huge-headers-slowly": headers_then(
        b"HTTP/1.1 200 OK\r\n", drip(b"".join(b"X-%d: %s\r\n" % (i, b"h" * 500) for i in range(90)), 0.001)
    ),
}


@pytest.mark.parametrize("kind", list(SLOW_SERVERS))
def test_slow_server_is_held_to_the_total_deadline(raw: Any, kind: str) -> None:
    server = raw(SLOW_SERVERS[kind])
    # Every socket read succeeds within read_timeout: only the total deadline can stop these.
    policy = local_policy(total_timeout=DEADLINE, read_timeout=10, connect_timeout=10)
    started = time.monotonic()
    with pytest.raises(OutboundPolicyError, match=f"took longer than total_timeout={DEADLINE}s") as caught:
        guarded_fetch(local(server.port), policy=policy)
    assert time.monotonic() - started < LATE
    assert TOTAL_TIMEOUT in str(caught.value)


def test_silent_tls_handshake_is_held_to_the_total_deadline(raw: Any) -> None:
    server = raw(lambda c: time.sleep(5))
    policy = local_policy(total_timeout=DEADLINE, read_timeout=10, connect_timeout=10)
    started = time.monotonic()
    with pytest.raises(OutboundPolicyError, match="total_timeout"):
        guarded_fetch(f"https://h.test:{server.port}/", policy=policy)
    assert time.monotonic() - started < LATE


def test_the_total_deadline_spans_redirect_hops(site: LoopbackServer) -> None:
    def slow_redirect(target: str) -> Any:
        def route(handler: BaseHTTPRequestHandler) -> None:
            time.sleep(0.3)  # each hop well under read_timeout; five of them over the deadline
            redirect(target)(handler)

        return route

    for n in range(5):
        site.routes[f"/r{n}"] = slow_redirect(f"/r{n + 1}")
    site.routes["/r5"] = reply(b"too late")
    started = time.monotonic()
    with pytest.raises(OutboundPolicyError, match="redirects included") as caught:
        guarded_fetch(local(site.port, "/r0"), policy=local_policy(total_timeout=DEADLINE, read_timeout=5))
    assert time.monotonic() - started < LATE
    assert len(site.seen) < 5 and TOTAL_TIMEOUT in str(caught.value)


def test_slow_dns_answer_is_held_to_the_total_deadline() -> None:
    def slow_resolver(host: str, port: int) -> list[str]:
        time.sleep(3)  # a hostile name server answers as late as the system resolver waits
        return ["127.0.0.1"]

    policy = OutboundPolicy(allowed_schemes=("http",), resolver=slow_resolver, total_timeout=DEADLINE)
    started = time.monotonic()
    with network_log() as log, pytest.raises(OutboundPolicyError, match="total_timeout") as caught:
        guarded_fetch("http://slow-dns.test/", policy=policy)
    assert time.monotonic() - started < LATE and log == []
    assert TOTAL_TIMEOUT in str(caught.value)


def test_load_web_reports_the_deadline(raw: Any) -> None:
    server = raw(SLOW_SERVERS["body"])
    with pytest.raises(OutboundPolicyError, match="total_timeout"):
        load_web(local(server.port), policy=local_policy(total_timeout=DEADLINE, read_timeout=5))


# --- huge headers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "limit"),
    [
        (
            b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(150)) + b"\r\n",
            "more than 100 headers",
        ),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n", "when reading header line"),
        (b"HTTP/1.1 200 " + b"O" * 70_000 + b"\r\n\r\n", "when reading status line"),
        (b"HTTP/1.1 302 Found\r\nLocation: /" + b"l" * 70_000 + b"\r\n\r\n", "when reading header line"),
    ],
    ids=["many-headers", "long-header", "long-status-line", "long-location"],
)
def test_huge_response_headers_are_refused(raw: Any, response: bytes, limit: str) -> None:
    server = raw(lambda c: c.sendall(response))
    with pytest.raises(OutboundPolicyError, match="response headers are too large") as caught:
        guarded_fetch(local(server.port), policy=local_policy())
    assert limit in str(caught.value)


# --- what is allowed still works ----------------------------------------------------------------


def test_loopback_server_allowed_by_network_gives_its_content(site: LoopbackServer) -> None:
    site.routes["/doc"] = reply(b"internal wiki page")
    policy = OutboundPolicy(allowed_schemes=("http",), allow_networks=["127.0.0.1/32"])
    with network_log() as log:
        result = guarded_fetch(f"http://127.0.0.1:{site.port}/doc", policy=policy)
    assert (result.status, result.content) == (200, b"internal wiki page")
    assert connected_to(log) == ["127.0.0.1"]


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", "0"])
def test_allowing_loopback_does_not_allow_the_unspecified_address(host: str) -> None:
    # Connecting to 0.0.0.0 or :: reaches this machine's own services on Linux.
    refused(f"http://{host}:8000/", local_policy(), names=ALLOW_NETWORKS)


def test_allowing_one_loopback_address_does_not_allow_its_neighbour() -> None:
    policy = OutboundPolicy(allowed_schemes=("http",), allow_networks=["127.0.0.1/32"])
    refused("http://127.0.0.2/", policy, names=ALLOW_NETWORKS)


def test_redirect_chain_of_exactly_max_redirects_arrives(site: LoopbackServer) -> None:
    for n in range(5):
        site.routes[f"/r{n}"] = redirect(f"/r{n + 1}")
    site.routes["/r5"] = reply(b"arrived")
    result = guarded_fetch(local(site.port, "/r0"), policy=local_policy())
    assert (result.content, len(result.redirects)) == (b"arrived", 5)


def test_body_of_exactly_max_bytes_arrives(raw: Any) -> None:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    server = raw(headers_then(head, lambda c: c.sendall(chunk(b"z" * 5000) * 2 + b"0\r\n\r\n")))
    assert guarded_fetch(local(server.port), policy=local_policy(max_bytes=10_000)).content == b"z" * 10_000


def test_redirect_from_https_to_http_is_followed_when_allowed(site: LoopbackServer, tmp_path: Path) -> None:
    plain = LoopbackServer().start()
    try:
        plain.routes["/plain"] = reply(b"downgraded")
        ca, _ = _serve_tls(site, tmp_path, "h.test")
        site.routes["/secure"] = redirect(f"http://h.test:{plain.port}/plain")
        policy = local_policy(verify=str(ca), allow_downgrade=True)
        assert guarded_fetch(f"https://h.test:{site.port}/secure", policy=policy).content == b"downgraded"
    finally:
        plain.stop()


def test_fast_server_under_a_short_deadline_is_fetched_whole(raw: Any) -> None:
    server = raw(lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nquick"))
    assert guarded_fetch(local(server.port), policy=local_policy(total_timeout=DEADLINE)).content == b"quick"


def test_load_web_of_an_allowed_loopback_page_gives_its_text(site: LoopbackServer) -> None:
    site.routes["/guide"] = reply(
        b"<title>Guide</title><p>Rotate the keys monthly.</p>", headers={"Content-Type": "text/html"}
    )
    [doc] = load_web(local(site.port, "/guide"), policy=local_policy())
    assert doc.text == "Rotate the keys monthly." and doc.metadata["title"] == "Guide"


# --- rag_ingest URL: refused with the reason, recorded as a failed Document -------------------


def ingest(*urls: str, root: Path) -> dict[str, Any]:
    """rag_ingest --json; the JSON summary, whether or not a source failed."""
    out = io.StringIO()
    # A failed source makes the command exit non-zero, after printing the summary.
    with contextlib.suppress(CommandError):
        call_command(
            "rag_ingest", *urls, root=str(root), json=True, stdout=out, stderr=io.StringIO(), verbosity=0
        )
    summary: dict[str, Any] = json.loads(out.getvalue())
    return summary


def problems(summary: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {p["source_id"]: (p["reason"], p["error"]) for p in summary["problems"]}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "gopher://127.0.0.1:70/_stats", "FTP://files.test/x.txt"]
)
def test_rag_ingest_refuses_a_non_http_url_instead_of_reading_it_as_a_path(tmp_path: Path, url: str) -> None:
    reason, error = problems(ingest(url, root=tmp_path))[url]
    assert reason == "outbound-refused" and ALLOWED_SCHEMES in error
    document = Document.objects.get(source_id=url)
    assert (document.status, document.status_reason) == ("failed", "outbound-refused")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://0x7f.1/", "http://[::ffff:10.0.0.1]/"]
)
def test_rag_ingest_refuses_an_internal_address_before_connecting(
    tmp_path: Path, settings: Any, url: str
) -> None:
    settings.RAG = {**settings.RAG, "OUTBOUND": {"ALLOWED_SCHEMES": ["http"]}}
    with network_log() as log:
        summary = ingest(url, root=tmp_path)
    reason, error = problems(summary)[url]
    assert reason == "outbound-refused" and ALLOW_NETWORKS in error
    assert connected_to(log) == []  # (the database is reached through libpq, not Python sockets)
    assert Document.objects.get(source_id=url).status == "failed"


@pytest.mark.django_db
def test_rag_ingest_records_an_oversize_and_a_slow_url_with_the_setting_to_raise(
    tmp_path: Path, settings: Any, site: LoopbackServer, raw: Any
) -> None:
    site.routes["/big.txt"] = reply(b"word " * 1000)
    slow = raw(SLOW_SERVERS["body"])
    settings.RAG = {
        **settings.RAG,
        "OUTBOUND": {
            "ALLOWED_SCHEMES": ["http"],
            "ALLOW_NETWORKS": ["127.0.0.1/32"],
            "MAX_BYTES": 1000,
            "TOTAL_TIMEOUT": DEADLINE,
        },
    }
    big, late = f"http://127.0.0.1:{site.port}/big.txt", f"http://127.0.0.1:{slow.port}/slow.txt"
    found = problems(ingest(big, late, root=tmp_path))
    assert found[big][0] == "outbound-refused" and MAX_BYTES in found[big][1]
    assert found[late][0] == "outbound-refused" and TOTAL_TIMEOUT in found[late][1]


@pytest.mark.django_db
def test_rag_ingest_loads_an_allowed_loopback_url(
    tmp_path: Path, settings: Any, site: LoopbackServer
) -> None:
    site.routes["/handbook.txt"] = reply(b"Backups run nightly at two.")
    settings.RAG = {
        **settings.RAG,
        "OUTBOUND": {"ALLOWED_SCHEMES": ["http"], "ALLOW_NETWORKS": ["127.0.0.1/32"]},
    }
    url = f"HTTP://127.0.0.1:{site.port}/handbook.txt"
    summary = ingest(url, root=tmp_path)
    assert summary["sources"] == {"loaded": 1}
    assert Document.objects.get(source_id=url).status == "indexed"
