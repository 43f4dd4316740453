"""Checks that query the database (tag ``database``): pgvector, ANN indexes, embedding spaces and switches."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections

from ..conf import rag_settings
from ..ddl import IndexSpec
from ..exceptions import RagError
from .common import configured_spaces, embedder_space

__all__ = ["check_database"]


@register(Tags.database)
def check_database(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    alias = rag_settings.DATABASE
    if not databases or alias not in databases or alias not in settings.DATABASES:
        return []
    try:
        with connections[alias].cursor() as cursor:
            return _database_messages(cursor, alias)
    except DatabaseError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [
            Error(
                f"cannot query database {alias!r}: {first}",
                hint="Check that PostgreSQL is running and DATABASE_URL points at it, or unset "
                "DATABASE_URL to use the embedded server.",
                id="django_rag.E010",
            )
        ]


_EXTENSION_STATE = """
SELECT (SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'),
       (SELECT count(*) FROM pg_extension WHERE extname = 'vector'),
       to_regclass('django_rag_chunk') IS NOT NULL,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
       coalesce((SELECT bool_or(trusted) FROM pg_available_extension_versions WHERE name = 'vector'), false),
       has_database_privilege(current_database(), 'CREATE'),
       current_user, current_database()
"""


def _database_messages(cursor: Any, alias: str) -> list[CheckMessage]:
    cursor.execute(_EXTENSION_STATE)
    available, installed, migrated, superuser, trusted, can_create, role, database = cursor.fetchone()
    if not available:
        return [
            Error(
                f"the PostgreSQL server behind {alias!r} does not have pgvector",
                hint="Install pgvector on the server (e.g. postgresql-NN-pgvector) or unset DATABASE_URL "
                "to use the embedded PostgreSQL 18 + pgvector.",
                id="django_rag.E011",
            )
        ]
    if not installed and not superuser and not (trusted and can_create):
        # Before migrate: its CREATE EXTENSION would fail with a bare "permission denied".
        return [
            Error(
                f"the pgvector extension is not installed in database {database!r} ({alias!r}) and role "
                f"{role!r} may not create it",
                hint=f'Ask a superuser to run: psql -d {database} -c "CREATE EXTENSION IF NOT EXISTS vector" '
                "(once per database), then run `manage.py migrate`.",
                id="django_rag.E013",
            )
        ]
    if not migrated:
        return []
    if not installed:
        return [
            Error(
                f"the pgvector extension is not installed in database {alias!r}",
                hint="Run CREATE EXTENSION vector as a superuser, then `manage.py migrate django_rag`.",
                id="django_rag.E012",
            )
        ]
    messages = _space_messages(cursor)
    try:
        spaces = configured_spaces()
    except RagError:
        return messages
    cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'django_rag_chunk'")
    rows = cursor.fetchall()
    existing = {row[0] for row in rows}
    definitions = " ".join(row[1] for row in rows)
    for space, dims in spaces.items():
        spec = IndexSpec(space, dims)
        if not spec.indexable:
            messages.append(
                Warning(
                    f"embedding space {space!r} has {dims} dimensions; pgvector indexes at most 4000, so its "
                    "searches are exact (sequential)",
                    hint="Use an embedder with DIMENSIONS <= 4000 for ANN search.",
                    id="django_rag.W002",
                )
            )
        elif spec.name not in existing and f"'{space}'" not in definitions:
            messages.append(
                Warning(
                    f"embedding space {space!r} has no ANN index; vector search scans every chunk",
                    hint="Run `manage.py rag_migration --app <your_app>` then `manage.py migrate`.",
                    id="django_rag.W001",
                )
            )
    return messages


_SWITCHES = """
SELECT c.name, c.embedder, c.active_space, s.embedder, s.space
FROM django_rag_collection AS c LEFT JOIN django_rag_embeddingswitch AS s ON s.collection_id = c.id
"""


def _switch_messages(cursor: Any) -> tuple[list[CheckMessage], set[str]]:
    """Embedder switches the settings contradict, and active spaces no embedder makes any more.

    Returns the messages and the names of collections with a switch open (W003 is for the others).
    """
    messages: list[CheckMessage] = []
    cursor.execute("SELECT to_regclass('django_rag_embeddingswitch') IS NOT NULL")
    if not cursor.fetchone()[0]:
        return messages, set()  # migration 0009 not applied yet: `migrate` comes first
    cursor.execute(_SWITCHES)
    rows = cursor.fetchall()
    spaces: dict[str, str] = {}
    for alias in rag_settings.EMBEDDERS:
        if found := embedder_space(alias):
            spaces[alias] = found[0]  # else reported by check_settings
    switching = set()
    for name, row_alias, active_space, target_alias, target_space in rows:
        alias = (rag_settings.collection_options(name) or {}).get("EMBEDDER", row_alias)
        if target_space:
            switching.add(name)
            declared = spaces.get(alias)
            if declared is not None and declared != target_space:
                messages.append(
                    Warning(
                        f"collection {name!r} is switching to {target_space} (embedder {target_alias!r}) but "
                        f"its EMBEDDER is now {alias!r} ({declared}): one switch at a time",
                        hint=f"Run `manage.py rag_reindex {name} --abort`, then "
                        f"`manage.py rag_reindex {name}`; or set EMBEDDER back to {target_alias!r} "
                        "to finish the first switch.",
                        id="django_rag.W020",
                    )
                )
        if active_space and active_space not in spaces.values():
            messages.append(
                Warning(
                    f"collection {name!r} searches space {active_space}, its last complete one, but no "
                    "embedder in RAG['EMBEDDERS'] makes it any more: its searches, answers and ingestion "
                    "fail",
                    hint="Keep the old embedder under an alias of its own (e.g. 'previous': {...} in "
                    f"RAG['EMBEDDERS']) until `manage.py rag_reindex {name}` has flipped it to its new "
                    "EMBEDDER.",
                    id="django_rag.W021",
                )
            )
    return messages, switching


def _space_messages(cursor: Any) -> list[CheckMessage]:
    messages, switching = _switch_messages(cursor)
    for name, options in rag_settings.COLLECTIONS.items():
        if name in switching:
            continue  # searches stay on the active space; W020/W021 and rag_status tell the rest
        alias_name = (options or {}).get("EMBEDDER", "default")
        found = embedder_space(alias_name)
        if found is None:
            continue  # reported by check_settings
        space, dimensions = found
        # Index-friendly probes: does the current space have rows, and if not, what does?
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM django_rag_chunk ch JOIN django_rag_collection c "
            "ON c.id = ch.collection_id WHERE c.name = %s AND ch.space = %s), "
            "(SELECT ch.space || ' (' || vector_dims(ch.embedding) || ' dims)' "
            "FROM django_rag_chunk ch JOIN django_rag_collection c ON c.id = ch.collection_id "
            "WHERE c.name = %s AND ch.space <> %s LIMIT 1)",
            [name, space, name, space],
        )
        current, other = cursor.fetchone()
        if other and not current:
            # A warning, not an error: errors would block `migrate`, which the fix itself needs.
            messages.append(
                Warning(
                    f"collection {name!r} uses embedder {alias_name!r} ({dimensions} dims, space "
                    f"{space}) but the store holds vectors of {other} for it",
                    hint=f"Run `manage.py rag_reindex {name}` to re-embed it, or set its EMBEDDER back.",
                    id="django_rag.W003",
                )
            )
    return messages
