"""The values of a ``rag_ingest`` run: its options, each outcome, the report and the progress hook."""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..types import (
    RagDocument,
    SyncResult,
)
from .pipeline import DEFAULT_BATCH_SIZE, IndexProgress

__all__ = [
    "DEFAULT_MAX_BYTES",
    "RESERVED_ID",
    "IngestOptions",
    "IngestReport",
    "SourceOutcome",
    "SourcesProgress",
]

DEFAULT_MAX_BYTES = 50 * 1024 * 1024


# A failed source whose id belongs to a registered model's rows (never recorded as a Document).
RESERVED_ID = "reserved-id"


@dataclass
class SourceOutcome:
    source: str  # the file's absolute path, or the URL
    source_id: str
    status: str  # "loaded" | "skipped" | "failed"
    reason: str = ""
    error: str = ""
    documents: list[RagDocument] = field(default_factory=list)
    content_type: str = ""
    change: str = ""  # dry runs: "add" | "update" | "unchanged" (loaded) or "record"


@dataclass(frozen=True)
class IngestOptions:
    """How ``ingest_sources`` reads sources; the ``rag_ingest`` options of the same names."""

    root: str = "."
    tags: tuple[str, ...] = ()
    tenant: str = ""
    per_page: bool = False
    batch_size: int = DEFAULT_BATCH_SIZE
    max_bytes: int = DEFAULT_MAX_BYTES
    excludes: tuple[str, ...] = ()
    follow_links: bool = False  # read files through links that lead out of the folder / root
    password: str | None = None
    passwords: Mapping[str, str] = field(default_factory=dict)  # glob of source ids -> password
    prune: bool = False
    dry_run: bool = False
    fail_fast: bool = False
    policy: Any = None  # an OutboundPolicy for URLs; None: RAG["OUTBOUND"]

    def password_for(self, source_id: str) -> str | None:
        for pattern, password in self.passwords.items():
            if fnmatch.fnmatchcase(source_id, pattern):
                return password
        return self.password


@dataclass
class IngestReport:
    """What a run did: chunk counts, per-status source counts, the problems, what was pruned."""

    sync: SyncResult = field(default_factory=SyncResult)
    counts: Counter[str] = field(default_factory=Counter)  # sources by status
    reasons: Counter[str] = field(default_factory=Counter)  # skipped and failed sources by reason
    problems: list[SourceOutcome] = field(default_factory=list)  # skipped and failed, in order
    changes: Counter[str] = field(default_factory=Counter)  # dry runs: loaded sources by change
    pruned: list[str] = field(default_factory=list)
    documents: int = 0  # documents loaded
    interrupted: bool = False  # stopped (Ctrl-C, --fail-fast) before every source was read
    prune_skipped: str = ""  # why --prune did not run

    def count(self, status: str) -> int:
        return self.counts[status]

    @property
    def failed(self) -> list[SourceOutcome]:
        return [outcome for outcome in self.problems if outcome.status == "failed"]


class SourcesProgress(IndexProgress):
    """``IndexProgress`` plus ``source(outcome)``, called once per source read, and the pruning:
    ``pruning(total)`` once the stale documents are known, ``pruned(n)`` after each batch removed."""

    def source(self, outcome: SourceOutcome) -> None:
        pass

    def pruning(self, total: int) -> None:
        pass

    def pruned(self, documents: int) -> None:
        pass
