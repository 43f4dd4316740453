"""Middleware for sites using the pages: a clean 503 while the database is down, and the CSP.

    MIDDLEWARE = [
        "django.middleware.security.SecurityMiddleware",
        "django_rag.web.middleware.DatabaseUnavailableMiddleware",  # before sessions and auth
        "django.contrib.sessions.middleware.SessionMiddleware",
        ...
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
        "django_rag.web.middleware.ContentSecurityPolicyMiddleware",  # Django 6: Django's own
    ]

With the database down, the session and auth middleware raise ``OperationalError`` before (or
after) any view runs, and Django answers 500, with a traceback page under ``DEBUG``. Django
turns each middleware's exception into a response where it happens, so no outer middleware sees
it; ``got_request_exception`` does, and marks the request. This middleware then answers every
request whose handling met a database that cannot be reached (``OperationalError``,
``InterfaceError``) with a 503 and ``Retry-After``: JSON for the JSON endpoints and clients that
ask for JSON, a short page otherwise, rendered without the session, the user or the database.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.template.loader import render_to_string
from django.utils.translation import gettext as _

from .headers import ContentSecurityPolicyMiddleware, protect

__all__ = [
    "UNAVAILABLE",
    "ContentSecurityPolicyMiddleware",
    "DatabaseUnavailableMiddleware",
    "remember_database_outage",
    "unavailable_response",
]

UNAVAILABLE = (OperationalError, InterfaceError)
RETRY_AFTER_SECONDS = 10
_MARK = "_django_rag_database_unavailable"

logger = logging.getLogger("django_rag.web")


def unavailable_response(request: HttpRequest, exc: BaseException | None = None) -> HttpResponseBase:
    """503 for ``request``: JSON or a short page, built without touching the database."""
    if exc is not None:
        # One line for the log: the outage, not a traceback per request.
        logger.warning("django-rag: database unavailable for %s %s: %s", request.method, request.path, exc)
    message = _("The service is not available right now. Please try again in a moment.")
    response: HttpResponse
    if _wants_json(request):
        response = JsonResponse({"error": message, "status": 503}, status=503)
    else:
        # No request in the context: context processors would load the session and the user.
        body = render_to_string("django_rag/unavailable.html", {"message": message})
        response = HttpResponse(body, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    protect(request, response)
    return response


def _wants_json(request: HttpRequest) -> bool:
    match = getattr(request, "resolver_match", None)
    view_class = getattr(getattr(match, "func", None), "view_class", None)
    if getattr(view_class, "json", False):
        return True
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


def remember_database_outage(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """``got_request_exception`` receiver: mark a request whose handling met the database down."""
    exc = sys.exc_info()[1]
    if request is not None and isinstance(exc, UNAVAILABLE):
        setattr(request, _MARK, exc)


class DatabaseUnavailableMiddleware:
    """503 instead of 500 for every request that met an unreachable database (see the module)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        # Connected by the middleware, once: only a site that installs it needs the marks.
        got_request_exception.connect(remember_database_outage, dispatch_uid="django_rag.database_outage")

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        exc = getattr(request, _MARK, None)
        if exc is not None and response.status_code >= 500:
            return unavailable_response(request, exc)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        if isinstance(exception, UNAVAILABLE):
            setattr(request, _MARK, exception)
            return unavailable_response(request, exception)
        return None
