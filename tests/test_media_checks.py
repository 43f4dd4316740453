"""System checks for register() declarations and RAG["MEDIA"] (django_rag.E100-E111)."""

from __future__ import annotations

import pytest

from django_rag.checks import check_registrations
from tests.mediaapp.models import Note, Upload


def ids(registry, model, **options) -> list[str]:
    registry.register(model, **options)
    return [message.id for message in check_registrations() if message.obj is model]


def test_the_suites_own_registrations_pass_the_checks() -> None:
    assert check_registrations() == []


def test_a_registration_needs_exactly_one_of_file_field_or_text(registry) -> None:
    assert ids(registry, Note, collection="notes") == ["django_rag.E101"]
    assert ids(registry, Upload, collection="docs", file_field="file", text="owner") == ["django_rag.E101"]


def test_file_field_must_name_a_file_field(registry) -> None:
    assert ids(registry, Upload, collection="docs", file_field="owner") == ["django_rag.E102"]


def test_text_must_name_fields_of_the_model(registry) -> None:
    assert ids(registry, Note, collection="notes", text=["title", "summary"]) == ["django_rag.E103"]


def test_the_collection_must_be_declared_in_settings(registry) -> None:
    messages = [m for m in check_registrations() if m.obj is Note]
    assert messages == []
    registry.register(Note, collection="archive", text="body")
    (message,) = [m for m in check_registrations() if m.obj is Note]
    assert (message.id, "'archive'" in message.msg) == ("django_rag.E104", True)


def test_content_types_must_have_a_loader(registry) -> None:
    options = {"collection": "docs", "file_field": "file", "content_types": ["text/plain", "video/mp4"]}
    assert ids(registry, Upload, **options) == ["django_rag.E105"]


@pytest.mark.parametrize("limit", [0, -1, "10MB"])
def test_max_bytes_must_be_a_positive_integer(registry, limit) -> None:
    assert ids(registry, Upload, collection="docs", file_field="file", max_bytes=limit) == ["django_rag.E106"]


def test_tenant_must_be_an_attribute_or_a_callable(registry) -> None:
    assert ids(registry, Note, collection="notes", text="body", tenant="org_id") == ["django_rag.E107"]


def test_tags_must_be_a_list_of_strings(registry) -> None:
    assert ids(registry, Note, collection="notes", text="body", tags="note") == ["django_rag.E108"]


def test_metadata_must_be_a_dict_or_a_callable(registry) -> None:
    assert ids(registry, Note, collection="notes", text="body", metadata=["a"]) == ["django_rag.E109"]


def test_unknown_media_settings_are_reported(settings) -> None:
    settings.RAG = {**settings.RAG, "MEDIA": {"MAX_BYTE": 10}}
    assert [message.id for message in check_registrations()] == ["django_rag.E100"]
