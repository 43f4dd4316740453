"""System checks: misconfiguration is reported here, with a hint, never raised at import.

Checks tagged ``database`` run with ``manage.py check --database default`` and before ``migrate``.
One id per check:

- E001 contenttypes missing; E002 RAG['DATABASE'] unknown; E003 not PostgreSQL
- E004 an embedder cannot be built; E005 a collection's embedder is undefined
- E006 TEXT_SEARCH or CONTEXT_HEADERS not a bool; E007 unknown RAG key; E008 unknown collection option
- E014 RAG['READ_DATABASE'] unknown; E015 RAG['READ_FALLBACK'] not a bool
- E016 RAG['BM25'] has an unknown key or a bad value
- E010 database unreachable; E011 no pgvector on the server; E012 extension not installed
  after migrating; E013 extension missing and this role cannot create it
- W001 a space has no ANN index; W002 a space too wide to index; W003 a collection holds another
  space's vectors; W004 routing disagrees with RAG['DATABASE']; W005 an OpenAI backend has no key;
  W006 the chat server cannot be reached; I006 no RAG['CHAT'], answers are quoted (answer/checks.py)
- E150 CHUNKER or SEMANTIC_THRESHOLD bad (ingest/checks.py); E151 PARENT_CHUNK_SIZE bad (search/checks.py)
- E100 unknown RAG['MEDIA'] key; E111 a MEDIA content type has no loader
- E101-E109 a ``register()`` declaration is wrong (see ``_registration_problems``)
- W110 without a Celery broker, saved rows would be ingested inside the request (the Tasks API
  backend runs jobs immediately); E112 the Tasks API backend of ingestion jobs is unusable
- E130 unknown RAG['BULK'] key; E131 RAG['BULK'] QUEUE or ROOT of the wrong type
- E140 unknown RAG['OCR'] key; E141 OCR is on and Tesseract (or a language's data) is missing
"""

from __future__ import annotations

import difflib
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import FieldDoesNotExist
from django.db import DatabaseError, connections, router

from .answer.checks import chat_messages, extractive_info
from .bm25 import bm25_options
from .conf import DEFAULT_COLLECTION_OPTIONS, DEFAULTS, rag_settings
from .ddl import IndexSpec, configured_spaces
from .embedders import get_embedder
from .exceptions import ConfigurationError, RagError
from .ingest.checks import chunker_messages
from .ingest.jobs import BULK_DEFAULTS
from .ingest.loaders import get_loader
from .ingest.loaders.ocr import OCR_DEFAULTS, ocr_problems
from .ingest.registration import MEDIA_DEFAULTS, Registration, registrations
from .models import Chunk
from .search.checks import parent_size_messages
from .tasks import task_backend, uses_celery

__all__ = ["check_database", "check_registrations", "check_settings"]


def _unknown(keys: Any, known: Any, where: str, check_id: str) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    for key in sorted(set(keys) - set(known), key=str):
        close = difflib.get_close_matches(str(key), [str(k) for k in known], n=1)
        hint = f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(sorted(known))}."
        messages.append(Error(f"{where} has an unknown key {key!r}", hint=hint, id=check_id))
    return messages


