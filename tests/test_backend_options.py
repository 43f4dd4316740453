"""Backends check their own options, and the system checks ask them instead of building them.

Building an embedder may load a model or need a secret, so ``manage.py check`` never does it: it
imports the class and calls ``check_options`` / ``space_for`` / ``missing_key``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from django_rag.answer.chat import OpenAIChat
from django_rag.backends import option_problems
from django_rag.checks import check_database, check_settings
from django_rag.embedders.hashing import HashingEmbedder
from django_rag.embedders.local import LocalEmbedder
from django_rag.exceptions import ConfigurationError

BUILDS: list[dict[str, Any]] = []
RECORDING = "tests.test_backend_options.RecordingEmbedder"


class RecordingEmbedder(HashingEmbedder):
    """A hashing embedder that notes every time it is built."""

    def __init__(self, **options: Any) -> None:
        BUILDS.append(options)
        super().__init__(**options)


class ProtocolChat:
    """A chat backend written to the protocol alone: no ``check_options``."""

    def __init__(self, *, model: str = "x") -> None:
        self.model = model


@pytest.fixture
def builds() -> Iterator[list[dict[str, Any]]]:
    BUILDS.clear()
    yield BUILDS
    BUILDS.clear()


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


@pytest.mark.django_db
def test_the_checks_never_build_an_embedder(builds: list[dict[str, Any]]) -> None:
    rag = {
        "EMBEDDERS": {"default": {"BACKEND": RECORDING, "DIMENSIONS": 64}},
        "COLLECTIONS": {"docs": {"EMBEDDER": "default"}},
    }
    with override_settings(RAG=rag):
        assert check_settings() == []
        check_database(databases=["default"])
    assert builds == []


def test_an_option_the_embedder_would_refuse_is_reported_without_building_it(
    builds: list[dict[str, Any]],
) -> None:
    with override_settings(RAG={"EMBEDDERS": {"default": {"BACKEND": RECORDING, "DIMENSIONS": 0}}}):
        messages = check_settings()
    assert ids(messages) == ["django_rag.E004"]
    assert "DIMENSIONS > 0" in messages[0].msg
    assert builds == []


def test_an_unknown_embedder_option_is_named() -> None:
    problems = option_problems({"BACKEND": RECORDING, "DIMENSION": 64}, "embedder")
    assert problems == ["RecordingEmbedder got unknown options ['dimension']; check RAG['EMBEDDERS']"]


def test_the_space_is_read_from_the_options() -> None:
    assert HashingEmbedder.space_for({"dimensions": 64}) == HashingEmbedder(dimensions=64).space
    assert HashingEmbedder.space_for({}) == HashingEmbedder().space


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threads": 0}, "LocalEmbedder THREADS must be a positive int, got 0"),
        ({"spin": "yes"}, "LocalEmbedder SPIN must be True or False, got 'yes'"),
        ({"max_length": -1}, "LocalEmbedder MAX_LENGTH must be a positive int, got -1"),
    ],
)
def test_the_local_embedder_checks_what_building_it_refuses(options: dict[str, Any], message: str) -> None:
    assert LocalEmbedder.check_options(options) == [message]
    with pytest.raises(ConfigurationError, match=message.split(",")[0]):
        LocalEmbedder(**options)


def test_the_openai_chat_backend_checks_its_options_and_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert OpenAIChat.check_options({"timeout": 0, "max_tokens": 0}) == [
        "OpenAIChat needs TIMEOUT > 0",
        "OpenAIChat needs MAX_TOKENS >= 1 (or None for the model's limit)",
    ]
    message = OpenAIChat.missing_key({"model": "m"})
    assert message is not None and message == OpenAIChat(model="m").missing_key_message
    assert OpenAIChat.missing_key({"api_key": "unused"}) is None


def test_a_backend_without_check_options_is_checked_against_its_signature() -> None:
    backend = "tests.test_backend_options.ProtocolChat"
    assert option_problems({"BACKEND": backend, "MODEL": "m"}, "chat backend") == []
    [problem] = option_problems({"BACKEND": backend, "TEMPERATURE": 1}, "chat backend")
    assert (
        repr(backend) in problem and "does not accept these options" in problem and "'temperature'" in problem
    )


def test_a_local_model_path_that_holds_no_model_is_reported_at_check_time(tmp_path: Path) -> None:
    """The check finds a missing ONNX file by looking at the path, without loading a model."""
    local = {
        "BACKEND": "django_rag.embedders.local.LocalEmbedder",
        "MODEL": "bge-small-en-v1.5",
        "MODEL_PATH": str(tmp_path / "nowhere"),
    }
    with override_settings(RAG={"EMBEDDERS": {"default": local}}):
        messages = check_settings()
    assert ids(messages) == ["django_rag.E004"]
    assert "holds no ONNX model" in messages[0].msg
