"""What the library's ModelAdmins share: what an operator may see (their scope), the read-only
base class and the small HTML tables of the change pages.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import Document
from .adminscope import operator_scope
from .scope import Scope, scope_for, visible_collections

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Any]
else:  # ModelAdmin is generic in django-stubs only, not at run time
    ModelAdmin = admin.ModelAdmin

__all__ = [
    "CHUNK_LIST_LIMIT",
    "ReadOnlyAdmin",
    "html_table",
    "retrieval_test_allowed",
    "scoped_documents",
    "scoped_rows",
    "sees_everything",
    "viewing",
]


CHUNK_LIST_LIMIT = 200


# The request whose change page is being rendered: read-only fields get only the object, and the
# counts they show must stay within the viewer's scope.
viewing: ContextVar[HttpRequest | None] = ContextVar("django_rag_admin_request", default=None)


_Row = TypeVar("_Row", bound=Model)


def sees_everything(request: HttpRequest) -> bool:
    scope = operator_scope(request)
    return scope is None or scope == Scope()


def retrieval_test_allowed(request: HttpRequest, name: str) -> bool:
    """Superusers test any collection; other operators those the pages offer them."""
    return operator_scope(request) is None or name in visible_collections(request)


def scoped_documents(request: HttpRequest | None, documents: QuerySet[Document]) -> QuerySet[Document]:
    if request is None:
        return documents.none()
    if getattr(request.user, "is_superuser", False):
        return documents
    return scope_for(request).documents(documents)


def scoped_rows(request: HttpRequest, rows: QuerySet[_Row], collection_names: str) -> QuerySet[_Row]:
    """Rows carrying a ``tenant`` and a collection (name lookup ``collection_names``), narrowed to
    the viewer's scope: log entries and ingest jobs, which have no tags to narrow by."""
    if getattr(request.user, "is_superuser", False):
        return rows
    scope = scope_for(request)
    if scope.tenant is not None:
        rows = rows.filter(tenant=scope.tenant)
    if scope.collections is not None:
        rows = rows.filter(**{f"{collection_names}__in": scope.collections})
    return rows.none() if scope.empty else rows


def html_table(headers: list[Any], rows: list[tuple[Any, ...]]) -> SafeString:
    head = format_html_join("", "<th scope='col'>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((c,) for c in row)),) for row in rows)
    )
    return format_html("<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", head, body)


class ReadOnlyAdmin(ModelAdmin):
    """Rows written by ingestion: viewable and deletable, never edited by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
