"""Hits as the pages and endpoints show them: title, snippet, source link and page, facets, answers."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import capfirst
from django.utils.translation import gettext

from ..answer.prompts import CITATION
from ..models import Collection, Document
from ..search.grouping import DocumentHits, Snippet, choose_passages, group_hits, sentence_snippet
from ..search.relevance import collection_size
from ..stores import get_store
from ..types import Hit, page_label

__all__ = [
    "Cited",
    "Facets",
    "Passage",
    "Result",
    "facets",
    "filter_hits",
    "grouped_results",
    "passage_url",
    "render_answer",
    "result_for",
    "shown_passages",
    "source_url",
]


def source_url(document_id: int, page: int | None) -> str:
    """The source view of a document, at ``#page=N`` for a page (PDF viewers open it there)."""
    url = reverse("django_rag:source", args=[document_id])
    return f"{url}#page={page}" if page else url


def passage_url(document: Document, index: int, page: int | None) -> str:
    """A link to one passage: ``?passage=N#passage-N`` in the stored text, or for an uploaded
    file the file itself at ``#page=P`` (a PDF viewer opens that page)."""
    url = reverse("django_rag:source", args=[document.pk])
    if document.owner_type_id and page:
        return f"{url}?passage={index}#page={page}"
    return f"{url}?passage={index}#passage-{index}"


@dataclass
class Passage:
    """One matching passage of a document: where it is, and its snippet."""

    chunk_id: int
    index: int
    page: int | None
    url: str
    snippet: Snippet
    relevance: float | None

    @property
    def snippet_html(self) -> SafeString:
        return self.snippet.html()

    def as_json(self) -> dict[str, Any]:
        return {
            "chunk": self.chunk_id,
            "passage": self.index,
            "page": self.page,
            "url": self.url,
            "snippet": self.snippet.text,
            "highlights": [list(mark) for mark in self.snippet.marks],
            "relevance": self.relevance,
        }


@dataclass
class Result:
    """One document of the results (or one numbered source of an answer), ready for a template or JSON.

    ``passage`` is its best passage (the snippet shown); ``more`` its other matching passages.
    """

    number: int
    title: str
    passage: Passage
    score: float
    vector_rank: int | None
    text_rank: int | None
    document_id: int
    tags: list[str] = field(default_factory=list)
    content_type: str = ""
    page_label: str = ""  # "page 3", "slide 4", "sheet Budget" (types.page_label)
    more: list[Passage] = field(default_factory=list)

    @property
    def snippet(self) -> SafeString:
        """The best passage's snippet as safe HTML: its text escaped, the query's words marked."""
        return self.passage.snippet.html()

    @property
    def url(self) -> str:
        return self.passage.url

    @property
    def where(self) -> str:
        """The page as the results list names it: "Page 3" (translated), "Slide 4", "Sheet Budget"."""
        if self.page_label and not self.page_label.startswith("page "):
            return capfirst(self.page_label)
        return gettext("Page %(page)s") % {"page": self.page} if self.page else ""

    @property
    def page(self) -> int | None:
        return self.passage.page

    @property
    def relevance(self) -> float | None:
        return self.passage.relevance

    @property
    def chunk_id(self) -> int:
        return self.passage.chunk_id

    def as_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "title": self.title,
            **self.passage.as_json(),
            "score": self.score,
            "vector_rank": self.vector_rank,
            "text_rank": self.text_rank,
            "document": self.document_id,
            "tags": self.tags,
            "content_type": self.content_type,
            "more": [passage.as_json() for passage in self.more],
            "page_label": self.page_label,
        }


def _passage(hit: Hit, document: Document, query: str) -> Passage:
    index = int(hit.chunk.index)
    return Passage(
        chunk_id=int(getattr(hit.chunk, "pk", 0) or 0),
        index=index,
        page=hit.page,
        url=passage_url(document, index, hit.page),
        snippet=sentence_snippet(hit.chunk.content, query),
        relevance=None if hit.relevance is None else round(hit.relevance, 4),
    )


def result_for(hit: Hit, number: int, query: str = "", *, others: Sequence[Hit] = ()) -> Result:
    """``hit`` as a result numbered ``number``; ``others`` are more passages of its document."""
    document = hit.document
    if document is None:  # the memory store keeps no Document rows; the pages need them
        raise ValueError("the web pages need a store that returns Document rows (the pgvector store)")
    return Result(
        number=number,
        title=document.title or document.source_id,
        passage=_passage(hit, document, query),
        score=hit.score,
        vector_rank=hit.vector_rank,
        text_rank=hit.text_rank,
        document_id=document.pk,
        tags=list(document.tags),
        content_type=document.content_type,
        more=[_passage(other, document, query) for other in others],
        page_label=page_label(document.metadata, hit.page),
    )


def shown_passages(groups: Sequence[DocumentHits], query: str, collection: Collection) -> list[DocumentHits]:
    """``groups`` (the ones about to be shown) with each document's displayed passage chosen on
    its own text (``search.grouping.choose_passages``), not on the header all its chunks share."""
    if all(len(group.hits) == 1 for group in groups):
        return list(groups)
    embedder = collection.get_embedder()
    size = collection_size(get_store(collection.using), collection, embedder.space)
    return choose_passages(groups, query, embedder=embedder, chunks=size)


def grouped_results(
    hits: Sequence[Hit],
    query: str,
    start: int = 1,
    *,
    collection: Collection | None = None,
    k: int | None = None,
) -> list[Result]:
    """One result per document (the first ``k``), numbered from ``start``, its other passages
    under ``more``; with ``collection``, each shows the passage chosen by ``shown_passages``."""
    groups = group_hits(hits)[:k]
    if collection is not None:
        groups = shown_passages(groups, query, collection)
    return [
        result_for(group.best, number, query, others=group.others)
        for number, group in enumerate(groups, start)
    ]


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


class Cited(Protocol):
    """What an ``[n]`` link needs of its source (a ``Result``, or a citation stored with a turn)."""

    @property
    def number(self) -> int: ...

    @property
    def url(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def page(self) -> int | None: ...


def render_answer(text: str, results: Sequence[Cited]) -> SafeString:
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
