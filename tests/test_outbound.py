"""guarded_fetch and OutboundPolicy: every hop checked, the connection pinned, the body capped.

Host names are fake (``*.test``) and answered by an injected resolver, so no test touches real
DNS; servers run on 127.0.0.1 and are reached only through a policy that allows loopback.
"""

from __future__ import annotations

import datetime
import gzip
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from django_rag.exceptions import ConfigurationError, LoaderError, OutboundPolicyError
from django_rag.ingest.outbound import OutboundPolicy, guarded_fetch

Route = Callable[[BaseHTTPRequestHandler], None]


class FakeDNS:
    """A resolver answering from a table and remembering every question."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.table[host]


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackServer

    def do_GET(self) -> None:
        self.server.seen.append((self.path, {key.lower(): value for key, value in self.headers.items()}))
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404)
        else:
            route(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, Route] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeouts, caps) is what these tests expect

    def start(self) -> LoopbackServer:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]


def reply(body: bytes = b"", *, status: int = 200, headers: dict[str, str] | None = None) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in {"Content-Type": "text/plain", **(headers or {})}.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    return route


def redirect(location: str, status: int = 302) -> Route:
    return reply(status=status, headers={"Location": location})


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer().start()
    yield srv
    srv.stop()


def loopback_policy(dns: FakeDNS, **options: Any) -> OutboundPolicy:
    """A policy that may reach the test servers: http allowed, 127.0.0.0/8 opened explicitly."""
    return OutboundPolicy(
        allowed_schemes=("http", "https"), allow_networks=["127.0.0.0/8"], resolver=dns, **options
    )


# --- the strict defaults ------------------------------------------------------------------------


def test_default_policy_refuses_plain_http_before_resolving() -> None:
    dns = FakeDNS({"public.test": ["93.184.216.34"]})
    with pytest.raises(OutboundPolicyError, match="scheme 'http' is not allowed"):
        guarded_fetch("http://public.test/", policy=OutboundPolicy(resolver=dns))
    assert dns.calls == []


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "unique local"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("::ffff:127.0.0.1", "IPv4-mapped address embedding 127.0.0.1"),
        ("::ffff:169.254.169.254", "IPv4-mapped address embedding 169.254.169.254"),
        ("2002:7f00:1::", "6to4 address embedding 127.0.0.1"),
        ("64:ff9b::a00:1", "NAT64 address embedding 10.0.0.1"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.10", "documentation"),
    ],
)
def test_default_policy_refuses_a_non_public_address(address: str, rule: str) -> None:
    policy = OutboundPolicy(resolver=FakeDNS({"evil.test": [address]}))
    with pytest.raises(OutboundPolicyError, match=rule) as caught:
        guarded_fetch("https://evil.test/latest/meta-data/", policy=policy)
    assert f"host 'evil.test' resolves to {address}" in str(caught.value)


def test_ip_literal_in_the_url_is_checked_without_a_lookup() -> None:
    dns = FakeDNS({})
    with pytest.raises(OutboundPolicyError, match="cloud metadata"):
        guarded_fetch("https://169.254.169.254/latest/", policy=OutboundPolicy(resolver=dns))
    with pytest.raises(OutboundPolicyError, match="IPv4-mapped"):
        guarded_fetch("https://[::ffff:7f00:1]/", policy=OutboundPolicy(resolver=dns))
    assert dns.calls == []


def test_host_with_one_public_and_one_private_address_is_refused() -> None:
    policy = OutboundPolicy(resolver=FakeDNS({"mixed.test": ["93.184.216.34", "10.0.0.7"]}))
    with pytest.raises(OutboundPolicyError, match=r"resolves to 10\.0\.0\.7, which is private"):
        guarded_fetch("https://mixed.test/", policy=policy)


def test_public_address_passes_the_checks() -> None:
    policy = OutboundPolicy(resolver=FakeDNS({"docs.test": ["93.184.216.34", "2606:2800:220:1::1"]}))
    destination = policy.check("https://docs.test/guide?page=2#intro")
    assert destination.addresses == ("93.184.216.34", "2606:2800:220:1::1")
    assert destination.host_header == "docs.test"
    assert destination.path == "/guide?page=2"


def test_credentials_in_the_url_are_refused() -> None:
    policy = OutboundPolicy(resolver=FakeDNS({"docs.test": ["93.184.216.34"]}))
    with pytest.raises(OutboundPolicyError, match="credentials in the URL"):
        policy.check("https://user:secret@docs.test/")


@pytest.mark.parametrize("url", ["https://[::1/", "https://docs.test:99999/", "https:///path-only"])
def test_malformed_url_is_refused(url: str) -> None:
    with pytest.raises(OutboundPolicyError, match="refused"):
        OutboundPolicy(resolver=FakeDNS({})).check(url)


def test_unresolvable_host_is_a_clear_loader_error() -> None:
    with pytest.raises(LoaderError, match=re.escape("could not resolve host 'nowhere.test'")):
        guarded_fetch("https://nowhere.test/", policy=OutboundPolicy(resolver=FakeDNS({})))


# --- host lists and explicit exceptions -------------------------------------------------------


def test_host_denylist_refuses_exact_and_wildcard_matches() -> None:
    dns = FakeDNS({"ads.test": ["93.184.216.34"], "cdn.tracker.test": ["93.184.216.34"]})
    policy = OutboundPolicy(host_denylist=["ads.test", "*.tracker.test"], resolver=dns)
    with pytest.raises(OutboundPolicyError, match=re.escape("host_denylist entry 'ads.test'")):
        policy.check("https://ADS.test./banner")
    with pytest.raises(OutboundPolicyError, match=r"host_denylist entry '\*\.tracker\.test'"):
        policy.check("https://cdn.tracker.test/")
    assert dns.calls == []


def test_host_allowlist_refuses_other_hosts() -> None:
    dns = FakeDNS({"docs.test": ["93.184.216.34"], "evil.test": ["93.184.216.35"]})
    policy = OutboundPolicy(host_allowlist=["docs.test"], resolver=dns)
    assert policy.check("https://docs.test/").addresses == ("93.184.216.34",)
    with pytest.raises(OutboundPolicyError, match=re.escape("'evil.test' is not in host_allowlist")):
        policy.check("https://evil.test/")


def test_wildcard_allowlist_entry_matches_subdomains_but_not_the_apex() -> None:
    dns = FakeDNS({"a.docs.test": ["93.184.216.34"], "docs.test": ["93.184.216.34"]})
    policy = OutboundPolicy(host_allowlist=["*.docs.test"], resolver=dns)
    assert policy.check("https://a.docs.test/").host == "a.docs.test"
    with pytest.raises(OutboundPolicyError, match="not in host_allowlist"):
        policy.check("https://docs.test/")
    with pytest.raises(OutboundPolicyError, match="not in host_allowlist"):
        policy.check("https://evildocs.test/")


def test_allow_networks_opens_only_the_listed_network() -> None:
    dns = FakeDNS({"local.test": ["127.0.0.1"], "lan.test": ["10.0.0.1"]})
    policy = OutboundPolicy(allow_networks=["127.0.0.0/8"], resolver=dns)
    assert policy.check("https://local.test/").addresses == ("127.0.0.1",)
    with pytest.raises(OutboundPolicyError, match="private"):
        policy.check("https://lan.test/")


def test_invalid_allow_networks_entry_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="allow_networks"):
        OutboundPolicy(allow_networks=["not-a-network"])


def test_from_settings_reads_the_outbound_setting(settings: Any) -> None:
    settings.RAG = {**settings.RAG, "OUTBOUND": {"MAX_BYTES": 1234, "HOST_ALLOWLIST": ["docs.test"]}}
    policy = OutboundPolicy.from_settings(max_redirects=2)
    assert (policy.max_bytes, policy.host_allowlist, policy.max_redirects) == (1234, ("docs.test",), 2)
    assert policy.allowed_schemes == ("https",)


def test_from_settings_rejects_an_unknown_key(settings: Any) -> None:
    settings.RAG = {**settings.RAG, "OUTBOUND": {"MAX_SIZE": 1}}
    with pytest.raises(ConfigurationError, match="unknown key 'MAX_SIZE'"):
        OutboundPolicy.from_settings()


# --- pinning -----------------------------------------------------------------------------------


def test_request_goes_to_the_checked_address_with_the_original_host_header(server: LoopbackServer) -> None:
    server.routes["/page"] = reply(b"hello")
    dns = FakeDNS({"docs.test": ["127.0.0.1"]})
    result = guarded_fetch(f"http://docs.test:{server.port}/page", policy=loopback_policy(dns))
    assert (result.status, result.content, result.address) == (200, b"hello", "127.0.0.1")
    assert dns.calls == ["docs.test"]  # resolved once; the connection used that answer
    assert server.seen[0][1]["host"] == f"docs.test:{server.port}"


def test_caller_host_header_is_ignored(server: LoopbackServer) -> None:
    server.routes["/"] = reply(b"ok")
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}))
    guarded_fetch(f"http://docs.test:{server.port}/", policy=policy, headers={"Host": "internal.admin"})
    assert server.seen[0][1]["host"] == f"docs.test:{server.port}"


def test_environment_proxies_are_ignored(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = LoopbackServer().start()
    try:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        server.routes["/"] = reply(b"direct")
        policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}))
        assert guarded_fetch(f"http://docs.test:{server.port}/", policy=policy).content == b"direct"
        assert proxy.seen == []
    finally:
        proxy.stop()


def _certificate(tmp_path: Path, hostname: str) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for ``hostname`` signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "django-rag test CA")])

    def build(subject: Any, public_key: Any, *extensions: tuple[Any, bool]) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
        )
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(ca_key, hashes.SHA256())

    def key_usage(*, signs_certificates: bool) -> tuple[Any, bool]:
        # Python 3.13 verifies with VERIFY_X509_STRICT, which refuses a CA without key usage.
        flags = dict.fromkeys(
            ("content_commitment", "key_encipherment", "data_encipherment", "key_agreement"), False
        )
        usage = x509.KeyUsage(
            digital_signature=not signs_certificates,
            key_cert_sign=signs_certificates,
            crl_sign=signs_certificates,
            encipher_only=False,
            decipher_only=False,
            **flags,
        )
        return usage, True

    ca = build(
        ca_name,
        ca_key.public_key(),
        (x509.BasicConstraints(ca=True, path_length=None), True),
        key_usage(signs_certificates=True),
    )
    leaf = build(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)]),
        key.public_key(),
        (x509.SubjectAlternativeName([x509.DNSName(hostname)]), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        key_usage(signs_certificates=False),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
    )
    pem = serialization.Encoding.PEM
    paths = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(leaf.public_bytes(pem))
    paths[2].write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def _serve_tls(server: LoopbackServer, tmp_path: Path, hostname: str) -> tuple[Path, list[str | None]]:
    ca, cert, key = _certificate(tmp_path, hostname)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment]
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return ca, names


def test_https_uses_the_hostname_for_sni_and_certificate(server: LoopbackServer, tmp_path: Path) -> None:
    ca, sni_names = _serve_tls(server, tmp_path, "docs.test")
    server.routes["/secure"] = reply(b"secret")
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}), verify=str(ca))
    result = guarded_fetch(f"https://docs.test:{server.port}/secure", policy=policy)
    assert (result.content, result.address) == (b"secret", "127.0.0.1")
    assert sni_names == ["docs.test"]


def test_https_certificate_for_another_name_is_refused(server: LoopbackServer, tmp_path: Path) -> None:
    ca, _ = _serve_tls(server, tmp_path, "other.test")
    server.routes["/"] = reply(b"secret")
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}), verify=str(ca))
    with pytest.raises(OutboundPolicyError, match=re.escape("TLS verification failed for 'docs.test'")):
        guarded_fetch(f"https://docs.test:{server.port}/", policy=policy)


# --- redirects -------------------------------------------------------------------------------


def test_redirects_are_followed_and_every_hop_resolved_once(server: LoopbackServer) -> None:
    base = f"http://docs.test:{server.port}"
    server.routes.update({"/a": redirect("/b"), "/b": redirect(f"{base}/c", 301), "/c": reply(b"end")})
    dns = FakeDNS({"docs.test": ["127.0.0.1"]})
    result = guarded_fetch(f"{base}/a", policy=loopback_policy(dns))
    assert (result.final_url, result.content) == (f"{base}/c", b"end")
    assert result.redirects == [f"{base}/a", f"{base}/b"]
    assert dns.calls == ["docs.test"] * 3


def test_redirect_to_a_blocked_address_is_refused(server: LoopbackServer) -> None:
    server.routes["/start"] = redirect("http://metadata.test/latest/meta-data/")
    dns = FakeDNS({"docs.test": ["127.0.0.1"], "metadata.test": ["169.254.169.254"]})
    with pytest.raises(OutboundPolicyError, match=r"metadata\.test.*169\.254\.169\.254.*cloud metadata"):
        guarded_fetch(f"http://docs.test:{server.port}/start", policy=loopback_policy(dns))


def test_redirect_to_a_refused_scheme_is_refused(server: LoopbackServer) -> None:
    server.routes["/start"] = redirect("file:///etc/passwd")
    with pytest.raises(OutboundPolicyError, match="scheme 'file'"):
        guarded_fetch(
            f"http://docs.test:{server.port}/start",
            policy=loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]})),
        )


def test_redirect_chain_longer_than_max_redirects_is_refused(server: LoopbackServer) -> None:
    for hop in range(5):
        server.routes[f"/r{hop}"] = redirect(f"/r{hop + 1}")
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}), max_redirects=3)
    with pytest.raises(OutboundPolicyError, match="more than 3 redirects"):
        guarded_fetch(f"http://docs.test:{server.port}/r0", policy=policy)
    assert server.paths() == ["/r0", "/r1", "/r2", "/r3"]


def test_redirect_loop_is_refused(server: LoopbackServer) -> None:
    server.routes.update({"/a": redirect("/b"), "/b": redirect("/a")})
    with pytest.raises(OutboundPolicyError, match="redirect loop"):
        guarded_fetch(
            f"http://docs.test:{server.port}/a", policy=loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}))
        )


def test_credentials_are_dropped_on_a_cross_origin_redirect(server: LoopbackServer) -> None:
    server.routes["/start"] = redirect(f"http://cdn.test:{server.port}/file")
    server.routes["/file"] = reply(b"file")
    dns = FakeDNS({"docs.test": ["127.0.0.1"], "cdn.test": ["127.0.0.1"]})
    secrets = {"Authorization": "Bearer s3cret", "Cookie": "session=1", "Proxy-Authorization": "Basic x"}
    guarded_fetch(f"http://docs.test:{server.port}/start", policy=loopback_policy(dns), headers=secrets)
    (_, first), (_, second) = server.seen
    assert first["authorization"] == "Bearer s3cret" and first["cookie"] == "session=1"
    assert not {"authorization", "cookie", "proxy-authorization"} & set(second)


def test_credentials_are_kept_on_a_same_origin_redirect(server: LoopbackServer) -> None:
    server.routes.update({"/start": redirect("/next"), "/next": reply(b"ok")})
    dns = FakeDNS({"docs.test": ["127.0.0.1"]})
    guarded_fetch(
        f"http://docs.test:{server.port}/start",
        policy=loopback_policy(dns),
        headers={"Authorization": "Bearer s3cret"},
    )
    assert [headers["authorization"] for _, headers in server.seen] == ["Bearer s3cret"] * 2


# --- size and time limits ------------------------------------------------------------------------


def test_body_over_max_bytes_is_refused_while_streaming(server: LoopbackServer) -> None:
    server.routes["/big"] = reply(b"x" * 300_000)  # no Content-Length: only counting can stop it
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}), max_bytes=100_000)
    with pytest.raises(OutboundPolicyError, match="larger than max_bytes=100000"):
        guarded_fetch(f"http://docs.test:{server.port}/big", policy=policy)


def test_declared_content_length_over_max_bytes_is_refused_before_reading(server: LoopbackServer) -> None:
    server.routes["/big"] = reply(b"x" * 2000, headers={"Content-Length": "2000"})
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}), max_bytes=1000)
    with pytest.raises(OutboundPolicyError, match="Content-Length: 2000"):
        guarded_fetch(f"http://docs.test:{server.port}/big", policy=policy)


def test_gzip_body_is_capped_on_its_decompressed_size(server: LoopbackServer) -> None:
    bomb = gzip.compress(b"\0" * 20_000_000)
    assert len(bomb) < 100_000  # small on the wire, 20 MB once decoded
    server.routes["/bomb"] = reply(
        bomb, headers={"Content-Encoding": "gzip", "Content-Length": str(len(bomb))}
    )
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}), max_bytes=1_000_000)
    with pytest.raises(OutboundPolicyError, match="larger than max_bytes=1000000"):
        guarded_fetch(f"http://docs.test:{server.port}/bomb", policy=policy)


def test_gzip_body_under_the_cap_is_decoded(server: LoopbackServer) -> None:
    body = b"compressed text " * 1000
    server.routes["/gz"] = reply(gzip.compress(body), headers={"Content-Encoding": "gzip"})
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}))
    assert guarded_fetch(f"http://docs.test:{server.port}/gz", policy=policy).content == body


def test_slow_server_times_out(server: LoopbackServer) -> None:
    def slow(handler: BaseHTTPRequestHandler) -> None:
        time.sleep(2)
        reply(b"late")(handler)

    server.routes["/slow"] = slow
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}), read_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(OutboundPolicyError, match="timed out"):
        guarded_fetch(f"http://docs.test:{server.port}/slow", policy=policy)
    assert time.monotonic() - started < 1.5


def test_trickling_body_stops_at_the_total_timeout(server: LoopbackServer) -> None:
    def trickle(handler: BaseHTTPRequestHandler) -> None:
        reply(b"")(handler)
        for _ in range(40):
            handler.wfile.write(b"x" * 100)
            handler.wfile.flush()
            time.sleep(0.05)

    server.routes["/trickle"] = trickle
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}), read_timeout=1, total_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(OutboundPolicyError, match="total_timeout"):
        guarded_fetch(f"http://docs.test:{server.port}/trickle", policy=policy)
    assert time.monotonic() - started < 1.5


# --- the result ---------------------------------------------------------------------------------


def test_error_status_is_returned_not_raised(server: LoopbackServer) -> None:
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}))
    result = guarded_fetch(f"http://docs.test:{server.port}/missing", policy=policy)
    assert (result.status, result.ok) == (404, False)


def test_result_exposes_content_type_and_decodes_with_the_declared_charset(server: LoopbackServer) -> None:
    server.routes["/latin"] = reply(
        "café".encode("latin-1"), headers={"Content-Type": "text/plain; charset=ISO-8859-1"}
    )
    policy = loopback_policy(FakeDNS({"docs.test": ["127.0.0.1"]}))
    result = guarded_fetch(f"http://docs.test:{server.port}/latin", policy=policy)
    assert (result.content_type, result.encoding, result.text) == ("text/plain", "ISO-8859-1", "café")
