"""Read replicas: which alias django-rag's reads go to, and what happens when the replica is down.

``RAG["READ_DATABASE"]`` names a replica of ``RAG["DATABASE"]``. Searches, ``ask`` and the chunk
QuerySets (``kb.chunks()``, and ``Chunk.objects`` through ``RagRouter``) read from it; every write,
lock, sync and statistics update stays on ``RAG["DATABASE"]``. An explicit ``using=`` always wins,
and ``read_from_primary()`` sends the reads of a block to the primary (to read your own writes
before the replica has replayed them). When the replica cannot be reached, ``RAG["READ_FALLBACK"]``
says whether reads go to the primary (with a logged warning) or fail with ``ConfigurationError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import TypeVar

from django.db import DatabaseError, connections

from .conf import rag_settings
from .dberrors import is_unreachable
from .exceptions import ConfigurationError

__all__ = ["reachable_read_alias", "read_alias", "read_from_primary", "with_read_fallback"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_primary: ContextVar[bool] = ContextVar("django_rag_read_from_primary", default=False)


@contextmanager
def read_from_primary() -> Iterator[None]:
    """Within this block (or function, as a decorator) django-rag reads from ``RAG["DATABASE"]``.

    For a read that must see a write just made, before the replica has replayed it::

        kb.index(docs)
        with rag.read_from_primary():
            hits = kb.search("...")
    """
    token = _primary.set(True)
    try:
        yield
    finally:
        _primary.reset(token)


def read_alias(alias: str) -> str:
    """The alias a read of data that lives in ``alias`` goes to (no connection is made).

    The replica serves only ``RAG["DATABASE"]``'s data: a collection read from another alias
    (``collection(name, using="other")``) is read there.
    """
    replica: str | None = rag_settings.READ_DATABASE
    if replica is None or _primary.get() or alias != rag_settings.DATABASE:
        return alias
    return replica


def reachable_read_alias(alias: str) -> str:
    """``read_alias(alias)``, after making sure the replica answers (for lazy QuerySets).

    Connects if no connection is open yet, and reconnects one that failed a query; a replica
    that cannot be reached is handled as ``RAG["READ_FALLBACK"]`` says.
    """
    target = read_alias(alias)
    if target == alias:
        return target
    connection = connections[target]
    try:
        if connection.connection is not None and connection.errors_occurred and not connection.is_usable():
            connection.close()
        connection.ensure_connection()
    except DatabaseError as error:
        return _fall_back(alias, target, error)
    return target


def with_read_fallback(alias: str, read: Callable[[str], T]) -> T:
    """``read(replica)``; if the replica cannot be reached, ``read(alias)`` or an error, by setting.

    ``read`` must only read: it may run twice.
    """
    target = read_alias(alias)
    if target == alias:
        return read(alias)
    try:
        return read(target)
    except (DatabaseError, ConfigurationError) as error:
        if not is_unreachable(error):
            raise
        return read(_fall_back(alias, target, error))


def _fall_back(primary: str, replica: str, error: BaseException) -> str:
    # A broken connection stays broken until closed; closed, the next read tries the replica again.
    with suppress(DatabaseError):
        connections[replica].close()
    if not rag_settings.READ_FALLBACK:
        raise ConfigurationError(
            f"the read replica {replica!r} (RAG['READ_DATABASE']) cannot be reached ({_first_line(error)}); "
            f"start it, or set RAG['READ_FALLBACK'] = True to read from {primary!r} while it is down"
        ) from error
    logger.warning(
        "read replica %r (RAG['READ_DATABASE']) cannot be reached (%s); reading from %r instead",
        replica,
        _first_line(error),
        primary,
    )
    return primary


def _first_line(error: BaseException) -> str:
    # The driver's own words, not the advice of a translated error (it is about DATABASE_URL).
    cause = error.__cause__ if isinstance(error, ConfigurationError) and error.__cause__ else error
    text = str(cause).strip()
    return text.splitlines()[0] if text else type(error).__name__
