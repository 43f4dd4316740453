"""Turn low-level database failures into errors that name the fix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, InterfaceError, OperationalError, ProgrammingError

from .exceptions import ConfigurationError

__all__ = ["translate_db_errors"]


@contextmanager
def translate_db_errors(using: str = "default") -> Iterator[None]:
    """Re-raise the database errors a misconfigured site hits as ``ConfigurationError``.

    Anything else (a constraint violation, a bug) passes through untouched.
    """
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "connect" in message.lower() or "connection" in message.lower() or isinstance(exc, InterfaceError):
            raise ConfigurationError(
                f"cannot reach the database {using!r} ({message}); check that PostgreSQL is running and "
                "DATABASE_URL points at it, or unset DATABASE_URL to use the embedded server"
            ) from exc
        raise
    except (ProgrammingError, DatabaseError) as exc:
        text = str(exc)
        if 'type "vector" does not exist' in text or 'extension "vector" is not available' in text:
            raise ConfigurationError(
                f"the pgvector extension is missing in database {using!r}; "
                "run `manage.py migrate django_rag` "
                "(it runs CREATE EXTENSION vector) on a server with pgvector installed"
            ) from exc
        if 'relation "django_rag_' in text and "does not exist" in text:
            raise ConfigurationError(
                f"django-rag's tables are missing in database {using!r}; run `manage.py migrate django_rag`"
            ) from exc
        if "text search configuration" in text and "does not exist" in text:
            raise ConfigurationError(
                f"{text.splitlines()[0]}; set the collection's TEXT_CONFIG to one listed in pg_ts_config "
                "(english, portuguese, simple, ...)"
            ) from exc
        raise
