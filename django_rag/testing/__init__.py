"""Deterministic doubles for testing code that uses django-rag, offline and without a model."""

from ..embedders.hashing import HashingEmbedder
from .openai_server import OpenAICompatibleServer, RecordedRequest
from .rerank_server import RerankServer, overlap_scores

__all__ = ["HashingEmbedder", "OpenAICompatibleServer", "RecordedRequest", "RerankServer", "overlap_scores"]
