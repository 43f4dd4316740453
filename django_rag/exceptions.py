"""The errors django-rag raises. Every one is a ``RagError``."""

__all__ = [
    "ChatDeadlineError",
    "ChatError",
    "ChatUnreachableError",
    "ConfigurationError",
    "EmbedderError",
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
