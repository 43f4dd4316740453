"""Admin writes scoped like reads (issue 24, findings 1, 2 and 6): an operator adds and changes rows
of their own tenant only, runs data-changing actions only with the change permission and inside
their scope, reads counts of their scope only, and tests retrieval only in the collections the
pages offer them."""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

import django_rag as rag
from django_rag.models import Document
from tests.mediaapp.models import Upload
from tests.web_support import set_web

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.conftest_web"]

UPLOAD_PERMISSIONS = ["add_upload", "change_upload", "view_upload", "delete_upload"]


def staff(username: str, *codenames: str) -> Client:
    user = User.objects.create_user(username, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def upload(client: Client, **fields: str) -> Any:
    data = {"file": SimpleUploadedFile("plan.txt", b"The launch plan of the zeppelin fleet."), **fields}
    return client.post("/admin/mediaapp/upload/add/", data)


def test_staff_adding_a_row_for_another_tenant_is_refused_and_nothing_is_indexed_for_it(
    web, committed
) -> None:
    alice = staff("alice", *UPLOAD_PERMISSIONS)
    with committed():
        response = upload(alice, tenant="globex", owner="")
    assert response.status_code == 200  # the form again, with the error on the tenant field
    assert "You may not choose this: it is “acme” for everything you save." in text(response)
    assert not Upload.objects.exists()
    assert not Document.objects.filter(tenant="globex").exists()
    assert not rag.collection("docs").search("zeppelin fleet", tenant="globex", mode="text")


def test_staff_naming_another_owner_is_refused(web, committed) -> None:
    alice = staff("alice", *UPLOAD_PERMISSIONS)
    with committed():
        response = upload(alice, tenant="acme", owner="bob")
    assert response.status_code == 200 and not Upload.objects.exists()


def test_staff_rows_get_their_tenant_and_owner_and_are_indexed_there(web, committed) -> None:
    alice = staff("alice", *UPLOAD_PERMISSIONS)
    with committed():
        response = upload(alice)  # a browser does not post the disabled fields
    assert response.status_code == 302
    row = Upload.objects.get()
    assert (row.tenant, row.owner) == ("acme", "alice")
    assert Document.objects.get(source_id=f"mediaapp.upload:{row.pk}").tenant == "acme"
    form = text(alice.get("/admin/mediaapp/upload/add/"))
    assert 'name="tenant" value="acme"' in form and "disabled" in form


def test_staff_cannot_open_or_move_another_tenants_row(web, committed) -> None:
    with committed():
        theirs = Upload.objects.create(
            file=SimpleUploadedFile("g.txt", b"Globex vault codes."), tenant="globex", owner="bob"
        )
    alice = staff("alice", *UPLOAD_PERMISSIONS)
    assert alice.get(f"/admin/mediaapp/upload/{theirs.pk}/change/").status_code == 302  # "does not exist"
    response = alice.post(f"/admin/mediaapp/upload/{theirs.pk}/change/", {"tenant": "acme"})
    assert response.status_code == 302
    assert Upload.objects.get(pk=theirs.pk).tenant == "globex"
    response = alice.post(
        "/admin/mediaapp/upload/",
        {"action": "delete_selected", "_selected_action": [theirs.pk], "post": "yes"},
    )
    assert Upload.objects.filter(pk=theirs.pk).exists()


def test_superusers_choose_any_tenant(web, committed) -> None:
    root = Client()
    root.force_login(User.objects.create_superuser("root", password="x"))
    with committed():
        response = upload(root, tenant="globex", owner="bob")
    assert response.status_code == 302
    assert Upload.objects.get().tenant == "globex"


def _uploads(committed: Any) -> dict[str, Upload]:
    rows = {}
    with committed():
        for tenant in ("acme", "globex"):
            rows[tenant] = Upload.objects.create(
                file=SimpleUploadedFile(f"{tenant}.txt", f"{tenant} snapshots.".encode()), tenant=tenant
            )
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("acme/loose", "Acme loose text.")], tenant="acme")
    kb.index([rag.RagDocument(f"globex/{n}", "Globex loose text.") for n in range(3)], tenant="globex")
    return rows


def reindex_collections(client: Client) -> Any:
    kb = rag.collection("docs")
    return client.post(
        "/admin/django_rag/collection/",
        {"action": "reindex_collections", "_selected_action": [kb.pk]},
        follow=True,
    )


