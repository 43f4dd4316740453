"""database_config(): DATABASE_URL, or an embedded PostgreSQL 18 + pgvector started on demand."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from django.db import connection

from django_rag.database import database_config, embedded_data_dir, embedded_database_url, parse_database_url
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


def test_the_data_directory_belongs_to_the_project_unless_django_rag_pgdata_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DJANGO_RAG_PGDATA", str(tmp_path / "override"))
    assert embedded_data_dir(tmp_path / "site") == tmp_path / "override"
    monkeypatch.delenv("DJANGO_RAG_PGDATA")
    assert embedded_data_dir(tmp_path / "site") == tmp_path / "site" / "pgdata"
    # Called with no base_dir from a settings module being imported: that module's BASE_DIR.
    settings_module = type(sys)("firsthour_site_settings")
    settings_module.BASE_DIR = tmp_path / "project"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "firsthour_site_settings", settings_module)
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "firsthour_site_settings")
    assert embedded_data_dir() == tmp_path / "project" / "pgdata"
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE")
    monkeypatch.chdir(tmp_path)
    assert embedded_data_dir() == tmp_path / "pgdata"


ROOT = Path(__file__).resolve().parent.parent
SITE_SETTINGS = """
from pathlib import Path
from django_rag.database import database_config
BASE_DIR = Path(__file__).resolve().parent
DATABASES = {"default": database_config()}
"""
SITE_MODULE = "site_settings"
OPEN_SITE = "import site_settings; print(site_settings.DATABASES['default']['HOST'])"


def test_two_sites_get_two_servers_and_each_process_names_its_data_directory() -> None:
    # The surprise: a second site silently opened the demo's database. Each site's settings
    # call database_config() with nothing set; neither site shares the other's server.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_RAG_PGDATA")}
    # Under /var/tmp and open to others: started by root, the server runs as the user pgserver.
    root = Path(tempfile.mkdtemp(prefix="two-sites-", dir="/var/tmp/django-rag"))
    root.chmod(0o755)
    try:
        runs = []
        for site in ("first", "second", "first"):
            (root / site).mkdir(exist_ok=True)
            (root / site / "site_settings.py").write_text(SITE_SETTINGS)
            runs.append(
                subprocess.run(
                    [sys.executable, "-c", OPEN_SITE],
                    env={
                        **env,
                        "PYTHONPATH": f"{root / site}:{ROOT}",
                        "DJANGO_SETTINGS_MODULE": "site_settings",
                    },
                    cwd="/",
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=True,
                )
            )
        sockets = [run.stdout.strip() for run in runs]
        assert sockets[0] == str(root / "first" / "pgdata") == sockets[2]
        assert sockets[1] == str(root / "second" / "pgdata")
        said = [run.stderr.strip().splitlines()[-1] for run in runs]
        assert said[0].startswith(
            f"django-rag: embedded PostgreSQL in a new data directory {root}/first/pgdata"
        )
        assert said[1].startswith(
            f"django-rag: embedded PostgreSQL in a new data directory {root}/second/pgdata"
        )
        assert said[2].startswith(
            f"django-rag: embedded PostgreSQL in data directory {root}/first/pgdata (set"
        )
    finally:
        for site in ("first", "second"):
            deadline = time.monotonic() + 20
            while (root / site / "pgdata" / "postmaster.pid").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the server changes OS user only when started by root")
def test_root_is_told_when_the_server_user_cannot_reach_the_data_directory() -> None:
    closed = Path(tempfile.mkdtemp(prefix="closed-", dir="/var/tmp/django-rag"))  # mode 0700
    try:
        with pytest.raises(
            ConfigurationError, match=rf"{closed} is closed to other users.*DJANGO_RAG_PGDATA"
        ):
            embedded_database_url(closed / "site" / "pgdata")
        assert closed.stat().st_mode & 0o777 == 0o700  # not opened to every user behind our back
        assert not (closed / "site" / "pgdata").exists()
    finally:
        shutil.rmtree(closed)


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
# "stdin": hold the server until the test closes our stdin, however slow the machine is.
sys.stdin.readline() if sys.argv[2] == "stdin" else time.sleep(float(sys.argv[2]))
"""


def test_the_embedded_server_starts_in_a_fresh_directory_is_shared_and_stops_with_its_last_user(
    tmp_path: Path,
) -> None:
    # /var/tmp, not pytest's tmp under /tmp/pytest-of-root: the server runs as its own OS user.
    pgdata = Path("/var/tmp/django-rag") / f"fresh-{tmp_path.name}"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(pgdata), "stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
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
        first.stdin.close()
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