def _read_database_problems() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    replica = rag_settings.READ_DATABASE
    if replica is not None and replica not in settings.DATABASES:
        errors.append(
            Error(
                f"RAG['READ_DATABASE'] is {replica!r}, which is not in DATABASES",
                hint="Add the replica to DATABASES under that alias, or set RAG['READ_DATABASE'] to None "
                "to read from RAG['DATABASE'].",
                id="django_rag.E014",
            )
        )
    if not isinstance(rag_settings.READ_FALLBACK, bool):
        errors.append(
            Error(
                f"RAG['READ_FALLBACK'] must be True or False, got {rag_settings.READ_FALLBACK!r}",
                hint="True: read from RAG['DATABASE'] while the replica is down; False: fail.",
                id="django_rag.E015",
            )
        )
    return errors


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    user = getattr(settings, "RAG", None) or {}
    errors += _unknown(user, DEFAULTS, "RAG", "django_rag.E007")
    try:
        bm25_options()
    except ConfigurationError as exc:
        errors.append(
            Error(
                str(exc),
                hint='RAG["BM25"] takes MODE ("bounded" or "exact"), BUDGET and POOL (positive integers) '
                "and TENANT_STATISTICS (True or False).",
                id="django_rag.E016",
            )
        )
    if not apps.is_installed("django.contrib.contenttypes"):
        errors.append(
            Error(
                "django-rag needs django.contrib.contenttypes",
                hint="Add 'django.contrib.contenttypes' to INSTALLED_APPS.",
                id="django_rag.E001",
            )
        )
    alias = rag_settings.DATABASE
    engine = settings.DATABASES.get(alias, {}).get("ENGINE", "")
    if alias not in settings.DATABASES:
        errors.append(
            Error(
                f"RAG['DATABASE'] is {alias!r}, which is not in DATABASES",
                hint="Set RAG['DATABASE'] to a configured alias.",
                id="django_rag.E002",
            )
        )
    elif "postgresql" not in engine and "postgis" not in engine:
        errors.append(
            Error(
                f"database {alias!r} uses {engine or 'no engine'}; django-rag needs PostgreSQL + pgvector",
                hint="Use django.db.backends.postgresql (e.g. DATABASES = {'default': "
                "django_rag.database.database_config()}).",
                id="django_rag.E003",
            )
        )
    read_problems = _read_database_problems()
    errors += read_problems
    if alias in settings.DATABASES and ("postgresql" in engine or "postgis" in engine) and not read_problems:
        routed = router.db_for_read(Chunk)
        # With a replica, RagRouter reads from it.
        if routed not in {alias, rag_settings.READ_DATABASE}:
            errors.append(
                Warning(
                    f"RAG['DATABASE'] is {alias!r} but the site's routing reads django_rag's models from "
                    f"{routed!r}, so Chunk.objects... in views queries another database",
                    hint="Add 'django_rag.routers.RagRouter' to DATABASE_ROUTERS, or use kb.chunks().",
                    id="django_rag.W004",
                )
            )
    # Only embedders the site declares or uses: the built-in OpenAI "default" may be unused.
    declared = set(user.get("EMBEDDERS", {}))
    used = {(options or {}).get("EMBEDDER", "default") for options in rag_settings.COLLECTIONS.values()}
    for name in sorted((declared | used) & set(rag_settings.EMBEDDERS)):
        try:
            embedder = get_embedder(name)
        except (RagError, TypeError) as exc:
            errors.append(
                Error(
                    f"embedder {name!r} cannot be built: {exc}",
                    hint=f"Fix RAG['EMBEDDERS'][{name!r}].",
                    id="django_rag.E004",
                )
            )
            continue
        errors += _missing_key(embedder, f"RAG['EMBEDDERS'][{name!r}]")
    errors += chat_messages(user)
    for name, options in rag_settings.COLLECTIONS.items():
        options = options or {}
        errors += _unknown(
            options, DEFAULT_COLLECTION_OPTIONS, f"RAG['COLLECTIONS'][{name!r}]", "django_rag.E008"
        )
        if not isinstance(options.get("TEXT_SEARCH", True), bool):
            errors.append(
                Error(
                    f"collection {name!r}: TEXT_SEARCH must be True or False, got {options['TEXT_SEARCH']!r}",
                    hint="True (default) indexes text for text and hybrid search; False is vector-only.",
                    id="django_rag.E006",
                )
            )
        if not isinstance(options.get("CONTEXT_HEADERS", True), bool):
            errors.append(
                Error(
                    f"collection {name!r}: CONTEXT_HEADERS must be True or False, "
                    f"got {options['CONTEXT_HEADERS']!r}",
                    hint="True (default) embeds and matches each chunk with its title and heading path; "
                    "False embeds the chunk text alone.",
                    id="django_rag.E006",
                )
            )
        errors += chunker_messages(name, options) + parent_size_messages(name, options)
        embedder_alias = options.get("EMBEDDER", "default")
        if embedder_alias not in rag_settings.EMBEDDERS:
            errors.append(
                Error(
                    f"collection {name!r} uses embedder {embedder_alias!r}, "
                    "which RAG['EMBEDDERS'] does not define",
                    hint=f"Define it or use one of {sorted(rag_settings.EMBEDDERS)}.",
                    id="django_rag.E005",
                )
            )
    return errors


def _missing_key(backend: Any, where: str) -> list[CheckMessage]:
    message = getattr(backend, "missing_key_message", None)
    if message is None or getattr(backend, "api_key", True):
        return []
    # A warning: `migrate` and `collectstatic` must run on machines that hold no secrets.
    return [Warning(message, hint=f"Set API_KEY in {where} or OPENAI_API_KEY.", id="django_rag.W005")]


