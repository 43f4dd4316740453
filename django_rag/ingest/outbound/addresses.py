"""Which addresses are internal, and how a URL's host is read (the way a browser reads it)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import unquote

from ...exceptions import OutboundPolicyError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

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


# What a host name may not hold once percent-decoded (the WHATWG URL standard's forbidden code points).
_FORBIDDEN_HOST_CHARACTERS = frozenset("\0\t\n\r #/:<>?@[\\]^|%")


def normalise_host(hostname: str, url: str) -> str:
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


def match_host(host: str, patterns: Iterable[str]) -> str | None:
    for pattern in patterns:
        wanted = pattern.lower().rstrip(".")
        if (wanted.startswith("*.") and host.endswith(wanted[1:])) or host == wanted:
            return pattern
    return None


def parse_ip(value: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return None


def blocked_reason(ip: IPAddress, allowed: Iterable[Network]) -> str | None:
    """Why ``ip`` must not be contacted, or None. ``allowed`` networks are exempt."""
    allowed = tuple(allowed)
    if any(ip.version == network.version and ip in network for network in allowed):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        for kind, inner in embedded:
            reason = blocked_reason(inner, allowed)
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
