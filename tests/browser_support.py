"""The example site in a real browser: what tests/test_web_browser.py and tests/test_answer_browser.py share.

``example_site`` serves the example project from a database of its own on the test PostgreSQL
server, migrated, set up by its ``demo`` command and served by ``manage.py runserver`` on
127.0.0.1, as a user would start it; ``log_in`` and ``Pages`` drive it in Debian's chromium under
Playwright (the ``browser`` fixture of tests/conftest_browser.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
PASSWORD = "demo-password"  # the demo command's accounts


@dataclass
class ExampleSite:
    url: str
    media: Path
    log: Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_url(name: str) -> str:
    """A URL of database ``name`` on the server the tests run against, for the site's process."""
    db = settings.DATABASES["default"]
    user = quote(db["USER"] or "", safe="")
    password = f":{quote(db['PASSWORD'], safe='')}" if db["PASSWORD"] else ""
    query = f"host={quote(db['HOST'] or '127.0.0.1', safe='')}"
    if db["PORT"]:
        query += f"&port={db['PORT']}"
    return f"postgresql://{user}{password}@/{name}?{query}"


def admin_connection() -> psycopg.Connection[Any]:
    db = settings.DATABASES["default"]
    return psycopg.connect(
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        user=db["USER"] or None,
        password=db["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    )


def wait_for(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    """Return once runserver answers the login page; fail with its log if it exits or never does."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"runserver exited with {server.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/accounts/login/", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"runserver did not answer on {url}:\n{log.read_text()}")


@contextmanager
def example_site(
    work: Path,
    name: str,
    *,
    environment: Mapping[str, str] | None = None,
    without: Collection[str] = (),
    worker: bool = False,
) -> Iterator[ExampleSite]:
    """Serve the example project from database ``name`` (made anew, dropped after) and ``work``.

    ``environment`` is added to this process's, less the variables named in ``without``.
    ``worker`` also runs the site's ``db_worker``, which ingests the uploads its saves queue.
    """
    with admin_connection() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in without}
    env.update(
        DJANGO_SETTINGS_MODULE="example_project.settings",
        DATABASE_URL=database_url(name),
        EXAMPLE_MEDIA_ROOT=str(work / "media"),
        CELERY_BROKER_URL="",  # no broker: uploads are queued in the database, run by db_worker
        PYTHONUNBUFFERED="1",
    )
    env.update(environment or {})
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], env=env, cwd=ROOT, check=True, timeout=300)
    demo = subprocess.run(
        [*manage, "demo", "--no-search", "--port", str(port)],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert f"http://127.0.0.1:{port}/kb/" in demo.stdout  # the demo prints the URL to open
    log = work / "runserver.log"
    with log.open("w") as output:
        # The example runs with DEBUG off, where runserver serves no static files unless asked
        # (--insecure): without rag.css the pages would be laid out differently from the demo's.
        commands = [[*manage, "runserver", f"127.0.0.1:{port}", "--noreload", "--insecure"]]
        if worker:
            commands.append([*manage, "db_worker", "--no-startup-delay", "--interval", "0.2"])
        processes = [
            subprocess.Popen(command, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
            for command in commands
        ]
        try:
            url = f"http://127.0.0.1:{port}"
            wait_for(url, processes[0], log)
            yield ExampleSite(url=url, media=work / "media", log=log)
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=20)
    with admin_connection() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def log_in(
    browser: Browser, url: str, username: str, *, javascript: bool = True, timeout: float = 20_000
) -> Page:
    """A new browser context logged in to the site at ``url`` as ``username``, on the search page."""
    context = browser.new_context(base_url=url, java_script_enabled=javascript)
    context.set_default_timeout(timeout)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/kb/")
    return page


@dataclass
class Pages:
    """Screenshots and axe-core results of every page a story visits."""

    axe: Axe = field(default_factory=Axe)
    violations: list[str] = field(default_factory=list)
    visited: list[str] = field(default_factory=list)

    def check(self, page: Page, name: str, *, checker: Page | None = None) -> None:
        """Screenshot ``page`` and run axe-core on it; for a page with JavaScript off, axe runs on
        the same HTML loaded into ``checker`` (axe is a script)."""
        page.wait_for_load_state("networkidle")
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{len(self.visited) + 1:02d}-{name}.png"), full_page=True)
        if checker is not None:
            checker.goto(page.url.split("#")[0] if page.url.startswith("http") else "/kb/")
            checker.set_content(page.content())
            page = checker
        results = self.axe.run(page)
        for violation in results.response["violations"]:
            if violation["impact"] in ("serious", "critical"):
                targets = [node["target"] for node in violation["nodes"]]
                self.violations.append(f"{name}: {violation['id']} ({violation['impact']}) {targets}")
        self.visited.append(name)
