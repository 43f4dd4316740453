"""Access isolation of writes, and access that follows a change at once (grant, search, revoke, search).

Writes in one tenant never alter, move or delete another tenant's document: its row, chunks,
vectors, text index and postings are compared before and after random index and remove runs
in tenant acme, over source ids and texts that other tenants hold too. A sync result counts
only the texts acme itself did not hold (``embedded``), so it tells nothing of other tenants.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from hypothesis import event, given
from hypothesis import strategies as st

import django_rag as rag
from django_rag.exceptions import QueryError
from django_rag.ingest.switch import reembed
from django_rag.models import Chunk, Document
from tests.isolation_corpus import CORPUS, PREFIXES, index_corpus, prefix_matches, prop
from tests.mediaapp.models import Note
from tests.web_support import body, login

pytestmark = pytest.mark.django_db

ME = "acme"
OTHERS = [doc for doc in CORPUS if doc.tenant != ME]
SOURCE_IDS = sorted({doc.source_id for doc in CORPUS} | {"acme/p1", "notes"})
# Texts other tenants hold, word for word, and texts nobody holds.
TEXTS = [doc.text for doc in OTHERS[:8]] + ["backup vault", "payroll launch policy", "restore invoice"]

Op = tuple[str, Any]
index_ops = st.tuples(
    st.just("index"),
    st.lists(
        st.tuples(st.sampled_from(SOURCE_IDS), st.sampled_from(TEXTS)),
        min_size=1,
        max_size=4,
        unique_by=lambda item: item[0],
    ),
    st.lists(st.sampled_from(["public", "internal", "hr"]), max_size=2, unique=True),
)
remove_ops = st.tuples(st.just("remove"), st.sampled_from(SOURCE_IDS))
prefix_ops = st.tuples(st.just("prefix"), st.sampled_from(PREFIXES))
operations = st.lists(st.one_of(index_ops, index_ops, remove_ops, prefix_ops), min_size=1, max_size=4)


def others_state(kb: rag.KnowledgeBase) -> dict[str, list[tuple[Any, ...]]]:
    """What is stored for tenants other than acme: rows, chunks (vectors, tsvectors as text), postings."""
    documents = Document.objects.filter(collection=kb).exclude(tenant=ME).order_by("pk")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.id, c.document_id, c.tenant, c.tags, c.space, c.index, c.content, c.content_hash, "
            "c.metadata::text, c.embedding::text, c.search_vector::text FROM django_rag_chunk AS c "
            "WHERE c.collection_id = %s AND c.tenant <> %s ORDER BY c.id",
            [kb.pk, ME],
        )
        chunks = cursor.fetchall()
        cursor.execute(
            "SELECT p.chunk_id, p.term, p.tf, p.dl FROM django_rag_posting AS p "
            "JOIN django_rag_chunk AS c ON c.id = p.chunk_id "
            "WHERE c.collection_id = %s AND c.tenant <> %s ORDER BY p.chunk_id, p.term",
            [kb.pk, ME],
        )
        postings = cursor.fetchall()
    return {"documents": list(documents.values_list()), "chunks": chunks, "postings": postings}


def my_documents(kb: rag.KnowledgeBase) -> dict[str, str]:
    return {
        document.source_id: "".join(
            Chunk.objects.filter(document=document).order_by("index").values_list("content", flat=True)
        )
        for document in Document.objects.filter(collection=kb, tenant=ME)
    }


def my_hashes(kb: rag.KnowledgeBase) -> set[str]:
    return set(
        Chunk.objects.filter(collection=kb, tenant=ME, space=kb.space).values_list("content_hash", flat=True)
    )


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


WRITE_EXAMPLES = 20


@prop(WRITE_EXAMPLES)
@given(ops=operations)
def test_index_and_remove_in_one_tenant_never_touch_another_tenants_documents(ops: list[Op]) -> None:
    with transaction.atomic():
        kb = rag.collection("docs")
        if not Document.objects.filter(collection=kb).exists():
            index_corpus(kb, OTHERS)
        before = others_state(kb)
        mine: dict[str, str] = my_documents(kb)
        for op in ops:
            if op[0] == "index":
                _, items, tags = op
                held = my_hashes(kb)
                result = kb.index([rag.RagDocument(sid, text) for sid, text in items], tenant=ME, tags=tags)
                # Only texts acme did not hold are embedded: another tenant's copy is no shortcut.
                assert result.embedded == len({sha1(text) for _, text in items} - held)
                event(f"index: {'some' if result.embedded < len(items) else 'no'} vectors reused")
                mine.update(dict(items))
            elif op[0] == "remove":
                assert kb.remove(source_id=op[1], tenant=ME) == int(op[1] in mine)
                mine.pop(op[1], None)
            else:
                gone = [sid for sid in mine if prefix_matches(sid, op[1])]
                assert kb.remove(prefix=op[1], tenant=ME) == len(gone)
                for sid in gone:
                    del mine[sid]
            assert others_state(kb) == before, f"after {op}"
        assert my_documents(kb) == mine
        transaction.set_rollback(True)  # the next example starts from the same state


def test_vectors_are_still_reused_within_one_tenant() -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("a", "A sentence globex wrote first.")], tenant="globex")
    first = kb.index([rag.RagDocument("a", "A sentence globex wrote first.")], tenant=ME)
    again = kb.index([rag.RagDocument("b", "A sentence globex wrote first.")], tenant=ME)
    assert (first.embedded, again.embedded) == (1, 0)


def test_rag_ingest_prune_in_one_tenant_leaves_the_same_files_of_another(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"The text of {name}.")
    for tenant in ("acme", "globex"):
        call_command("rag_ingest", str(tmp_path), "--tenant", tenant, "--root", str(tmp_path), verbosity=0)
    (tmp_path / "b.txt").unlink()
    call_command(
        "rag_ingest", str(tmp_path), "--tenant", "acme", "--root", str(tmp_path), "--prune", verbosity=0
    )
    stored = sorted(Document.objects.values_list("tenant", "source_id"))
    assert stored == [("acme", "a.txt"), ("globex", "a.txt"), ("globex", "b.txt")]


# Grant, search, revoke, search again: access follows the change on the very next request.

SECRET = "The merger code name is bluebird and it closes in March."


def scope_by_username(request: Any) -> dict[str, Any]:
    name = request.user.get_username()
    return {"alice": {"tenant": "acme"}, "bob": {"tenant": "globex"}, "carol": {"tags": ["public"]}}[name]


@pytest.fixture
def web(settings: Any) -> None:
    settings.ROOT_URLCONF = "tests.web_urls"
    settings.RAG = {**settings.RAG, "WEB": {"SCOPE": scope_by_username, "ASK_RATE": None}}


def reach(kb: rag.KnowledgeBase, user: str, **scope: Any) -> dict[str, bool]:
    """Whether ``user`` (through the web) and ``scope`` (through the Python API) reach the secret."""
    client = login(user)
    secret = set(
        Document.objects.filter(collection=kb, chunks__content__contains="bluebird").values_list(
            "pk", flat=True
        )
    )
    query = {"q": "bluebird merger", "collection": kb.name}
    hits = kb.search(query["q"], k=10, mode="hybrid", **scope)
    results = client.get("/kb/api/search/", query).json()["results"]
    page = body(client.get("/kb/", query))
    return {
        "api": any(hit.document.pk in secret for hit in hits if hit.document is not None),
        "json": any(result["document"] in secret for result in results),
        "page": any(f"/kb/source/{pk}/" in page for pk in secret),
        "source": any(client.get(f"/kb/source/{pk}/").status_code == 200 for pk in secret),
    }


NOWHERE = {"api": False, "json": False, "page": False, "source": False}
EVERYWHERE = {"api": True, "json": True, "page": True, "source": True}


def test_a_document_whose_tags_change_is_gone_for_the_old_tag_on_the_next_request(web: None) -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("memo", SECRET)], tenant="acme", tags=["public"])
    assert reach(kb, "carol", tags=["public"]) == EVERYWHERE
    kb.index([rag.RagDocument("memo", SECRET)], tenant="acme", tags=["internal"])  # revoke
    assert reach(kb, "carol", tags=["public"]) == NOWHERE
    assert reach(kb, "alice", tenant="acme") == EVERYWHERE
    kb.index([rag.RagDocument("memo", SECRET)], tenant="acme", tags=["internal", "public"])  # grant again
    assert reach(kb, "carol", tags=["public"]) == EVERYWHERE


def test_a_document_moved_to_another_tenant_is_gone_for_the_old_one_on_the_next_request(web: None) -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("memo", SECRET)], tenant="acme")
    assert (reach(kb, "alice", tenant="acme"), reach(kb, "bob", tenant="globex")) == (EVERYWHERE, NOWHERE)
    kb.index([rag.RagDocument("memo", SECRET)], tenant="globex")  # grant globex
    kb.remove(source_id="memo", tenant="acme")  # revoke acme
    assert (reach(kb, "alice", tenant="acme"), reach(kb, "bob", tenant="globex")) == (NOWHERE, EVERYWHERE)


def test_a_registered_row_edited_into_another_tenant_is_gone_for_the_old_one_on_the_next_request(
    web: None, committed: Any
) -> None:
    notes = rag.collection("notes")
    with committed():
        note = Note.objects.create(title="Memo", body=SECRET, tenant="acme")
    assert (reach(notes, "alice", tenant="acme"), reach(notes, "bob", tenant="globex")) == (
        EVERYWHERE,
        NOWHERE,
    )
    with committed():
        note.tenant = "globex"
        note.save()
    assert (reach(notes, "alice", tenant="acme"), reach(notes, "bob", tenant="globex")) == (
        NOWHERE,
        EVERYWHERE,
    )
    with committed():
        note.tenant = "acme"
        note.save()
    assert (reach(notes, "alice", tenant="acme"), reach(notes, "bob", tenant="globex")) == (
        EVERYWHERE,
        NOWHERE,
    )


def test_a_registered_rows_source_ids_are_refused_to_every_other_writer(committed: Any) -> None:
    # A row's ingestion deletes (and, queued, moves) the documents under its source id in every
    # tenant: were globex free to index one, editing acme's row would delete or take globex's text.
    notes = rag.collection("notes")
    with committed():
        note = Note.objects.create(title="Plan", body="The launch plan for next quarter.", tenant="acme")
    row_id = f"mediaapp.note:{note.pk}"
    for source_id in (row_id, f"{row_id}#p2", "mediaapp.note:999"):
        with pytest.raises(QueryError, match="reserved for the rows of a model registered"):
            notes.index([rag.RagDocument(source_id, "Globex's own text.")], tenant="globex")
    # Only in the model's own collection: elsewhere the id is an ordinary one.
    rag.collection("docs").index([rag.RagDocument(row_id, "Globex's own text.")], tenant="globex")
    with committed():
        note.body = "The launch plan, second draft."
        note.save()
    assert sorted(Document.objects.values_list("collection__name", "tenant", "source_id")) == [
        ("docs", "globex", row_id),
        ("notes", "acme", row_id),
    ]


# What tenants of one collection share (docs/security/isolation.md)


def test_bm25_scores_of_a_tenant_move_with_another_tenants_documents_unless_collections_are_apart() -> None:
    acme_docs = [rag.RagDocument("memo", SECRET), rag.RagDocument("other", "Lunch is at noon.")]
    globex_docs = [rag.RagDocument(f"sighting-{n}", f"A bluebird seen on day {n}.") for n in range(5)]

    def score(kb: rag.KnowledgeBase) -> float:
        [hit] = kb.search("bluebird", k=1, mode="text", tenant="acme")
        return hit.score

    shared = rag.collection("docs")
    shared.index(acme_docs, tenant="acme")
    alone = score(shared)
    shared.index(globex_docs, tenant="globex")
    assert score(shared) < alone  # globex's documents made 'bluebird' commoner, for acme too

    own = rag.collection("kb-acme", create=True, text_config="english")
    own.index(acme_docs, tenant="acme")
    before = score(own)
    rag.collection("kb-globex", create=True, text_config="english").index(globex_docs, tenant="globex")
    assert score(own) == before == alone


def test_reembedding_into_a_new_space_reuses_vectors_within_each_tenant_only(settings: Any) -> None:
    kb = rag.collection("docs")
    for tenant in ("acme", "globex"):
        kb.index(
            [rag.RagDocument("a", "The same words."), rag.RagDocument("b", "The same words.")], tenant=tenant
        )
    small = {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 32}
    settings.RAG = {
        **settings.RAG,
        "EMBEDDERS": {**settings.RAG["EMBEDDERS"], "small": small},
        "COLLECTIONS": {
            **settings.RAG["COLLECTIONS"],
            "docs": {"TEXT_CONFIG": "english", "EMBEDDER": "small"},
        },
    }
    result = reembed(rag.collection("docs"))
    assert result.embedded == 2  # one text, embedded once per tenant that holds it
    assert set(Chunk.objects.values_list("tenant", "space")) == {
        ("acme", "hashing:32"),
        ("globex", "hashing:32"),
    }


def test_a_row_moved_to_another_tenant_whose_ingestion_fails_is_still_gone_for_the_old_one(
    committed: Any, registry: Any
) -> None:
    def text(note: Note) -> str:
        if note.tenant == "globex":
            raise RuntimeError("the text service is down")
        return f"{note.title}\n\n{note.body}"

    registry.unregister(Note)
    registry.register(Note, collection="notes", text=text, tenant="tenant")
    notes = rag.collection("notes")
    with committed():  # ingested inline (RAG["ASYNC"] False): no job queue in between
        note = Note.objects.create(title="Memo", body=SECRET, tenant="acme")
    assert notes.search("bluebird merger", k=3, tenant="acme")
    with committed():
        note.tenant = "globex"
        note.save()
    assert Document.objects.get(source_id=f"mediaapp.note:{note.pk}").status == Document.Status.FAILED
    assert notes.search("bluebird merger", k=3, tenant="acme") == []


def test_rag_ingest_fails_a_file_named_like_a_registered_row_alone_and_writes_nothing_under_its_id(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.txt").write_text("An ordinary file.")
    (tmp_path / "mediaapp.upload:7.txt").write_text("A file whose name is a registered row's id.")
    with pytest.raises(
        CommandError, match=r"1 source\(s\) failed: mediaapp.upload:7.txt: source id .* is reserved"
    ):
        call_command("rag_ingest", str(tmp_path), "--tenant", "globex", "--root", str(tmp_path), verbosity=0)
    assert list(Document.objects.values_list("tenant", "source_id")) == [("globex", "a.txt")]
