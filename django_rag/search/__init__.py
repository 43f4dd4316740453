"""Search: request validation, the search pipeline over the store, rerank and MMR (evaluation, which indexes, sits above: django_rag.evaluation)."""

from .query import MODES, SYNTAXES, RerankOption, SearchOptions, search

__all__ = ["MODES", "SYNTAXES", "RerankOption", "SearchOptions", "search"]
