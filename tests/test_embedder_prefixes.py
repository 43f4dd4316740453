"""Query and document sides: INSTRUCTIONS and prefixes, and the embedding space that follows them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

import django_rag as rag
from django_rag.embedders.base import INSTRUCTIONS, load_embedder
from django_rag.embedders.local import LocalEmbedder
from django_rag.embedders.openai import OpenAIEmbedder
from django_rag.testing import HashingEmbedder, OpenAICompatibleServer

BGE = INSTRUCTIONS["bge"][0]


def test_no_prefix_by_default_so_existing_spaces_stay_the_same() -> None:
    assert HashingEmbedder(dimensions=64).space == "hashing:64"
    assert LocalEmbedder().space == "all-MiniLM-L6-v2:384"
    assert (HashingEmbedder().query_prefix, HashingEmbedder().document_prefix) == ("", "")


def test_e5_marks_both_sides() -> None:
    e5 = HashingEmbedder(dimensions=64, instructions="e5")
    plain = HashingEmbedder(dimensions=64)

    assert e5.embed_query("cats") == plain.embed_query("query: cats")
    assert e5.embed_documents(["cats"]) == plain.embed_documents(["passage: cats"])
    assert e5.space == "hashing+e5:64"


def test_bge_instructs_the_query_only() -> None:
    bge = HashingEmbedder(dimensions=64, instructions="bge")
    plain = HashingEmbedder(dimensions=64)

    assert bge.embed_query("tiny cats") == plain.embed_query(BGE + "tiny cats")
    assert bge.embed_documents(["tiny cats"]) == plain.embed_documents(["tiny cats"])
    assert bge.space == "hashing+bge:64"


def test_explicit_prefixes_win_over_the_preset_and_make_their_own_space() -> None:
    custom = HashingEmbedder(dimensions=64, instructions="e5", document_prefix="doc: ")
    other = HashingEmbedder(dimensions=64, query_prefix="query: ", document_prefix="document: ")

    assert (custom.query_prefix, custom.document_prefix) == ("query: ", "doc: ")
    assert custom.space.startswith("hashing+p") and custom.space.endswith(":64")
    assert len({custom.space, other.space, HashingEmbedder(dimensions=64, instructions="e5").space}) == 3
    # The same prefixes given either way are the same space.
    assert (
        HashingEmbedder(dimensions=64, query_prefix="query: ", document_prefix="passage: ").space
        == "hashing+e5:64"
    )


def test_a_local_model_gets_its_prefixes_and_its_space(tmp_path: object) -> None:
    e5 = LocalEmbedder(instructions="e5")
    plain = LocalEmbedder()

    assert e5.embed_query("cats") == pytest.approx(plain.embed_documents(["query: cats"])[0], abs=1e-6)
    assert e5.space == "all-MiniLM-L6-v2+e5:384" != plain.space


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(dimensions=32) as running:
        yield running


def test_an_openai_compatible_server_gets_the_prefixed_texts(server: OpenAICompatibleServer) -> None:
    embedder = OpenAIEmbedder(
        base_url=server.base_url, api_key="k", model="e5-small-v2", dimensions=32, instructions="e5"
    )

    embedder.embed_documents(["backups run nightly"])
    embedder.embed_query("when do backups run?")

    assert [r.body["input"] for r in server.requests] == [
        ["passage: backups run nightly"],
        ["query: when do backups run?"],
    ]
    assert embedder.space == "e5-small-v2+e5:32"


def test_settings_take_instructions() -> None:
    embedder = load_embedder(
        {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 16, "INSTRUCTIONS": "bge"}
    )
    assert embedder.query_prefix == BGE and embedder.space == "hashing+bge:16"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"instructions": "e6"}, r"INSTRUCTIONS must be one of \['bge', 'e5'\] or None, got 'e6'"),
        ({"query_prefix": 3}, "QUERY_PREFIX must be a string, got 3"),
    ],
)
def test_bad_prefix_options_are_configuration_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(rag.ConfigurationError, match=message):
        HashingEmbedder(dimensions=16, **options)  # type: ignore[arg-type]


@pytest.mark.django_db
def test_an_index_built_without_prefixes_is_never_searched_with_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("a", "nightly backups to tape")])
    assert kb.search("backups")

    e5 = {"default": {**settings.RAG["EMBEDDERS"]["default"], "INSTRUCTIONS": "e5"}}
    with override_settings(RAG={**settings.RAG, "EMBEDDERS": e5}):
        kb = rag.collection("docs")
        # A new space: the switch machinery of rag_reindex takes over, as for a new model.
        with pytest.raises(rag.ConfigurationError, match=r"searches space 'hashing:64'.*no embedder"):
            kb.search("backups")
    assert "EMBEDDER is now 'default' (hashing+e5:64)" in caplog.text

    # Kept under an alias of its own, the old setup keeps serving the old space until the reindex.
    both = {**e5, "previous": settings.RAG["EMBEDDERS"]["default"]}
    with override_settings(RAG={**settings.RAG, "EMBEDDERS": both}):
        assert [h.source_id for h in rag.collection("docs").search("backups")] == ["a"]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"instructions": "e5"},
        {"instructions": "bge"},
        {"query_prefix": "search_query: ", "document_prefix": "search_document: "},
        {"instructions": "e5", "document_prefix": ""},
    ],
)
def test_the_checks_name_the_same_space_as_the_built_embedder(options: dict[str, str]) -> None:
    """System checks compare index spaces without building embedders (``space_for``): a prefix
    must move that name exactly as it moves the built embedder's, or W001 would miss an index."""
    options = {"dimensions": 16, **options}
    assert HashingEmbedder.space_for(options) == HashingEmbedder(**options).space


def test_a_bad_instructions_value_is_reported_by_the_check_and_by_building() -> None:
    problems = HashingEmbedder.check_options({"dimensions": 16, "instructions": "e6"})
    assert len(problems) == 1 and "INSTRUCTIONS must be one of ['bge', 'e5']" in problems[0]
    with pytest.raises(Exception, match="INSTRUCTIONS must be one of"):
        HashingEmbedder(dimensions=16, instructions="e6")
