"""psycopg adapters for pgvector values: the binary wire format, without per-call classes."""

from __future__ import annotations

import struct
import weakref
from collections.abc import Sequence
from typing import Any

import psycopg
from django.db import connections
from pgvector.psycopg.vector import VectorBinaryDumper, register_vector_info
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types import TypeInfo

from ..exceptions import ConfigurationError

__all__ = [
    "PackedVector",
    "pack",
    "packed_dumper",
    "raw_connection",
    "register_packed_vectors",
    "vector_dumper",
    "vector_type",
]

_vector_info: weakref.WeakKeyDictionary[psycopg.Connection[Any], TypeInfo] = weakref.WeakKeyDictionary()

_dumpers: dict[int, type[VectorBinaryDumper]] = {}


def vector_dumper(oid: int) -> type[VectorBinaryDumper]:
    """pgvector's binary dumper bound to a database's ``vector`` oid (one class per oid)."""
    dumper = _dumpers.get(oid)
    if dumper is None:
        dumper = _dumpers[oid] = type("VectorDumper", (VectorBinaryDumper,), {"oid": oid})
    return dumper


class PackedVector(bytes):
    """A vector already in pgvector's binary wire format (dims, unused, big-endian float4s)."""


_packers: dict[int, struct.Struct] = {}


def pack(values: Sequence[float]) -> PackedVector:
    # One struct.pack per vector: a third of the time of pgvector.Vector(values).to_binary().
    packer = _packers.get(len(values))
    if packer is None:
        packer = _packers[len(values)] = struct.Struct(f">HH{len(values)}f")
    return PackedVector(packer.pack(len(values), 0, *values))


class _PackedVectorDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return obj  # type: ignore[no-any-return]


_packed_dumpers: dict[int, type[_PackedVectorDumper]] = {}


def packed_dumper(oid: int) -> type[Dumper]:
    """The pass-through dumper of ``PackedVector`` bound to a database's ``vector`` oid."""
    dumper = _packed_dumpers.get(oid)
    if dumper is None:
        dumper = _packed_dumpers[oid] = type("", (_PackedVectorDumper,), {"oid": oid})
    return dumper


def register_packed_vectors(cur: psycopg.Cursor[Any] | psycopg.Connection[Any], info: TypeInfo) -> None:
    """pgvector's adapters on ``cur`` (or a whole connection), then the pass-through dumper of
    ``PackedVector``.

    Registered last, it is also the dumper COPY picks for the vector type.
    """
    register_vector_info(cur, info)  # type: ignore[arg-type]  # pgvector accepts any adapters context
    cur.adapters.register_dumper(PackedVector, packed_dumper(info.oid))


def raw_connection(using: str) -> psycopg.Connection[Any]:
    wrapper = connections[using]
    wrapper.ensure_connection()
    raw: psycopg.Connection[Any] = wrapper.connection
    return raw


def vector_type(conn: psycopg.Connection[Any]) -> TypeInfo:
    info = _vector_info.get(conn)
    if info is None:
        info = TypeInfo.fetch(conn, "vector")
        if info is None:
            raise ConfigurationError(
                "the pgvector extension is not installed in this database; "
                "run `manage.py migrate django_rag` "
                "(it runs CREATE EXTENSION vector) or ask a superuser to run CREATE EXTENSION vector"
            )
        _vector_info[conn] = info
    return info
