"""Checks of search arguments shared by every entry point (API, ORM querysets, commands, views).

Each raises a ``QueryError`` that names the parameter, before anything reaches the database:
a wrong type, a value out of range, or text PostgreSQL cannot store (NUL, lone surrogates).
Messages show the offending value through ``shown``, which never fails and stays short.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.db import connections

from .exceptions import QueryError

if TYPE_CHECKING:
    from .models import Collection

__all__ = [
    "FLOAT4_MAX",
    "MAX_FILTER_DEPTH",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "MAX_RRF_K",
    "check_bool",
    "check_choice",
    "check_filters",
    "check_k",
    "check_min_score",
    "check_mmr_lambda",
    "check_optional_text",
    "check_query_text",
    "check_query_vector",
    "check_rrf_k",
    "check_tags",
    "check_text",
    "check_text_search",
    "check_using",
    "check_weights",
    "shown",
    "unstorable",
]

MAX_K = 1000
MAX_QUERY_CHARS = 20_000
MAX_RRF_K = 10_000
# Deeper filters are no metadata anyone stores; the limit keeps a hostile value from exhausting the stack.
MAX_FILTER_DEPTH = 32
FLOAT4_MAX = 3.4028234663852886e38


def shown(value: Any, limit: int = 60) -> str:
    """``value`` for an error message: short, and never an error itself (``repr`` of a huge int is)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a caller's object whose __repr__ fails must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_k(k: Any, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise QueryError(f"{name} must be an integer between 1 and {MAX_K}, got {shown(k)}")
    return k


def check_rrf_k(rrf_k: Any) -> int:
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, int) or not 1 <= rrf_k <= MAX_RRF_K:
        raise QueryError(f"rrf_k must be an integer between 1 and {MAX_RRF_K}, got {shown(rrf_k)}")
    return rrf_k


def check_bool(value: Any, name: str) -> bool:
    # Truthiness would read mmr="no" as yes: only a real bool says what the caller meant.
    if not isinstance(value, bool):
        raise QueryError(f"{name} must be True or False, got {shown(value)}")
    return value


