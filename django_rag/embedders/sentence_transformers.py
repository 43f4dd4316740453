"""Embeddings through ``sentence-transformers``, for sites that already run torch.

``MODEL`` is a sentence-transformers model name (downloaded by that library when the site is
online) and names the embedding space; ``MODEL_PATH`` loads a local copy instead. The library
is imported, and the model loaded, on first use; a model is shared by the whole process.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from typing import Any

from ..exceptions import ConfigurationError
from .base import BaseEmbedder, Vector

__all__ = ["SentenceTransformersEmbedder"]

_lock = threading.Lock()

_MISSING = (
    "SentenceTransformersEmbedder needs the sentence-transformers package (and torch): "
    "pip install sentence-transformers, or use django_rag.embedders.local.LocalEmbedder "
    'with pip install "django-rag[local]"'
)


class SentenceTransformersEmbedder(BaseEmbedder):
    """Options: ``MODEL``, ``MODEL_PATH``, ``DEVICE`` ("cpu", "cuda"...), ``QUERY_PREFIX``,
    ``DOCUMENT_PREFIX``, ``NORMALIZE``, ``BATCH_SIZE``, ``DIMENSIONS``."""

    model = "all-MiniLM-L6-v2"
    dimensions = 384
    batch_size = 32

    def __init__(
        self,
        *,
        model_path: str | None = None,
        device: str | None = None,
        normalize: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ConfigurationError(_MISSING)
        self.model_path = str(model_path) if model_path is not None else None
        self.device = device
        self.normalize = bool(normalize)
        self._model: Any = None

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> list[str]:
        problems = super().check_options(options)
        if importlib.util.find_spec("sentence_transformers") is None:
            problems.append(_MISSING)
        return problems

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        prefix = self.prefix(kind)
        vectors = self._load().encode(
            [prefix + text for text in texts],
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [[float(x) for x in vector] for vector in vectors]

    def _load(self) -> Any:
        if self._model is None:
            with _lock:
                model = _load_model(self.model_path or self.model, self.device)
            width = model.get_sentence_embedding_dimension()
            if width is not None and width != self.dimensions:
                raise ConfigurationError(
                    f"sentence-transformers model {self.model!r} makes {width}-dim vectors but its embedder "
                    f"is declared with {self.dimensions}; set DIMENSIONS to {width} in RAG['EMBEDDERS']"
                )
            self._model = model
        return self._model


@functools.cache
def _load_model(name_or_path: str, device: str | None) -> Any:
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(name_or_path, device=device)
    except Exception as exc:  # unknown name, no network, bad directory...
        raise ConfigurationError(
            f"sentence-transformers cannot load {name_or_path!r} (check MODEL / MODEL_PATH): {exc}"
        ) from exc
