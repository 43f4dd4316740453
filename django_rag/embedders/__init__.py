"""Embedding backends. Configure them in ``RAG["EMBEDDERS"]``; fetch one with ``get_embedder``."""

from .base import BaseEmbedder, Embedder, get_embedder, load_embedder

__all__ = ["BaseEmbedder", "Embedder", "get_embedder", "load_embedder"]
