"""The ``browser`` fixture of the browser tests: Debian's chromium under Playwright, one per module.

A plugin (``pytest_plugins = ["tests.conftest_browser"]``) rather than a name imported into each
test module; the helpers the tests call are in tests/browser_support.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield launched
        launched.close()
