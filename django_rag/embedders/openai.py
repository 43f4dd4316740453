"""Embeddings from the OpenAI API or any server that speaks its wire format.

Azure-compatible gateways, Ollama, vLLM, LiteLLM and the like work through ``BASE_URL``.
The ``openai`` package is an optional extra, imported only when this backend is built.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import TYPE_CHECKING, Any

from ..exceptions import ConfigurationError, EmbedderError
from ..retry import RetryPolicy, call_openai, openai_api_key, openai_error_message
from .base import BaseEmbedder, Vector

if TYPE_CHECKING:
    import openai
    from openai.types import CreateEmbeddingResponse

__all__ = ["OpenAIEmbedder"]


class OpenAIEmbedder(BaseEmbedder):
    """Embed texts with an OpenAI-compatible ``/embeddings`` endpoint.

    Configure it in ``RAG["EMBEDDERS"]``::

        "default": {
            "BACKEND": "django_rag.embedders.openai.OpenAIEmbedder",
            "MODEL": "text-embedding-3-small",
            "DIMENSIONS": 1536,
            # optional: API_KEY (default: $OPENAI_API_KEY), BASE_URL, ORGANIZATION, TIMEOUT,
            # MAX_RETRIES, BACKOFF_BASE, BACKOFF_MAX, BATCH_SIZE, SEND_DIMENSIONS
        }

    Rate limits (429), server errors (5xx), timeouts and dropped connections are retried with
    exponential backoff and jitter, honouring ``Retry-After`` up to ``BACKOFF_MAX`` seconds.
    Bad requests, bad keys and unknown models fail at once with an ``EmbedderError``.
    """

    model = "text-embedding-3-small"
    dimensions = 1536
    batch_size = 256

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        send_dimensions: bool | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        _import_openai()  # fail at configuration time, not on the first document
        # A missing key is reported when the embedder is first used (and by check W005), not
        # here: building it must not need a runtime secret (``migrate``, ``check``, CI builds).
        api_key = openai_api_key(api_key)
        if not _timings_valid(timeout, max_retries, backoff_base, backoff_max):
            raise ConfigurationError(_TIMINGS)
        self.api_key = api_key
        self.base_url = base_url
        self.organization = organization
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.retry_policy = RetryPolicy(self.max_retries, self.backoff_base, self.backoff_max)
        # Only the text-embedding-3 family accepts `dimensions`; older models and most local
        # servers reject or ignore it, so it is opt-in for them.
        self.send_dimensions = (
            self.model.startswith("text-embedding-3") if send_dimensions is None else bool(send_dimensions)
        )

    @functools.cached_property
    def client(self) -> openai.OpenAI:
        """The client, built on first use so that a forked worker never shares a parent's connections."""
        if not self.api_key:
            raise ConfigurationError(self.missing_key_message)
        client: openai.OpenAI = _import_openai().OpenAI(
            api_key=self.api_key,
            base_url=self.base_url,
            organization=self.organization,
            timeout=self.timeout,
            # We retry ourselves: the client's retries would multiply with ours and hide attempts.
            max_retries=0,
        )
        return client

    @property
    def missing_key_message(self) -> str:
        return _missing_key_message(self.model)

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> list[str]:
        problems = super().check_options(options)
        if importlib.util.find_spec("openai") is None:
            problems.append('OpenAIEmbedder needs the openai package: pip install "django-rag[openai]"')
        timings = [options.get(k, d) for k, d in _TIMING_DEFAULTS.items()]
        try:
            valid = _timings_valid(*timings)
        except TypeError as exc:  # building would fail the same way (load_backend reports it)
            problems.append(f"OpenAIEmbedder does not accept these options: {exc}")
        else:
            if not valid:
                problems.append(_TIMINGS)
        return problems

    @classmethod
    def missing_key(cls, options: dict[str, Any]) -> str | None:
        """System check W005: the message when neither API_KEY nor OPENAI_API_KEY is set."""
        if openai_api_key(options.get("api_key")):
            return None
        return _missing_key_message(options.get("model") or cls.model)

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        # OpenAI's models embed queries and documents alike; a model served elsewhere behind the
        # same API (e5 or bge on vLLM, TEI, Ollama) gets its prefixes (INSTRUCTIONS) here.
        # OpenAI rejects an empty string with a 400 that fails the whole batch; a single space
        # embeds as "nothing" and keeps every input's position.
        prefix = self.prefix(kind)
        inputs = [prefix + text or " " for text in texts]
        params: dict[str, Any] = {"model": self.model, "input": inputs}
        if self.send_dimensions:
            params["dimensions"] = self.dimensions
        response = self._with_retries(params)
        # The API tags each vector with its input's index and does not promise to keep the order.
        vectors: list[Vector | None] = [None] * len(inputs)
        for item in response.data:
            if not 0 <= item.index < len(inputs) or vectors[item.index] is not None:
                raise EmbedderError(f"{self._where()} returned an unexpected embedding index {item.index}")
            vectors[item.index] = list(item.embedding)
        missing = [i for i, vector in enumerate(vectors) if vector is None]
        if missing:
            raise EmbedderError(f"{self._where()} returned no embedding for inputs {missing}")
        return [vector for vector in vectors if vector is not None]

    def _with_retries(self, params: dict[str, Any]) -> CreateEmbeddingResponse:
        return call_openai(
            lambda: self.client.embeddings.create(**params),
            self.retry_policy,
            timeout=self.timeout,
            where=self._where,
            error=EmbedderError,
            rejection=self._rejection,
        )

    def _rejection(self, status: int, exc: Exception) -> str:
        where, detail = self._where(), openai_error_message(exc)
        if status == 401:
            return (
                f"OpenAI rejected the API key at {self._base_url()} (401: {detail}); check "
                "RAG['EMBEDDERS'][<alias>]['API_KEY'] or OPENAI_API_KEY"
            )
        if status == 403:
            return f"{where} refused access (403: {detail}); the key may lack access to this model or project"
        if status == 404:
            return (
                f"model {self.model!r} was not found at {self._base_url()} (404: {detail}); "
                "check MODEL and BASE_URL in RAG['EMBEDDERS']"
            )
        hint = ""
        if status == 400 and self.send_dimensions:
            hint = "; if the model does not accept `dimensions`, set SEND_DIMENSIONS to False"
        return f"{where} rejected the request (HTTP {status}: {detail}){hint}"

    def _base_url(self) -> str:
        if "client" in self.__dict__:
            return str(self.client.base_url).rstrip("/")
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"

    def _where(self) -> str:
        return f"embedder {self.model!r} at {self._base_url()}"


_TIMINGS = "OpenAIEmbedder needs TIMEOUT > 0 and MAX_RETRIES, BACKOFF_BASE, BACKOFF_MAX >= 0"
_TIMING_DEFAULTS = {"timeout": 30.0, "max_retries": 5, "backoff_base": 0.5, "backoff_max": 20.0}


def _timings_valid(timeout: Any, max_retries: Any, backoff_base: Any, backoff_max: Any) -> bool:
    return bool(timeout > 0 and max_retries >= 0 and backoff_base >= 0 and backoff_max >= 0)


def _missing_key_message(model: str) -> str:
    return (
        f"OpenAIEmbedder ({model}) has no API key: set RAG['EMBEDDERS'][<alias>]['API_KEY'] "
        "or the OPENAI_API_KEY environment variable (local servers such as Ollama or vLLM "
        "accept any placeholder, e.g. 'unused')"
    )


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ConfigurationError(
            'OpenAIEmbedder needs the openai package: pip install "django-rag[openai]"'
        ) from exc
    return openai
