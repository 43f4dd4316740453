"""System checks: misconfiguration is reported here, with a hint, never raised at import.

One module per concern: ``settings`` (the RAG dict), ``database`` (tag ``database``),
``registrations`` (``register()`` and MEDIA), ``queues`` (task queue, BULK, OCR); ``common`` holds
what they share. Importing this package registers them all. The checks never build an embedder
or a chat backend: each backend class checks its own options (``check_options``).

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
- E160 CHUNKER or SEMANTIC_THRESHOLD bad (ingest/checks.py); E161 PARENT_CHUNK_SIZE bad (search/checks.py)
- E100 unknown RAG['MEDIA'] key; E111 a MEDIA content type has no loader
- E101-E109 a ``register()`` declaration is wrong (see ``_registration_problems``)
- W110 without a Celery broker, saved rows would be ingested inside the request (the Tasks API
  backend runs jobs immediately); E112 the Tasks API backend of ingestion jobs is unusable
- E130 unknown RAG['BULK'] key; E131 RAG['BULK'] QUEUE or ROOT of the wrong type
- E140 unknown RAG['OCR'] key; E141 OCR is on and Tesseract (or a language's data) is missing
"""

from .database import check_database
from .queues import check_bulk, check_ocr, check_task_queue
from .registrations import check_registrations
from .settings import check_answers, check_settings

__all__ = [
    "check_answers",
    "check_bulk",
    "check_database",
    "check_ocr",
    "check_registrations",
    "check_settings",
    "check_task_queue",
]
