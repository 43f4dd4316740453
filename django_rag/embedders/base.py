"""The embedder protocol, a batching base class and the settings-driven factory."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..backends import load_backend, one_per_process
from ..conf import on_rag_change, rag_settings
from ..exceptions import ConfigurationError

__all__ = ["INSTRUCTIONS", "BaseEmbedder", "Embedder", "get_embedder", "load_embedder"]

Vector = list[float]

# The prefixes (query, document) that model families were trained with, by INSTRUCTIONS name.
# Without them such a model still runs, only worse; with them on a model that lacks them, too.
INSTRUCTIONS: dict[str, tuple[str, str]] = {
    # intfloat/e5-*-v2, multilingual-e5-*: both sides marked.
    "e5": ("query: ", "passage: "),
    # BAAI/bge-*-en-v1.5: an instruction before short queries, passages as they are.
    "bge": ("Represent this sentence for searching relevant passages: ", ""),
}


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
    (models such as e5 embed the two differently) and set ``model`` and ``dimensions``; they put
    ``self.prefix(kind)`` before each text.

    Every embedder takes ``INSTRUCTIONS`` (``"e5"``, ``"bge"``: the prefixes those models were
    trained with, see ``INSTRUCTIONS``) and ``QUERY_PREFIX`` / ``DOCUMENT_PREFIX`` (which win over
    it). None by default: MiniLM and OpenAI's models need none. Prefixes are part of the space
    (``space``), so an index built with one setup is never searched with another.
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
        instructions: str | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        **options: Any,
    ) -> None:
        if problems := _prefix_problems(type(self).__name__, instructions, query_prefix, document_prefix):
            raise ConfigurationError(problems[0])
        self.query_prefix, self.document_prefix = _prefixes(instructions, query_prefix, document_prefix)
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
        """The embedding space: vectors are comparable only within one space.

        ``model:dimensions``; with prefixes, ``model+tag:dimensions`` where the tag names the
        preset (``+e5``, ``+bge``) or fingerprints custom prefixes, so that changing them makes a
        new space to re-embed into (``rag_reindex``) instead of mixing two setups in one index.
        """
        return _space(self.model, self.dimensions, (self.query_prefix, self.document_prefix))

    def prefix(self, kind: str) -> str:
        """What goes before each text of ``kind`` (``"query"`` or ``"document"``)."""
        return self.query_prefix if kind == "query" else self.document_prefix

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
        problems += _prefix_problems(
            cls.__name__,
            options.get("instructions"),
            options.get("query_prefix"),
            options.get("document_prefix"),
        )
        return problems

    @classmethod
    def space_for(cls, options: dict[str, Any]) -> str:
        """The space ``cls(**options)`` embeds into, without building it (``space`` of the instance)."""
        dimensions = options.get("dimensions")
        prefixes = _prefixes(
            options.get("instructions"), options.get("query_prefix"), options.get("document_prefix")
        )
        return _space(
            options.get("model") or cls.model,
            cls.dimensions if dimensions is None else int(dimensions),
            prefixes,
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


def _prefix_problems(name: str, instructions: Any, query_prefix: Any, document_prefix: Any) -> list[str]:
    problems = []
    if instructions is not None and instructions not in INSTRUCTIONS:
        problems.append(
            f"{name} INSTRUCTIONS must be one of {sorted(INSTRUCTIONS)} or None, "
            f"got {instructions!r}; or set QUERY_PREFIX and DOCUMENT_PREFIX"
        )
    for key, value in (("QUERY_PREFIX", query_prefix), ("DOCUMENT_PREFIX", document_prefix)):
        if value is not None and not isinstance(value, str):
            problems.append(f"{name} {key} must be a string, got {value!r}")
    return problems


def _prefixes(instructions: Any, query_prefix: Any, document_prefix: Any) -> tuple[str, str]:
    """(query, document) prefixes: the explicit ones win over the INSTRUCTIONS preset."""
    preset = INSTRUCTIONS.get(instructions or "", ("", ""))
    return (
        preset[0] if query_prefix is None else str(query_prefix),
        preset[1] if document_prefix is None else str(document_prefix),
    )


def _space(model: str, dimensions: int, prefixes: tuple[str, str]) -> str:
    """``model:dimensions``, or ``model+tag:dimensions`` when texts are prefixed (``space``)."""
    if not any(prefixes):
        return f"{model}:{dimensions}"
    tag = next((name for name, preset in INSTRUCTIONS.items() if preset == prefixes), None)
    if tag is None:
        tag = "p" + hashlib.sha1("\0".join(prefixes).encode()).hexdigest()[:8]
    return f"{model}+{tag}:{dimensions}"


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
