"""A storage that resolves ``django.core.files.storage.storages[alias]`` on every call.

A FileField keeps the storage instance it was declared with, but the S3 tests start their
S3-compatible server (and so learn its port) after models are loaded: resolving the alias
late lets ``STORAGES`` (overridden in the test, or set from the environment in a worker) decide.
"""

from __future__ import annotations

from datetime import datetime
from typing import IO, Any

from django.core.files.base import File
from django.core.files.storage import Storage, storages
from django.utils.deconstruct import deconstructible


@deconstructible
class AliasStorage(Storage):
    def __init__(self, alias: str) -> None:
        self.alias = alias

    @property
    def target(self) -> Storage:
        return storages[self.alias]

    def _open(self, name: str, mode: str = "rb") -> File[Any]:
        return self.target.open(name, mode)

    def _save(self, name: str, content: IO[Any]) -> str:
        return self.target.save(name, content)

    def get_available_name(self, name: str, max_length: int | None = None) -> str:
        return self.target.get_available_name(name, max_length=max_length)

    def delete(self, name: str) -> None:
        self.target.delete(name)

    def exists(self, name: str) -> bool:
        return self.target.exists(name)

    def size(self, name: str) -> int:
        return self.target.size(name)

    def url(self, name: str | None) -> str:
        return self.target.url(name)

    def get_modified_time(self, name: str) -> datetime:
        return self.target.get_modified_time(name)
