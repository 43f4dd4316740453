"""A web page (or a PDF or text file on the web) into documents, fetched through guarded_fetch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ...exceptions import LoaderError
from ...types import RagDocument
from ..outbound import FetchResult, OutboundPolicy, guarded_fetch
from .registry import available, get_loader, guess_content_type, load_bytes
from .sniff import sniff_content_type

__all__ = ["load_fetched", "load_web"]


def load_web(
    url: str,
    *,
    policy: OutboundPolicy | None = None,
    source_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
) -> list[RagDocument]:
    """Fetch ``url`` under ``policy`` and load the body according to its content type.

    ``source_id`` defaults to ``url`` (the stable identity, even if the page redirects);
    ``metadata["source"]`` is the final URL after redirects, ``metadata["content_type"]`` what the
    server said. Raises OutboundPolicyError when the policy refuses the fetch and LoaderError for
    an error status or a content type no loader handles.
    """
    result = guarded_fetch(url, policy=policy)
    return load_fetched(result, source_id=source_id or url, metadata=metadata, tags=tags)


def load_fetched(
    result: FetchResult,
    *,
    source_id: str,
    metadata: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
) -> list[RagDocument]:
    """The documents of a fetched response (``load_web`` after the fetch): the body by its type."""
    if not result.ok:
        raise LoaderError(f"GET {result.final_url} returned HTTP {result.status}")
    # A missing or generic type says nothing; the file extension in the URL may.
    content_type = result.content_type
    if content_type in ("", "application/octet-stream"):
        content_type = guess_content_type(urlsplit(result.final_url).path) or content_type
    if get_loader(content_type) is None and not available(
        sniff_content_type(result.content[:65536], content_type)
    ):
        raise LoaderError(
            f"{result.final_url} has content type {content_type or 'none'!r}, which no loader handles"
        )
    derived = {"source": result.final_url, "loader": "web"}
    return load_bytes(
        result.content,
        content_type=content_type,
        source_id=source_id,
        charset=result.encoding,
        base_url=result.final_url,
        metadata={**derived, **(metadata or {})},
        tags=tags,
    )
