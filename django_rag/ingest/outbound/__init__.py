"""OutboundPolicy and guarded_fetch: the only way django-rag touches the network.

Fetching a URL a user typed is a server-side request forgery risk, so every hop is checked
before a byte is sent: scheme, host allow/deny lists, and every address the host resolves to.
The host is resolved once and the connection is made to the checked address (the ``Host``
header, TLS SNI and certificate check still use the hostname), so a DNS answer that changes
between check and connect cannot smuggle the request somewhere else.
"""

from .fetch import FetchResult, guarded_fetch
from .policy import Destination, OutboundPolicy, Resolver, system_resolver

__all__ = ["Destination", "FetchResult", "OutboundPolicy", "Resolver", "guarded_fetch", "system_resolver"]
