"""Files, folders and URLs into documents, with a reason for everything that is skipped.

The layer under ``manage.py rag_ingest``: walk the sources, pick a loader by content type,
and report per source what was loaded, skipped (``unsupported-type``, ``too-large``,
``empty-text``) or failed (with the loader's error).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..exceptions import LoaderError, OutboundPolicyError
from ..models import Collection
from ..types import EMPTY_TEXT, TOO_LARGE, UNSUPPORTED_TYPE, RagDocument, SyncResult
from .loaders import get_loader, guess_content_type, load_bytes, load_pdf, load_web
from .pipeline import index_documents

__all__ = [
    "DEFAULT_MAX_BYTES",
    "IngestReport",
    "SourceOutcome",
    "ingest_sources",
    "iter_files",
    "load_source",
]

DEFAULT_MAX_BYTES = 50 * 1024 * 1024


@dataclass
class SourceOutcome:
    source: str
    status: str  # "loaded" | "skipped" | "failed"
    reason: str = ""
    documents: list[RagDocument] = field(default_factory=list)


@dataclass
class IngestReport:
    sync: SyncResult = field(default_factory=SyncResult)
    outcomes: list[SourceOutcome] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status == status)

    @property
    def failed(self) -> list[SourceOutcome]:
        return [outcome for outcome in self.outcomes if outcome.status == "failed"]


def iter_files(path: Path) -> Iterator[tuple[Path, str]]:
    """``(file, source_id)`` for a file, or for every file under a folder (recursive, sorted, no dotfiles).

    Files in a folder get ``<folder name>/<relative path>`` as source id, so re-ingesting the
    folder from anywhere syncs the same documents.
    """
    if path.is_dir():
        for file in sorted(path.rglob("*")):
            relative = file.relative_to(path)
            if file.is_file() and not any(part.startswith(".") for part in relative.parts):
                yield file, f"{path.resolve().name}/{relative.as_posix()}"
    else:
        yield path, path.as_posix()


def load_source(
    source: str | Path,
    *,
    source_id: str | None = None,
    per_page: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    policy: Any = None,
) -> SourceOutcome:
    """Load one file path or http(s) URL; never raises for bad content, reports it instead."""
    label = str(source)
    try:
        if isinstance(source, str) and source.startswith(("http://", "https://")):
            docs = load_web(source, policy=policy, source_id=source_id)
        else:
            path = Path(source)
            content_type = guess_content_type(path.name)
            if content_type is None or not _supported(content_type):
                return SourceOutcome(
                    label, "skipped", f"{UNSUPPORTED_TYPE} ({content_type or path.suffix or '?'})"
                )
            size = path.stat().st_size
            if size > max_bytes:
                return SourceOutcome(label, "skipped", f"{TOO_LARGE} ({size} bytes > {max_bytes})")
            data = path.read_bytes()
            sid = source_id or path.as_posix()
            meta = {"source": path.as_posix()}
            if content_type == "application/pdf" and per_page:
                docs = load_pdf(data, source_id=sid, per_page=True, metadata=meta)
            else:
                docs = load_bytes(data, content_type=content_type, source_id=sid, metadata=meta)
    except (LoaderError, OutboundPolicyError, OSError) as exc:
        return SourceOutcome(label, "failed", str(exc))
    if not docs:
        return SourceOutcome(label, "skipped", EMPTY_TEXT)
    return SourceOutcome(label, "loaded", documents=docs)


def ingest_sources(
    collection: Collection,
    sources: Iterable[str],
    *,
    tags: Iterable[str] = (),
    tenant: str = "",
    per_page: bool = False,
    batch_size: int = 64,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: Callable[[SourceOutcome], None] | None = None,
    using: str | None = None,
) -> IngestReport:
    """Load every source (files, folders, URLs) and sync what loaded into ``collection`` in batches."""
    report = IngestReport()
    pending: list[RagDocument] = []
    for source in sources:
        targets: Iterable[tuple[str | Path, str | None]]
        if source.startswith(("http://", "https://")):
            targets = [(source, None)]
        else:
            path = Path(source)
            if not path.exists():
                outcome = SourceOutcome(source, "failed", "no such file or folder")
                report.outcomes.append(outcome)
                if progress:
                    progress(outcome)
                continue
            targets = iter_files(path)
        for target, source_id in targets:
            outcome = load_source(target, source_id=source_id, per_page=per_page, max_bytes=max_bytes)
            report.outcomes.append(outcome)
            pending += outcome.documents
            if len(pending) >= batch_size:
                report.sync += index_documents(
                    collection, pending, tags=list(tags), tenant=tenant, batch_size=batch_size, using=using
                )
                pending = []
            if progress:
                progress(outcome)
    if pending:
        report.sync += index_documents(
            collection, pending, tags=list(tags), tenant=tenant, batch_size=batch_size, using=using
        )
    return report


def _supported(content_type: str) -> bool:
    return get_loader(content_type) is not None
