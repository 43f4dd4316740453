"""Embedders for the ingestion tests: the hashing embedder's space ("hashing:N"), with a twist."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from django_rag.embedders.base import Vector
from django_rag.embedders.hashing import HashingEmbedder


class PausingEmbedder(HashingEmbedder):
    """Touches ``marker`` and sleeps ``seconds`` before embedding: a worker to kill mid-ingestion."""

    def __init__(self, *, marker: str, seconds: float = 120.0, **options: Any) -> None:
        super().__init__(**options)
        self.marker = Path(marker)
        self.seconds = seconds

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        self.marker.touch()
        time.sleep(self.seconds)
        return super()._embed(texts, kind)


class RecordingEmbedder(HashingEmbedder):
    """Appends ``<pid> <sha1 of the text>`` to ``log`` for every text it embeds: who embedded what."""

    def __init__(self, *, log: str, **options: Any) -> None:
        super().__init__(**options)
        self.log = Path(log)

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        vectors = super()._embed(texts, kind)
        lines = "".join(f"{os.getpid()} {hashlib.sha1(text.encode()).hexdigest()}\n" for text in texts)
        with self.log.open("a") as file:
            file.write(lines)
        return vectors


class EditingEmbedder(HashingEmbedder):
    """Runs ``EditingEmbedder.edit`` once, as if another request saved the row mid-ingestion."""

    edit: Any = None

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        edit, EditingEmbedder.edit = EditingEmbedder.edit, None
        if edit is not None:
            edit()
        return super()._embed(texts, kind)


class LoggingEmbedder(HashingEmbedder):
    """Appends every document text it embeds to the file ``log``, one JSON line each, in any process.

    The embedder switch tests count these lines to prove a killed and restarted ``rag_reindex``
    embeds no text twice.
    """

    def __init__(self, *, log: str, **options: Any) -> None:
        super().__init__(**options)
        self.log = Path(log)

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        vectors = super()._embed(texts, kind)
        if kind == "document":
            lines = "".join(json.dumps(text) + "\n" for text in texts)
            # One O_APPEND write per call: lines of concurrent processes never interleave.
            fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
        return vectors