@register()
def check_answers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Which backend writes the answers, when the site has not chosen one (I006)."""
    return extractive_info(getattr(settings, "RAG", {}) or {})


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
        try:
            spaces[alias] = get_embedder(alias).space
        except RagError:
            continue  # reported by check_settings
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
        try:
            embedder = get_embedder(alias_name)
        except RagError:
            continue  # reported by check_settings
        # Index-friendly probes: does the current space have rows, and if not, what does?
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM django_rag_chunk ch JOIN django_rag_collection c "
            "ON c.id = ch.collection_id WHERE c.name = %s AND ch.space = %s), "
            "(SELECT ch.space || ' (' || vector_dims(ch.embedding) || ' dims)' "
            "FROM django_rag_chunk ch JOIN django_rag_collection c ON c.id = ch.collection_id "
            "WHERE c.name = %s AND ch.space <> %s LIMIT 1)",
            [name, embedder.space, name, embedder.space],
        )
        current, other = cursor.fetchone()
        if other and not current:
            # A warning, not an error: errors would block `migrate`, which the fix itself needs.
            messages.append(
                Warning(
                    f"collection {name!r} uses embedder {alias_name!r} ({embedder.dimensions} dims, space "
                    f"{embedder.space}) but the store holds vectors of {other} for it",
                    hint=f"Run `manage.py rag_reindex {name}` to re-embed it, or set its EMBEDDER back.",
                    id="django_rag.W003",
                )
            )
    return messages


@register()
def check_registrations(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Bad ``django_rag.register()`` declarations and ``RAG["MEDIA"]`` keys (django_rag.E100...)."""
    media = rag_settings.MEDIA or {}
    errors = _unknown(media, MEDIA_DEFAULTS, "RAG['MEDIA']", "django_rag.E100")
    for content_type in media.get("CONTENT_TYPES") or ():
        if get_loader(content_type) is None:
            errors.append(
                Error(
                    f"RAG['MEDIA']['CONTENT_TYPES'] has {content_type!r}, which no loader handles",
                    hint="Remove it, or add one with django_rag.ingest.loaders.register_loader().",
                    id="django_rag.E111",
                )
            )
    for registration in registrations():
        errors += [
            Error(
                f"register({registration.model._meta.label}): {message}",
                hint=hint,
                obj=registration.model,
                id=f"django_rag.E{number}",
            )
            for number, message, hint in _registration_problems(registration)
        ]
    return errors


def _registration_problems(registration: Registration) -> list[tuple[int, str, str]]:
    """(check number, message, hint) for each mistake in one ``register()`` declaration."""
    model, name = registration.model, registration.model.__name__
    problems: list[tuple[int, str, str]] = []
    if (registration.file_field is None) == (registration.text is None):
        problems.append(
            (
                101,
                "needs exactly one of file_field= or text=",
                "Pass file_field='<FileField name>' to index uploads, or text='<field>' (or a "
                "callable) to index the row's text.",
            )
        )
    if registration.file_field is not None:
        field = _model_field(model, registration.file_field)
        if field is None or field.get_internal_type() not in ("FileField", "ImageField"):
            problems.append(
                (
                    102,
                    f"file_field {registration.file_field!r} is not a FileField of {name}",
                    "Name a models.FileField of the model.",
                )
            )
    if registration.text is not None and not callable(registration.text):
        names = [registration.text] if isinstance(registration.text, str) else list(registration.text)
        problems += [
            (
                103,
                f"text names {field!r}, which {name} does not have",
                "Name fields or attributes of the model, or pass a callable of the row.",
            )
            for field in names
            if not isinstance(field, str) or not hasattr(model, field)
        ]
    if registration.collection not in rag_settings.COLLECTIONS:
        problems.append(
            (
                104,
                f"collection {registration.collection!r} is not declared in RAG['COLLECTIONS']",
                f"Declare it (declared: {sorted(rag_settings.COLLECTIONS)}).",
            )
        )
    problems += [
        (
            105,
            f"no loader handles content type {content_type!r}",
            "Remove it, or add one with django_rag.ingest.loaders.register_loader().",
        )
        for content_type in registration.content_types or ()
        if get_loader(content_type) is None
    ]
    limit = registration.max_bytes
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0):
        problems.append(
            (106, f"max_bytes must be a positive integer, not {limit!r}", "Pass a size in bytes.")
        )
    tenant = registration.tenant
    if tenant is not None and not (callable(tenant) or (isinstance(tenant, str) and hasattr(model, tenant))):
        problems.append(
            (
                107,
                f"tenant {tenant!r} is neither a callable nor an attribute of {name}",
                "Name a field (e.g. tenant='org_id') or pass a callable of the row.",
            )
        )
    tags = registration.tags
    if isinstance(tags, str) or not (callable(tags) or all(isinstance(tag, str) for tag in tags)):
        problems.append(
            (108, "tags must be a list of strings or a callable of the row", "e.g. tags=['manual'].")
        )
    metadata = registration.metadata
    if metadata is not None and not (callable(metadata) or isinstance(metadata, dict)):
        problems.append(
            (109, "metadata must be a dict or a callable of the row", "e.g. metadata={'kind': 'a'}.")
        )
    return problems


