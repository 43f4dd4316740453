"""DDL for the per-space ANN indexes that ``rag_migration`` emits and the checks look for."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .conf import DEFAULT_COLLECTION_OPTIONS, rag_settings
from .embedders import get_embedder
from .sql import HALFVEC_MAX_DIMS, quote_literal, vector_cast_type

__all__ = ["IndexSpec", "configured_aliases", "configured_spaces"]

TABLE = "django_rag_chunk"


@dataclass(frozen=True)
class IndexSpec:
    """One partial expression index: the chunks of one embedding space, cast to their width."""

    space: str
    dimensions: int
    method: str = "hnsw"
    m: int = 16
    ef_construction: int = 64
    lists: int = 100

    @property
    def indexable(self) -> bool:
        return self.dimensions <= HALFVEC_MAX_DIMS

    @property
    def column_type(self) -> str:
        return vector_cast_type(self.dimensions)

    @property
    def with_options(self) -> str:
        if self.method == "hnsw":
            return f"m = {self.m}, ef_construction = {self.ef_construction}"
        return f"lists = {self.lists}"

    @property
    def name(self) -> str:
        # Deterministic from the definition, so an unchanged configuration maps to the same name.
        digest = hashlib.sha1(f"{self.space}|{self.column_type}|{self.method}|{self.with_options}".encode())
        slug = re.sub(r"[^a-z0-9]+", "_", self.space.lower()).strip("_")[:28]
        return f"rag_{self.method}_{slug}_{digest.hexdigest()[:8]}"

    def create_sql(self, *, concurrently: bool = False) -> str:
        ops = self.column_type.split("(")[0] + "_cosine_ops"
        return (
            f'CREATE INDEX {"CONCURRENTLY " if concurrently else ""}IF NOT EXISTS "{self.name}" ON "{TABLE}" '
            f"USING {self.method} ((embedding::{self.column_type}) {ops}) WITH ({self.with_options}) "
            f"WHERE space = {quote_literal(self.space)}"
        )

    def drop_sql(self, *, concurrently: bool = False) -> str:
        return f'DROP INDEX {"CONCURRENTLY " if concurrently else ""}IF EXISTS "{self.name}"'


def configured_aliases() -> list[str]:
    """The embedder aliases of every declared collection (``["default"]`` with none declared)."""
    aliases = {
        options.get("EMBEDDER", DEFAULT_COLLECTION_OPTIONS["EMBEDDER"])
        for options in rag_settings.COLLECTIONS.values()
    } or {"default"}
    return sorted(aliases)


def configured_spaces() -> dict[str, int]:
    """Embedding spaces the settings use: ``{space: dimensions}`` for every declared collection's embedder.

    With no collection declared, the ``default`` embedder's space.
    """
    spaces: dict[str, int] = {}
    for alias in configured_aliases():
        embedder = get_embedder(alias)
        spaces[embedder.space] = embedder.dimensions
    return spaces
