"""The security headers of the library's responses: no framing, a strict Content-Security-Policy.

Every page and JSON response of ``django_rag.urls`` carries, unless the response already has them:

- ``Content-Security-Policy``: ``RAG["WEB"]["CSP"]`` (default ``DEFAULT_CSP``: scripts, styles,
  fonts and images from the site itself only, no plugins, no framing, forms posting to the site);
  ``None`` leaves the header to the site (Django 6's ``SECURE_CSP``, or this module's middleware);
- ``X-Frame-Options``: ``settings.X_FRAME_OPTIONS`` (Django's default ``DENY``);
- ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: same-origin``.

The library's templates hold no inline script, style or event handler, so the policy needs no
``'unsafe-inline'``; a script tag carries the request's nonce when Django 6's CSP middleware made
one (``csp_nonce`` in the template context), for sites whose own policy is nonce-based.

For the rest of the site (the admin, login pages) on Django 5.2, ``ContentSecurityPolicyMiddleware``
is a small stand-in for Django 6's ``django.middleware.csp.ContentSecurityPolicyMiddleware``: it
reads the same ``SECURE_CSP`` and ``SECURE_CSP_REPORT_ONLY`` settings and never overwrites a header
a view set. On Django 6 it *is* Django's middleware.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import django
from django.conf import settings
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from .conf import WEB_DEFAULTS, web_settings

__all__ = ["DEFAULT_CSP", "ContentSecurityPolicyMiddleware", "build_policy", "protect"]

DEFAULT_CSP: dict[str, list[str]] = WEB_DEFAULTS["CSP"]

_NONCE = "<CSP_NONCE_SENTINEL>"  # Django 6's django.utils.csp.CSP.NONCE


def build_policy(config: Mapping[str, Any], nonce: str | None = None) -> str:
    """``{"script-src": ["'self'"], "upgrade-insecure-requests": True}`` -> the header's value.

    The format of Django 6's ``SECURE_CSP``: a list (or one string) of sources per directive,
    ``True`` for a directive without sources, ``False`` or empty to leave it out.
    """
    parts = []
    for directive, value in config.items():
        if value is True:
            parts.append(directive)
            continue
        if not value:
            continue
        sources = [value] if isinstance(value, str) else list(value)
        rendered = []
        for source in sources:
            if source == _NONCE:
                if nonce:
                    rendered.append(f"'nonce-{nonce}'")
            else:
                rendered.append(str(source))
        parts.append(" ".join([directive, *rendered]))
    return "; ".join(parts)


def protect(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """Add the library's security headers to ``response`` where it has none of its own."""
    policy = web_settings()["CSP"]
    if policy and "Content-Security-Policy" not in response:
        response["Content-Security-Policy"] = build_policy(policy, _nonce(request, policy))
    if "X-Frame-Options" not in response:
        response["X-Frame-Options"] = getattr(settings, "X_FRAME_OPTIONS", "DENY").upper()
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    return response


def _nonce(request: HttpRequest, policy: Mapping[str, Any]) -> str | None:
    """The request's nonce (Django 6's CSP middleware makes one lazily), only if ``policy`` uses it."""
    nonce = getattr(request, "_csp_nonce", None)
    uses = any(
        value == _NONCE or (not isinstance(value, str | bool) and _NONCE in value)
        for value in policy.values()
    )
    return str(nonce) if nonce is not None and uses else None


class _ContentSecurityPolicyMiddleware:
    """``SECURE_CSP`` / ``SECURE_CSP_REPORT_ONLY`` on every response that has no such header (5.2)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        for header, name in (
            ("Content-Security-Policy", "SECURE_CSP"),
            ("Content-Security-Policy-Report-Only", "SECURE_CSP_REPORT_ONLY"),
        ):
            config = getattr(settings, name, None)
            if config and header not in response:
                response[header] = build_policy(config)
        return response


if django.VERSION >= (6, 0):  # Django's own, with its nonces, where it exists
    from django.middleware.csp import ContentSecurityPolicyMiddleware
else:
    ContentSecurityPolicyMiddleware = _ContentSecurityPolicyMiddleware  # type: ignore[misc, assignment]
