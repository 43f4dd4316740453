"""Chat backends: the model that writes answers. Configure one in ``RAG["CHAT"]``.

A backend has two methods. ``complete(messages)`` returns ``(text, usage)``; ``stream(messages)``
returns a ``ChatStream``: iterate it for text deltas, read ``usage`` once it is exhausted.
``messages`` are OpenAI-style ``{"role": "system" | "user" | "assistant", "content": str}``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..backends import load_backend, one_per_process
from ..conf import on_rag_change, rag_settings
from ..exceptions import ChatDeadlineError, ChatError, ChatUnreachableError, ConfigurationError
from ..retry import RetryPolicy, call_openai, openai_api_key, openai_error_message
from .deadline import Deadline, within

if TYPE_CHECKING:
    import openai

__all__ = ["ChatBackend", "ChatStream", "Message", "OpenAIChat", "get_chat", "load_chat"]

Message = dict[str, str]
Usage = dict[str, int]

_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


class ChatStream(Iterator[str]):
    """Text deltas of a streamed reply; ``usage`` is filled in when the stream is exhausted.

    Wrap a generator that yields deltas and *returns* the usage dict::

        def deltas() -> Generator[str, None, dict[str, int]]:
            yield "Hello"
            return {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}

        return ChatStream(deltas())
    """

    def __init__(self, deltas: Generator[str, None, Usage | None] | Iterator[str]) -> None:
        self._deltas = deltas
        self.usage: Usage = {}
        self.done = False

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> str:
        try:
            return next(self._deltas)
        except StopIteration as stop:
            self.done = True
            if isinstance(stop.value, dict):
                self.usage = dict(stop.value)
            raise


@runtime_checkable
class ChatBackend(Protocol):
    """What ``ask`` needs from a chat model."""

    model: str

    def complete(self, messages: Sequence[Message]) -> tuple[str, Usage]: ...

    def stream(self, messages: Sequence[Message]) -> ChatStream: ...


class OpenAIChat:
    """Chat completions from the OpenAI API or any server that speaks its wire format.

    Configure it in ``RAG["CHAT"]``::

        "CHAT": {
            "BACKEND": "django_rag.answer.chat.OpenAIChat",
            "MODEL": "gpt-4o-mini",
            # optional: API_KEY (default: $OPENAI_API_KEY), BASE_URL, ORGANIZATION, TEMPERATURE,
            # MAX_TOKENS, DEADLINE, TIMEOUT, MAX_RETRIES, BACKOFF_BASE, BACKOFF_MAX, STREAM_USAGE
        }

    ``DEADLINE`` (seconds, default 60) bounds a whole answer: connecting, waiting for the first
    token, every later token and every retry. Past it the call raises ``ChatDeadlineError``,
    even from a server that hangs or trickles a byte at a time (``django_rag.answer.deadline``).
    ``TIMEOUT`` caps one HTTP attempt within it.

    Retries follow the embedder's policy (see ``django_rag.retry``). A stream is retried only
    until its first byte: once deltas have been handed out, a broken stream is a ``ChatError``.
    ``STREAM_USAGE`` asks for token counts at the end of a stream (``stream_options``); turn it
    off for servers that reject that option.
    """

    def __init__(
        self,
        *,
        model: str = "gpt-4o-mini",
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float = 60.0,
        deadline: float = 60.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        stream_usage: bool = True,
    ) -> None:
        _import_openai()  # fail at configuration time, not on the first question
        # A missing key is reported on the first question (and by check W005), never at build time.
        api_key = openai_api_key(api_key)
        if problems := self.check_options(
            {"timeout": timeout, "deadline": deadline, "max_tokens": max_tokens}
        ):
            raise ConfigurationError(problems[0])
        self.model = model
        self.api_key = api_key
        self.base_url = base_url
        self.organization = organization
        # None leaves the server's default: some models accept no temperature but their own.
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = float(timeout)
        self.deadline = float(deadline)
        self.retry_policy = RetryPolicy(int(max_retries), float(backoff_base), float(backoff_max))
        self.stream_usage = bool(stream_usage)

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
        """What ``OpenAIChat(**options)`` would refuse, without building it (for system checks)."""
        problems = []
        if importlib.util.find_spec("openai") is None:
            problems.append('OpenAIChat needs the openai package: pip install "django-rag[openai]"')
        timeout, deadline = options.get("timeout", 60.0), options.get("deadline", 60.0)
        max_tokens = options.get("max_tokens")
        if timeout <= 0:
            problems.append("OpenAIChat needs TIMEOUT > 0")
        if isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0:
            problems.append(f"OpenAIChat needs DEADLINE > 0 (seconds), got {deadline!r}")
        if max_tokens is not None and max_tokens < 1:
            problems.append("OpenAIChat needs MAX_TOKENS >= 1 (or None for the model's limit)")
        return problems

    @classmethod
    def missing_key(cls, options: dict[str, Any]) -> str | None:
        """System check W005: the message when neither API_KEY nor OPENAI_API_KEY is set."""
        if openai_api_key(options.get("api_key")):
            return None
        return _missing_key_message(options.get("model", "gpt-4o-mini"))

    def complete(self, messages: Sequence[Message]) -> tuple[str, Usage]:
        deadline = Deadline(self.deadline, where=self._where)

        def produce() -> Generator[Any, None, None]:
            yield self._create(messages, deadline)

        [response] = list(within(deadline, produce))
        if not response.choices:
            raise ChatError(f"{self._where()} returned no choices")
        return response.choices[0].message.content or "", _usage(response.usage)

    def stream(self, messages: Sequence[Message]) -> ChatStream:
        extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if self.stream_usage else {}
        deadline = Deadline(self.deadline, where=self._where)
        opened: list[Any] = []

        def produce() -> Generator[str, None, Usage]:
            response = self._create(messages, deadline, stream=True, **extra)
            opened.append(response)
            return (yield from self._deltas(response))

        def abort() -> None:
            if opened:
                opened[0].close()

        return ChatStream(within(deadline, produce, abort=abort))

    def _deltas(self, response: Any) -> Generator[str, None, Usage]:
        usage: Usage = {}
        try:
            with response:
                for chunk in response:
                    if chunk.usage is not None:  # the last event when include_usage is on
                        usage = _usage(chunk.usage)
                    for choice in chunk.choices:
                        if choice.index == 0 and choice.delta.content:
                            yield choice.delta.content
        except Exception as exc:  # the transport's errors vary (openai, httpx, socket)
            raise ChatError(f"the stream from {self._where()} broke off: {exc}") from exc
        return usage

    def _create(self, messages: Sequence[Message], deadline: Deadline, **options: Any) -> Any:
        params: dict[str, Any] = {"model": self.model, "messages": list(messages), **options}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens

        def attempt() -> Any:
            deadline.check()
            timeout = deadline.attempt_timeout(self.timeout)
            return self.client.chat.completions.create(**params, timeout=timeout)

        try:
            return call_openai(
                attempt,
                self.retry_policy,
                timeout=self.timeout,
                where=self._where,
                error=ChatError,
                rejection=self._rejection,
                sleep=deadline.sleep,
            )
        except ChatDeadlineError:
            raise
        except ChatError as exc:
            if deadline.expired:
                raise deadline.error() from exc
            if _unreachable(exc.__cause__):
                raise ChatUnreachableError(
                    f"{self._where()} cannot be reached ({exc.__cause__}); check RAG['CHAT']['BASE_URL'] "
                    "(or OPENAI_BASE_URL) and that the server is running"
                ) from exc
            raise

    def _rejection(self, status: int, exc: Exception) -> str:
        detail = openai_error_message(exc)
        if status == 401:
            return (
                f"the chat API at {self._base_url()} rejected the API key (401: {detail}); check "
                "RAG['CHAT']['API_KEY'] or OPENAI_API_KEY"
            )
        if status == 404:
            return (
                f"chat model {self.model!r} was not found at {self._base_url()} (404: {detail}); "
                "check MODEL and BASE_URL in RAG['CHAT']"
            )
        return f"{self._where()} rejected the request (HTTP {status}: {detail})"

    def _base_url(self) -> str:
        if "client" in self.__dict__:
            return str(self.client.base_url).rstrip("/")
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"

    def _where(self) -> str:
        return f"chat model {self.model!r} at {self._base_url()}"

    def __repr__(self) -> str:
        return f"<OpenAIChat {self.model}>"


def _unreachable(cause: BaseException | None) -> bool:
    """A failed connection (refused, no route, unknown host), not a slow or refusing server."""
    openai = _import_openai()
    return isinstance(cause, openai.APIConnectionError) and not isinstance(cause, openai.APITimeoutError)


def _usage(usage: Any) -> Usage:
    if usage is None:
        return {}
    values = {name: getattr(usage, name, None) for name in _USAGE_FIELDS}
    return {name: int(value) for name, value in values.items() if value is not None}


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ConfigurationError(
            'OpenAIChat needs the openai package: pip install "django-rag[openai]"'
        ) from exc
    return openai


def _missing_key_message(model: str) -> str:
    return (
        f"OpenAIChat ({model}) has no API key: set RAG['CHAT']['API_KEY'] or the OPENAI_API_KEY "
        "environment variable (local servers such as Ollama or vLLM accept any placeholder)"
    )


def load_chat(config: dict[str, Any]) -> ChatBackend:
    """Build a chat backend from ``{"BACKEND": "dotted.path", "MODEL": ..., **options}``."""
    chat: ChatBackend = load_backend(config, "chat backend")
    return chat


@one_per_process
def _cached_chat() -> ChatBackend:
    chat: ChatBackend = load_chat(rag_settings.CHAT)
    return chat


on_rag_change(_cached_chat.cache_clear)


def get_chat() -> ChatBackend:
    """The chat backend of ``RAG["CHAT"]`` (one instance per process, reset on setting change)."""
    return _cached_chat()
