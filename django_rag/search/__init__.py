"""Search: request validation, the search pipeline over the store, strategies, rerank and MMR.

Evaluation indexes a dataset before it searches, so it sits above search and ingest
(``django_rag.evaluation``): search never imports the ingest pipeline.
"""

from .query import MODES, SYNTAXES, RerankOption, SearchOptions, search

__all__ = ["MODES", "SYNTAXES", "RerankOption", "SearchOptions", "search"]
