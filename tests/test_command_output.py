"""Names with control characters are printed escaped by every command (issue 24, finding 7).

A file named with an ANSI escape would drive the operator's terminal when a command prints its
source id; one with a newline would forge a line of the report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

import django_rag as rag
from django_rag.management.output import printable, printable_json
from django_rag.models import Collection
from django_rag.testing import OpenAICompatibleServer

HOSTILE = "\x1b[2J\x1b]0;owned\x07red\nFORGED line x"
ESCAPED = "\\x1b[2J\\x1b]0;owned\\x07red\\nFORGED line x"


def run(command: str, *args: str, **options: Any) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out, stderr=StringIO(), **options)
    return out.getvalue()


def assert_clean(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output
    assert not any(line.startswith("FORGED") for line in output.splitlines())


def test_printable_escapes_controls_and_keeps_the_rest() -> None:
    assert printable(HOSTILE) == ESCAPED
    assert printable("relatório\tfinal ✓") == "relatório\\tfinal ✓"
    assert printable("a\x9b31mb\u202ec\x7f") == "a\\x9b31mb\\u202ec\\x7f"
    assert printable("two\nlines\tand a tab\x1b", lines=True) == "two\nlines\tand a tab\\x1b"
    text = printable_json({"id": "a\x1b\x9b\u2028b"})
    assert text == '{"id": "a\\u001b\\u009b\\u2028b"}' and json.loads(text) == {"id": "a\x1b\x9b\u2028b"}


@pytest.fixture
def hostile_file(tmp_path: Path, db) -> Path:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / f"{HOSTILE}.md").write_text("Backups run every night at 02:00 and are kept for 30 days.")
    (folder / f"empty {HOSTILE}.md").write_text("   ")
    return folder


@pytest.mark.django_db
def test_rag_ingest_prints_a_hostile_file_name_escaped(hostile_file: Path) -> None:
    output = run("rag_ingest", str(hostile_file), "--collection", "docs", root=str(hostile_file.parent))

    assert_clean(output)
    assert f"skipped  empty-text         kb/empty {ESCAPED}.md: no text to index" in output.splitlines()
    summary = run(
        "rag_ingest", str(hostile_file), "--collection", "docs", "--json", root=str(hostile_file.parent)
    )
    assert_clean(summary)
    assert json.loads(summary)["problems"][0]["source_id"] == f"kb/empty {HOSTILE}.md"


@pytest.mark.django_db
def test_a_failure_message_naming_a_hostile_file_is_escaped(tmp_path: Path) -> None:
    (tmp_path / HOSTILE).mkdir()
    os.mkfifo(tmp_path / HOSTILE / "pipe.txt")  # fails for real, even as root
    with pytest.raises(CommandError) as raised:
        run("rag_ingest", str(tmp_path), "--collection", "docs", root=str(tmp_path))
    assert_clean(str(raised.value))
    assert ESCAPED in str(raised.value)


@pytest.mark.django_db
def test_rag_search_prints_a_hostile_source_id_escaped(hostile_file: Path) -> None:
    run("rag_ingest", str(hostile_file), "--collection", "docs", root=str(hostile_file.parent))

    output = run("rag_search", "when do backups run", "--collection", "docs", verbosity=2)

    assert_clean(output)
    assert f"kb/{ESCAPED}.md" in output.splitlines()[1]
    hit = json.loads(
        run("rag_search", "when do backups run", "--collection", "docs", "--json").splitlines()[0]
    )
    assert hit["source_id"] == f"kb/{HOSTILE}.md"


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=64) as running:
        chat = {"BACKEND": "django_rag.answer.chat.OpenAIChat", "BASE_URL": running.base_url, "API_KEY": "t"}
        with override_settings(RAG={**settings.RAG, "CHAT": {**chat, "MAX_RETRIES": 0}}):
            yield running


@pytest.mark.django_db
def test_rag_ask_prints_hostile_titles_sources_and_answers_escaped(server: OpenAICompatibleServer) -> None:
    rag.collection("docs").index(
        [
            rag.RagDocument(
                "backup", "Backups run every night at 02:00.", {"title": HOSTILE, "source": HOSTILE}
            )
        ]
    )
    server.chat_reply = "Nightly \x1b[5mat 02:00 [1].\nThat is all."

    output = run("rag_ask", "when do backups run?", "-c", "docs")

    assert_clean(output)
    assert output.splitlines() == [
        "Nightly \\x1b[5mat 02:00 [1].",
        "That is all.",
        "",
        "Sources:",
        f"[1] {ESCAPED} — {ESCAPED}",
    ]


@pytest.mark.django_db
def test_rag_status_prints_a_hostile_collection_name_escaped() -> None:
    rag.collection("docs")
    Collection.objects.filter(name="docs").update(name=HOSTILE)

    output = run("rag_status", verbosity=1)

    assert_clean(output)
    assert any(line.startswith(f"{ESCAPED}: active") for line in output.splitlines())
