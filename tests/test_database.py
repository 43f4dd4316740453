"""database_config(): DATABASE_URL, or an embedded PostgreSQL 18 + pgvector started on demand."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from django_rag.database import database_config, embedded_database_url, parse_database_url
from django_rag.exceptions import ConfigurationError


def test_a_network_url_becomes_a_databases_entry() -> None:
    config = parse_database_url("postgres://rag:p%40ss@db.internal:5433/site?sslmode=require")
    assert config == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "site",
        "USER": "rag",
        "PASSWORD": "p@ss",
        "HOST": "db.internal",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "require"},
    }


def test_a_socket_url_keeps_its_host_directory() -> None:
    config = parse_database_url("postgresql://postgres:@/postgres?host=/var/tmp/pg")
    assert (config["HOST"], config["NAME"], config["PORT"], config["OPTIONS"]) == (
        "/var/tmp/pg",
        "postgres",
        "",
        {},
    )


def test_a_non_postgres_url_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigurationError, match=r"PostgreSQL URL.*pgvector"):
        parse_database_url("sqlite:///db.sqlite3")


def test_database_url_wins_over_the_embedded_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@h:5432/n")
    assert database_config(conn_max_age=60)["HOST"] == "h"
    assert database_config(conn_max_age=60)["CONN_MAX_AGE"] == 60


def test_an_unusable_data_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigurationError, match="DJANGO_RAG_PGDATA"):
        embedded_database_url(blocker / "pgdata")


@pytest.mark.django_db
def test_the_test_database_has_pgvector_0_8() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        major, minor = cursor.fetchone()[0].split(".")[:2]
    assert (int(major), int(minor)) >= (0, 8)


HOLD = """
import sys, time, psycopg
from django_rag.database import embedded_database_url
url = embedded_database_url(sys.argv[1])
with psycopg.connect(url) as conn:
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    print(url, conn.execute("SELECT '[1,2]'::vector <=> '[2,4]'::vector").fetchone()[0], flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_the_embedded_server_starts_in_a_fresh_directory_is_shared_and_stops_with_its_last_user(
    tmp_path: Path,
) -> None:
    # /var/tmp, not pytest's tmp under /tmp/pytest-of-root: the server runs as its own OS user.
    pgdata = Path("/var/tmp/django-rag") / f"fresh-{tmp_path.name}"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(pgdata), "3"], stdout=subprocess.PIPE, text=True
    )
    try:
        first_line = first.stdout.readline().split()
        second = subprocess.run(
            [sys.executable, "-c", HOLD, str(pgdata), "0"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
        assert first_line[0] == second[0]  # same server, same socket
        assert float(first_line[1]) == pytest.approx(0.0, abs=1e-6)
        assert (pgdata / "postmaster.pid").exists()  # still running for the first process
    finally:
        first.wait(timeout=60)
    deadline = time.monotonic() + 20
    while (pgdata / "postmaster.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (pgdata / "postmaster.pid").exists()
    subprocess.run(["rm", "-rf", str(pgdata)], check=False)


def test_a_user_killed_without_cleanup_does_not_keep_the_server_alive(tmp_path: Path) -> None:
    import signal

    pgdata = Path("/var/tmp/django-rag") / f"killed-{tmp_path.name}"
    victim = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(pgdata), "60"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert victim.stdout.readline()  # connected
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        subprocess.run(
            [sys.executable, "-c", HOLD, str(pgdata), "0"], capture_output=True, timeout=60, check=True
        )
        deadline = time.monotonic() + 20
        while (pgdata / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not (pgdata / "postmaster.pid").exists()
    finally:
        subprocess.run(["rm", "-rf", str(pgdata)], check=False)


def test_database_errors_that_name_a_fix_become_configuration_errors_the_rest_pass_untouched() -> None:
    from django.db import IntegrityError, ProgrammingError

    from django_rag.dberrors import translate_db_errors

    missing = ProgrammingError('relation "django_rag_chunk" does not exist')
    with pytest.raises(ConfigurationError, match="tables are missing") as caught, translate_db_errors():
        raise missing
    assert caught.value.__cause__ is missing
    original = IntegrityError("duplicate key value violates unique constraint")
    with pytest.raises(IntegrityError) as caught, translate_db_errors("default"):
        raise original
    assert caught.value is original and caught.value.__cause__ is None
    with translate_db_errors("default"):
        pass  # no error, nothing to translate
