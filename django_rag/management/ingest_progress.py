"""``rag_ingest``'s live output and its end: the progress bars, the Ctrl-C handler, the JSON summaries
and the password file it reads.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_rag.ingest.sources import (
    IngestOptions,
    IngestReport,
    SourceOutcome,
    SourcesProgress,
)
from django_rag.management.output import printable
from django_rag.models import IngestJob
from django_rag.types import SyncResult

__all__ = ["Progress", "Stopper", "job_summary", "password_map", "summary"]

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is a dependency; a broken install still ingests
    tqdm = None


def password_map(path: str | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CommandError(f"--password-map {path}: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise CommandError(f'--password-map {path} must hold a JSON object of {{"GLOB": "password"}}')
    return {str(k): v for k, v in data.items()}


def job_summary(job: IngestJob) -> dict[str, Any]:
    return {
        "job": str(job.pk),
        "queue": job.queue,
        "batches": job.batches,
        "failed_batches": job.failed_batches,
        "sources": {"total": job.total, "loaded": job.loaded, "skipped": job.skipped, "failed": job.failed},
        "chunks": {
            "added": job.chunks_added,
            "removed": job.chunks_removed,
            "unchanged": job.chunks_unchanged,
        },
        "embedded": job.embedded,
        "error": job.error,
    }


def summary(report: IngestReport, options: IngestOptions, interrupted: bool) -> dict[str, Any]:
    sync: SyncResult = report.sync
    return {
        "dry_run": options.dry_run,
        "interrupted": interrupted or report.interrupted,
        "sources": dict(report.counts),
        "documents": report.documents,
        "reasons": dict(report.reasons),
        "changes": dict(report.changes),
        "chunks": {"added": sync.added, "removed": sync.removed, "unchanged": sync.unchanged},
        "embedded": sync.embedded,
        "pruned": report.pruned,
        "prune_skipped": report.prune_skipped,
        "problems": [
            {
                "source_id": o.source_id,
                "source": o.source,
                "status": o.status,
                "reason": o.reason,
                "error": o.error,
            }
            for o in report.problems
        ],
    }


class Stopper:
    """The first Ctrl-C asks the run to stop after the batch in hand; a second one stops it now."""

    def __init__(self, *, waiting: bool = False) -> None:
        self.signalled = False
        self.waiting = waiting  # --async: Ctrl-C stops the watching, never the workers
        self._previous: Any = None

    def stopped(self) -> bool:
        return self.signalled

    def __enter__(self) -> Stopper:
        # Signal handlers can only be set from the main thread (call_command may run elsewhere).
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signalled:
            raise KeyboardInterrupt
        self.signalled = True
        if not self.waiting:
            sys.stderr.write("\nstopping after the current batch (Ctrl-C again to stop now)\n")


class Progress(SourcesProgress):
    """Two tqdm bars on stderr: sources read (total counted first), then chunk texts embedded."""

    def __init__(self, command: BaseCommand, verbosity: int) -> None:
        self.command = command
        self.verbosity = verbosity
        self.sources: Any = None
        self.embedding: Any = None
        self.removing: Any = None

    def start(self, total: int) -> None:
        if tqdm is None or self.verbosity < 1:
            return
        # disable=None: no bars when stderr is not a terminal (cron logs get the table only).
        bar = {"dynamic_ncols": True, "disable": None}
        self.sources = tqdm(total=total, unit="source", desc="reading", position=0, **bar)
        self.embedding = tqdm(total=0, unit="text", desc="embedding", position=1, **bar)

    def source(self, outcome: SourceOutcome) -> None:
        if self.sources is not None:
            self.sources.update(1)
        if outcome.status != "loaded" and self.verbosity >= 2:
            sid, error = printable(outcome.source_id), printable(outcome.error)
            line = f"{outcome.status}: {sid}: {outcome.reason}: {error}"
            (self.sources.write if self.sources is not None else self.command.stderr.write)(line)

    def pruning(self, total: int) -> None:
        if tqdm is not None and self.verbosity >= 1:
            self.removing = tqdm(total=total, unit="doc", desc="pruning", dynamic_ncols=True, disable=None)

    def pruned(self, documents: int) -> None:
        if self.removing is not None:
            self.removing.update(documents)

    def chunked(self, documents: int, chunks: int, to_embed: int) -> None:
        if self.embedding is not None:
            # The total grows batch by batch: chunks are known once their documents are read.
            self.embedding.total += to_embed
            self.embedding.refresh()

    def embedded(self, texts: int) -> None:
        if self.embedding is not None:
            self.embedding.update(texts)

    def close(self) -> None:
        for bar in (self.sources, self.embedding, self.removing):
            if bar is not None:
                bar.close()