def _model_field(model: Any, name: str) -> Any:
    try:
        return model._meta.get_field(name)
    except FieldDoesNotExist:
        return None


@register()
def check_task_queue(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Where saves of registered models go without a Celery broker (django_rag.W110, E112)."""
    if not rag_settings.ASYNC or not any(r.auto for r in registrations()) or uses_celery():
        return []
    alias = {**MEDIA_DEFAULTS, **(rag_settings.MEDIA or {})}["TASK_BACKEND"]
    fix = (
        "Queue them in the database: add 'django_tasks_db' (and on Django 5.2 'django_tasks') to "
        "INSTALLED_APPS, set TASKS = {'default': {'BACKEND': 'django_tasks_db.DatabaseBackend'}}, migrate, "
        "and run `manage.py db_worker`; or configure a Celery broker."
    )
    try:
        backend = task_backend()
    except Exception as exc:  # an alias missing from TASKS, a backend that cannot be imported
        return [
            Error(
                f"RAG['MEDIA']['TASK_BACKEND'] = {alias!r}: the Tasks API backend for ingestion jobs is "
                f"unusable ({exc})",
                hint="Name a backend of settings.TASKS. " + fix,
                id="django_rag.E112",
            )
        ]
    if backend is None:
        return [
            Error(
                "no Celery broker and no Tasks API: saved rows of registered models cannot be queued",
                hint="pip install django-tasks django-tasks-db. " + fix,
                id="django_rag.E112",
            )
        ]
    if type(backend).__name__ in ("ImmediateBackend", "DummyBackend"):
        what = "inside the request" if type(backend).__name__ == "ImmediateBackend" else "never"
        return [
            Warning(
                f"no Celery broker, and the Tasks API backend {alias!r} is {type(backend).__name__}: saved "
                f"rows of registered models are ingested {what}",
                hint=fix + " Or set RAG['ASYNC'] = False to ingest inline after the commit on purpose.",
                id="django_rag.W110",
            )
        ]
    return []


@register()
def check_bulk(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``RAG["BULK"]`` (``rag_ingest --async``): known keys, a queue name and a root of the right type."""
    bulk = rag_settings.BULK or {}
    if not isinstance(bulk, dict):
        return [
            Error(
                "RAG['BULK'] must be a dict",
                hint='e.g. {"QUEUE": "django_rag.{collection}"}',
                id="django_rag.E131",
            )
        ]
    errors = _unknown(bulk, BULK_DEFAULTS, "RAG['BULK']", "django_rag.E130")
    queue = bulk.get("QUEUE", BULK_DEFAULTS["QUEUE"])
    if not isinstance(queue, str) or not queue.strip():
        errors.append(
            Error(
                f"RAG['BULK']['QUEUE'] is {queue!r}, not a queue name",
                hint='A string where "{collection}" stands for the name (default "django_rag.{collection}").',
                id="django_rag.E131",
            )
        )
    root = bulk.get("ROOT")
    if root is not None and (not isinstance(root, str) or not root):
        errors.append(
            Error(
                f"RAG['BULK']['ROOT'] is {root!r}, not a path",
                hint="The folder where this worker sees the command's --root, or None (the same path).",
                id="django_rag.E131",
            )
        )
    return errors


@register()
def check_ocr(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """RAG['OCR'] keys, and the engine when OCR is on (django_rag.E140, E141)."""
    errors = _unknown(rag_settings.OCR or {}, OCR_DEFAULTS, "RAG['OCR']", "django_rag.E140")
    if errors:
        return errors
    return [Error(message, hint=hint, id="django_rag.E141") for message, hint in ocr_problems()]
