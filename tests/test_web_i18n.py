"""Brazilian Portuguese: every user-facing string translated, the compiled catalogue current, pages
in Portuguese, and a collection with TEXT_CONFIG "portuguese" that stems Portuguese words."""

from __future__ import annotations

import gettext
import html
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

import django_rag as rag
from tests.web_support import body, login

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.conftest_web"]

PACKAGE = Path(rag.__file__).parent
LOCALE = PACKAGE / "locale" / "pt_BR" / "LC_MESSAGES"
# Written for this project (example_project/sample_docs/pt/, same licence as the code).
ARTICLE = (Path(__file__).parent.parent / "example_project" / "sample_docs" / "pt" / "backups.md").read_text()


def test_every_user_facing_string_of_the_app_has_a_pt_br_translation(tmp_path, monkeypatch) -> None:
    # makemessages on a copy: the same extraction a maintainer runs, merged with today's catalogue.
    copy = tmp_path / "django_rag"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
    monkeypatch.chdir(copy)
    call_command("makemessages", locale=["pt_BR"], no_obsolete=True, verbosity=0)
    merged = copy / "locale" / "pt_BR" / "LC_MESSAGES" / "django.po"
    result = subprocess.run(
        ["msgfmt", "--check", "--statistics", "-o", "/dev/null", str(merged)],
        capture_output=True,
        text=True,
        check=True,
    )
    statistics = result.stderr.strip()
    assert "untranslated" not in statistics and "fuzzy" not in statistics, statistics
    assert int(statistics.split()[0]) > 200


def test_the_committed_catalogue_is_compiled_from_the_committed_translations(tmp_path) -> None:
    compiled = tmp_path / "django.mo"
    subprocess.run(["msgfmt", "--check", "-o", str(compiled), str(LOCALE / "django.po")], check=True)
    with compiled.open("rb") as fresh, (LOCALE / "django.mo").open("rb") as committed:
        assert gettext.GNUTranslations(committed)._catalog == gettext.GNUTranslations(fresh)._catalog


def test_the_pages_speak_portuguese(web, docs, settings) -> None:
    settings.LANGUAGE_CODE = "pt-br"
    alice = login("alice")
    page = html.unescape(body(alice.get("/kb/", {"q": "snapshots", "mode": "text"})))
    assert '<html lang="pt-br">' in page
    assert "Buscar na base de conhecimento" in page and "Abrir a fonte na página 3" in page
    error = alice.get("/kb/api/search/", {"q": ""}).json()
    assert error["error"] == "Digite uma consulta."
    answer = html.unescape(body(alice.post("/kb/ask/", {"q": "capital do Peru?", "mode": "text"})))
    assert "Não tenho informação suficiente nos documentos disponíveis" in answer


def test_a_portuguese_collection_finds_inflected_words(web, settings) -> None:
    settings.RAG = {
        **settings.RAG,
        "COLLECTIONS": {
            **settings.RAG["COLLECTIONS"],
            "artigos": {"TEXT_CONFIG": "portuguese"},
            "literal": {"TEXT_CONFIG": "simple"},
        },
    }
    settings.RAG["WEB"] = {**settings.RAG["WEB"], "COLLECTIONS": ["artigos", "literal"]}
    article = rag.RagDocument("artigos/backups", ARTICLE, {"title": "Cópias de segurança"})
    rag.collection("artigos").index([article], tenant="acme")
    rag.collection("literal").index([article], tenant="acme")
    alice = login("alice")
    # "biblioteca" and "restauradas" appear in the article only as "bibliotecas" and "restaurar".
    query = {"q": "biblioteca restauradas", "mode": "text"}
    stemmed = alice.get("/kb/api/search/", {**query, "collection": "artigos"}).json()
    literal = alice.get("/kb/api/search/", {**query, "collection": "literal"}).json()
    assert stemmed["count"] >= 1 and stemmed["results"][0]["title"] == "Cópias de segurança"
    # Chunks follow the headings now: "bibliotecas" is in its own section's passage, which the
    # document's entry shows as its best passage or under "more from this document".
    passages = [stemmed["results"][0], *stemmed["results"][0]["more"]]
    marked = [p["snippet"][start:end] for p in passages for start, end in p["highlights"]]
    assert "bibliotecas" in marked
    assert literal["count"] == 0
