"""Clean failures and no framing (issue 24, findings 3 and 4), in process: every page and endpoint of
the library carries a strict CSP and X-Frame-Options, the admin too with the CSP middleware, no
template holds an inline script, style or handler, 2,000 query parameters are a 400 and a database
that cannot be reached is a 503 with the session and auth middleware in place, never a 500.

The same against the example site over loopback, with a real PostgreSQL stopped under load, is
tests/test_example_site.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.checks import run_checks
from django.db import connection
from django.test import Client

from django_rag.models import Document
from django_rag.web.headers import DEFAULT_CSP, build_policy
from tests.web_support import set_web

pytest_plugins = ["tests.conftest_web"]

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIRS = [ROOT / "django_rag" / "templates", ROOT / "example_project" / "templates"]
INLINE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle\s*=|\son[a-z]+\s*=", re.IGNORECASE)
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django_rag.web.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_rag.web.middleware.ContentSecurityPolicyMiddleware",
]


def assert_protected(response: Any) -> None:
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


@pytest.mark.django_db
def test_every_library_page_and_endpoint_carries_the_csp_and_cannot_be_framed(web, docs, alice) -> None:
    answer = alice.post("/kb/api/ask/", {"q": "how long are snapshots kept?", "mode": "text"})
    document = Document.objects.get(source_id="acme/backups")
    responses = {
        "search form": alice.get("/kb/"),
        "search": alice.get("/kb/", {"q": "snapshots", "mode": "text"}),
        "search 400": alice.get("/kb/", {"q": "", "mode": "fuzzy"}),
        "ask form": alice.get("/kb/ask/"),
        "ask": alice.post("/kb/ask/", {"q": "how long are snapshots kept?", "mode": "text"}),
        "source": alice.get(f"/kb/source/{document.pk}/"),
        "source 404": alice.get("/kb/source/999999/"),
        "search json": alice.get("/kb/api/search/", {"q": "snapshots", "mode": "text"}),
        "ask json": answer,
        "ask json stream": alice.post("/kb/api/ask/", {"q": "snapshots?", "mode": "text", "stream": "1"}),
        "feedback": alice.post("/kb/feedback/", {"entry": answer.json()["entry"], "helpful": "1"}),
        "login redirect": Client().get("/kb/"),
    }
    for name, response in responses.items():
        assert response.status_code < 500, name
        assert_protected(response)


@pytest.mark.django_db
def test_the_library_policy_is_a_setting_and_none_leaves_the_header_to_the_site(
    web, docs, alice, settings
) -> None:
    set_web(settings, CSP={"default-src": ["'self'"], "upgrade-insecure-requests": True})
    assert alice.get("/kb/")["Content-Security-Policy"] == "default-src 'self'; upgrade-insecure-requests"
    set_web(settings, CSP=None)
    response = alice.get("/kb/")
    assert "Content-Security-Policy" not in response and response["X-Frame-Options"] == "DENY"
    set_web(settings, CSP="default-src *")
    assert "django_rag.E126" in {message.id for message in run_checks()}


@pytest.mark.django_db
def test_the_admin_carries_the_sites_csp_through_the_middleware(web, settings) -> None:
    settings.MIDDLEWARE = MIDDLEWARE
    settings.SECURE_CSP = DEFAULT_CSP
    root = Client()
    root.force_login(User.objects.create_superuser("root", password="x"))
    for url in ("/admin/", "/admin/django_rag/collection/", "/admin/django_rag/document/", "/admin/login/"):
        response = root.get(url)
        assert response.status_code in (200, 302), url
        assert response["Content-Security-Policy"] == build_policy(DEFAULT_CSP)
        assert_protected(response)


def test_no_template_has_an_inline_script_style_or_handler() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for directory in TEMPLATE_DIRS
        for path in directory.rglob("*.html")
        for match in INLINE.finditer(path.read_text())
    ]
    assert not found


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_two_thousand_query_parameters_are_a_400_not_a_500(web, docs, alice, settings, debug) -> None:
    settings.DEBUG = debug
    many = {f"p{n}": "x" for n in range(2000)}
    for url in ("/kb/", "/kb/api/search/"):
        response = alice.get(url, {"q": "snapshots", **many})
        assert response.status_code == 400, url
        assert "Traceback" not in response.content.decode()
        assert_protected(response)


@pytest.fixture
def database_down(web: Any, settings: Any) -> Iterator[Client]:
    """alice logged in, then the database unreachable (nothing listens on port 1) until the end."""
    settings.MIDDLEWARE = MIDDLEWARE
    settings.SECURE_CSP = DEFAULT_CSP
    alice = Client(raise_request_exception=False)
    alice.force_login(User.objects.create_user("alice", is_staff=True, is_superuser=True))
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT="1", OPTIONS={"connect_timeout": 2})
    try:
        yield alice
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_an_unreachable_database_is_a_503_page_or_json_with_no_traceback(
    database_down, settings, debug
) -> None:
    settings.DEBUG = debug
    alice = database_down
    pages = {
        "/kb/": alice.get("/kb/", {"q": "snapshots"}),
        "/kb/ask/": alice.post("/kb/ask/", {"q": "snapshots?"}),
        "/admin/": alice.get("/admin/"),
        "/admin/django_rag/document/": alice.get("/admin/django_rag/document/"),
        "/admin/login/": Client(raise_request_exception=False).post(
            "/admin/login/", {"username": "alice", "password": "x"}
        ),
    }
    for url, response in pages.items():
        body = response.content.decode()
        assert response.status_code == 503, url
        assert response["Content-Type"].startswith("text/html"), url
        assert (
            "Temporarily unavailable" in body and "Traceback" not in body and "OperationalError" not in body
        )
        assert response["Retry-After"] == "10"
        assert_protected(response)
    for response in (
        alice.get("/kb/api/search/", {"q": "snapshots"}),
        alice.post("/kb/api/ask/", {"q": "x?"}),
    ):
        assert response.status_code == 503
        assert response.json() == {
            "error": "The service is not available right now. Please try again in a moment.",
            "status": 503,
        }


@pytest.mark.django_db
def test_the_outage_middleware_after_sessions_or_auth_is_a_warning(settings) -> None:
    settings.MIDDLEWARE = MIDDLEWARE
    assert "django_rag.W126" not in {message.id for message in run_checks()}
    settings.MIDDLEWARE = [MIDDLEWARE[0], *MIDDLEWARE[2:4], MIDDLEWARE[1], *MIDDLEWARE[4:]]
    warned = [message for message in run_checks() if message.id == "django_rag.W126"]
    assert warned and "SessionMiddleware, django.contrib.auth" in warned[0].msg


def test_policies_are_built_as_django_6_builds_secure_csp() -> None:
    config = {"script-src": ["'self'", "<CSP_NONCE_SENTINEL>"], "upgrade-insecure-requests": True, "x": []}
    assert build_policy(config, "r4nd0m") == "script-src 'self' 'nonce-r4nd0m'; upgrade-insecure-requests"
    assert build_policy(config) == "script-src 'self'; upgrade-insecure-requests"
    assert build_policy({"default-src": "'none'"}) == "default-src 'none'"
