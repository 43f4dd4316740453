"""Build pluggable parts from settings: ``{"BACKEND": "dotted.path", **OPTIONS}``."""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string

from .exceptions import ConfigurationError

__all__ = ["load_backend"]


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
