"""Build pluggable parts from settings: ``{"BACKEND": "dotted.path", **OPTIONS}``."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from django.utils.module_loading import import_string

from .exceptions import ConfigurationError

__all__ = ["backend_class", "backend_options", "load_backend", "one_per_process", "option_problems"]

T = TypeVar("T")


def backend_class(config: dict[str, Any], kind: str) -> Any:
    """Import ``config["BACKEND"]`` without building it.

    ``kind`` ("embedder", "chat backend", "reranker") names the part in error messages.
    """
    if not isinstance(config, dict):
        raise ConfigurationError(
            f"a {kind} config must be a dict with a 'BACKEND' dotted path, got {config!r}"
        )
    backend = config.get("BACKEND")
    if not backend:
        raise ConfigurationError(f"a {kind} config needs a 'BACKEND' dotted path")
    try:
        return import_string(backend)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {kind} backend {backend!r}: {exc}") from exc


def backend_options(config: dict[str, Any]) -> dict[str, Any]:
    """The keyword options a backend is built with: the config's other keys, lower-cased."""
    return {key.lower(): value for key, value in config.items() if key != "BACKEND"}


def load_backend(config: dict[str, Any], kind: str) -> Any:
    """Import ``config["BACKEND"]`` and call it with the other keys lower-cased as keyword options."""
    cls = backend_class(config, kind)
    try:
        return cls(**backend_options(config))
    except TypeError as exc:
        raise ConfigurationError(
            f"{kind} backend {config['BACKEND']!r} does not accept these options: {exc}"
        ) from exc


def option_problems(config: dict[str, Any], kind: str) -> list[str]:
    """What building ``config`` would refuse, found without building it (for system checks).

    The options must fit the class's signature; a class may say more with a ``check_options(options)``
    classmethod returning one message per problem (the embedders and chat backends here do).
    """
    try:
        cls = backend_class(config, kind)
    except ConfigurationError as exc:
        return [str(exc)]
    options = backend_options(config)
    try:
        inspect.signature(cls).bind(**options)
    except (TypeError, ValueError) as exc:
        return [f"{kind} backend {config['BACKEND']!r} does not accept these options: {exc}"]
    check = getattr(cls, "check_options", None)
    return list(check(options)) if check is not None else []


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
