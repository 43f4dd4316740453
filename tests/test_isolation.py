"""Access isolation of reads: no chunk, snippet, passage or citation of another scope, by any path.

A property test per entry point draws tenants (some differing only by case, emptiness or a LIKE
wildcard), tag lists (empty ones too), metadata filters and source prefixes, and checks every
result against an oracle that reads the fixed corpus (tests/isolation_corpus.py), not the
database: the hits are exactly the chunks the scope allows (the top k of them when k is
smaller), never one more. The corpus is indexed once for the module; examples only read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Q
from hypothesis import event, given
from hypothesis import strategies as st

from django_rag.answer.chat import OpenAIChat
from django_rag.models import Chunk, Collection
from django_rag.stores.base import DocumentInfo, QueryScope, SearchRequest
from django_rag.stores.memory import MemoryStore
from django_rag.testing import HashingEmbedder, OpenAICompatibleServer
from django_rag.types import ChunkData, Hit
from tests.isolation_corpus import (
    CORPUS,
    NAME,
    PREFIXES,
    SECTIONS,
    TAGS,
    TENANTS,
    YEARS,
    Corpus,
    Doc,
    SearchScope,
    filters,
    markers_in,
    matching,
    maybe,
    prop,
    queries,
    search_scopes,
    tag_lists,
    tenants,
    visible,
)

pytestmark = pytest.mark.django_db
# The corpus fixture: indexed once per module.
pytest_plugins = ["tests.conftest_isolation"]


@pytest.fixture(scope="module")
def chat_server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=64) as server:
        yield server


@pytest.fixture(scope="module")
def chat(chat_server: OpenAICompatibleServer) -> OpenAIChat:
    # One client for the module: building an openai client takes about half a second here.
    return OpenAIChat(base_url=chat_server.base_url, api_key="test", max_retries=0)


def expected_for(mode: str, docs: list[Doc], words: Sequence[str]) -> list[Doc]:
    """Vector and hybrid search reach every allowed chunk; text search those holding a query word."""
    return matching(docs, words) if mode == "text" else docs


def check_hits(corpus: Corpus, hits: Sequence[Hit], expected: list[Doc], k: int, path: str) -> None:
    allowed = corpus.chunks(expected)
    event(f"{path}: {'some' if expected else 'no'} chunks in scope")  # --hypothesis-show-statistics
    got = [hit.chunk.pk for hit in hits]
    outside = [corpus.by_chunk[pk] for pk in got if pk not in allowed]
    assert not outside, f"{path}: hits outside the scope: {outside}"
    assert len(set(got)) == len(got) == min(k, len(expected)), path
    for hit in hits:
        doc = corpus.by_chunk[hit.chunk.pk]
        assert hit.document is not None and hit.document.pk == corpus.document_ids[doc.number], path
        assert (hit.content, hit.source_id) == (doc.text, doc.source_id), path
        assert markers_in(str(hit.snippet)) <= {doc.marker}, path


def by_length(query: str, texts: list[str]) -> list[float]:
    """A rerank score function: any order will do, the point is the path."""
    return [float(len(text)) for text in texts]


SEARCH_PATHS: list[tuple[str, dict[str, Any]]] = [
    ("vector", {"mode": "vector"}),
    ("text", {"mode": "text"}),
    ("hybrid", {"mode": "hybrid"}),
    ("hybrid+rerank", {"mode": "hybrid", "rerank": by_length}),
    ("text+rerank", {"mode": "text", "rerank": by_length}),
    ("vector+mmr", {"mode": "vector", "mmr": True}),
    ("hybrid+rerank+mmr", {"mode": "hybrid", "rerank": by_length, "mmr": True}),
    ("text+websearch", {"mode": "text", "syntax": "websearch"}),
    ("text+phrase", {"mode": "text", "syntax": "phrase"}),
    ("hybrid+phrase", {"mode": "hybrid", "syntax": "phrase"}),
]


def expected_for_syntax(options: dict[str, Any], allowed: list[Doc], words: list[str]) -> list[Doc]:
    """websearch ANDs plain words; phrase wants them next to each other, in order."""
    syntax = options.get("syntax", "plain")
    if options["mode"] != "text" or syntax == "plain":
        return expected_for(options["mode"], allowed, words)
    if syntax == "websearch":
        return [doc for doc in allowed if set(words) <= {doc.marker, *doc.words}]
    tokens, n = [doc.text.split() for doc in allowed], len(words)
    return [
        doc
        for doc, held in zip(allowed, tokens, strict=True)
        if any(held[i : i + n] == words for i in range(len(held) - n + 1))
    ]


SEARCH_EXAMPLES = 40


@prop(SEARCH_EXAMPLES)
@given(scope=search_scopes, words=queries, k=st.sampled_from([1, 3, 64]))
def test_kb_search_returns_exactly_the_scopes_chunks_in_every_mode(
    corpus: Corpus, scope: SearchScope, words: list[str], k: int
) -> None:
    allowed = visible(scope.allows)
    for path, options in SEARCH_PATHS:
        hits = corpus.kb.search(" ".join(words), k=k, **options, **scope.kwargs())
        check_hits(corpus, hits, expected_for_syntax(options, allowed, words), k, path)


def test_an_empty_tag_list_allows_nothing(corpus: Corpus) -> None:
    # A site passing "the tags this user may read" must not open everything when there are none.
    for mode in ("vector", "text", "hybrid"):
        assert corpus.kb.search("backup vault", k=64, mode=mode, tags=[]) == [], mode
    assert corpus.kb.search("backup", k=64, tags=[], mmr=True, rerank=by_length) == []


def test_the_memory_store_reads_an_empty_tag_list_the_same_way() -> None:
    store, kb = MemoryStore(), Collection(name="memory")
    embedder = HashingEmbedder(dimensions=64)
    chunk = ChunkData(
        index=0, content="backup", content_hash="h", embedding=embedder.embed_documents(["backup"])[0]
    )
    store.upsert_many(kb, [(DocumentInfo("a", tags=["public"]), [chunk])], space=embedder.space)
    vector = embedder.embed_query("backup")

    def found(tags: list[str] | None) -> list[str]:
        request = SearchRequest(
            mode="vector", k=5, space=embedder.space, vector=vector, scope=QueryScope(tags=tags)
        )
        return [hit.source_id for hit in store.search(kb, request)]

    assert (found(None), found(["public"]), found([])) == (["a"], ["a"], [])


def test_a_vector_query_is_scoped_like_a_text_one(corpus: Corpus) -> None:
    vector = corpus.kb.get_embedder().embed_query("backup vault")
    hits = corpus.kb.search(vector, k=64, tenant="ACME")
    assert hits and {corpus.by_chunk[hit.chunk.pk].tenant for hit in hits} == {"ACME"}


ASK_EXAMPLES = 20


@prop(ASK_EXAMPLES)
@given(scope=search_scopes, words=queries, mode=st.sampled_from(["vector", "text", "hybrid"]))
def test_kb_ask_sends_and_cites_only_the_scopes_passages(
    corpus: Corpus,
    chat_server: OpenAICompatibleServer,
    chat: OpenAIChat,
    scope: SearchScope,
    words: list[str],
    mode: str,
) -> None:
    allowed = expected_for(mode, visible(scope.allows), words)
    # The question's own words reach the prompt and the output whatever the scope.
    forbidden = {doc.marker for doc in CORPUS} - {doc.marker for doc in allowed} - set(words)
    for stream in (False, True):
        chat_server.reset()
        question = " ".join(words)
        if stream:
            answering = corpus.kb.ask(question, stream=True, mode=mode, chat=chat, **scope.kwargs())
            check_hits(corpus, answering.sources, allowed, 6, f"ask stream {mode}")
            answer = answering.answer
        else:
            answer = corpus.kb.ask(question, mode=mode, chat=chat, **scope.kwargs())
        sent = json.dumps([request.body for request in chat_server.requests])
        assert not markers_in(sent) & forbidden, f"the prompt held passages of another scope ({mode})"
        assert markers_in(answer.text) <= {doc.marker for doc in allowed}
        cited = corpus.chunks([corpus.by_chunk[hit.chunk.pk] for hit in answer.citations])
        assert cited <= corpus.chunks(allowed)
        if allowed:
            assert answer.citations, "the fake model cites passage [1] when there is one"


# The ORM: scope and arbitrary extra conditions composed around nearest() and text_search()

Leaf = tuple[str, Any]
leaves = st.one_of(
    st.sampled_from(TENANTS).map(lambda t: ("tenant", t)),
    st.lists(st.sampled_from(TAGS), min_size=1, max_size=2, unique=True).map(lambda t: ("overlap", tuple(t))),
    st.sampled_from(TAGS).map(lambda t: ("contains", t)),
    st.sampled_from(SECTIONS).map(lambda s: ("section", s)),
    st.sampled_from(YEARS).map(lambda y: ("year_gte", y)),
    st.sampled_from(PREFIXES).map(lambda p: ("startswith", p)),
)
trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.tuples(st.just("and"), children, children),
        st.tuples(st.just("or"), children, children),
        st.tuples(st.just("not"), children),
    ),
    max_leaves=4,
)


def to_q(tree: Any) -> Q:
    kind = tree[0]
    if kind in ("and", "or"):
        left, right = to_q(tree[1]), to_q(tree[2])
        return left & right if kind == "and" else left | right
    if kind == "not":
        return ~to_q(tree[1])
    lookups = {
        "tenant": "tenant",
        "overlap": "tags__overlap",
        "contains": "tags__contains",
        "section": "metadata__section",
        "year_gte": "metadata__year__gte",
        "startswith": "document__source_id__startswith",
    }
    value = tree[1]
    if kind == "overlap":
        value = list(value)
    elif kind == "contains":
        value = [value]
    return Q(**{lookups[kind]: value})


def holds(tree: Any, doc: Doc) -> bool:
    kind, value = tree[0], tree[1]
    if kind == "and":
        return holds(value, doc) and holds(tree[2], doc)
    if kind == "or":
        return holds(value, doc) or holds(tree[2], doc)
    if kind == "not":
        return not holds(value, doc)
    return {
        "tenant": lambda: doc.tenant == value,
        "overlap": lambda: bool(set(value) & set(doc.tags)),
        "contains": lambda: value in doc.tags,
        "section": lambda: doc.section == value,
        "year_gte": lambda: doc.year >= value,
        "startswith": lambda: doc.source_id.startswith(value),
    }[kind]()


ORM_EXAMPLES = 40


@prop(ORM_EXAMPLES)
@given(
    tenant=st.none() | st.sampled_from(TENANTS),
    extra=trees,
    negate=st.booleans(),
    scope_first=st.booleans(),
    words=queries,
    k=st.sampled_from([1, 3, 64]),
)
def test_orm_searches_composed_with_any_filter_stay_in_the_scope(
    corpus: Corpus,
    tenant: str | None,
    extra: Any,
    negate: bool,
    scope_first: bool,
    words: list[str],
    k: int,
) -> None:
    kb = corpus.kb
    query = " ".join(words)
    scope = Q(tenant=tenant) if tenant is not None else Q()

    def allows(doc: Doc) -> bool:
        return (tenant is None or doc.tenant == tenant) and holds(extra, doc) != negate

    allowed = visible(allows)
    searches = {
        "nearest": lambda qs: qs.nearest(query, k=k, collection=kb),
        "text_search": lambda qs: qs.text_search(query, k=k, collection=kb),
    }
    for name, run in searches.items():
        base = Chunk.objects.filter(collection=kb)
        qs = run(base.filter(scope)) if scope_first else run(base).filter(scope)
        qs = qs.exclude(to_q(extra)) if negate else qs.filter(to_q(extra))
        expected = corpus.chunks(expected_for("text" if name == "text_search" else "vector", allowed, words))
        event(f"{name}: {'some' if expected else 'no'} chunks in scope")
        path = f"{name} scope_first={scope_first} negate={negate} {extra}"
        for got in (
            [chunk.pk for chunk in qs],
            list(qs.values_list("pk", flat=True)),
            [chunk.pk for chunk in qs.iterator()],
        ):
            assert set(got) <= expected, f"{path}: outside the scope: {set(got) - expected}"
            assert len(got) == min(k, len(expected)), path
        assert qs.count() == min(k, len(expected)), path


# Management commands


COMMAND_EXAMPLES = 10


@pytest.fixture
def chat_settings(settings: Any, chat_server: OpenAICompatibleServer) -> None:
    """RAG["CHAT"] on the loopback server, for the whole test (one openai client for its examples)."""
    chat = {"BACKEND": "django_rag.answer.chat.OpenAIChat", "BASE_URL": chat_server.base_url, "API_KEY": "t"}
    settings.RAG = {**settings.RAG, "CHAT": {**chat, "MAX_RETRIES": 0}}


def command_args(scope: SearchScope) -> list[str]:
    args = []
    if scope.tenant is not None:
        args += ["--tenant", scope.tenant]
    if scope.tags:  # the command refuses an empty --tags
        args += ["--tags", ",".join(scope.tags)]
    for key, value in (scope.filters or {}).items():
        args += ["--filter", f"{key}={json.dumps(value)}"]
    return args


# The commands have no --source-prefix, and refuse an empty --tags.
command_scopes = st.builds(
    SearchScope,
    tenant=maybe(tenants),
    tags=maybe(tag_lists.filter(bool)),
    filters=st.one_of(st.none(), st.none(), filters),
)


@prop(COMMAND_EXAMPLES)
@given(scope=command_scopes, words=queries, mode=st.sampled_from(["vector", "text", "hybrid"]))
def test_rag_search_and_rag_ask_print_only_the_scopes_documents(
    corpus: Corpus,
    chat_settings: None,
    chat_server: OpenAICompatibleServer,
    scope: SearchScope,
    words: list[str],
    mode: str,
) -> None:
    query = " ".join(words)
    allowed = expected_for(mode, visible(scope.allows), words)
    # The question's own words reach the prompt and the output whatever the scope.
    forbidden = {doc.marker for doc in CORPUS} - {doc.marker for doc in allowed} - set(words)
    out = StringIO()
    args = [query, "--collection", NAME, "--mode", mode, "-k", "64", "--json", *command_args(scope)]
    call_command("rag_search", *args, stdout=out)
    printed = [json.loads(line) for line in out.getvalue().splitlines()]
    event(f"rag_search: {'some' if allowed else 'no'} chunks in scope")
    assert sorted(hit["content"] for hit in printed) == sorted(doc.text for doc in allowed)
    assert not markers_in(out.getvalue()) & forbidden

    chat_server.reset()
    out = StringIO()
    ask_args = [query, "--collection", NAME, "--mode", mode, "--json", *command_args(scope)]
    call_command("rag_ask", *ask_args, stdout=out)
    answer = json.loads(out.getvalue())
    sent = json.dumps([request.body for request in chat_server.requests])
    assert not markers_in(sent) & forbidden and not markers_in(out.getvalue()) & forbidden
    assert {c["source_id"] for c in answer["citations"]} <= {doc.source_id for doc in allowed}
