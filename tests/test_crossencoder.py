"""The local ONNX cross-encoder, run on a tiny real ONNX model built here with the onnx package.

No cross-encoder weights ship in a package this project can install, so the model is made in the
test: a per-token weight table read through the real BERT WordPiece tokenizer (the one vendored
for all-MiniLM-L6-v2), summing the weights of the *passage* tokens only (token_type_ids 1, the
second segment of the pair). It scores passages by the words it was given, which proves the
pair encoding, the batching with padding, the input feeds and the output handling end to end.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from django.conf import settings
from django.test import override_settings
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

import django_rag as rag
from django_rag.search.crossencoder import CrossEncoderReranker
from django_rag.search.rerank import get_reranker
from django_rag.types import ChunkData, Hit

TOKENIZER = Path(rag.__file__).parent / "embedders" / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"
TEXTS = [
    "pasta recipes for the weekend",
    "the nightly backup goes to tape",
    "restore a database backup from tape",
    "billing questions and invoices",
]
WEIGHTS = {"backup": 2.0, "tape": 1.0, "restore": 0.5}


def hits_for(texts: list[str]) -> list[Hit]:
    return [
        Hit(
            chunk=ChunkData(index=0, content=t),
            document=None,
            score=1.0 - i / 10,
            vector_rank=i + 1,
            source_id=t,
        )
        for i, t in enumerate(texts)
    ]


def build_model(path: Path, weights: dict[str, float], *, labels: int = 1, with_types: bool = True) -> Path:
    """A cross-encoder-shaped ONNX graph: logits[b, labels] = sum of passage-token weights."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    table = np.zeros((tokenizer.get_vocab_size(),), dtype=np.float32)
    for word, weight in weights.items():
        table[tokenizer.token_to_id(word)] = weight
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ]
    if with_types:
        inputs.append(
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "sequence"])
        )
    gate = "token_type_ids" if with_types else "attention_mask"
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["per_token"]),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", [gate], ["gate_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["per_token", "mask_f"], ["masked"]),
        helper.make_node("Mul", ["masked", "gate_f"], ["passage"]),
        helper.make_node("ReduceSum", ["passage", "axis"], ["summed"], keepdims=0),
        helper.make_node("Unsqueeze", ["summed", "axis"], ["one"]),
        helper.make_node("Tile", ["one", "repeats"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny-cross-encoder",
        inputs,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", labels])],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis"),
            numpy_helper.from_array(np.array([1, labels], dtype=np.int64), "repeats"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path / "model.onnx"))
    shutil.copy(TOKENIZER, path / "tokenizer.json")
    return path


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return build_model(tmp_path / "tiny", WEIGHTS)


def test_it_ranks_passages_by_the_models_logits(model_dir: Path) -> None:
    ranked = CrossEncoderReranker(model_path=model_dir).rerank("how do I restore a backup?", hits_for(TEXTS))

    assert [hit.source_id for hit in ranked] == [TEXTS[2], TEXTS[1], TEXTS[0], TEXTS[3]]
    assert [hit.score for hit in ranked] == [3.5, 3.0, 0.0, 0.0]


def test_only_the_passage_segment_counts_so_the_pair_is_encoded_as_a_pair(model_dir: Path) -> None:
    # The query is full of weighted words; were it not the first segment, every passage would score.
    ranked = CrossEncoderReranker(model_path=model_dir).rerank("backup tape restore", hits_for(TEXTS))

    assert {hit.source_id: hit.score for hit in ranked}[TEXTS[0]] == 0.0


def test_batches_padded_to_their_longest_pair_give_the_same_scores(model_dir: Path) -> None:
    texts = [f"{'word ' * (i * 7)} backup" for i in range(9)] + TEXTS
    one_by_one = CrossEncoderReranker(model_path=model_dir, batch_size=1).rerank("q", hits_for(texts))
    batched = CrossEncoderReranker(model_path=model_dir, batch_size=4).rerank("q", hits_for(texts))

    assert [(h.source_id, h.score) for h in batched] == [(h.source_id, h.score) for h in one_by_one]


def test_long_passages_are_truncated_to_max_length(model_dir: Path) -> None:
    late = "filler " * 40 + "backup"
    ranked = CrossEncoderReranker(model_path=model_dir, max_length=16).rerank("q", hits_for([late, "backup"]))

    assert [(h.source_id, h.score) for h in ranked] == [("backup", 2.0), (late, 0.0)]


def test_sigmoid_activation_maps_logits_to_zero_one(model_dir: Path) -> None:
    ranked = CrossEncoderReranker(model_path=model_dir, activation="sigmoid").rerank("q", hits_for(TEXTS))

    assert ranked[0].score == pytest.approx(1 / (1 + np.exp(-3.5)))
    assert ranked[-1].score == pytest.approx(0.5)


def test_a_model_without_token_type_ids_runs(tmp_path: Path) -> None:
    path = build_model(tmp_path / "no-types", {"backup": 1.0}, with_types=False)

    ranked = CrossEncoderReranker(model_path=path).rerank("q", hits_for(TEXTS))

    assert ranked[0].source_id in {TEXTS[1], TEXTS[2]} and ranked[0].score == 1.0


def test_a_model_with_two_labels_is_a_clear_error_or_the_fallback(tmp_path: Path) -> None:
    path = build_model(tmp_path / "two", WEIGHTS, labels=2)
    hits = hits_for(TEXTS)

    with pytest.raises(rag.RerankerError, match=r"shape \(4, 2\) for 4 pairs; expected one logit per pair"):
        CrossEncoderReranker(model_path=path).rerank("q", hits)
    assert CrossEncoderReranker(model_path=path, on_error="fallback").rerank("q", hits, top_n=2) == hits[:2]


def test_an_optimum_layout_finds_the_tokenizer_one_level_up(tmp_path: Path) -> None:
    build_model(tmp_path / "export" / "onnx", WEIGHTS)
    (tmp_path / "export" / "onnx" / "tokenizer.json").rename(tmp_path / "export" / "tokenizer.json")

    reranker = CrossEncoderReranker(model_path=tmp_path / "export")

    assert reranker.tokenizer_file == tmp_path / "export" / "tokenizer.json"
    assert reranker.rerank("q", hits_for(TEXTS))[0].source_id == TEXTS[2]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs MODEL_PATH"),
        ({"MODEL_PATH": "/nowhere"}, "holds no ONNX model"),
        ({"MAX_LENGTH": 0}, "MAX_LENGTH must be a positive int"),
        ({"ACTIVATION": "softmax"}, "ACTIVATION must be 'none' or 'sigmoid'"),
        ({"MODEL": "x"}, "has no option 'MODEL'"),
    ],
)
def test_check_options_names_the_problem(model_dir: Path, options: dict[str, object], message: str) -> None:
    given = {"MODEL_PATH": str(model_dir), **options} if options != {} else {}

    assert any(message in p.message for p in CrossEncoderReranker.check_options(given))


def test_it_loads_from_settings(model_dir: Path) -> None:
    config = {"BACKEND": "django_rag.search.crossencoder.CrossEncoderReranker", "MODEL_PATH": str(model_dir)}
    with override_settings(RAG={**settings.RAG, "RERANKERS": {"local": config}}):
        reranker = get_reranker("local")

    assert isinstance(reranker, CrossEncoderReranker)
    assert reranker.rerank("backup", hits_for(TEXTS), top_n=1)[0].source_id == TEXTS[2]
