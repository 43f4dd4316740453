"""The app's migrations go back and forth: each reverse restores exactly what the step before made."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections

import django_rag as rag


def trigger_function(alias: str) -> str:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_get_functiondef('django_rag_chunk_text_sync'::regproc)")
        return str(cursor.fetchone()[0])


def migrate(alias: str, *target: str) -> None:
    call_command("migrate", "django_rag", *target, database=alias, stdout=StringIO(), verbosity=0)


@pytest.mark.django_db(databases=["scratch"], transaction=True)
def test_migrations_reverse_to_0004_and_forward_again() -> None:
    migrate("scratch", "0004")
    after_0002 = trigger_function("scratch")
    assert "django_rag_lexeme_count" in after_0002  # 0002's function, as 0005 restores it
    migrate("scratch", "0005")
    assert "django_rag_termstats" in trigger_function("scratch")
    migrate("scratch", "0004")
    assert trigger_function("scratch") == after_0002
    migrate("scratch")
    assert "django_rag_postblock" in trigger_function("scratch")
    kb = rag.collection("docs", using="scratch")
    kb.index([rag.RagDocument("a", "backups run nightly")])
    assert [hit.source_id for hit in kb.search("backups", k=1, mode="text")] == ["a"]


def test_no_migration_reads_another_migrations_source() -> None:
    from pathlib import Path

    import django_rag

    folder = Path(django_rag.__file__).parent / "migrations"
    for path in folder.glob("0*.py"):
        source = path.read_text()
        assert "import_module" not in source and "django_rag.migrations." not in source, path.name


def postings_and_frequencies(alias: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT chunk_id, collection_id, space, term, tf, dl FROM django_rag_posting ORDER BY 1, 4"
        )
        postings = cursor.fetchall()
        cursor.execute(
            "SELECT collection_id, space, term, count(*) FROM django_rag_posting "
            "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        )
        return postings, cursor.fetchall()


@pytest.mark.django_db(databases=["scratch"], transaction=True)
def test_0008_moves_stored_postings_out_of_blocks_and_back() -> None:
    migrate("scratch")
    kb = rag.collection("docs", using="scratch")
    kb.index([rag.RagDocument(f"d{i}", f"backups run nightly {i} times, restores weekly") for i in range(30)])
    before = postings_and_frequencies("scratch")
    assert len(before[0]) > 30 * 5
    migrate("scratch", "0007")  # 0008 reversed: posting rows and 0005's frequencies from the blocks
    assert postings_and_frequencies("scratch") == before
    with connections["scratch"].cursor() as cursor:
        cursor.execute(
            "SELECT collection_id, space, term, sum(df) FROM django_rag_termstats "
            "GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
        )
        assert cursor.fetchall() == before[1]
    migrate("scratch")  # and forward again: the rows into blocks
    assert postings_and_frequencies("scratch") == before
    assert len(kb.search("nightly restores", k=30, mode="text")) == 30
