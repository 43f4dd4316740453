"""Model instances from raw result rows, as the ORM's QuerySet builds them (search hits)."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from django.db import connections
from django.db.models import DEFERRED, Model
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.signals import post_init, pre_init

__all__ = ["RowLoader"]


class RowLoader:
    """Builds one model's instances from its columns of a result row, as the ORM does.

    The concrete fields the statement leaves out (the chunk's embedding and tsvector) are
    deferred, and values pass through the same DB converters as in a QuerySet (JSON, ...).
    """

    def __init__(self, model: type[Model], fields: list[Any], start: int, using: str) -> None:
        connection = connections[using]
        self.model = model
        self.names = [f.attname for f in fields]
        self.values = itemgetter(*range(start, start + len(fields)))
        self.converters = []
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

    def can_skip_init(self) -> bool:
        """Whether instances may skip ``Model.__init__`` now (nobody listens to its signals)."""
        model = self.model
        return self.direct and not (pre_init.has_listeners(model) or post_init.has_listeners(model))

    def build(self, row: tuple[Any, ...], using: str, connection: Any, direct: bool) -> Any:
        values = list(self.values(row))
        for i, col, converters in self.converters:
            value = values[i]
            for converter in converters:
                value = converter(value, col, connection)
            values[i] = value
        model = self.model
        if direct:
            instance = model.__new__(model)
            instance._state = state = ModelState()
            state.adding, state.db = False, using
            instance.__dict__.update(zip(self.names, values, strict=True))
            return instance
        return model.from_db(using, self.concrete_names, list(self.concrete((*values, DEFERRED))))
