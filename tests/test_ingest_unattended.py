"""rag_ingest as a nightly job: stable ids, a mirrored folder, resumable runs, every outcome recorded.

Embedding is counted by ``CountingEmbedder`` (the hashing embedder, remembering every text it was
sent), so "nothing re-embedded" is a count of calls, not an inference from the summary line.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest
from django.core.management import CommandError, call_command, load_command_class
from django.test import override_settings

from django_rag.embedders.hashing import HashingEmbedder
from django_rag.models import Chunk, Document

FIXTURES = Path(__file__).parent / "fixtures"


class CountingEmbedder(HashingEmbedder):
    """Every document text embedded, in order; ``interrupt_after`` sends SIGINT on that call."""

    texts: ClassVar[list[str]] = []
    calls: ClassVar[int] = 0
    interrupt_after: ClassVar[int | None] = None

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        if kind == "document":
            type(self).texts.extend(texts)
            type(self).calls += 1
            if self.calls == self.interrupt_after:
                # What Ctrl-C does: the signal arrives while the batch is being embedded.
                os.kill(os.getpid(), signal.SIGINT)
        return super()._embed(texts, kind)


COUNTING = {
    "EMBEDDERS": {"default": {"BACKEND": "tests.test_ingest_unattended.CountingEmbedder", "DIMENSIONS": 64}},
    "COLLECTIONS": {"docs": {"TEXT_CONFIG": "english", "CHUNK_SIZE": 64, "CHUNK_OVERLAP": 0}},
}


@pytest.fixture(autouse=True)
def counting():
    CountingEmbedder.texts, CountingEmbedder.calls, CountingEmbedder.interrupt_after = [], 0, None
    with override_settings(RAG=COUNTING):
        yield CountingEmbedder


def run(*args: str, root: Path, **options: Any) -> dict[str, Any]:
    """rag_ingest --json; returns the summary (a failed run raises CommandError after printing it)."""
    out = io.StringIO()
    call_command(
        "rag_ingest",
        *args,
        root=str(root),
        json=True,
        stdout=out,
        stderr=io.StringIO(),
        **{"verbosity": 0, **options},
    )
    return json.loads(out.getvalue())


def run_failing(*args: str, root: Path, **options: Any) -> tuple[dict[str, Any], CommandError]:
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command(
            "rag_ingest",
            *args,
            root=str(root),
            json=True,
            stdout=out,
            stderr=io.StringIO(),
            **{"verbosity": 0, **options},
        )
    return json.loads(out.getvalue()), raised.value


def indexed() -> set[str]:
    return set(Document.objects.filter(status="indexed").values_list("source_id", flat=True))


def paragraphs(name: str, n: int) -> str:
    return "\n\n".join(
        f"{name} paragraph {i} talks about {name} topic number {i} at some length." for i in range(n)
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "kb" / "guides").mkdir(parents=True)
    (tmp_path / "kb" / "guides" / "backup.md").write_text(paragraphs("backup", 6))
    (tmp_path / "kb" / "restore.txt").write_text(paragraphs("restore", 4))
    (tmp_path / "kb" / "upgrade.txt").write_text(paragraphs("upgrade", 3))
    return tmp_path


# --- stable ids ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_ids_are_paths_relative_to_the_root_however_the_path_is_written(site: Path, monkeypatch) -> None:
    monkeypatch.chdir(site)
    run("kb", root=site)
    first = indexed()
    for spelling in ("./kb", "kb/../kb/", str(site / "kb")):
        summary = run(spelling, root=site)
        assert summary["chunks"]["added"] == 0 and summary["embedded"] == 0
    assert indexed() == first == {"kb/guides/backup.md", "kb/restore.txt", "kb/upgrade.txt"}
    assert Document.objects.count() == 3


@pytest.mark.django_db
def test_two_folders_of_the_same_name_do_not_overwrite_each_other(tmp_path: Path) -> None:
    for parent in ("a", "b"):
        (tmp_path / parent / "docs").mkdir(parents=True)
        (tmp_path / parent / "docs" / "index.md").write_text(f"the {parent} index")
    run(str(tmp_path / "a" / "docs"), str(tmp_path / "b" / "docs"), root=tmp_path)
    assert indexed() == {"a/docs/index.md", "b/docs/index.md"}


@pytest.mark.django_db
def test_a_path_outside_the_root_is_refused_before_anything_is_read(site: Path, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"outside --root .*pass a --root that holds every path"):
        call_command("rag_ingest", str(site / "kb"), root=str(site / "kb" / "guides"), verbosity=0)
    assert Document.objects.count() == 0


# --- a mirrored folder ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_mirrored_folder_follows_adds_edits_deletes_and_renames(site: Path, counting) -> None:
    kb = site / "kb"
    run(str(kb), root=site, prune=True)
    assert indexed() == {"kb/guides/backup.md", "kb/restore.txt", "kb/upgrade.txt"}
    first = Counter(counting.texts)
    assert max(first.values()) == 1

    (kb / "new.md").write_text(paragraphs("fresh", 2))  # add
    with (kb / "restore.txt").open("a") as file:  # edit: one paragraph more
        file.write("\n\nrestore appendix about point in time recovery and its many caveats.")
    (kb / "upgrade.txt").unlink()  # delete
    (kb / "guides" / "backup.md").rename(kb / "guides" / "backups.md")  # rename
    counting.texts = []
    summary = run(str(kb), root=site, prune=True)

    assert indexed() == {"kb/guides/backups.md", "kb/restore.txt", "kb/new.md"}
    assert sorted(summary["pruned"]) == ["kb/guides/backup.md", "kb/upgrade.txt"]
    assert not Chunk.objects.filter(
        document__source_id__in=["kb/upgrade.txt", "kb/guides/backup.md"]
    ).exists()
    # Embedded again: the new file's chunks and the edited file's changed chunk, nothing else. The
    # renamed file's chunks are new rows but their vectors are reused (same texts, same tenant).
    again = set(counting.texts)
    assert again and again.isdisjoint(first)
    assert all("fresh" in text or "appendix" in text for text in again)
    # And a third run changes nothing.
    counting.texts = []
    summary = run(str(kb), root=site, prune=True)
    assert counting.texts == [] and summary["pruned"] == [] and summary["chunks"]["added"] == 0


@pytest.mark.django_db
def test_prune_never_touches_documents_from_elsewhere(site: Path) -> None:
    import django_rag as rag

    rag.collection("docs").index([rag.RagDocument("kb/notes", "added from Python, not from a file")])
    run(str(site / "kb" / "guides"), root=site)
    (site / "kb" / "restore.txt").unlink()
    summary = run(str(site / "kb" / "guides"), root=site, prune=True)  # only kb/guides is mirrored
    assert summary["pruned"] == []
    assert "kb/notes" in indexed()


@pytest.mark.django_db
def test_dry_run_reports_the_changes_and_writes_nothing(site: Path, counting) -> None:
    kb = site / "kb"
    run(str(kb), root=site)
    (kb / "upgrade.txt").unlink()
    (kb / "restore.txt").write_text("entirely new text")
    (kb / "added.md").write_text("another file")
    (kb / "data.bin").write_bytes(b"\x00\x01")
    before = list(Document.objects.values_list("source_id", "status", "content_hash").order_by("source_id"))
    counting.texts = []
    summary = run(str(kb), root=site, prune=True, dry_run=True)
    assert summary["dry_run"] is True
    assert summary["changes"] == {"add": 1, "update": 1, "unchanged": 1}
    assert summary["pruned"] == ["kb/upgrade.txt"]
    assert summary["reasons"] == {"unsupported-type": 1}
    assert counting.texts == []
    assert (
        list(Document.objects.values_list("source_id", "status", "content_hash").order_by("source_id"))
        == before
    )


@pytest.mark.django_db
def test_excluded_files_and_folders_are_not_read_and_are_pruned(site: Path) -> None:
    kb = site / "kb"
    run(str(kb), root=site)
    summary = run(str(kb), root=site, exclude=["guides", "*.txt"], prune=True)
    assert summary["sources"] == {}
    assert sorted(summary["pruned"]) == ["kb/guides/backup.md", "kb/restore.txt", "kb/upgrade.txt"]


# --- batches, resume, Ctrl-C ----------------------------------------------------------------------


@pytest.mark.django_db
def test_an_interrupted_run_stops_after_its_batch_and_resumes_without_embedding_twice(
    tmp_path: Path, counting
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(10):
        (folder / f"doc{i:02}.txt").write_text(paragraphs(f"doc{i}", 8))
    counting.interrupt_after = 2  # Ctrl-C while the second batch is embedded
    summary, error = run_failing(str(folder), root=tmp_path, batch_size=2)
    assert error.returncode == 130 and "interrupted" in str(error)
    assert summary["interrupted"] is True
    # The batch in hand was finished and committed, and nothing after it was read.
    assert len(indexed()) == 4 and summary["sources"] == {"loaded": 4}
    assert counting.calls == 2

    counting.interrupt_after = None
    summary = run(str(folder), root=tmp_path, batch_size=2)
    assert len(indexed()) == 10 and summary["interrupted"] is False
    twice = [text for text, n in Counter(counting.texts).items() if n > 1]
    assert twice == []  # 0 texts embedded twice across the two runs
    assert len(counting.texts) == Chunk.objects.count() > 20


@pytest.mark.django_db
def test_prune_does_not_run_after_an_interrupted_run(site: Path, counting) -> None:
    run(str(site / "kb"), root=site)
    (site / "kb" / "upgrade.txt").unlink()
    (site / "kb" / "restore.txt").write_text(paragraphs("changed", 3))
    counting.calls, counting.interrupt_after = 0, 1
    summary, _ = run_failing(str(site / "kb"), root=site, prune=True, batch_size=1)
    assert summary["pruned"] == [] and summary["prune_skipped"] == "the run did not read every source"
    assert "kb/upgrade.txt" in indexed()


@pytest.mark.django_db
def test_batches_are_committed_as_they_go(tmp_path: Path, counting) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(6):
        (folder / f"{i}.txt").write_text(paragraphs(f"text{i}", 2))
    seen: list[int] = []

    class Watch(CountingEmbedder):
        def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
            # Another connection would see these rows: each earlier batch is committed already.
            seen.append(Document.objects.filter(status="indexed").count())
            return super()._embed(texts, kind)

    CountingEmbedder.texts = []
    rag = {**COUNTING, "EMBEDDERS": {"default": {"BACKEND": f"{__name__}.WatchEmbedder", "DIMENSIONS": 64}}}
    globals()["WatchEmbedder"] = Watch
    with override_settings(RAG=rag):
        run(str(folder), root=tmp_path, batch_size=2)
    assert seen == [0, 2, 4]


# --- every outcome recorded -----------------------------------------------------------------------


@pytest.mark.django_db
def test_bad_inputs_are_each_recorded_with_a_reason_and_the_run_completes(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "good.txt").write_text("one good file among bad ones")
    # Tests run as root, so chmod 000 cannot make a read fail: a FIFO (reading it would block
    # forever) and a dangling symbolic link fail for real instead.
    os.mkfifo(bad / "pipe.txt")
    (bad / "dangling.md").symlink_to(bad / "gone.md")
    shutil.copy(FIXTURES / "pdf" / "invalid.pdf", bad / "broken.pdf")
    (bad / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (bad / "loop").symlink_to(bad)  # a folder that contains itself
    (bad / "self.txt").symlink_to(bad / "self.txt")  # a link to itself
    (bad / "sub").mkdir()
    (bad / "sub" / "up").symlink_to(bad)  # a loop two levels down
    (bad / "empty.md").write_text("  \n\n ")
    (bad / "big.txt").write_text("x" * 2000)
    (bad / "archive.zip").write_bytes(b"PK\x03\x04")

    summary, error = run_failing(str(bad), root=tmp_path, max_bytes=1000)
    assert "failed" in str(error) and error.returncode == 1
    recorded = {
        sid: (status, reason)
        for sid, status, reason in Document.objects.values_list("source_id", "status", "status_reason")
    }
    assert recorded == {
        "bad/good.txt": ("indexed", ""),
        "bad/pipe.txt": ("failed", "unreadable"),
        "bad/dangling.md": ("failed", "unreadable"),
        "bad/broken.pdf": ("failed", "extraction-failed"),
        "bad/image.txt": ("skipped", "binary-content"),
        "bad/loop": ("skipped", "symlink-loop"),
        "bad/self.txt": ("skipped", "symlink-loop"),
        "bad/sub/up": ("skipped", "symlink-loop"),
        "bad/empty.md": ("skipped", "empty-text"),
        "bad/big.txt": ("skipped", "too-large"),
        "bad/archive.zip": ("skipped", "unsupported-type"),
    }
    errors = dict(Document.objects.values_list("source_id", "error"))
    assert "not a regular file (a FIFO)" in errors["bad/pipe.txt"]
    assert "malformed" in errors["bad/broken.pdf"]
    assert "2000 bytes > --max-bytes 1000" in errors["bad/big.txt"]
    assert summary["sources"] == {"loaded": 1, "failed": 3, "skipped": 7}


@pytest.mark.django_db
def test_a_file_that_starts_failing_keeps_its_old_chunks_and_one_now_empty_loses_them(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.pdf").write_bytes((FIXTURES / "pdf" / "pdflatex-outline.pdf").read_bytes())
    (folder / "b.txt").write_text("text that will go away")
    run(str(folder), root=tmp_path)
    chunks = Chunk.objects.filter(document__source_id="f/a.pdf").count()
    (folder / "a.pdf").write_bytes((FIXTURES / "pdf" / "invalid.pdf").read_bytes())
    (folder / "b.txt").write_text("")
    run_failing(str(folder), root=tmp_path)
    a, b = Document.objects.get(source_id="f/a.pdf"), Document.objects.get(source_id="f/b.txt")
    assert (a.status, a.status_reason) == ("failed", "extraction-failed")
    assert Chunk.objects.filter(document=a).count() == chunks > 0  # still searchable
    assert (b.status, b.status_reason, b.chunks.count()) == ("skipped", "empty-text", 0)


@pytest.mark.django_db
def test_fail_fast_stops_at_the_first_failure(tmp_path: Path) -> None:
    folder = tmp_path / "ci"
    folder.mkdir()
    shutil.copy(FIXTURES / "pdf" / "invalid.pdf", folder / "a-broken.pdf")
    (folder / "b.txt").write_text("never read")
    summary, error = run_failing(str(folder), root=tmp_path, fail_fast=True)
    assert summary["sources"] == {"failed": 1} and error.returncode == 1
    assert not Document.objects.filter(source_id="ci/b.txt").exists()


@pytest.mark.django_db
def test_encrypted_pdfs_open_with_a_password_or_a_password_map(tmp_path: Path) -> None:
    folder = tmp_path / "secret"
    folder.mkdir()
    shutil.copy(FIXTURES / "pdf" / "libreoffice-writer-password.pdf", folder / "writer.pdf")
    shutil.copy(FIXTURES / "pdf" / "r4-aes-user-password.pdf", folder / "aes.pdf")
    summary, _ = run_failing(str(folder), root=tmp_path)
    assert summary["reasons"] == {"extraction-failed": 2}
    assert all("encrypted" in p["error"] for p in summary["problems"])

    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({"secret/writer.pdf": "openpassword", "*/aes.pdf": "asdfzxcv"}))
    summary = run(str(folder), root=tmp_path, password_map=str(passwords))
    assert summary["sources"] == {"loaded": 2}
    assert indexed() == {"secret/writer.pdf", "secret/aes.pdf"}


# Committed as the command commits them (batches of 500 records): in the test's own transaction the
# 10,000 records' advisory locks would all be held at once, most of PostgreSQL's shared lock
# table (measured: 10,000 in one transaction passed, 15,000 failed), and fail whenever other
# sessions on the server hold some too.
@pytest.mark.django_db(transaction=True)
def test_ten_thousand_empty_files_are_each_recorded_in_bounded_memory(tmp_path: Path, report) -> None:
    import time

    folder = tmp_path / "empty"
    folder.mkdir()
    for i in range(10_000):
        (folder / f"{i:05}.txt").touch()
    # The process's peak resident set, reset first (Linux: /proc/self/clear_refs), over its size then.
    Path("/proc/self/clear_refs").write_text("5")
    base = resident("VmRSS")
    started = time.perf_counter()
    summary = run(str(folder), root=tmp_path)
    seconds = time.perf_counter() - started
    peak = resident("VmHWM") - base
    assert summary["sources"] == {"skipped": 10_000} and summary["reasons"] == {"empty-text": 10_000}
    assert Document.objects.filter(status="skipped", status_reason="empty-text").count() == 10_000
    report(f"10,000 empty files: {seconds:.1f} s, peak memory {peak / 2**20:.1f} MiB over the process before")
    # What grows with the files: one small problem entry per file in the report (for --json).
    assert peak < 64 * 2**20


def resident(field: str) -> int:
    """A /proc/self/status memory figure in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")


@pytest.mark.django_db
def test_a_refused_url_is_recorded_and_the_refusal_names_the_setting(tmp_path: Path) -> None:
    summary, _ = run_failing("http://127.0.0.1:1/a", "https://127.0.0.1:1/b", root=tmp_path)
    errors = {p["source_id"]: (p["reason"], p["error"]) for p in summary["problems"]}
    assert errors["http://127.0.0.1:1/a"][0] == "outbound-refused"
    assert 'RAG["OUTBOUND"]["ALLOWED_SCHEMES"]' in errors["http://127.0.0.1:1/a"][1]
    assert 'RAG["OUTBOUND"]["ALLOW_NETWORKS"]' in errors["https://127.0.0.1:1/b"][1]
    assert Document.objects.get(source_id="https://127.0.0.1:1/b").status_reason == "outbound-refused"


def test_help_documents_the_size_limits_and_exit_status() -> None:
    command = load_command_class("django_rag", "rag_ingest")
    text = command.create_parser("manage.py", "rag_ingest").format_help()
    for needle in (
        'RAG["OUTBOUND"]["MAX_BYTES"]',
        'RAG["MEDIA"]["MAX_BYTES"]',
        "--max-bytes",
        "--prune",
        "130",
    ):
        assert needle in text
