"""rag_ingest stays in its folder: a symbolic link that leads out is skipped and recorded, unless asked.

Whoever can write into an ingested folder must not be able to make any file the ingest process
can read searchable by planting a link to it (issue 24, finding 5).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_rag.api import collection
from django_rag.ingest.jobs import create_job, plan_batches, run_batch
from django_rag.ingest.sources import IngestOptions, ingest_sources, targets
from django_rag.models import Chunk, Document

RAG = {
    "EMBEDDERS": {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}},
    "COLLECTIONS": {"docs": {"TEXT_CONFIG": "english"}},
}

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("rag")]


@pytest.fixture
def rag():
    with override_settings(RAG=RAG):
        yield


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """``root/kb`` is ingested; ``root/private`` sits beside it and ``secret/`` outside the root."""
    root = tmp_path / "root"
    (root / "kb" / "guides").mkdir(parents=True)
    (root / "kb" / "guides" / "backup.md").write_text("backups run nightly at two")
    (root / "private").mkdir()
    (root / "private" / "salaries.txt").write_text("salaries of everyone zebra")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "passwd.txt").write_text("root password hunter2 zebra")
    return root


def ingest(*args: str, root: Path, **options: Any) -> tuple[dict[str, Any], str]:
    """rag_ingest --json, and the same run's table (a second, identical run prints it)."""
    out = io.StringIO()
    call_command("rag_ingest", *args, root=str(root), json=True, stdout=out, verbosity=0, **options)
    table = io.StringIO()
    call_command("rag_ingest", *args, root=str(root), stdout=table, stderr=io.StringIO(), **options)
    return json.loads(out.getvalue()), table.getvalue()


def searchable() -> str:
    return " ".join(Chunk.objects.values_list("content", flat=True))


def test_a_link_out_of_the_folder_is_skipped_and_recorded(site: Path) -> None:
    kb = site / "kb"
    (kb / "passwd.txt").symlink_to(site.parent / "secret" / "passwd.txt")  # out of the root
    (kb / "salaries.txt").symlink_to(site / "private" / "salaries.txt")  # in the root, out of kb/
    (kb / "private").symlink_to(site / "private")  # a folder out of kb/

    summary, table = ingest(str(kb), root=site)

    assert "hunter2" not in searchable() and "salaries" not in searchable()
    assert summary["reasons"] == {"symlink-outside": 3}
    problems = {p["source_id"]: (p["status"], p["reason"]) for p in summary["problems"]}
    assert problems == {
        "kb/passwd.txt": ("skipped", "symlink-outside"),
        "kb/private": ("skipped", "symlink-outside"),
        "kb/salaries.txt": ("skipped", "symlink-outside"),
    }
    recorded = Document.objects.get(source_id="kb/passwd.txt")
    assert (recorded.status, recorded.status_reason) == ("skipped", "symlink-outside")
    assert "--follow-links" in recorded.error and str(site.parent / "secret" / "passwd.txt") in recorded.error
    assert "symlink-outside" in table and "kb/passwd.txt" in table
    assert set(Document.objects.filter(status="indexed").values_list("source_id", flat=True)) == {
        "kb/guides/backup.md"
    }


def test_follow_links_reads_through_them(site: Path) -> None:
    kb = site / "kb"
    (kb / "passwd.txt").symlink_to(site.parent / "secret" / "passwd.txt")
    (kb / "private").symlink_to(site / "private")

    summary, _ = ingest(str(kb), root=site, follow_links=True)

    assert summary["sources"] == {"loaded": 3} and summary["problems"] == []
    assert "hunter2" in searchable() and "salaries" in searchable()
    assert set(Document.objects.values_list("source_id", flat=True)) == {
        "kb/guides/backup.md",
        "kb/passwd.txt",
        "kb/private/salaries.txt",
    }


def test_links_inside_the_folder_still_work(site: Path) -> None:
    kb = site / "kb"
    (kb / "latest.md").symlink_to(kb / "guides" / "backup.md")
    (kb / "guides" / "current.md").symlink_to("backup.md")  # relative
    (kb / "guides" / "up").symlink_to("..")  # a loop stays a loop, not an escape

    summary, _ = ingest(str(kb), root=site)

    assert summary["reasons"] == {"symlink-loop": 1}
    assert set(Document.objects.filter(status="indexed").values_list("source_id", flat=True)) == {
        "kb/guides/backup.md",
        "kb/guides/current.md",
        "kb/latest.md",
    }


def test_a_path_given_alone_that_leads_out_of_the_root_is_skipped(site: Path) -> None:
    (site / "passwd.txt").symlink_to(site.parent / "secret" / "passwd.txt")
    (site / "outside").symlink_to(site.parent / "secret")

    summary, _ = ingest(str(site / "passwd.txt"), str(site / "outside"), root=site)

    assert summary["reasons"] == {"symlink-outside": 2} and "hunter2" not in searchable()
    summary, _ = ingest(str(site / "passwd.txt"), str(site / "outside"), root=site, follow_links=True)
    assert summary["sources"] == {"loaded": 2} and "hunter2" in searchable()


def test_the_library_skips_by_default_and_follows_when_asked(site: Path) -> None:
    (site / "kb" / "passwd.txt").symlink_to(site.parent / "secret" / "passwd.txt")
    kb = collection("docs")

    report = ingest_sources(kb, [str(site / "kb")], IngestOptions(root=str(site)))
    assert report.reasons == {"symlink-outside": 1} and "hunter2" not in searchable()

    report = ingest_sources(kb, [str(site / "kb")], IngestOptions(root=str(site), follow_links=True))
    assert report.count("loaded") == 2 and "hunter2" in searchable()


def test_a_link_planted_after_the_walk_is_not_read_by_a_worker(site: Path) -> None:
    # rag_ingest --async walks here, a worker reads later: the worker judges the file again.
    (site / "kb" / "late.txt").write_text("an ordinary file when walked")
    options = IngestOptions(root=str(site))
    kb = collection("docs")
    batches = plan_batches(targets([str(site / "kb")], options), 10)
    job = create_job(kb, options, batches)
    (site / "kb" / "late.txt").unlink()
    (site / "kb" / "late.txt").symlink_to(site.parent / "secret" / "passwd.txt")

    report = run_batch(str(job.pk), 0, batches[0].items)

    assert report is not None and report.reasons == {"symlink-outside": 1}
    assert "hunter2" not in searchable()
    assert Document.objects.get(source_id="kb/late.txt").status_reason == "symlink-outside"