def check_choice(value: Any, name: str, choices: Sequence[str], what: str) -> str:
    """``value`` if it is one of ``choices``; ``what`` names it in the message ("search mode")."""
    if not isinstance(value, str) or value not in choices:
        raise QueryError(f"unknown {what} {shown(value)}; {name} must be one of {', '.join(choices)}")
    return value


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None if it is no number (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        return None
    return number if math.isfinite(number) else None


def check_mmr_lambda(value: Any) -> float:
    number = _number(value)
    if number is None or not 0.0 <= number <= 1.0:
        raise QueryError(f"mmr_lambda must be a number between 0 and 1, got {shown(value)}")
    return number


def check_min_score(min_score: Any, mode: str) -> float | None:
    if min_score is None:
        return None
    number = _number(min_score)
    if number is None:
        raise QueryError(f"min_score must be a finite number, got {shown(min_score)}")
    if not 0.0 <= number <= 1.0:
        raise QueryError(f"min_score is a relevance between 0 and 1 (in every mode), got {shown(min_score)}")
    return number


def check_weights(weights: Any) -> tuple[float, float]:
    message = f"weights must be a pair of non-negative numbers (vector, text), got {shown(weights)}"
    # A string or a mapping unpacks into two items too ("ab", {"v": 1, "t": 2}): only a real pair is one.
    if isinstance(weights, str | bytes | bytearray | Mapping) or not isinstance(weights, Sequence):
        raise QueryError(message)
    if len(weights) != 2:
        raise QueryError(message)
    pair = [_number(weight) for weight in weights]
    if pair[0] is None or pair[1] is None or pair[0] < 0 or pair[1] < 0:
        raise QueryError(message)
    return pair[0], pair[1]


def unstorable(text: str) -> str | None:
    """Why PostgreSQL cannot take ``text`` as a bound value, or None."""
    if "\x00" in text:
        return "a NUL character, which PostgreSQL text cannot hold"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate, which is not valid Unicode text"
    return None


def check_text(value: Any, name: str) -> str:
    """A string PostgreSQL can store (tenant, a tag, a source prefix)."""
    if not isinstance(value, str):
        raise QueryError(f"{name} must be a string, got {type(value).__name__}")
    problem = unstorable(value)
    if problem is not None:
        raise QueryError(f"{name} holds {problem}")
    return value


def check_optional_text(value: Any, name: str) -> str | None:
    return None if value is None else check_text(value, name)


def check_tags(tags: Any) -> list[str] | None:
    if tags is None:
        return None
    if isinstance(tags, str | bytes | Mapping) or not isinstance(tags, Sequence | set | frozenset):
        raise QueryError(f"tags must be a list of strings, got {type(tags).__name__}")
    if not all(isinstance(tag, str) for tag in tags):
        raise QueryError("tags must be a list of strings")
    return [check_text(tag, "tags") for tag in tags]


def check_filters(filters: Any) -> dict[str, Any] | None:
    """Metadata filters: a dict of string keys to JSON values, nested or not, that PostgreSQL can store.

    Walked without recursion (a hostile value may nest thousands of levels) and depth-limited.
    """
    if filters is None:
        return None
    if not isinstance(filters, dict):
        raise QueryError(f"filters must be a dict of metadata key -> value, got {type(filters).__name__}")
    pending: list[tuple[Any, str, int]] = [(filters, "filters", 0)]
    while pending:
        value, where, depth = pending.pop()
        if depth > MAX_FILTER_DEPTH:
            raise QueryError(f"filters nest deeper than {MAX_FILTER_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise QueryError(f"{where} keys must be strings, got {shown(key)}")
                problem = unstorable(key)
                if problem is not None:
                    raise QueryError(f"{where} has a key that holds {problem}")
                pending.append((item, f"{where}[{shown(key)}]", depth + 1))
        elif isinstance(value, list | tuple):
            pending += [(item, where, depth + 1) for item in value]
        elif isinstance(value, str):
            problem = unstorable(value)
            if problem is not None:
                raise QueryError(f"{where} holds {problem}")
        elif isinstance(value, float) and not math.isfinite(value):
            raise QueryError(f"{where} holds {value!r}, which JSON cannot represent")
        elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
            # jsonb holds any decimal, but neither JSON encoders nor other stores agree on huge ints.
            raise QueryError(f"{where} holds {shown(value)}; metadata numbers must fit in 64 bits")
        elif value is not None and not isinstance(value, str | int | float | bool):
            raise QueryError(
                f"{where} holds a {type(value).__name__}; "
                "use JSON values (string, number, bool, null, list, dict)"
            )
    return filters


def check_query_text(query: Any, name: str = "the search query") -> str:
    if not isinstance(query, str):
        raise QueryError(f"{name} must be a string, got {type(query).__name__}")
    # PostgreSQL text cannot hold NUL; it carries no meaning in a query anyway.
    query = query.replace("\x00", "")
    if not query.strip():
        raise QueryError(f"{name} is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"{name} is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
    problem = unstorable(query)
    if problem is not None:
        raise QueryError(f"{name} holds {problem}")
    return str(query)


def check_query_vector(query: Iterable[Any]) -> list[float]:
    """A caller's query vector as floats; a QueryError if cosine search cannot use it."""
    # Bytes and strings iterate as numbers or characters, a mapping as its keys, a set in no order.
    if isinstance(query, str | bytes | bytearray | memoryview | Mapping | set | frozenset):
        raise QueryError(f"a query vector must be a sequence of numbers, got {type(query).__name__}")
    try:
        items = list(query)
        # float(True) is 1.0: a list of booleans is a mistake, not a direction. (``in`` over the
        # types runs in C: a generator here cost ~60 us per 384-dim search.)
        if bool in map(type, items):
            raise TypeError("it holds booleans")
        vector = list(map(float, items))
    except (TypeError, ValueError, OverflowError) as exc:
        raise QueryError(f"a query vector must be a sequence of numbers ({exc})") from None
    if not vector:
        raise QueryError("the query vector is empty")
    # One sum finds NaN and infinities (they make it non-finite), and any() stops at the first
    # non-zero component: pgvector refuses the former, and a zero vector has no cosine.
    if not math.isfinite(sum(vector)):
        raise QueryError("the query vector holds NaN or infinite values")
    if max(vector) > FLOAT4_MAX or min(vector) < -FLOAT4_MAX:
        raise QueryError("the query vector has components beyond float4, pgvector's component type")
    if not any(vector):
        raise QueryError("the query vector is all zeros: it has no direction to compare by cosine")
    return vector


def check_using(using: Any) -> str | None:
    """A database alias of ``DATABASES`` (None: the caller's default)."""
    if using is not None and (not isinstance(using, str) or using not in connections.settings):
        raise QueryError(
            f"using must be a database alias of DATABASES ({', '.join(connections.settings)}), "
            f"got {shown(using)}"
        )
    return using


def check_text_search(collection: Collection, mode: str = "text") -> None:
    """Text and hybrid search need the collection's text index (TEXT_SEARCH, on by default)."""
    if not collection.text_search:
        raise QueryError(
            f"collection {collection.name!r} has TEXT_SEARCH off, so {mode} search has no text index to use; "
            "search with mode='vector', or set RAG['COLLECTIONS'][...]['TEXT_SEARCH'] = True "
            "(the stored chunks are indexed when the collection is next used)"
        )
