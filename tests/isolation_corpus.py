"""The fixed corpus of the isolation tests and the oracle that says what a scope may see.

Tenants that differ only by case, a trailing LIKE wildcard or emptiness; one source id held by
every tenant; tags that differ only by case. Every document is one chunk whose first word is a
marker of its own (``mk07``), so a page, a prompt or a command's output can be searched for
the markers of documents outside the scope.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import django_rag as rag

NAME = "isolation"
TENANTS = ("acme", "globex", "", "ACME", "acme%")
TAGS = ("public", "internal", "Public", "hr")
SECTIONS = ("billing", "backup", "people")
YEARS = (2023, 2024)
VOCAB = ("backup", "invoice", "snapshot", "vault", "payroll", "launch", "restore", "policy")
SEPARATORS = ("/", "#", ":", "?")
PREFIXES = ("shared", "shared/handbook", "acme", "globex", "wiki", "wiki#p7", "sha", "wiki#")


def prop(max_examples: int) -> settings:
    """Hypothesis settings of these tests: bounded, derandomized (the same examples in CI every run)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        # The fixtures hold read-only state (the corpus, settings, a logged-in client).
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@dataclass(frozen=True)
class Doc:
    number: int
    source_id: str
    tenant: str
    tags: tuple[str, ...]
    section: str
    year: int
    words: tuple[str, ...]

    @property
    def marker(self) -> str:
        return f"mk{self.number:02d}"

    @property
    def text(self) -> str:
        return " ".join((self.marker, *self.words))

    @property
    def metadata(self) -> dict[str, Any]:
        return {"section": self.section, "year": self.year}


def _corpus() -> tuple[Doc, ...]:
    rng = random.Random(13)
    docs = []
    for number in range(24):
        tenant = TENANTS[number % len(TENANTS)]
        if number < len(TENANTS):
            source_id = "shared/handbook"  # one source id in every tenant
        else:
            head = rng.choice(["acme", "globex", "wiki", "shared"])
            source_id = f"{head}{rng.choice(SEPARATORS)}p{number}"
        tags = tuple(sorted(rng.sample(TAGS, rng.randint(0, 2))))
        words = tuple(rng.sample(VOCAB, rng.randint(1, 3)))
        docs.append(Doc(number, source_id, tenant, tags, rng.choice(SECTIONS), rng.choice(YEARS), words))
    return tuple(docs)


CORPUS = _corpus()


def index_corpus(kb: rag.KnowledgeBase, docs: Iterable[Doc] = CORPUS) -> None:
    by_tenant: dict[str, list[rag.RagDocument]] = {}
    for doc in docs:
        by_tenant.setdefault(doc.tenant, []).append(
            rag.RagDocument(doc.source_id, doc.text, doc.metadata, list(doc.tags))
        )
    for tenant, batch in by_tenant.items():
        kb.index(batch, tenant=tenant)


def prefix_matches(source_id: str, prefix: str) -> bool:
    """Whole-segment prefix matching, written out again here as the oracle."""
    if source_id == prefix:
        return True
    if prefix.endswith(SEPARATORS):
        return source_id.startswith(prefix)
    return any(source_id.startswith(prefix + sep) for sep in SEPARATORS)


@dataclass(frozen=True)
class SearchScope:
    """What a search is confined to; None restricts nothing of that kind."""

    tenant: str | None = None
    tags: tuple[str, ...] | None = None
    filters: dict[str, Any] | None = field(default=None, hash=False)
    source_prefix: str | None = None

    def kwargs(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.tenant is not None:
            found["tenant"] = self.tenant
        if self.tags is not None:
            found["tags"] = list(self.tags)
        if self.filters is not None:
            found["filters"] = dict(self.filters)
        if self.source_prefix is not None:
            found["source_prefix"] = self.source_prefix
        return found

    def allows(self, doc: Doc) -> bool:
        if self.tenant is not None and doc.tenant != self.tenant:
            return False
        # An empty tag list allows nothing: overlap with no tag is empty.
        if self.tags is not None and not set(self.tags) & set(doc.tags):
            return False
        for key, value in (self.filters or {}).items():
            stored = doc.metadata.get(key)
            # JSON containment: a missing key never matches, and 2024 is not "2024".
            if type(stored) is not type(value) or stored != value:
                return False
        return self.source_prefix is None or prefix_matches(doc.source_id, self.source_prefix)


def visible(allows: Any, docs: Sequence[Doc] = CORPUS) -> list[Doc]:
    return [doc for doc in docs if allows(doc)]


def matching(docs: Iterable[Doc], words: Sequence[str]) -> list[Doc]:
    """Documents a plain text query of ``words`` matches (the 'simple' config: lowercase words)."""
    wanted = {word.lower() for word in words}
    return [doc for doc in docs if wanted & {doc.marker, *doc.words}]


def markers_in(text: str) -> set[str]:
    return {doc.marker for doc in CORPUS if doc.marker in text}


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """None (no restriction) half of the time, so that scopes with several keys still hold documents."""
    return st.one_of(st.none(), strategy)


tenants = st.sampled_from((*TENANTS, "initech"))
tag_lists = st.lists(st.sampled_from((*TAGS, "nobody")), max_size=3, unique=True).map(tuple)
filters = st.fixed_dictionaries(
    {},
    optional={
        "section": st.sampled_from((*SECTIONS, "legal")),
        "year": st.sampled_from((*YEARS, 2030, "2024")),
    },
)
search_scopes = st.builds(
    SearchScope,
    tenant=maybe(tenants),
    tags=maybe(tag_lists),
    filters=st.one_of(st.none(), st.none(), filters),
    source_prefix=st.one_of(st.none(), st.none(), st.sampled_from(PREFIXES)),
)
queries = st.lists(
    st.sampled_from(VOCAB) | st.sampled_from([doc.marker for doc in CORPUS]), min_size=1, max_size=3
)


@dataclass
class Corpus:
    kb: rag.KnowledgeBase
    document_ids: dict[int, int]  # doc number -> Document pk
    chunk_ids: dict[int, int]  # doc number -> Chunk pk
    by_chunk: dict[int, Doc]

    def chunks(self, docs: Sequence[Doc]) -> set[int]:
        return {self.chunk_ids[doc.number] for doc in docs}
