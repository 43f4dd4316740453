"""Questions per user per period, counted in Django's cache (``RAG["WEB"]["ASK_RATE"]``).

A fixed window per user (per client address when anonymous): the first question of a window
creates its counter with the window's lifetime, later ones increment it. With a cache shared
by every process (Redis, Memcached, the database cache) the limit holds across the site;
``LocMemCache`` counts per process.
"""

from __future__ import annotations

import math
import time

from django.core.cache import caches
from django.http import HttpRequest

from .conf import parse_rate, web_settings

__all__ = ["retry_after"]


def _who(request: HttpRequest) -> str:
    if request.user.is_authenticated:
        return f"user:{request.user.pk}"
    return f"addr:{request.META.get('REMOTE_ADDR', '')}"


def retry_after(request: HttpRequest, action: str = "ask") -> int | None:
    """Count one ``action`` by ``request``'s user; seconds to wait if over the limit, else None."""
    settings = web_settings()
    rate = parse_rate(settings["ASK_RATE"])
    if rate is None:
        return None
    now = time.time()
    window = int(now // rate.period)
    key = f"django_rag:rate:{action}:{_who(request)}:{window}"
    cache = caches[settings["CACHE"]]
    # add() is atomic where the backend is: only one request creates the window's counter.
    cache.add(key, 0, timeout=rate.period + 1)
    try:
        count = cache.incr(key)
    except ValueError:  # evicted between add and incr: this request opens the window again
        cache.set(key, 1, timeout=rate.period + 1)
        count = 1
    if count <= rate.limit:
        return None
    return max(1, math.ceil((window + 1) * rate.period - now))
