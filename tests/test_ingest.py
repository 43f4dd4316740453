"""rag_ingest and the guarantees of a sync: nothing half-written, concurrent syncs serialize."""

from __future__ import annotations

import io
import shutil
import threading
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import override_settings

import django_rag as rag
from django_rag.embedders.hashing import HashingEmbedder
from django_rag.exceptions import EmbedderError
from django_rag.models import Chunk, Document

FIXTURES = Path(__file__).parent / "fixtures"


def ingest(*args: str, **options: object) -> str:
    """rag_ingest with ids relative to the folder holding the first path (its parent)."""
    out = io.StringIO()
    options.setdefault("root", str(Path(args[0]).parent))
    call_command("rag_ingest", *args, stdout=out, stderr=io.StringIO(), verbosity=0, **options)
    return out.getvalue()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "backup.md").write_text("# Backups\n\nRun pg_dump every night.\n")
    (root / "page.html").write_text(
        "<html><title>T</title><body><p>Restore with pg_restore.</p></body></html>"
    )
    (root / "blank.txt").write_text("   \n")
    (root / "data.bin").write_bytes(b"\x00\x01")
    (root / ".hidden.md").write_text("never loaded")
    shutil.copy(FIXTURES / "pdf" / "pdflatex-outline.pdf", root / "outline.pdf")
    return root


@pytest.mark.django_db
def test_a_folder_is_ingested_recursively_with_a_summary_line(folder: Path) -> None:
    summary = ingest(str(folder))
    assert "3 sources loaded into 3 documents" in summary and "2 skipped, 0 failed" in summary
    assert set(Document.objects.filter(status="indexed").values_list("source_id", flat=True)) == {
        "kb/guides/backup.md",
        "kb/page.html",
        "kb/outline.pdf",
    }
    # The skips are recorded, with their reasons, for the admin.
    assert set(Document.objects.filter(status="skipped").values_list("source_id", "status_reason")) == {
        ("kb/blank.txt", "empty-text"),
        ("kb/data.bin", "unsupported-type"),
    }
    assert rag.collection("docs").search("pg_restore", mode="text")[0].source_id == "kb/page.html"


@pytest.mark.django_db
def test_ingesting_again_embeds_nothing(folder: Path) -> None:
    ingest(str(folder))
    chunks = Chunk.objects.count()
    summary = ingest(str(folder))
    assert "added 0, removed 0" in summary and "(0 embedded)" in summary
    assert Chunk.objects.count() == chunks


@pytest.mark.django_db
def test_per_page_makes_one_document_per_pdf_page(folder: Path) -> None:
    ingest(str(folder / "outline.pdf"), per_page=True, tags="manual", tenant="acme")
    pages = Document.objects.order_by("source_id")
    assert [d.source_id.rsplit("#", 1)[1] for d in pages] == ["p1", "p2", "p3", "p4"]
    assert all(d.tags == ["manual"] and d.tenant == "acme" and d.page_count == 4 for d in pages)


@pytest.mark.django_db
def test_skips_and_failures_are_reported_and_failures_exit_non_zero(folder: Path) -> None:
    shutil.copy(FIXTURES / "pdf" / "invalid.pdf", folder / "broken.pdf")
    with pytest.raises(CommandError, match=r"1 source\(s\) failed: .*broken.pdf.*malformed"):
        ingest(str(folder))
    # The good sources were still indexed.
    assert Document.objects.filter(source_id="kb/guides/backup.md").exists()


@pytest.mark.django_db
def test_a_missing_path_and_an_unknown_collection_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"1 source.*failed: nope: no such file or folder"):
        ingest(str(tmp_path / "nope"))
    with pytest.raises(CommandError, match="unknown collection 'zzz'"):
        ingest(str(tmp_path), collection="zzz")


class FailingEmbedder(HashingEmbedder):
    """Fails like an exhausted OpenAI retry budget."""

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        raise EmbedderError("429 Too Many Requests after 5 attempts")


@pytest.mark.django_db
def test_a_failed_embedding_leaves_the_stored_version_intact() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("doc", "First paragraph.\n\nSecond paragraph.")])
    before = list(Chunk.objects.values_list("content", "content_hash"))
    failing = {"default": {"BACKEND": "tests.test_ingest.FailingEmbedder", "DIMENSIONS": 64}}
    with (
        override_settings(RAG={"EMBEDDERS": failing, "COLLECTIONS": {"docs": {}}}),
        pytest.raises(EmbedderError),
    ):
        rag.collection("docs").index([rag.RagDocument("doc", "First paragraph.\n\nA new second paragraph.")])
    assert list(Chunk.objects.values_list("content", "content_hash")) == before
    assert Document.objects.get(source_id="doc").status == "indexed"


class SlowEmbedder(HashingEmbedder):
    """Holds both writers inside the window between embedding and writing."""

    barrier = threading.Barrier(2, timeout=30)

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        vectors = super()._embed(texts, kind)
        if kind == "document":
            self.barrier.wait()
        return vectors


@pytest.mark.django_db(transaction=True)
def test_concurrent_syncs_of_one_document_serialize_to_one_complete_version() -> None:
    slow = {"default": {"BACKEND": "tests.test_ingest.SlowEmbedder", "DIMENSIONS": 64}}
    versions = {
        "a": "\n\n".join(f"Version A paragraph {i} with its own words." for i in range(30)),
        "b": "\n\n".join(f"Version B paragraph {i} says something else." for i in range(20)),
    }
    errors: list[BaseException] = []

    def sync(text: str) -> None:
        try:
            rag.collection("notes").index([rag.RagDocument("shared", text)])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    with override_settings(
        RAG={"EMBEDDERS": slow, "COLLECTIONS": {"notes": {"CHUNK_SIZE": 16, "CHUNK_OVERLAP": 0}}}
    ):
        rag.collection("notes")
        threads = [threading.Thread(target=sync, args=(text,)) for text in versions.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert errors == []
    contents = list(Chunk.objects.order_by("index").values_list("content", flat=True))
    winner = "A" if "Version A" in contents[0] else "B"
    assert all(f"Version {winner}" in content for content in contents)
    assert len(contents) == (30 if winner == "A" else 20)
    assert len(contents) == len(set(Chunk.objects.values_list("index", flat=True)))
    assert Document.objects.count() == 1
