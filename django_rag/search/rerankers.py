"""Ready rerankers for hosted and self-hosted services, each speaking its own wire format.

Configure one in ``RAG["RERANKERS"]`` like any backend::

    RAG = {"RERANKERS": {
        "default": {"BACKEND": "django_rag.search.rerankers.CohereReranker"},  # COHERE_API_KEY
        "voyage": {"BACKEND": "django_rag.search.rerankers.VoyageReranker", "MODEL": "rerank-2.5"},
        "tei": {"BACKEND": "django_rag.search.rerankers.TEIReranker", "URL": "http://tei:8080/rerank"},
    }}

Every backend takes MODEL, URL, API_KEY (else the provider's environment variable), TIMEOUT,
MAX_RETRIES, BACKOFF_BASE, BACKOFF_MAX and ON_ERROR, and retries like ``HTTPReranker``. An
answer that does not account for every text asked for (a missing, repeated or out-of-range
index, a score that is not a finite number) is a ``RerankerError``, never a ranking; with
``ON_ERROR: "fallback"`` the search returns its hits unreranked instead.
"""

from __future__ import annotations

from typing import Any

from ..exceptions import ConfigurationError
from .rerank_base import OptionProblem
from .rerank_http import HTTPReranker

__all__ = ["CohereReranker", "JinaReranker", "TEIReranker", "VoyageReranker"]


class CohereReranker(HTTPReranker):
    """Cohere's ``POST /v2/rerank`` (``rerank-v3.5`` by default; key from COHERE_API_KEY or CO_API_KEY).

    ``MAX_TOKENS_PER_DOC`` (optional) is sent as ``max_tokens_per_doc``: Cohere truncates each
    document to it (4096 when not sent).
    """

    default_model = "rerank-v3.5"
    default_url = "https://api.cohere.com/v2/rerank"
    key_variables = ("COHERE_API_KEY", "CO_API_KEY")
    needs_key = True
    _options = HTTPReranker._options | {"max_tokens_per_doc"}

    def __init__(self, *, max_tokens_per_doc: int | None = None, **options: Any) -> None:
        super().__init__(**options)
        if max_tokens_per_doc is not None:
            problem = _positive_int("CohereReranker", "MAX_TOKENS_PER_DOC", max_tokens_per_doc)
            if problem:
                raise _error(problem)
        self.max_tokens_per_doc = max_tokens_per_doc

    @classmethod
    def check_options(cls, options: Any) -> list[OptionProblem]:
        problems = super().check_options(options)
        value = {str(k).lower(): v for k, v in options.items()}.get("max_tokens_per_doc")
        if value is not None and (problem := _positive_int(cls.__name__, "MAX_TOKENS_PER_DOC", value)):
            problems.append(problem)
        return problems

    def _payload(self, query: str, texts: list[str], top_n: int | None) -> dict[str, Any]:
        payload = super()._payload(query, texts, top_n)
        if self.max_tokens_per_doc is not None:
            payload["max_tokens_per_doc"] = self.max_tokens_per_doc
        return payload


class VoyageReranker(HTTPReranker):
    """Voyage AI's ``POST /v1/rerank`` (``rerank-2.5`` by default; key from VOYAGE_API_KEY).

    Sends ``top_k`` (Voyage's name for top_n) and ``truncation`` (``TRUNCATION``, default True:
    Voyage cuts over-long texts instead of refusing the request); reads ``data[]``.
    """

    default_model = "rerank-2.5"
    default_url = "https://api.voyageai.com/v1/rerank"
    key_variables = ("VOYAGE_API_KEY",)
    needs_key = True
    max_batch = 1000  # Voyage refuses more documents in one request
    _options = HTTPReranker._options | {"truncation"}
    _shape = "expected data[].index and .relevance_score"

    def __init__(self, *, truncation: bool = True, **options: Any) -> None:
        super().__init__(**options)
        if not isinstance(truncation, bool):
            raise _error(
                OptionProblem(f"VoyageReranker TRUNCATION must be True or False, got {truncation!r}")
            )
        self.truncation = truncation

    @classmethod
    def check_options(cls, options: Any) -> list[OptionProblem]:
        problems = super().check_options(options)
        value = {str(k).lower(): v for k, v in options.items()}.get("truncation", True)
        if not isinstance(value, bool):
            problems.append(OptionProblem(f"{cls.__name__} TRUNCATION must be True or False, got {value!r}"))
        return problems

    def _payload(self, query: str, texts: list[str], top_n: int | None) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model,
            "query": query,
            "documents": texts,
            "truncation": self.truncation,
        }
        if top_n is not None:
            payload["top_k"] = top_n
        return payload

    def _results(self, body: Any) -> list[tuple[Any, Any]]:
        return [(item["index"], item["relevance_score"]) for item in body["data"]]


