"""Admin writes scoped like reads: an operator adds, edits and deletes only inside their scope.

``ScopedAdminMixin`` goes first in the bases of a site's ModelAdmin for a registered model (and
the library's own admins use the same rules). For an operator who is not a superuser, with
``RAG["WEB"]["SCOPE"]`` returning a tenant:

- the change list, change, delete and action querysets hold only the rows of that tenant;
- the tenant field is filled with it and the owner field with the operator; a form that posts
  any other value for either is refused with an error on that field, and nothing is saved;
- an operator whose scope hook raises ``PermissionDenied`` sees and writes nothing.

    from django_rag.admin import ModelAdmin, ScopedAdminMixin

    @admin.register(Attachment)
    class AttachmentAdmin(ScopedAdminMixin, ModelAdmin):
        tenant_field = "tenant"   # the model field holding the tenant (None: the model has none)
        owner_field = "owner"     # a ForeignKey to the user model or a text field (None: none)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from django import forms
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import FieldDoesNotExist, PermissionDenied
from django.db.models import CharField, ForeignKey, Model, QuerySet, TextField
from django.http import HttpRequest
from django.utils.translation import gettext as _

from .scope import Scope, scope_for

__all__ = ["ScopedAdminMixin", "operator_scope"]

_Row = TypeVar("_Row", bound=Model)
_NOTHING = Scope(tags=())

if TYPE_CHECKING:
    _Base = admin.ModelAdmin[Any]
else:  # the mixin's methods call ModelAdmin's through super(); at run time it is a plain mixin
    _Base = object


def operator_scope(request: HttpRequest) -> Scope | None:
    """The scope an admin operator acts in: None for a superuser (everything), else the scope hook's
    answer for this request (a hook refusing the operator is a scope that holds nothing)."""
    if getattr(request.user, "is_superuser", False):
        return None
    try:
        return scope_for(request)
    except PermissionDenied:
        return _NOTHING


class ScopedAdminMixin(_Base):
    """Fill tenant and owner from the operator's scope, refuse other values, narrow every queryset."""

    tenant_field: str | None = "tenant"
    owner_field: str | None = "owner"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows: QuerySet[Any] = super().get_queryset(request)
        scope = operator_scope(request)
        if scope is None:
            return rows
        if scope.empty:
            return rows.none()
        if scope.tenant is not None and self.tenant_field:
            rows = rows.filter(**{self.tenant_field: scope.tenant})
        return rows

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        scope = operator_scope(request)
        return (scope is None or not scope.empty) and bool(super().has_add_permission(request, *args))

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = dict(super().get_changeform_initial_data(request))
        initial.update(self.scoped_values(request))
        return initial

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form_class = super().get_form(request, obj, change, **kwargs)
        fixed = self.scoped_values(request)
        if not fixed:
            return form_class
        names = list(fixed)

        class ScopedForm(form_class):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **form_kwargs: Any) -> None:
                super().__init__(*args, **form_kwargs)
                for name in names:
                    if name in self.fields:
                        # Shown with the operator's value; a browser does not post a disabled field.
                        self.fields[name].disabled = True
                        self.initial[name] = fixed[name]

            def clean(self) -> dict[str, Any]:
                data: dict[str, Any] = super().clean() or {}
                for name in names:
                    if name not in self.fields:
                        continue  # not in the form: whatever is posted for it is never read
                    posted = self.data.get(self.add_prefix(name)) if self.is_bound else None
                    if posted not in (None, "") and str(posted) != str(_posted_form(fixed[name])):
                        # A hand-made request naming another tenant or owner: refused, not corrected.
                        message = _("You may not choose this: it is “%(value)s” for everything you save.")
                        self.add_error(
                            name, forms.ValidationError(message % {"value": fixed[name]}, code="out_of_scope")
                        )
                return data

        ScopedForm.__name__ = form_class.__name__
        return ScopedForm

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        for name, value in self.scoped_values(request).items():
            setattr(obj, name, value)
        super().save_model(request, obj, form, change)

    def scoped_values(self, request: HttpRequest) -> dict[str, Any]:
        """The fields this operator cannot choose, with the values written for them."""
        scope = operator_scope(request)
        if scope is None:
            return {}
        values: dict[str, Any] = {}
        if self.tenant_field and scope.tenant is not None:
            values[self.tenant_field] = scope.tenant
        owner = self._owner_value(request)
        if self.owner_field and owner is not None:
            values[self.owner_field] = owner
        return values

    def _owner_value(self, request: HttpRequest) -> Any:
        if not self.owner_field or not request.user.is_authenticated:
            return None
        try:
            field = self.model._meta.get_field(self.owner_field)
        except FieldDoesNotExist:
            return None
        if isinstance(field, ForeignKey) and field.related_model._meta.label == settings.AUTH_USER_MODEL:
            return request.user
        if isinstance(field, CharField | TextField):
            return request.user.get_username()
        return None


def _posted_form(value: Any) -> Any:
    """What a form posts for ``value``: the primary key of a row, the value itself otherwise."""
    return value.pk if isinstance(value, Model) else value
