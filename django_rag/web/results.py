"""Hits as the pages and endpoints show them: title, snippet, source link and page, facets, answers."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..answer.prompts import CITATION
from ..types import Hit, page_label

__all__ = ["Facets", "Result", "facets", "filter_hits", "render_answer", "result_for", "source_url"]


def source_url(document_id: int, page: int | None) -> str:
    """The source view of a document, at ``#page=N`` for a page (PDF viewers open it there)."""
    url = reverse("django_rag:source", args=[document_id])
    return f"{url}#page={page}" if page else url


@dataclass
class Result:
    """One hit, ready for a template or JSON."""

    number: int
    title: str
    snippet: str
    page: int | None
    url: str
    score: float
    vector_rank: int | None
    text_rank: int | None
    document_id: int
    chunk_id: int
    tags: list[str] = field(default_factory=list)
    content_type: str = ""
    page_label: str = ""  # "page 3", "slide 4", "sheet Budget" (types.page_label)

    def as_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "title": self.title,
            "snippet": str(self.snippet),
            "page": self.page,
            "url": self.url,
            "score": self.score,
            "vector_rank": self.vector_rank,
            "text_rank": self.text_rank,
            "document": self.document_id,
            "chunk": self.chunk_id,
            "tags": self.tags,
            "content_type": self.content_type,
            "page_label": self.page_label,
        }


def result_for(hit: Hit, number: int) -> Result:
    document = hit.document
    if document is None:  # the memory store keeps no Document rows; the pages need them
        raise ValueError("the web pages need a store that returns Document rows (the pgvector store)")
    return Result(
        number=number,
        title=document.title or document.source_id,
        snippet=hit.snippet,
        page=hit.page,
        url=source_url(document.pk, hit.page),
        score=hit.score,
        vector_rank=hit.vector_rank,
        text_rank=hit.text_rank,
        document_id=document.pk,
        chunk_id=int(getattr(hit.chunk, "pk", 0) or 0),
        tags=list(document.tags),
        content_type=document.content_type,
        page_label=page_label(document.metadata, hit.page),
    )


@dataclass
class Facets:
    tags: list[tuple[str, int]]
    types: list[tuple[str, int]]


def facets(hits: Sequence[Hit]) -> Facets:
    """Counts of hits per tag and per content type, most frequent first."""
    tags: Counter[str] = Counter()
    types: Counter[str] = Counter()
    for hit in hits:
        if hit.document is None:
            continue
        tags.update(set(hit.document.tags))
        if hit.document.content_type:
            types[hit.document.content_type] += 1
    return Facets(tags=tags.most_common(), types=types.most_common())


def filter_hits(hits: Sequence[Hit], *, tag: str = "", content_type: str = "") -> list[Hit]:
    """The hits of documents carrying ``tag`` and of ``content_type`` (a facet only ever narrows)."""
    found = []
    for hit in hits:
        document = hit.document
        if document is None:
            continue
        if tag and tag not in document.tags:
            continue
        if content_type and document.content_type != content_type:
            continue
        found.append(hit)
    return found


def render_answer(text: str, results: Sequence[Result]) -> SafeString:
    """The answer as safe HTML: its text escaped, each valid ``[n]`` a link to source ``n``."""
    by_number = {result.number: result for result in results}

    def link(match: re.Match[str]) -> str:
        parts = []
        for part in re.split(r"[,;]", match.group(1)):
            number = int(part)
            result = by_number.get(number)
            if result is None:
                parts.append(f"[{number}]")
                continue
            page = f", p. {result.page}" if result.page else ""
            parts.append(
                f'<a class="rag-cite" href="{escape(result.url)}" '
                f'title="{escape(result.title)}{page}">[{number}]</a>'
            )
        return "".join(parts)

    # Escape first, then link: the pattern survives escaping (digits, brackets, commas).
    html = CITATION.sub(link, str(escape(text)))
    paragraphs = [p.strip() for p in html.split("\n\n") if p.strip()]
    # Every piece of text was escaped above; only our own <a> and <p> tags are markup.
    return mark_safe("".join(f"<p>{p}</p>" for p in paragraphs))
