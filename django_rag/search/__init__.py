"""Search: request validation, the search pipeline over the store, rerank, MMR and evaluation."""

from .query import MODES, SYNTAXES, RerankOption, SearchOptions, search

__all__ = ["MODES", "SYNTAXES", "RerankOption", "SearchOptions", "search"]
