"""Build pluggable parts from settings: ``{"BACKEND": "dotted.path", **OPTIONS}``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from django.utils.module_loading import import_string

from .exceptions import ConfigurationError

__all__ = ["load_backend", "one_per_process"]

T = TypeVar("T")


def load_backend(config: dict[str, Any], kind: str) -> Any:
    """Import ``config["BACKEND"]`` and call it with the other keys lower-cased as keyword options.

    ``kind`` ("embedder", "chat backend", "reranker") names the part in error messages.
    """
    if not isinstance(config, dict):
        raise ConfigurationError(
            f"a {kind} config must be a dict with a 'BACKEND' dotted path, got {config!r}"
        )
    options = dict(config)
    backend = options.pop("BACKEND", None)
    if not backend:
        raise ConfigurationError(f"a {kind} config needs a 'BACKEND' dotted path")
    try:
        cls = import_string(backend)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {kind} backend {backend!r}: {exc}") from exc
    try:
        return cls(**{key.lower(): value for key, value in options.items()})
    except TypeError as exc:
        raise ConfigurationError(f"{kind} backend {backend!r} does not accept these options: {exc}") from exc


class one_per_process(Generic[T]):  # lower case: a decorator, like functools.cache
    """``functools.cache`` whose concurrent first calls build one value, not one each.

    The first requests of a fresh process often arrive together; with a bare cache each would
    build its own backend (its own HTTP client, its own copy of a model) and all but one would
    be thrown away. Calls wait for the one build in progress instead. The lock is re-entrant: a
    build may ask for another value of the same cache (an embedder wrapping another one).
    """

    def __init__(self, function: Callable[..., T]) -> None:
        self._cached = functools.cache(function)
        self._lock = threading.RLock()
        functools.update_wrapper(self, function)

    def __call__(self, *args: Hashable) -> T:
        with self._lock:
            return self._cached(*args)

    def cache_clear(self) -> None:
        with self._lock:
            self._cached.cache_clear()