class JinaReranker(HTTPReranker):
    """Jina AI's ``POST /v1/rerank`` (``jina-reranker-v2-base-multilingual`` by default; JINA_API_KEY).

    The documents are not sent back (``return_documents: false``): only indices and scores are read.
    """

    default_model = "jina-reranker-v2-base-multilingual"
    default_url = "https://api.jina.ai/v1/rerank"
    key_variables = ("JINA_API_KEY",)
    needs_key = True

    def _payload(self, query: str, texts: list[str], top_n: int | None) -> dict[str, Any]:
        payload = super()._payload(query, texts, top_n)
        payload["return_documents"] = False
        return payload


class TEIReranker(HTTPReranker):
    """Hugging Face Text Embeddings Inference serving a reranker model: ``POST /rerank``.

    TEI serves one model, so MODEL only names it in messages. Sends ``{"query", "texts",
    "truncate"}`` and reads ``[{"index", "score"}, ...]``. ``TRUNCATE`` (default True) cuts texts
    over the model's length instead of failing the request; ``RAW_SCORES`` asks for logits instead
    of the sigmoid; ``BATCH_SIZE`` (default 32, TEI's ``--max-client-batch-size``) splits longer
    lists across requests. API_KEY (or TEI_API_KEY) only when the server was started with one.
    """

    default_model = None
    default_url = "http://127.0.0.1:8080/rerank"
    key_variables = ("TEI_API_KEY",)
    needs_key = False
    _options = HTTPReranker._options | {"truncate", "raw_scores", "batch_size"}
    _shape = "expected a list of {index, score}"

    def __init__(
        self, *, truncate: bool = True, raw_scores: bool = False, batch_size: int = 32, **options: Any
    ) -> None:
        super().__init__(**options)
        problems = [p for p in self._own_problems(truncate, raw_scores, batch_size) if not p.warning]
        if problems:
            raise _error(problems[0])
        self.truncate = truncate
        self.raw_scores = raw_scores
        self.batch_size = batch_size

    def _batch(self) -> int | None:  # per instance: the server's limit is one of its settings
        return self.batch_size

    @classmethod
    def check_options(cls, options: Any) -> list[OptionProblem]:
        given = {str(k).lower(): v for k, v in options.items()}
        return super().check_options(options) + cls._own_problems(
            given.get("truncate", True), given.get("raw_scores", False), given.get("batch_size", 32)
        )

    @classmethod
    def _own_problems(cls, truncate: Any, raw_scores: Any, batch_size: Any) -> list[OptionProblem]:
        problems = [
            OptionProblem(f"{cls.__name__} {name} must be True or False, got {value!r}")
            for name, value in (("TRUNCATE", truncate), ("RAW_SCORES", raw_scores))
            if not isinstance(value, bool)
        ]
        if problem := _positive_int(cls.__name__, "BATCH_SIZE", batch_size):
            problems.append(problem)
        return problems

    def _payload(self, query: str, texts: list[str], top_n: int | None) -> dict[str, Any]:
        # TEI has no top_n: it scores every text; the best top_n are kept here.
        return {
            "query": query,
            "texts": texts,
            "truncate": self.truncate,
            "raw_scores": self.raw_scores,
            "return_text": False,
        }

    def _scores(self, query: str, texts: list[str], top_n: int | None) -> dict[int, float]:
        return super()._scores(query, texts, None)

    def _results(self, body: Any) -> list[tuple[Any, Any]]:
        if not isinstance(body, list):
            raise TypeError(f"a {type(body).__name__}, not a list")
        return [(item["index"], item["score"]) for item in body]


def _positive_int(backend: str, name: str, value: Any) -> OptionProblem | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return OptionProblem(f"{backend} {name} must be a positive integer, got {value!r}")
    return None


def _error(problem: OptionProblem) -> ConfigurationError:
    return ConfigurationError(problem.message)
