"""Answers in a real browser, on the example site with no API key at all.

The example project runs as its own process (``manage.py runserver``, its own database, its local
MiniLM embedder) with no ``OPENAI_API_KEY`` and no ``RAG["CHAT"]``: answers are quoted from the
documents by the extractive backend. A search answers above its results, a follow-up continues
the thread, the conversation is reopened from the list and deleted, and the other tenant's user
cannot open it by id. Screenshots go to ``screenshots/`` at the repository root (ignored by git).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.browser_support import Pages, example_site, log_in

pytestmark = pytest.mark.slow
pytest_plugins = ["tests.conftest_browser"]  # the browser fixture

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "screenshots"
QUESTION = "How long are backups kept?"
FOLLOW_UP = "Can I restore one to a new workspace?"


@pytest.fixture(scope="module")
def keyless_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example project set up by its demo command, served with no API key in its environment."""
    work = tmp_path_factory.mktemp("example-answers")
    keys = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_CHAT_MODEL")
    with example_site(work, f"example_answers_{os.getpid()}", without=keys) as served:
        yield served.url


def _cited_titles(page: Page) -> list[str]:
    return page.locator(".rag-answer .rag-sources li > a").all_inner_texts()


def _shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_answers_without_a_language_model_in_a_browser(
    keyless_site: str,
    browser: Browser,
    report: Any,
) -> None:
    started = time.monotonic()
    pages = Pages()
    alice = log_in(browser, keyless_site, "alice", timeout=30_000)

    # A search answers above its results, quoting the backups document: "35 days".
    alice.fill("#id_q", QUESTION)
    alice.click("form[role=search] button[type=submit]")
    alice.wait_for_selector(".rag-answer .rag-answer-text")
    answer = alice.inner_text(".rag-answer .rag-answer-text")
    assert "Quoted from the documents" in answer and "35 days" in answer
    assert any("backup" in title.lower() for title in _cited_titles(alice)), _cited_titles(alice)
    answer_box = alice.locator(".rag-answer").bounding_box()
    results_box = alice.locator(".rag-results-section").bounding_box()
    assert answer_box is not None and results_box is not None
    assert answer_box["y"] + answer_box["height"] <= results_box["y"]  # drawn above the results
    citation = alice.locator(".rag-answer-text a.rag-cite").first
    assert re.fullmatch(r"/kb/source/\d+/\?passage=(\d+)#passage-\1", citation.get_attribute("href") or "")
    _shot(alice, "search-answer")
    pages.check(alice, "search-answer")

    # The follow-up continues the thread: rewritten with the first question, it cites backups.
    alice.fill("#rag-followup-q", FOLLOW_UP)
    alice.click(".rag-followup button[type=submit]")
    alice.wait_for_selector(".rag-answer .rag-answer-text")
    conversation = re.search(r"conversation=(\d+)", alice.url)
    assert conversation is not None
    follow_up = alice.inner_text(".rag-answer .rag-answer-text")
    assert "Quoted from the documents" in follow_up
    assert any("backup" in title.lower() for title in _cited_titles(alice)), _cited_titles(alice)
    assert "restore" in follow_up.lower()
    _shot(alice, "search-follow-up")
    pages.check(alice, "search-follow-up")
    number = conversation.group(1)

    # The other tenant's user cannot reach it by its id: page, JSON, or asking into it.
    bob = log_in(browser, keyless_site, "bob", timeout=30_000)
    assert bob.goto(f"/kb/conversations/{number}/").status == 404  # type: ignore[union-attr]
    assert "This conversation does not exist or is not yours." in bob.content()
    assert bob.request.get(f"/kb/api/conversations/{number}/").status == 404
    csrf = next(c["value"] for c in bob.context.cookies() if c["name"] == "csrftoken")
    asked = bob.request.post(
        "/kb/api/ask/",
        form={"q": FOLLOW_UP, "conversation": number, "csrfmiddlewaretoken": csrf},
        headers={"X-CSRFToken": csrf, "Referer": keyless_site + "/kb/"},
    )
    assert asked.status == 404
    assert bob.request.delete(f"/kb/api/conversations/{number}/", headers={"X-CSRFToken": csrf}).status in (
        403,
        404,
    )
    bob.goto(f"/kb/?q=backups&conversation={number}")
    assert "This conversation does not exist or is not yours." in bob.content()

    # Alice reopens it from her list, sees both turns, then deletes it.
    alice.goto("/kb/conversations/")
    pages.check(alice, "conversations")
    alice.click(f"#conversation-{number} a")
    alice.wait_for_url(f"**/kb/conversations/{number}/")
    turns = alice.locator(".rag-turn h2").all_inner_texts()
    assert turns == [QUESTION, FOLLOW_UP]
    _shot(alice, "conversation")
    pages.check(alice, "conversation")
    alice.click("text=Delete this conversation")
    alice.wait_for_url("**/kb/conversations/")
    assert alice.locator(f"#conversation-{number}").count() == 0
    assert alice.request.get(f"/kb/conversations/{number}/").status == 404

    # Without JavaScript the search page is a plain page with the answer in it.
    plain = log_in(browser, keyless_site, "alice", javascript=False, timeout=30_000)
    plain.goto("/kb/?q=" + QUESTION.replace(" ", "+"))
    assert "35 days" in plain.inner_text(".rag-answer .rag-answer-text")

    assert pages.violations == [], "\n".join(pages.violations)
    report(f"keyless browser story: {len(pages.visited)} pages, {time.monotonic() - started:.0f} s")
