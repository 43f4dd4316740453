"""The ``RAG`` settings dict: defaults, lazy access, reset when tests override settings.

Read settings only through ``rag_settings``; nothing here touches ``django.conf.settings``
at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

from .exceptions import ConfigurationError

__all__ = [
    "DEFAULTS",
    "DEFAULT_COLLECTION_OPTIONS",
    "on_rag_change",
    "rag_section",
    "rag_settings",
    "web_settings",
]

DEFAULT_COLLECTION_OPTIONS: dict[str, Any] = {
    "EMBEDDER": "default",
    "TEXT_CONFIG": "english",
    # False: no tsvector or BM25 postings (vector search only); ingest writes much less per chunk.
    "TEXT_SEARCH": True,
    "CHUNK_SIZE": 256,  # tokens
    "CHUNK_OVERLAP": 32,  # tokens
    # Embed and match every chunk with its document's title and heading path (not displayed).
    "CONTEXT_HEADERS": True,
    # "default" (sentence- and heading-aligned, by size) or "semantic" (ingest.semantic: also ends
    # a chunk where adjacent sentences' similarity drops under SEMANTIC_THRESHOLD).
    "CHUNKER": "default",
    "SEMANTIC_THRESHOLD": 0.5,
    # strategy="parent_document" returns each small chunk's section up to this many tokens.
    "PARENT_CHUNK_SIZE": 1024,
    # An alias of RAG["RERANKERS"] that reranks every search of the collection (rerank=False skips it).
    "RERANKER": None,
}

DEFAULTS: dict[str, Any] = {
    "EMBEDDERS": {
        "default": {
            "BACKEND": "django_rag.embedders.openai.OpenAIEmbedder",
            "MODEL": "text-embedding-3-small",
            "DIMENSIONS": 1536,
        },
    },
    # No RAG["CHAT"]: answers quote the passages' sentences (no language model, no key). A site
    # with a model sets e.g. {"BACKEND": "django_rag.answer.chat.OpenAIChat", "MODEL": "gpt-4o-mini"}.
    "CHAT": {"BACKEND": "django_rag.answer.extractive.ExtractiveChat"},
    # alias -> {"BACKEND": dotted path, **options}; see django_rag.rerank. None configured by default.
    "RERANKERS": {},
    # name -> options (see DEFAULT_COLLECTION_OPTIONS); created in the database on first use.
    "COLLECTIONS": {},
    "STORE": "django_rag.stores.pgvector.PgVectorStore",
    # Database alias the app reads and writes through.
    "DATABASE": "default",
    # A replica of DATABASE that searches, ask and the chunk QuerySets read from (None: DATABASE).
    # Writes, locks and syncs always go to DATABASE. See docs/howto/read-replicas.md.
    "READ_DATABASE": None,
    # The replica cannot be reached: True reads from DATABASE with a logged warning, False raises
    # ConfigurationError.
    "READ_FALLBACK": True,
    "ASYNC": True,
    "OUTBOUND": {},
    "MEDIA": {},
    # `rag_ingest --async` (django_rag.ingest.jobs, docs/howto/celery.md): QUEUE names the Celery
    # queue of a collection's batches ("{collection}" becomes its name); ROOT, set on a worker,
    # replaces the --root the command was given (shared storage mounted elsewhere).
    "BULK": {},
    # Bounds on the work one file may cause in a loader (django_rag.ingest.loaders.limits).
    "LOADERS": {},
    # OCR of images and of PDF pages without a text layer (django_rag.ingest.loaders.ocr):
    # {"ENABLED": False, "LANGUAGES": "eng", "COMMAND": "tesseract", "DPI": 200}.
    "OCR": {},
    # How the text leg reads BM25 postings: {"MODE": "bounded" | "exact", "BUDGET", "POOL"}
    # (django_rag.bm25).
    "BM25": {},
    # The relevance (0 to 1, the same scale in every mode) below which a hit is not returned when a
    # search gives no min_score (django_rag.search.relevance); None returns every hit.
    "MIN_SCORE": 0.5,
    # HNSW ef_search for vector queries (pgvector's default is 40); raised to k when k is larger.
    "EF_SEARCH": 40,
    # pgvector's hnsw/ivfflat.iterative_scan for every PostgreSQL connection the site opens, so
    # that a filtered ORM query (Chunk.objects.nearest(...).filter(...)) returns its k rows on
    # every evaluation path, subqueries included. strict_order keeps rows in distance order.
    # None leaves the server's setting alone (set it per role behind a transaction pooler).
    "ITERATIVE_SCAN": "strict_order",
    # The pages and JSON endpoints of include("django_rag.urls") (docs/web.md). A site's RAG["WEB"]
    # is merged over these keys (django_rag.web.conf.web_settings).
    "WEB": {
        # Dotted path of scope(request) -> {"tenant": str, "tags": [...], "collections": [...]}; a
        # missing key (or no SCOPE) restricts nothing of that kind.
        "SCOPE": None,
        "LOGIN_REQUIRED": True,
        # View -> permission ("app_label.codename") a user needs besides logging in; None: none.
        "PERMISSIONS": {"search": None, "ask": None, "source": None},
        # Collections the pages offer (None: every one in RAG["COLLECTIONS"]); the scope narrows it.
        "COLLECTIONS": None,
        "PAGE_SIZE": 10,
        # Hits fetched per search: facets count them and pagination walks them.
        "MAX_RESULTS": 50,
        "MAX_K": 50,  # largest k the JSON endpoints accept
        "MAX_QUERY_CHARS": 1000,
        "ASK_K": 6,
        # Questions per user (per address when anonymous) per period: "N/s", "N/m", "N/h", "N/d"; None: off.
        "ASK_RATE": "20/m",
        "CACHE": "default",  # the cache alias the rate limit counts in
        "LOG_QUERIES": True,
        "LOG_RETENTION_DAYS": 90,  # manage.py rag_prune_queries deletes older entries
        # Content-Security-Policy of the pages and endpoints (django_rag.web.headers), in the format
        # of Django 6's SECURE_CSP; None: no header from the library (the site's own applies).
        "CSP": {
            "default-src": ["'self'"],
            "script-src": ["'self'"],
            "style-src": ["'self'"],
            "img-src": ["'self'", "data:"],
            "font-src": ["'self'"],
            "connect-src": ["'self'"],
            "object-src": ["'none'"],
            "base-uri": ["'self'"],
            "form-action": ["'self'"],
            "frame-ancestors": ["'none'"],
        },
        # The search page answers the query above its results (users with the "ask" permission).
        "SEARCH_ANSWERS": True,
        # manage.py rag_prune_conversations deletes conversations idle for longer.
        "CONVERSATION_RETENTION_DAYS": 30,
    },
}


class RagSettings:
    """Attribute access to ``settings.RAG`` merged over ``DEFAULTS``, computed on first use."""

    def __init__(self) -> None:
        self._merged: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self._merged is None:
            user = getattr(settings, "RAG", {}) or {}
            merged = {**DEFAULTS, **user}
            if "EMBEDDERS" in user and "default" not in user["EMBEDDERS"]:
                # A "default" alias always exists, so collections without an EMBEDDER still work.
                merged["EMBEDDERS"] = {"default": DEFAULTS["EMBEDDERS"]["default"], **user["EMBEDDERS"]}
            self._merged = merged
        return self._merged

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        values = self._load()
        if name not in values:
            raise AttributeError(f"RAG has no setting {name!r}")
        return values[name]

    def collection_options(self, name: str) -> dict[str, Any] | None:
        """Options of a collection declared in settings, defaults filled in; None if undeclared."""
        declared = self.COLLECTIONS.get(name)
        if declared is None:
            return None
        return {**DEFAULT_COLLECTION_OPTIONS, **declared}

    def reload(self) -> None:
        self._merged = None


rag_settings = RagSettings()


def rag_section(name: str, known: Set[str]) -> dict[str, Any]:
    """The keys a site gives in ``RAG[name]`` (a dict of options), lower-cased; none where Django is
    not configured. A key not in ``known`` (lower case) is a ConfigurationError naming them all."""
    if not settings.configured:
        return {}
    given = {key.lower(): value for key, value in (getattr(rag_settings, name, None) or {}).items()}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigurationError(
            f"RAG['{name}'] has unknown keys {[key.upper() for key in unknown]}; "
            f"known: {sorted(key.upper() for key in known)}"
        )
    return given


def web_settings() -> dict[str, Any]:
    """``RAG["WEB"]`` over ``DEFAULTS["WEB"]`` (PERMISSIONS merged key by key).

    Here rather than in ``web.conf`` so that code below the web layer (the pruning commands)
    reads the same values.
    """
    user = rag_settings.WEB or {}
    merged = {**DEFAULTS["WEB"], **user}
    merged["PERMISSIONS"] = {**DEFAULTS["WEB"]["PERMISSIONS"], **(user.get("PERMISSIONS") or {})}
    return merged


def on_rag_change(function: Callable[[], Any]) -> Callable[[], Any]:
    """Call ``function`` (a cache's ``cache_clear``) whenever ``settings.RAG`` changes.

    Backend modules register their own caches, so this module knows none of them.
    """

    def receiver(*, setting: str, **kwargs: Any) -> None:
        if setting == "RAG":
            function()

    setting_changed.connect(receiver, weak=False)
    return function


on_rag_change(rag_settings.reload)
