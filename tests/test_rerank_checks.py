"""System checks of RAG["RERANKERS"] (django_rag.search.checks): options read, nothing built."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

from django_rag.search.checks import check_rerankers


def messages(rerankers: dict[str, Any], collections: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    rag = {**settings.RAG, "RERANKERS": rerankers}
    if collections is not None:
        rag["COLLECTIONS"] = collections
    with override_settings(RAG=rag):
        return [(m.id or "", m.msg) for m in check_rerankers()]


def test_good_rerankers_pass() -> None:
    assert (
        messages(
            {
                "cohere": {"BACKEND": "django_rag.search.rerankers.CohereReranker", "API_KEY": "k"},
                "tei": {"BACKEND": "django_rag.search.rerankers.TEIReranker", "URL": "http://tei:80/rerank"},
                "fn": {"BACKEND": "django_rag.search.rerank.CallableReranker", "FUNCTION": "math.fsum"},
            },
            {"docs": {"RERANKER": "tei"}},
        )
        == []
    )


def test_a_bad_option_is_an_error_naming_the_alias() -> None:
    [(check_id, message)] = messages(
        {"tei": {"BACKEND": "django_rag.search.rerankers.TEIReranker", "BATCH_SIZE": "32"}}
    )
    assert check_id == "django_rag.E151"
    assert message == "RAG['RERANKERS']['tei']: TEIReranker BATCH_SIZE must be a positive integer, got '32'"


def test_a_missing_key_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOYAGE_API_KEY", raising=False)
    [(check_id, message)] = messages({"v": {"BACKEND": "django_rag.search.rerankers.VoyageReranker"}})
    assert check_id == "django_rag.W151" and "VOYAGE_API_KEY" in message


def test_a_model_path_that_holds_no_model_is_reported_without_loading_anything(tmp_path: Any) -> None:
    [(check_id, message)] = messages(
        {
            "ce": {
                "BACKEND": "django_rag.search.crossencoder.CrossEncoderReranker",
                "MODEL_PATH": str(tmp_path),
            }
        }
    )
    assert check_id == "django_rag.E151" and "holds no ONNX model" in message


@pytest.mark.parametrize(
    "config", [{"BACKEND": "nowhere.Reranker"}, {"MODEL": "x"}, "django_rag.search.rerankers.CohereReranker"]
)
def test_an_unusable_entry_is_e150(config: Any) -> None:
    assert [check_id for check_id, _ in messages({"bad": config})] == ["django_rag.E150"]


def test_a_collection_naming_an_undefined_reranker_is_e152() -> None:
    [(check_id, message)] = messages({}, {"docs": {"RERANKER": "cohere"}})
    assert check_id == "django_rag.E152" and "'docs' reranks with 'cohere'" in message


def test_the_check_is_registered() -> None:
    rag = {**settings.RAG, "RERANKERS": {"bad": {"BACKEND": "nowhere.Reranker"}}}
    with override_settings(RAG=rag):
        assert "django_rag.E150" in [m.id for m in run_checks()]
