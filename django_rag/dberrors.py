"""Turn low-level database failures into errors that name the fix."""

from __future__ import annotations

from types import TracebackType

import psycopg
from django.db import DatabaseError, InterfaceError, OperationalError, connections

from .exceptions import ConfigurationError, QueryError

__all__ = ["UnreachableDatabaseError", "is_unreachable", "translate_db_errors"]


class UnreachableDatabaseError(ConfigurationError):
    """The database could not be connected to (or its connection broke): a replica may fall back."""


class translate_db_errors:  # lower case: named and used as the function it replaced
    """Re-raise the database errors a misconfigured site hits as ``ConfigurationError``.

    Covers Django's wrapped errors and psycopg's own (from the raw cursors the store uses for
    bulk statements and searches). psycopg's other errors (a constraint violation...) reach the
    caller as the ``django.db`` error an ORM call would raise (``IntegrityError``, ``DataError``...),
    chained to psycopg's. Anything else (a bug) passes through untouched.
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
            if _lost(exc):
                # Django reconnects only once its connection is closed; a raw cursor's failure
                # does not close it, and every later call would meet the dead session again.
                connections[self.using].close()
            translated = _translated(exc, self.using)
            if translated is not None:
                raise translated from exc
            if isinstance(exc, psycopg.Error):
                # The store's raw psycopg cursors bypass Django's error wrapper: re-raise as the
                # django.db error (OperationalError...) that callers and the views catch.
                with connections[self.using].wrap_database_errors:
                    raise exc.with_traceback(tb)
        # Anything else propagates as it was raised.


# What psycopg says when the server ends a session it had accepted (pg_terminate_backend, a
# restart, a crash, a dropped network), as opposed to refusing to open one.
_LOST = (
    "terminating connection",
    "server closed the connection",
    "consuming input failed",
    "connection is lost",
)


def _lost(exc: BaseException) -> bool:
    sqlstate = getattr(exc, "sqlstate", None) or getattr(exc.__cause__, "sqlstate", None)
    return sqlstate in ("57P01", "57P02") or (
        isinstance(exc, (OperationalError, psycopg.OperationalError))
        and any(words in str(exc).lower() for words in _LOST)
    )


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the server could not be reached or the session was lost (rather than
    the query being wrong): a read on a replica may then fall back to the primary."""
    if isinstance(exc, UnreachableDatabaseError):
        return True
    return (
        _lost(exc)
        or isinstance(exc, (InterfaceError, psycopg.InterfaceError))
        or (isinstance(exc, (OperationalError, psycopg.OperationalError)) and "connect" in str(exc).lower())
    )


def _translated(exc: Exception, using: str) -> Exception | None:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    sqlstate = getattr(exc, "sqlstate", None) or getattr(exc.__cause__, "sqlstate", None)
    if sqlstate == "25006":  # read_only_sql_transaction: a hot standby, or default_transaction_read_only
        return ConfigurationError(
            f"the database {using!r} is read-only ({first}); nothing was written. Point RAG['DATABASE'] "
            "(or using=) at a primary that accepts writes, or turn off default_transaction_read_only"
        )
    if sqlstate == "53100":  # disk_full
        return ConfigurationError(
            f"the database {using!r} is out of disk space ({first}); the transaction was rolled back, "
            "so nothing of it was written: free space on the database server and run it again"
        )
    if _lost(exc):
        return UnreachableDatabaseError(
            f"the connection to the database {using!r} was lost ({first}); the transaction was rolled "
            "back, so nothing of it was written: run it again"
        )
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
