"""Turn low-level database failures into errors that name the fix."""

from __future__ import annotations

from types import TracebackType

import psycopg
from django.db import DatabaseError, InterfaceError, OperationalError

from .exceptions import ConfigurationError, QueryError

__all__ = ["UnreachableDatabaseError", "is_unreachable", "translate_db_errors"]


class UnreachableDatabaseError(ConfigurationError):
    """The database could not be connected to (or its connection broke): a replica may fall back."""


class translate_db_errors:  # lower case: named and used as the function it replaced
    """Re-raise the database errors a misconfigured site hits as ``ConfigurationError``.

    Covers Django's wrapped errors and psycopg's own (from the raw cursors the store uses for
    bulk statements). Anything else (a constraint violation, a bug) passes through untouched.
    A class rather than a ``@contextmanager`` generator: it wraps every search.
    """

    __slots__ = ("using",)

    def __init__(self, using: str = "default") -> None:
        self.using = using

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, (DatabaseError, psycopg.Error)):
            translated = _translated(exc, self.using)
            if translated is not None:
                raise translated from exc
        # Anything else propagates as it was raised.


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the server could not be reached (rather than the query being wrong)."""
    if isinstance(exc, UnreachableDatabaseError):
        return True
    return isinstance(exc, (InterfaceError, psycopg.InterfaceError)) or (
        isinstance(exc, (OperationalError, psycopg.OperationalError)) and "connect" in str(exc).lower()
    )


def _translated(exc: Exception, using: str) -> Exception | None:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if is_unreachable(exc):
        return UnreachableDatabaseError(
            f"cannot reach the database {using!r} ({first}); check that PostgreSQL is running and "
            "DATABASE_URL points at it, or unset DATABASE_URL to use the embedded server"
        )
    if 'type "vector" does not exist' in text or 'extension "vector" is not available' in text:
        return ConfigurationError(
            f"the pgvector extension is missing in database {using!r}; "
            "run `manage.py migrate django_rag` (it runs CREATE EXTENSION vector) on a server with pgvector"
        )
    if 'relation "django_rag_' in text and "does not exist" in text:
        return ConfigurationError(
            f"django-rag's tables are missing in database {using!r}; run `manage.py migrate django_rag`"
        )
    if "text search configuration" in text and "does not exist" in text:
        return ConfigurationError(
            f"{first}; set the collection's TEXT_CONFIG to one listed in pg_ts_config "
            "(english, portuguese, simple, ...)"
        )
    if isinstance(exc, psycopg.errors.ProgramLimitExceeded):
        return QueryError(f"the query is too large for PostgreSQL: {first}")
    return None