def test_reindexing_collections_needs_the_change_permission(web, committed, monkeypatch) -> None:
    _uploads(committed)
    scheduled: list[Any] = []
    monkeypatch.setattr("django_rag.web.actions.schedule_ingest", lambda model, pk: scheduled.append(pk))
    viewer = staff("alice", "view_collection")
    response = reindex_collections(viewer)
    assert "scheduled" not in text(response) and not scheduled
    listing = text(viewer.get("/admin/django_rag/collection/"))
    assert "reindex_collections" not in listing  # not even offered


def test_reindexing_collections_stays_in_the_operators_scope_and_counts_only_it(
    web, committed, monkeypatch
) -> None:
    rows = _uploads(committed)
    scheduled: list[Any] = []
    monkeypatch.setattr("django_rag.web.actions.schedule_ingest", lambda model, pk: scheduled.append(pk))
    alice = staff("alice", "view_collection", "change_collection")
    page = text(reindex_collections(alice))
    assert [int(pk) for pk in scheduled] == [rows["acme"].pk]  # globex's row is not queued
    # acme holds 2 documents: its upload and one loose text; globex's 4 are not counted.
    assert "Docs: 1 documents scheduled from their rows, 1 from other sources left as they are." in page


def test_document_actions_need_the_change_permission_and_stay_in_scope(web, committed, monkeypatch) -> None:
    rows = _uploads(committed)
    scheduled: list[Any] = []
    monkeypatch.setattr("django_rag.web.actions.schedule_ingest", lambda model, pk: scheduled.append(pk))
    every = list(Document.objects.values_list("pk", flat=True))
    alice = staff("alice", "view_document")
    alice.post("/admin/django_rag/document/", {"action": "reindex_selected", "_selected_action": every})
    assert not scheduled  # the view permission is not enough
    User.objects.get(username="alice").user_permissions.add(
        Permission.objects.get(codename="change_document")
    )
    page = text(
        alice.post(
            "/admin/django_rag/document/",
            {"action": "reindex_selected", "_selected_action": every},
            follow=True,
        )
    )
    assert [int(pk) for pk in scheduled] == [rows["acme"].pk]
    assert "1 item scheduled for re-indexing." in page
    assert "1 document did not come from a registered model" in page


def test_the_document_page_stays_read_only_for_operators_with_the_change_permission(web, committed) -> None:
    rows = _uploads(committed)
    document = Document.objects.get(source_id=f"mediaapp.upload:{rows['acme'].pk}")
    alice = staff("alice", "view_document", "change_document")
    page = text(alice.get(f"/admin/django_rag/document/{document.pk}/change/"))
    assert 'name="_save"' not in page
    response = alice.post(f"/admin/django_rag/document/{document.pk}/change/", {"tenant": "globex"})
    assert response.status_code == 403
    assert Document.objects.get(pk=document.pk).tenant == "acme"


def test_operators_with_a_scope_cannot_edit_or_delete_a_shared_collection(web) -> None:
    kb = rag.collection("docs")
    alice = staff("alice", "view_collection", "change_collection", "delete_collection")
    assert 'name="_save"' not in text(alice.get(f"/admin/django_rag/collection/{kb.pk}/change/"))
    assert alice.post(f"/admin/django_rag/collection/{kb.pk}/delete/", {"post": "yes"}).status_code == 403
    assert alice.get("/admin/django_rag/collection/add/").status_code == 403


def test_the_retrieval_test_offers_staff_only_the_collections_the_pages_offer(web, settings) -> None:
    rag.collection("docs").index([rag.RagDocument("a", "Snapshots kept a month.")], tenant="acme")
    notes = rag.collection("notes")
    set_web(settings, COLLECTIONS=["docs"])
    alice = staff("alice", "view_collection")
    params = {"q": "snapshots", "mode": "text", "k": 3, "vector_weight": 1, "text_weight": 1, "rrf_k": 60}
    assert alice.get(f"/admin/django_rag/collection/{notes.pk}/retrieval-test/", params).status_code == 404
    docs = rag.collection("docs")
    assert alice.get(f"/admin/django_rag/collection/{docs.pk}/retrieval-test/", params).status_code == 200
    listing = text(alice.get("/admin/django_rag/collection/"))
    assert f"/{docs.pk}/retrieval-test/" in listing and f"/{notes.pk}/retrieval-test/" not in listing
    root = Client()
    root.force_login(User.objects.create_superuser("root", password="x"))
    assert root.get(f"/admin/django_rag/collection/{notes.pk}/retrieval-test/", params).status_code == 200
