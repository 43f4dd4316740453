"""Who may search what in the example site: one tenant per user, given by a group "tenant:<name>".

``RAG["WEB"]["SCOPE"] = "example_project.kb.scope.scope"``. Superusers see every tenant; a user
without a tenant group may not search at all.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils.translation import gettext as _

TENANT_GROUP_PREFIX = "tenant:"
TENANTS = ("acme", "globex")


def tenant_of(user: Any) -> str | None:
    """The user's tenant (the name of their first "tenant:..." group), None if they have none."""
    if not getattr(user, "is_authenticated", False):
        return None
    names = sorted(user.groups.filter(name__startswith=TENANT_GROUP_PREFIX).values_list("name", flat=True))
    return names[0].removeprefix(TENANT_GROUP_PREFIX) if names else None


def scope(request: HttpRequest) -> dict[str, Any]:
    if request.user.is_superuser:
        return {}
    tenant = tenant_of(request.user)
    if tenant is None:
        raise PermissionDenied(_("Your account belongs to no tenant, so there is nothing you may search."))
    return {"tenant": tenant}
