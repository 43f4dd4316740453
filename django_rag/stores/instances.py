"""Model instances from raw result rows, as the ORM's QuerySet builds them (search hits)."""

from __future__ import annotations

import json
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from django.db import connections
from django.db.models import DEFERRED, JSONField, Model
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.signals import post_init, pre_init

__all__ = ["RowLoader"]

_scan_json = json.JSONDecoder().scan_once  # json's C scanner, as json.loads runs it


def _load_json(value: str | None) -> Any:
    """A jsonb column's text, as ``JSONField.from_db_value`` decodes it with the default decoder.

    PostgreSQL prints jsonb as canonical JSON, so the scanner reads it whole from position 0;
    ``json.loads`` adds three Python frames and two whitespace matches around the same call.
    """
    if value is None:
        return None
    try:
        found, end = _scan_json(value, 0)
        if end == len(value):
            return found
    except (StopIteration, ValueError):
        pass
    try:
        return json.loads(value)  # not canonical after all: what the full decoder makes of it
    except json.JSONDecodeError:
        return value  # as from_db_value does


class RowLoader:
    """Builds one model's instances from its columns of a result row, as the ORM does.

    The concrete fields the statement leaves out (the chunk's embedding and tsvector) are
    deferred, and values pass through the same DB converters as in a QuerySet (JSON, ...).
    One loader serves one database alias.
    """

    def __init__(self, model: type[Model], fields: list[Any], start: int, using: str) -> None:
        connection = connections[using]
        self.model = model
        self.using = using
        self.names = [f.attname for f in fields]
        self.values = itemgetter(*range(start, start + len(fields)))
        # (position in fields, column expression, converters) of the fields that have any.
        self.converters: list[tuple[int, Any, list[Callable[..., Any]]]] = []
        for i, field_ in enumerate(fields):
            col = field_.get_col(model._meta.db_table)
            found = connection.ops.get_db_converters(col) + field_.get_db_converters(connection)
            if found:
                self.converters.append((i, col, found))
        at = {f.attname: i for i, f in enumerate(fields)}
        # For from_db: every concrete field in order, -1 picking the DEFERRED appended to the values.
        self.concrete_names = [f.attname for f in model._meta.concrete_fields]
        self.concrete = itemgetter(*[at.get(name, -1) for name in self.concrete_names])
        # Model.__init__ sets each value with setattr; for these models that only writes
        # __dict__ (no field descriptor does more on a new instance), so the instance can be
        # made as from_db makes it without the per-field loop, unless someone listens to its
        # init signals or the model overrides __init__/from_db.
        self.direct = (
            model.__init__ is Model.__init__
            and model.from_db.__func__ is Model.from_db.__func__  # type: ignore[attr-defined]
            and all(
                not hasattr(type(getattr(model, name, None)), "__set__")
                or type(getattr(model, name)) is ForeignKeyDeferredAttribute
                for name in self.names
            )
        )
        self.make = self._compile(start) if self.direct else None

    def _compile(self, start: int) -> Callable[[tuple[Any, ...], Any], Model]:
        """``make(row, connection)``: one instance, its ``__dict__`` written in one go.

        Generated once per loader, as dataclasses generate ``__init__``: the row positions and
        converters are constants, so a hit pays for no loop, list or zip of its own.
        """
        namespace: dict[str, Any] = {
            "new": object.__new__, "Model": self.model, "State": ModelState, "load_json": _load_json,
        }
        values = {i: f"row[{start + i}]" for i in range(len(self.names))}
        for i, col, found in self.converters:
            if _plain_json(col, found):
                values[i] = f"load_json({values[i]})"
                continue
            namespace[f"col{i}"] = col
            for j, converter in enumerate(found):
                namespace[f"conv{i}_{j}"] = converter
                values[i] = f"conv{i}_{j}({values[i]}, col{i}, connection)"
        items = [f"{name!r}: {values[i]}" for i, name in enumerate(self.names)]
        source = (
            "def make(row, connection):\n"
            "    state = new(State)\n"
            f"    state.__dict__ = {{'db': {self.using!r}, 'adding': False}}\n"
            "    instance = new(Model)\n"
            f"    instance.__dict__ = {{'_state': state, {', '.join(items)}}}\n"
            "    return instance\n"
        )
        exec(compile(source, f"<RowLoader {self.model._meta.label}>", "exec"), namespace)
        return namespace["make"]

    def can_skip_init(self) -> bool:
        """Whether instances may skip ``Model.__init__`` now (nobody listens to its signals)."""
        model = self.model
        return self.direct and not (pre_init.has_listeners(model) or post_init.has_listeners(model))

    def build(self, row: tuple[Any, ...], connection: Any, direct: bool) -> Any:
        """One instance from ``row``; ``direct`` (from ``can_skip_init``) skips ``Model.__init__``."""
        if direct:
            return self.make(row, connection)  # type: ignore[misc]
        values = list(self.values(row))
        for i, col, converters in self.converters:
            value = values[i]
            for converter in converters:
                value = converter(value, col, connection)
            values[i] = value
        return self.model.from_db(self.using, self.concrete_names, list(self.concrete((*values, DEFERRED))))


def _plain_json(col: Any, converters: list[Callable[..., Any]]) -> bool:
    """Whether a column's only converter is a ``JSONField``'s own, with the default decoder."""
    field_ = getattr(col, "target", None)
    return (
        type(field_) is JSONField
        and field_.decoder is None
        and converters == [field_.from_db_value]
    )
