"""What the check modules share: unknown-key errors, and embedders as their classes declare them.

An embedder is never built here (building may load a model or need a secret): its class checks
its own options (``check_options``) and names its space (``space_for``).
"""

from __future__ import annotations

import difflib
from typing import Any

from django.core.checks import CheckMessage, Error

from ..backends import backend_class, backend_options, option_problems
from ..conf import rag_settings
from ..ddl import configured_aliases
from ..exceptions import RagError

__all__ = ["configured_spaces", "embedder_missing_key", "embedder_problems", "embedder_space", "unknown_keys"]


def unknown_keys(keys: Any, known: Any, where: str, check_id: str) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    for key in sorted(set(keys) - set(known), key=str):
        close = difflib.get_close_matches(str(key), [str(k) for k in known], n=1)
        hint = f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(sorted(known))}."
        messages.append(Error(f"{where} has an unknown key {key!r}", hint=hint, id=check_id))
    return messages


def embedder_problems(alias: str) -> list[str]:
    """What building ``RAG["EMBEDDERS"][alias]`` would refuse (empty: it would build)."""
    try:
        return option_problems(rag_settings.EMBEDDERS[alias], "embedder")
    except TypeError as exc:  # an option of the wrong type, met by the class's own check
        return [str(exc)]


def embedder_missing_key(alias: str) -> str | None:
    """The class's message when the embedder would have no API key (W005), else None."""
    config = rag_settings.EMBEDDERS[alias]
    missing_key = getattr(backend_class(config, "embedder"), "missing_key", None)
    return missing_key(backend_options(config)) if missing_key is not None else None


def embedder_space(alias: str) -> tuple[str, int] | None:
    """``(space, dimensions)`` of the embedder ``alias`` declares; None if it is unknown or broken.

    None too for an embedder class without ``space_for`` (one written to the protocol alone):
    the checks that compare spaces pass over it.
    """
    if alias not in rag_settings.EMBEDDERS or embedder_problems(alias):
        return None
    config = rag_settings.EMBEDDERS[alias]
    try:
        space_for = getattr(backend_class(config, "embedder"), "space_for", None)
    except RagError:
        return None
    if space_for is None:
        return None
    space: str = space_for(backend_options(config))
    return space, int(space.rsplit(":", 1)[1])


def configured_spaces() -> dict[str, int]:
    """``ddl.configured_spaces()`` read from the embedder classes: ``{space: dimensions}``."""
    spaces = {}
    for alias in configured_aliases():
        found = embedder_space(alias)
        if found is None:
            raise RagError(f"embedder {alias!r} cannot be built")
        spaces[found[0]] = found[1]
    return spaces
