"""Hits from the rows of a search statement, built as a QuerySet builds instances.

Each value goes through its field's database converters, then ``Model.from_db``: the chunk and
document instances are the ORM's own (deferred ``embedding`` and ``search_vector``, signals sent).
Hits of one document share its instance, as ``prefetch_related`` would.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DEFERRED, Field, Model
from django.utils.safestring import SafeString

from ..models import Chunk, Document
from ..types import Hit
from .base import SearchRequest
from .pgstatement import CHUNK_FIELDS, DOCUMENT_FIELDS, PREFIX, VECTOR_PREFIX

__all__ = ["hits_from_rows"]

_MARK_START, _MARK_STOP = "\x02", "\x03"


def hits_from_rows(rows: list[tuple[Any, ...]], request: SearchRequest, using: str) -> list[Hit]:
    """The hits of a search's rows (``pgsearch.fetch_rows``), best first."""
    if request.mode == "vector":
        # relaxed_order may return neighbours slightly out of order; ties go to the lower id.
        rows.sort(key=_DISTANCE_ID)
        prefix = VECTOR_PREFIX
    else:
        prefix = PREFIX
    chunks, documents = _builders(using, prefix)
    connection = connections[using]
    document_at = prefix + _CHUNK_DOCUMENT_ID
    # Hits of one document share its instance (as prefetch_related would): built once per search.
    by_document: dict[Any, Document] = {}
    hits = []
    for rank, row in enumerate(rows, 1):
        chunk = chunks(row, connection)
        document = by_document.get(row[document_at])
        if document is None:
            document = by_document[row[document_at]] = documents(row, connection)
        chunk.document = document  # the foreign key's own cache: no query when it is read
        if prefix == VECTOR_PREFIX:
            score, vrank, trank = 1.0 - row[0], rank, None
            similarity, text_match = score, None
            # None: the chunk's opening, made if the snippet is read (see types.Hit).
            snippet: str | None = None if request.snippets else SafeString("")
        else:
            score, vrank, trank = float(row[0]), row[1], row[2]
            snippet = _snippet(row[3])
            similarity = None if row[5] is None else 1.0 - row[5]
            text_match = _text_match(row[4], row[6])
        hits.append(
            Hit(
                chunk=chunk,
                document=document,
                score=score,
                vector_rank=vrank,
                text_rank=trank,
                snippet=snippet,  # type: ignore[arg-type]  # None: made on first read (types.Hit)
                page=chunk.page,
                source_id=document.source_id,
                similarity=similarity,
                text_match=text_match,
            )
        )
    return hits


def _text_match(bm25: float | None, total: float | None) -> float:
    """A chunk's BM25 score as a share of the query's ``qidf`` total, at most 1 (0: no term)."""
    if not bm25 or not total:
        return 0.0
    return min(1.0, float(bm25) / float(total))


_CHUNK_DOCUMENT_ID = [f.attname for f in CHUNK_FIELDS].index("document_id")
_DISTANCE_ID = itemgetter(0, VECTOR_PREFIX + [f.attname for f in CHUNK_FIELDS].index("id"))


@dataclass(frozen=True)
class _Builder:
    """Builds one model's instances from its columns of a result row, as a QuerySet would:
    each value through its field's database converters, then ``Model.from_db``."""

    model: type[Model]
    using: str
    names: tuple[str, ...]  # every concrete field, in order: from_db then needs no lookup of its own
    # Row positions of the concrete fields, -1 for a field the statement leaves out (DEFERRED).
    values: Callable[[tuple[Any, ...]], tuple[Any, ...]]
    # (position among the concrete fields, converters, column) of the fields that have any (JSON...).
    converters: tuple[tuple[int, tuple[Callable[..., Any], ...], Any], ...]

    def __call__(self, row: tuple[Any, ...], connection: BaseDatabaseWrapper) -> Any:
        values = list(self.values((*row, DEFERRED)))
        for position, converters, expression in self.converters:
            value = values[position]
            for converter in converters:
                value = converter(value, expression, connection)
            values[position] = value
        return self.model.from_db(self.using, self.names, values)


def _builder(model: type[Model], fields: list[Field[Any, Any]], start: int, using: str) -> _Builder:
    connection = connections[using]
    at = {field.attname: start + offset for offset, field in enumerate(fields)}
    concrete = list(model._meta.concrete_fields)
    converters = []
    for position, field in enumerate(concrete):
        if field.attname not in at:
            continue
        expression = field.get_col(model._meta.db_table)
        found = tuple(connection.ops.get_db_converters(expression) + field.get_db_converters(connection))
        if found:
            converters.append((position, found, expression))
    return _Builder(
        model,
        using,
        tuple(f.attname for f in concrete),
        itemgetter(*[at.get(f.attname, -1) for f in concrete]),
        tuple(converters),
    )


@functools.cache
def _builders(using: str, prefix: int) -> tuple[_Builder, _Builder]:
    """The chunk and document builders of a row layout, resolved once per database alias."""
    split = prefix + len(CHUNK_FIELDS)
    return _builder(Chunk, CHUNK_FIELDS, prefix, using), _builder(Document, DOCUMENT_FIELDS, split, using)


def _snippet(headline: str) -> SafeString:
    """HTML-escape the chunk text, then turn ts_headline's markers into <mark>: safe to render."""
    # html.escape is what django.utils.html.escape runs, without its lazy-string wrapper.
    text = html.escape(headline.replace("\n", " "))
    return SafeString(text.replace(_MARK_START, "<mark>").replace(_MARK_STOP, "</mark>"))
