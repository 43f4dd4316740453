"""The embedder protocol, a batching base class and the settings-driven factory."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..backends import load_backend, one_per_process
from ..conf import on_rag_change, rag_settings
from ..exceptions import ConfigurationError

__all__ = ["BaseEmbedder", "Embedder", "get_embedder", "load_embedder"]

Vector = list[float]


@runtime_checkable
class Embedder(Protocol):
    """What the rest of the app needs from an embedding model."""

    model: str
    dimensions: int

    @property
    def space(self) -> str: ...

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]: ...

    def embed_query(self, text: str) -> Vector: ...


class BaseEmbedder:
    """Batches ``embed_documents`` and checks every vector's width.

    Subclasses implement ``_embed(texts, kind)`` where ``kind`` is ``"document"`` or ``"query"``
    (models such as e5 embed the two differently) and set ``model`` and ``dimensions``.
    """

    model: str = ""
    dimensions: int = 0
    batch_size: int = 64

    def __init__(
        self,
        *,
        model: str | None = None,
        dimensions: int | None = None,
        batch_size: int | None = None,
        **options: Any,
    ) -> None:
        if model is not None:
            self.model = model
        if dimensions is not None:
            self.dimensions = int(dimensions)
        if batch_size is not None:
            self.batch_size = int(batch_size)
        if options:
            raise ConfigurationError(
                f"{type(self).__name__} got unknown options {sorted(options)}; check RAG['EMBEDDERS']"
            )
        if self.dimensions <= 0:
            raise ConfigurationError(f"{type(self).__name__} needs DIMENSIONS > 0")
        if self.batch_size <= 0:
            raise ConfigurationError(f"{type(self).__name__} needs BATCH_SIZE > 0")

    @property
    def space(self) -> str:
        """The embedding space: vectors are comparable only within one space."""
        return f"{self.model}:{self.dimensions}"

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> list[str]:
        """What ``cls(**options)`` would refuse, without building it (system check E004).

        Subclasses that refuse more in ``__init__`` extend this and call it there.
        """
        known = {
            name
            for klass in cls.__mro__
            if "__init__" in vars(klass) and klass is not object
            for name, parameter in inspect.signature(vars(klass)["__init__"]).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        }
        problems = []
        if unknown := sorted(set(options) - known):
            problems.append(f"{cls.__name__} got unknown options {unknown}; check RAG['EMBEDDERS']")
        for key, default in (("dimensions", cls.dimensions), ("batch_size", cls.batch_size)):
            value = options.get(key)
            try:
                number = default if value is None else int(value)
            except (TypeError, ValueError):
                number = 0
            if number <= 0:
                problems.append(f"{cls.__name__} needs {key.upper()} > 0")
        return problems

    @classmethod
    def space_for(cls, options: dict[str, Any]) -> str:
        """The space ``cls(**options)`` embeds into, without building it (``space`` of the instance)."""
        dimensions = options.get("dimensions")
        return (
            f"{options.get('model') or cls.model}:{cls.dimensions if dimensions is None else int(dimensions)}"
        )

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        vectors: list[Vector] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(
                self._checked(self._embed(list(texts[start : start + self.batch_size]), "document"))
            )
        return vectors

    def embed_query(self, text: str) -> Vector:
        return self._checked(self._embed([text], "query"))[0]

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        raise NotImplementedError

    def _checked(self, vectors: list[Vector]) -> list[Vector]:
        for vector in vectors:
            if len(vector) != self.dimensions:
                raise ConfigurationError(
                    f"embedder '{self.model}' is declared with {self.dimensions} dimensions but returned "
                    f"a {len(vector)}-dim vector; set DIMENSIONS to {len(vector)} in RAG['EMBEDDERS']"
                )
        return vectors

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.space}>"


def load_embedder(config: dict[str, Any]) -> Embedder:
    """Build an embedder from ``{"BACKEND": "dotted.path", "MODEL": ..., **options}``."""
    embedder: Embedder = load_backend(config, "embedder")
    return embedder


@one_per_process
def _cached_embedder(alias: str) -> Embedder:
    embedders = rag_settings.EMBEDDERS
    if alias not in embedders:
        raise ConfigurationError(f"no embedder named {alias!r}; RAG['EMBEDDERS'] defines {sorted(embedders)}")
    embedder: Embedder = load_embedder(embedders[alias])
    return embedder


on_rag_change(_cached_embedder.cache_clear)


def get_embedder(alias: str = "default") -> Embedder:
    """The configured embedder for ``alias`` (one instance per process, reset on setting change)."""
    return _cached_embedder(alias)
