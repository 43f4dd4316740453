"""The embedder protocol, the hashing embedder and the settings-driven factory."""

from __future__ import annotations

import math

import pytest
from django.test import override_settings

from django_rag.embedders import Embedder, get_embedder, load_embedder
from django_rag.embedders.hashing import HashingEmbedder
from django_rag.exceptions import ConfigurationError

HASHING = "django_rag.embedders.hashing.HashingEmbedder"


def test_the_hashing_embedder_is_deterministic_unit_length_and_declares_its_space() -> None:
    embedder = HashingEmbedder(dimensions=32)
    first, second = embedder.embed_documents(["same words here", "same words here"])
    assert first == second == HashingEmbedder(dimensions=32).embed_query("same words here")
    assert len(first) == 32
    assert math.sqrt(sum(x * x for x in first)) == pytest.approx(1.0)
    assert embedder.space == "hashing:32"
    assert isinstance(embedder, Embedder)


def test_the_hashing_embedder_gives_texts_sharing_words_closer_vectors() -> None:
    embedder = HashingEmbedder(dimensions=256)
    base, near, far = embedder.embed_documents(
        ["postgres backup nightly", "nightly postgres backup job", "cats"]
    )
    cosine = lambda a, b: sum(x * y for x, y in zip(a, b, strict=True))  # noqa: E731
    assert cosine(base, near) > cosine(base, far)


def test_a_text_without_words_still_gets_a_valid_vector() -> None:
    vector = HashingEmbedder(dimensions=8).embed_query("!!!")
    assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0)


def test_batches_respect_batch_size_and_keep_order() -> None:
    calls: list[int] = []

    class Counting(HashingEmbedder):
        def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
            calls.append(len(texts))
            return super()._embed(texts, kind)

    embedder = Counting(dimensions=16, batch_size=4)
    texts = [f"text {i}" for i in range(10)]
    assert embedder.embed_documents(texts) == [HashingEmbedder(dimensions=16).embed_query(t) for t in texts]
    assert calls == [4, 4, 2]


def test_a_vector_of_the_wrong_width_names_the_setting_to_fix() -> None:
    class Liar(HashingEmbedder):
        def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
            return [[0.0] * 3 for _ in texts]

    with pytest.raises(
        ConfigurationError, match=r"declared with 16 dimensions but returned a 3-dim.*DIMENSIONS"
    ):
        Liar(dimensions=16).embed_query("x")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "BACKEND"),
        ({"BACKEND": "nowhere.Embedder"}, "cannot import"),
        ({"BACKEND": HASHING, "COLOUR": "blue"}, "unknown options"),
        ({"BACKEND": HASHING, "DIMENSIONS": 0}, "DIMENSIONS > 0"),
    ],
)
def test_bad_embedder_configs_are_configuration_errors(config: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_embedder(config)


def test_get_embedder_follows_settings_changes_and_names_unknown_aliases() -> None:
    assert get_embedder().space == "hashing:64"
    with override_settings(RAG={"EMBEDDERS": {"default": {"BACKEND": HASHING, "DIMENSIONS": 12}}}):
        assert get_embedder().space == "hashing:12"
        with pytest.raises(ConfigurationError, match="no embedder named 'other'"):
            get_embedder("other")
    assert get_embedder().space == "hashing:64"
