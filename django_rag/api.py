"""``collection()`` and ``KnowledgeBase``: the entry point of the Python API.

``KnowledgeBase`` is a proxy of the ``Collection`` model with the behaviour: ``index``,
``remove``, ``search`` and ``ask``. It is a ``Collection`` row in every way the ORM cares
about (``Chunk.objects.filter(collection=kb)`` works), so the models stay plain data and the
pipelines they call sit above them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, cast, overload

from django.utils.translation import gettext_lazy as _

from .answer import AnswerStream, ChatBackend, answer_prompt, check_answer_options, get_chat, prepare
from .answer.extractive import PassageQuoter
from .conf import rag_settings
from .dberrors import translate_db_errors
from .ingest.pipeline import DEFAULT_BATCH_SIZE, index_documents
from .models import Collection, Document
from .search import RerankOption, search
from .search.strategies import DEFAULT_N_QUERIES, TextModel
from .stores import get_store
from .types import Answer, Hit, RagDocument, SyncResult

__all__ = ["KnowledgeBase", "collection"]


class KnowledgeBase(Collection):
    """A collection with its operations. Get one with ``django_rag.collection(name)``.

    Every operation runs on the database the row was read from (``collection(..., using=)``),
    unless it is given ``using=`` itself.
    """

    class Meta:
        proxy = True
        verbose_name = _("knowledge base")
        verbose_name_plural = _("knowledge bases")

    def index(
        self,
        docs: Iterable[RagDocument] | RagDocument,
        *,
        tags: Sequence[str] = (),
        tenant: str = "",
        owner: Any = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        using: str | None = None,
    ) -> SyncResult:
        """Sync ``docs`` into this collection, in ``tenant``: each document's stored chunks become
        exactly its new chunks; unchanged ones are not embedded again. Returns what changed."""
        return index_documents(
            self, docs, tags=tags, tenant=tenant, owner=owner, batch_size=batch_size, using=using
        )

    def remove(
        self,
        *,
        source_id: str | None = None,
        prefix: str | None = None,
        tenant: str = "",
        using: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Delete ``tenant``'s document ``source_id``, or all its documents under ``prefix``.

        A prefix matches whole segments: ``"faq"`` covers ``faq``, ``faq/...`` and ``faq#p2``,
        never ``faq2``; ``%`` and ``_`` are literal. Other tenants' documents are never touched.
        Any number of documents, in committed batches (each document removed whole);
        ``progress(n)`` is called after each batch. Returns the number of documents deleted.
        """
        return get_store(using or self.using).delete(
            self, source_id=source_id, prefix=prefix, tenant=tenant, progress=progress
        )

    def delete(
        self,
        using: str | None = None,
        keep_parents: bool = False,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, dict[str, int]]:
        """Delete the collection and everything in it, documents in committed batches (see
        ``remove``): a Django cascade would read every row into memory and lock them in one go."""
        removed = get_store(using or self.using).delete_collection(self, progress=progress)
        return removed + 1, {Document._meta.label: removed, Collection._meta.label: 1}

    def search(
        self,
        query: str | Sequence[float],
        *,
        k: int = 8,
        mode: str = "vector",
        filters: dict[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        tenant: str | None = None,
        source_prefix: str | None = None,
        min_score: float | None = None,
        syntax: str = "plain",
        candidates: int | None = None,
        rrf_k: int = 60,
        weights: tuple[float, float] = (1.0, 1.0),
        rerank: RerankOption | None = None,
        mmr: bool = False,
        mmr_lambda: float = 0.5,
        snippets: bool = True,
        strategy: str | None = None,
        n_queries: int = DEFAULT_N_QUERIES,
        compress: bool = False,
        parent_chunk_size: int | None = None,
        chat: ChatBackend | None = None,
        using: str | None = None,
    ) -> list[Hit]:
        """The ``k`` best chunks for ``query``, best first; see ``django_rag.search.search``.

        ``strategy="multi_query"`` and ``compress=True`` use ``chat``, by default ``RAG["CHAT"]``
        when it is a language model (the extractive default is none: multi_query then fails and
        compress filters by embedding)."""
        return search(
            self,
            query,
            k=k,
            mode=mode,
            filters=filters,
            tags=tags,
            tenant=tenant,
            source_prefix=source_prefix,
            min_score=min_score,
            syntax=syntax,
            candidates=candidates,
            rrf_k=rrf_k,
            weights=weights,
            rerank=rerank,
            mmr=mmr,
            mmr_lambda=mmr_lambda,
            snippets=snippets,
            strategy=strategy,
            n_queries=n_queries,
            compress=compress,
            parent_chunk_size=parent_chunk_size,
            rewriter=strategy_chat(chat, strategy, compress),
            using=using,
        )

    @overload
    def ask(
        self,
        question: str,
        *,
        stream: Literal[False] = ...,
        k: int = ...,
        mode: str = ...,
        filters: dict[str, Any] | None = ...,
        tags: Sequence[str] | None = ...,
        tenant: str | None = ...,
        source_prefix: str | None = ...,
        min_score: float | None = ...,
        syntax: str = ...,
        rerank: RerankOption | None = ...,
        mmr: bool = ...,
        strategy: str | None = ...,
        n_queries: int = ...,
        compress: bool = ...,
        chat: ChatBackend | None = ...,
        system_prompt: str | None = ...,
        prompt: str | None = ...,
        system: str | None = ...,
        using: str | None = ...,
    ) -> Answer: ...
    @overload
    def ask(
        self,
        question: str,
        *,
        stream: Literal[True],
        k: int = ...,
        mode: str = ...,
        filters: dict[str, Any] | None = ...,
        tags: Sequence[str] | None = ...,
        tenant: str | None = ...,
        source_prefix: str | None = ...,
        min_score: float | None = ...,
        syntax: str = ...,
        rerank: RerankOption | None = ...,
        mmr: bool = ...,
        strategy: str | None = ...,
        n_queries: int = ...,
        compress: bool = ...,
        chat: ChatBackend | None = ...,
        system_prompt: str | None = ...,
        prompt: str | None = ...,
        system: str | None = ...,
        using: str | None = ...,
    ) -> AnswerStream: ...
    def ask(
        self,
        question: str,
        *,
        stream: bool = False,
        k: int = 6,
        mode: str = "vector",
        filters: dict[str, Any] | None = None,
        tags: Sequence[str] | None = None,
        tenant: str | None = None,
        source_prefix: str | None = None,
        min_score: float | None = None,
        syntax: str = "plain",
        rerank: RerankOption | None = None,
        mmr: bool = False,
        strategy: str | None = None,
        n_queries: int = DEFAULT_N_QUERIES,
        compress: bool = False,
        chat: ChatBackend | None = None,
        system_prompt: str | None = None,
        prompt: str | None = None,
        system: str | None = None,
        using: str | None = None,
    ) -> Answer | AnswerStream:
        """Answer ``question`` from this collection with ``[n]`` citations; see ``django_rag.answer.ask``.

        ``strategy``, ``n_queries`` and ``compress`` shape the search as in ``search``; ``chat``
        writes the answer and, when a strategy needs one, the query variants or the cuts."""
        check_answer_options(stream, chat)
        prepared = prepare(
            self,
            question,
            k=k,
            mode=mode,
            system_prompt=system_prompt,
            prompt=prompt,
            system=system,
            using=using,
            filters=filters,
            tags=tags,
            tenant=tenant,
            source_prefix=source_prefix,
            min_score=min_score,
            syntax=syntax,
            rerank=rerank,
            mmr=mmr,
            strategy=strategy,
            n_queries=n_queries,
            compress=compress,
            rewriter=strategy_chat(chat, strategy, compress),
        )
        return AnswerStream(prepared, chat=chat) if stream else answer_prompt(prepared, chat=chat)


def strategy_chat(chat: ChatBackend | None, strategy: str | None, compress: bool) -> TextModel | None:
    """The chat model a search step writes with: ``chat``, else ``RAG["CHAT"]`` if it is a language
    model. None when no step needs one, or when the site has only the extractive backend (it quotes
    passages; it cannot reword a query or pick sentences by number)."""
    if strategy != "multi_query" and compress is not True:
        return None
    backend = chat if chat is not None else get_chat()
    return None if isinstance(backend, PassageQuoter) else backend


def collection(
    name: str | Collection,
    *,
    create: bool = False,
    embedder: str | None = None,
    text_config: str | None = None,
    text_search: bool | None = None,
    using: str | None = None,
) -> KnowledgeBase:
    """The collection ``name`` (or the row's) in database ``using`` (default ``RAG["DATABASE"]``).

    Created on first use when declared in ``RAG["COLLECTIONS"]``; settings are the source of
    truth for declared collections (see ``CollectionManager.resolve``). An undeclared name must
    already exist, or be created with ``create=True``.
    """
    if using is None and isinstance(name, Collection):
        using = name.using
    using = using or rag_settings.DATABASE
    with translate_db_errors(using):
        kb = KnowledgeBase.objects.db_manager(using).resolve(
            name, create=create, embedder=embedder, text_config=text_config, text_search=text_search
        )
    return cast(KnowledgeBase, kb)
