"""``RAG["WEB"]`` merged over its defaults, and the few values derived from it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..conf import DEFAULTS, web_settings
from ..exceptions import ConfigurationError

__all__ = ["WEB_DEFAULTS", "Rate", "parse_rate", "web_settings"]

WEB_DEFAULTS: dict[str, Any] = DEFAULTS["WEB"]

_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Rate:
    """``limit`` requests per ``period`` seconds."""

    limit: int
    period: int


def parse_rate(value: Any) -> Rate | None:
    """``"20/m"`` -> Rate(20, 60); ``"5/10s"`` -> Rate(5, 10); None -> no limit."""
    if value is None:
        return None
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigurationError(
            f"RAG['WEB']['ASK_RATE'] must look like '20/m' (N per s, m, h or d) or be None, got {value!r}"
        )
    count, multiplier, unit = match.groups()
    return Rate(int(count), int(multiplier or 1) * _SECONDS[unit])
