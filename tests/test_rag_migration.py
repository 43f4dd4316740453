"""rag_migration: one partial ANN index per embedding space, emitted as a migration of the site's app."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

import django_rag as rag
from django_rag.ddl import IndexSpec

HASHING = "django_rag.embedders.hashing.HashingEmbedder"


def run(*args: str, **options: object) -> str:
    out = io.StringIO()
    call_command("rag_migration", *args, stdout=out, stderr=out, **options)
    return out.getvalue()


@pytest.fixture
def migrations_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty migrations package for the test app, so emitted files land in tmp_path."""
    name = f"ragmig_{uuid.uuid4().hex[:8]}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    with override_settings(MIGRATION_MODULES={"siteapp": name}):
        yield package


def emitted(package: Path) -> list[str]:
    return sorted(path.name for path in package.glob("0*.py"))


def test_sql_prints_one_partial_expression_index_per_space() -> None:
    sql = run(sql=True)
    assert sql.strip() == (
        f'CREATE INDEX IF NOT EXISTS "{IndexSpec("hashing:64", 64).name}" ON "django_rag_chunk" USING hnsw '
        "((embedding::vector(64)) vector_cosine_ops) WITH (m = 16, ef_construction = 64) "
        "WHERE space = 'hashing:64';"
    )


def test_index_options_change_the_ddl_and_the_index_name() -> None:
    sql = run(sql=True, index="ivfflat", lists=50)
    assert "USING ivfflat" in sql and "WITH (lists = 50)" in sql
    assert IndexSpec("hashing:64", 64, m=32).name != IndexSpec("hashing:64", 64).name


def test_wide_spaces_use_halfvec_and_very_wide_ones_stay_exact_with_a_warning() -> None:
    embedders = {
        "default": {"BACKEND": HASHING, "MODEL": "wide", "DIMENSIONS": 3072},
        "huge": {"BACKEND": HASHING, "MODEL": "huge", "DIMENSIONS": 4096},
    }
    with override_settings(RAG={"EMBEDDERS": embedders, "COLLECTIONS": {"a": {}, "b": {"EMBEDDER": "huge"}}}):
        out = run(sql=True)
    assert "((embedding::halfvec(3072)) halfvec_cosine_ops)" in out
    assert "huge:4096" in out and "at most 4000" in out
    assert "vector(4096)" not in out


def test_writing_needs_an_app_and_refuses_django_rag_itself() -> None:
    with pytest.raises(CommandError, match="--app"):
        run()
    with pytest.raises(CommandError, match="your own app"):
        run(app="django_rag")
    with pytest.raises(CommandError, match="no installed app"):
        run(app="nosuchapp")


def test_a_wrong_app_label_lists_the_installed_labels_and_the_sites_own_apps() -> None:
    # The tutorial's mistake: the project's name is not an app label.
    with pytest.raises(CommandError) as caught:
        run(app="mysite")
    message = str(caught.value)
    assert "no installed app with label 'mysite'; the installed app labels are admin, auth," in message
    labels = message.split("the installed app labels are ", 1)[1].split(". ", 1)[0].split(", ")
    assert {"contenttypes", "django_rag", "siteapp", "mediaapp"} <= set(labels) and labels == sorted(labels)
    # django.contrib and django_rag come from packages or are django_rag: never offered as a target.
    own = message.split("Pass one of your site's own apps: ", 1)[1].rstrip(".").split(", ")
    assert set(own) == {"siteapp", "mediaapp"}


def test_a_site_with_no_app_of_its_own_is_told_to_create_one() -> None:
    apps = ["django.contrib.contenttypes", "django_rag"]
    with override_settings(INSTALLED_APPS=apps), pytest.raises(CommandError) as caught:
        run(app="mysite")
    assert str(caught.value) == (
        "no installed app with label 'mysite'; the installed app labels are contenttypes, django_rag. None "
        "of them is your site's own: create one (`manage.py startapp kb`), add 'kb' to INSTALLED_APPS, then "
        "run `manage.py rag_migration --app kb`."
    )


def test_bad_index_parameters_are_refused() -> None:
    with pytest.raises(CommandError, match="--m must be a positive"):
        run(sql=True, m=0)
    with pytest.raises(CommandError, match="256MB or 1GB"):
        run(sql=True, maintenance_work_mem="lots")


def test_running_twice_without_settings_changes_writes_nothing_new(migrations_package: Path) -> None:
    assert "Wrote" in run(app="siteapp")
    assert emitted(migrations_package) == ["0001_rag_indexes.py"]
    assert "No changes" in run(app="siteapp")
    assert emitted(migrations_package) == ["0001_rag_indexes.py"]


def test_a_new_space_gets_a_second_migration_that_depends_on_the_first(migrations_package: Path) -> None:
    run(app="siteapp")
    embedders = {
        "default": {"BACKEND": HASHING, "DIMENSIONS": 64},
        "small": {"BACKEND": HASHING, "MODEL": "small", "DIMENSIONS": 32},
    }
    with override_settings(
        RAG={"EMBEDDERS": embedders, "COLLECTIONS": {"docs": {}, "notes": {"EMBEDDER": "small"}}}
    ):
        run(app="siteapp")
    assert emitted(migrations_package) == ["0001_rag_indexes.py", "0002_rag_indexes.py"]
    second = (migrations_package / "0002_rag_indexes.py").read_text()
    assert "small:32" in second and "hashing:64" not in second
    assert "('siteapp', '0001_rag_indexes')" in second


@pytest.mark.django_db(transaction=True)
def test_the_applied_migration_serves_nearest_queries(migrations_package: Path) -> None:
    run(app="siteapp", maintenance_work_mem="64MB")
    name = IndexSpec("hashing:64", 64).name
    call_command("migrate", "siteapp", verbosity=0)
    try:
        kb = rag.collection("docs")
        kb.index(
            [
                rag.RagDocument(f"doc/{i}", f"Document {i} about topic {i % 37} and item {i * 7}.")
                for i in range(2000)
            ]
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE django_rag_chunk")
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
            assert "WHERE ((space)::text = 'hashing:64'::text)" in cursor.fetchone()[0]
        plan = kb.chunks().nearest("topic 5", k=10).explain()
        print(plan)
        assert f"Index Scan using {name}" in plan
        assert len(list(kb.chunks().nearest("topic 5", k=10))) == 10
    finally:
        call_command("migrate", "siteapp", "zero", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", [name])
        assert cursor.fetchone()[0] == 0
