"""The errors django-rag raises. Every one is a ``RagError``."""

__all__ = [
    "ChatDeadlineError",
    "ChatError",
    "ChatUnreachableError",
    "ConfigurationError",
    "EmbedderError",
    "FileRefusedError",
    "LoaderError",
    "OutboundPolicyError",
    "QueryError",
    "RagError",
    "RerankerError",
]


class RagError(Exception):
    """Base class of every error raised by django-rag."""


class ConfigurationError(RagError):
    """The settings, the database or a collection are not set up the way the call needs."""


class LoaderError(RagError):
    """A source could not be turned into documents (malformed, encrypted, unreadable)."""


class FileRefusedError(LoaderError):
    """A file that is not read, on purpose: encrypted, corrupt, or past a bound (a zip bomb, an XML
    entity bomb). ``reason`` is what its Document records (``encrypted``, ``corrupt-file``,
    ``unsafe-file``, ``unsupported-type``); a run records it as skipped and goes on."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class OutboundPolicyError(RagError):
    """An outbound request was refused by the OutboundPolicy (scheme, host, address, size...)."""


class EmbedderError(RagError):
    """The embedding backend failed (after its retries) or returned something unusable."""


class ChatError(RagError):
    """The chat backend failed (after its retries), refused the request or broke off a stream."""


class ChatDeadlineError(ChatError):
    """The chat backend did not finish its answer within ``RAG["CHAT"]["DEADLINE"]`` (retries included)."""


class ChatUnreachableError(ChatError):
    """No connection could be made to the chat backend's server: a wrong BASE_URL or a server down."""


class RerankerError(RagError):
    """The reranker failed (after its retries) or returned something unusable."""


class QueryError(RagError, ValueError):
    """A search or ask call got an argument it cannot run with (empty query, bad k, unknown mode)."""
