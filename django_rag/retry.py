"""Retries with exponential backoff, shared by every backend that calls a remote API.

One policy everywhere: rate limits (429), server errors (5xx), request/lock timeouts (408,
409), client timeouts and dropped connections are retried with exponential backoff and
equal jitter, honouring ``Retry-After`` up to ``backoff_max``; anything else fails at once.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from .exceptions import ConfigurationError, RagError

__all__ = [
    "RETRY_STATUSES",
    "RetryPolicy",
    "TransientFailure",
    "call_openai",
    "is_transient",
    "is_transient_status",
    "openai_api_key",
    "openai_error_message",
    "retry_after_seconds",
    "retry_call",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# 408 and 409 are transient on OpenAI (request and lock timeouts), as the official client also treats them.
RETRY_STATUSES = frozenset({408, 409, 429})


def is_transient_status(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry: ``max_retries`` extra attempts after the first."""

    max_retries: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 20.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff_base < 0 or self.backoff_max < 0:
            raise ConfigurationError("MAX_RETRIES, BACKOFF_BASE and BACKOFF_MAX must be >= 0")

    @property
    def attempts(self) -> int:
        return self.max_retries + 1

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.backoff_max)
        delay = min(self.backoff_base * 2 ** (attempt - 1), self.backoff_max)
        # Equal jitter: callers that failed together (one rate limit, many workers) spread out.
        return float(delay / 2 + random.uniform(0, delay / 2))


class TransientFailure(Exception):
    """Raised by one attempt to ask ``retry_call`` for another; ``description`` names what failed."""

    def __init__(self, description: str, *, retry_after: float | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.retry_after = retry_after


def retry_call(
    attempt: Callable[[], T],
    policy: RetryPolicy,
    *,
    where: Callable[[], str],
    error: type[RagError],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``attempt`` until it returns, retrying while it raises ``TransientFailure``.

    ``sleep`` waits between attempts; a caller with a deadline passes one that stops at it.

    Raise ``TransientFailure`` from ``attempt`` (chained to the real exception) for what may pass,
    and ``error`` for what will not. When the attempts run out, ``error`` names them, the last
    failure and ``where``.
    """
    for number in range(1, policy.attempts + 1):
        try:
            return attempt()
        except TransientFailure as failure:
            if number == policy.attempts:
                raise error(
                    f"{where()} failed after {policy.attempts} attempts (last: {failure.description}); "
                    "check the service or raise MAX_RETRIES"
                ) from failure.__cause__
            delay = policy.delay(number, failure.retry_after)
            logger.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.2fs",
                where(),
                number,
                policy.attempts,
                failure.description,
                delay,
            )
            sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def call_openai(
    call: Callable[[], T],
    policy: RetryPolicy,
    *,
    timeout: float,
    where: Callable[[], str],
    error: type[RagError],
    rejection: Callable[[int, Exception], str],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``retry_call`` for the ``openai`` client: sort its exceptions into transient and final.

    ``rejection(status, exc)`` words the error for a request the server refused for good
    (400, 401, 404...), so each backend can name its own settings in the fix.
    """
    import openai

    def attempt() -> T:
        try:
            return call()
        except openai.APIStatusError as exc:
            if not is_transient_status(exc.status_code):
                raise error(rejection(exc.status_code, exc)) from exc
            raise TransientFailure(
                f"HTTP {exc.status_code}: {openai_error_message(exc)}",
                retry_after=retry_after_seconds(exc.response.headers),
            ) from exc
        except openai.APITimeoutError as exc:
            raise TransientFailure(f"timed out after {timeout:g}s") from exc
        except openai.APIConnectionError as exc:
            raise TransientFailure(f"connection error: {exc.__cause__ or exc}") from exc
        except (openai.OpenAIError, ValueError) as exc:
            # A malformed body (bad JSON, no data) will not get better by asking again.
            raise error(f"{where()} returned an unusable response: {exc}") from exc

    return retry_call(attempt, policy, where=where, error=error, sleep=sleep)


def openai_api_key(api_key: str | None) -> str | None:
    """The key an OpenAI backend uses: its API_KEY option, else ``$OPENAI_API_KEY``."""
    return api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")


def openai_error_message(exc: Exception) -> str:
    """The server's own words from an API error body (``{"error": {"message": ...}}``), if any."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(getattr(exc, "message", exc))


def retry_after_seconds(headers: Mapping[str, Any]) -> float | None:
    """The server's requested wait in seconds, from ``retry-after-ms`` or ``Retry-After``."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return None


# Exceptions worth retrying, by class name so that optional packages (openai, botocore) need not
# be importable here: connections and timeouts, and database errors such as a dropped connection.
_TRANSIENT_NAMES = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "ConnectionError",
        "ConnectTimeoutError",
        "EndpointConnectionError",
        "InterfaceError",
        "OperationalError",
        "ReadTimeoutError",
        "Timeout",
        "TransientFailure",
    }
)


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` or its cause is worth retrying later (429/5xx, timeouts, lost connections)."""
    for error in _chain(exc):
        if isinstance(error, ConnectionError | TimeoutError):
            return True
        if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__):
            return True
        status = getattr(error, "status_code", None)
        if status is None:  # botocore's ClientError keeps it in its response
            response = getattr(error, "response", None)
            status = (
                response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if isinstance(response, dict)
                else None
            )
        if isinstance(status, int) and is_transient_status(status):
            return True
    return False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
