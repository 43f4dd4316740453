"""A local cross-encoder reranker on ONNX Runtime: no torch, no network, nothing downloaded.

``MODEL_PATH`` is an exported cross-encoder (e.g. ``cross-encoder/ms-marco-MiniLM-L-6-v2``
exported with Optimum): a directory holding ``model.onnx`` (or ``onnx/model.onnx``) and
``tokenizer.json``, or an ``.onnx`` file with ``TOKENIZER_PATH``. The query and each passage are
encoded as one pair (``[CLS] query [SEP] passage [SEP]``, the longer one truncated first), and the
model's single logit per pair is the score (``ACTIVATION: "sigmoid"`` maps it to 0..1)::

    RAG = {"RERANKERS": {"default": {
        "BACKEND": "django_rag.search.crossencoder.CrossEncoderReranker",
        "MODEL_PATH": "/srv/models/ms-marco-MiniLM-L-6-v2",
    }}}

The model loads on first use and is shared by every reranker of the process that names it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends import one_per_process
from ..embedders.local import onnx_session
from ..exceptions import ConfigurationError, RerankerError
from .rerank_base import BaseReranker, OptionProblem, checked_scores

__all__ = ["CrossEncoderReranker"]

INSTALL_HINT = 'pip install "django-rag[local]"'
_PACKAGES = ("onnxruntime", "tokenizers", "numpy")
_ACTIVATIONS = ("none", "sigmoid")
_OPTIONS = frozenset(
    {"model_path", "tokenizer_path", "max_length", "batch_size", "threads", "activation", "on_error"}
)


@dataclass(frozen=True)
class _Model:
    session: Any
    inputs: frozenset[str]
    int_type: Any
    output: str


class CrossEncoderReranker(BaseReranker):
    """Scores (query, passage) pairs with an ONNX cross-encoder on the CPU.

    Options: ``MODEL_PATH`` (required), ``TOKENIZER_PATH``, ``MAX_LENGTH`` (tokens per pair,
    default 512), ``BATCH_SIZE`` (pairs per run, default 16), ``THREADS`` (ONNX Runtime intra-op
    threads), ``ACTIVATION`` ("none" or "sigmoid"), ``ON_ERROR`` ("raise" or "fallback").
    """

    def __init__(
        self,
        *,
        model_path: str | Path,
        tokenizer_path: str | Path | None = None,
        max_length: int = 512,
        batch_size: int = 16,
        threads: int | None = None,
        activation: str = "none",
        on_error: str = "raise",
    ) -> None:
        options = {"model_path": model_path, "tokenizer_path": tokenizer_path, "max_length": max_length}
        options.update(batch_size=batch_size, threads=threads, activation=activation, on_error=on_error)
        if problems := self.check_options(options):
            raise ConfigurationError(
                problems[0].message + (f" ({problems[0].hint})" if problems[0].hint else "")
            )
        self.model_file, self.tokenizer_file = _files(model_path, tokenizer_path)
        self.max_length = max_length
        self.batch_size = batch_size
        self.threads = threads
        self.activation = activation
        self.on_error = on_error

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> list[OptionProblem]:
        given = {str(key).lower(): value for key, value in options.items()}
        problems = [
            OptionProblem(
                f"CrossEncoderReranker has no option {key.upper()!r}",
                f"Its options are {', '.join(sorted(o.upper() for o in _OPTIONS))}.",
            )
            for key in sorted(set(given) - _OPTIONS - {"backend"})
        ]
        if missing := [name for name in _PACKAGES if importlib.util.find_spec(name) is None]:
            problems.append(OptionProblem(f"CrossEncoderReranker needs {', '.join(missing)}", INSTALL_HINT))
        if given.get("model_path") is None:
            problems.append(
                OptionProblem(
                    "CrossEncoderReranker needs MODEL_PATH",
                    "A directory holding model.onnx and tokenizer.json of an exported cross-encoder.",
                )
            )
        else:
            try:
                _files(given["model_path"], given.get("tokenizer_path"))
            except ConfigurationError as exc:
                problems.append(OptionProblem(str(exc)))
        for name, default, allow_none in (
            ("max_length", 512, False),
            ("batch_size", 16, False),
            ("threads", None, True),
        ):
            value = given.get(name, default)
            if value is None and allow_none:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                problems.append(
                    OptionProblem(
                        f"CrossEncoderReranker {name.upper()} must be a positive int, got {value!r}"
                    )
                )
        if given.get("activation", "none") not in _ACTIVATIONS:
            problems.append(
                OptionProblem(
                    f"CrossEncoderReranker ACTIVATION must be 'none' or 'sigmoid', "
                    f"got {given['activation']!r}"
                )
            )
        if given.get("on_error", "raise") not in ("raise", "fallback"):
            problems.append(
                OptionProblem(
                    f"CrossEncoderReranker ON_ERROR must be 'raise' or 'fallback', got {given['on_error']!r}"
                )
            )
        return problems

    def scores(self, query: str, texts: list[str], top_n: int | None) -> dict[int, float]:
        import numpy as np  # an optional dependency (the "local" extra), checked in check_options

        model = _load_model(str(self.model_file), self.threads)
        tokenizer = _load_tokenizer(str(self.tokenizer_file), self.max_length)
        encodings = tokenizer.encode_batch([(query, text) for text in texts])
        # Batches of similar lengths, each padded to its longest pair: far fewer padded positions
        # than batches in retrieval order (the attention mask keeps the scores the same).
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        values: dict[int, float] = {}
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batch = [encodings[i] for i in rows]
            width = max(len(e.ids) for e in batch)
            ids = np.zeros((len(batch), width), dtype=model.int_type)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for row, encoding in enumerate(batch):
                ids[row, : len(encoding.ids)] = encoding.ids
                mask[row, : len(encoding.ids)] = 1
                types[row, : len(encoding.ids)] = encoding.type_ids
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in model.inputs:
                feeds["token_type_ids"] = types
            try:
                logits = np.asarray(model.session.run([model.output], feeds)[0], dtype=np.float64)
            except Exception as exc:
                raise RerankerError(f"cross-encoder {self.model_file} failed: {exc}") from exc
            if logits.ndim == 2 and logits.shape[1] == 1:
                logits = logits[:, 0]
            if logits.shape != (len(batch),):
                raise RerankerError(
                    f"cross-encoder {self.model_file} returned scores of shape {logits.shape} for "
                    f"{len(batch)} pairs; expected one logit per pair (a model with a single output label)"
                )
            if self.activation == "sigmoid":
                logits = 1.0 / (1.0 + np.exp(-logits))
            values.update(zip(rows, logits.tolist(), strict=True))
        return checked_scores(
            list(values.items()), len(texts), len(texts), f"cross-encoder {self.model_file}"
        )

    def __repr__(self) -> str:
        return f"<CrossEncoderReranker {self.model_file}>"


def _files(model_path: str | Path, tokenizer_path: str | Path | None) -> tuple[Path, Path]:
    path = Path(model_path).expanduser()
    candidates = [path] if path.is_file() else [path / "model.onnx", path / "onnx" / "model.onnx"]
    model = next((c for c in candidates if c.is_file()), None)
    if model is None:
        raise ConfigurationError(
            f"CrossEncoderReranker MODEL_PATH {str(model_path)!r} holds no ONNX model (looked for "
            f"{' and '.join(str(c) for c in candidates)}); point it at an exported cross-encoder"
        )
    if tokenizer_path is not None:
        tokenizer = Path(tokenizer_path).expanduser()
        if not tokenizer.is_file():
            raise ConfigurationError(
                f"CrossEncoderReranker TOKENIZER_PATH {str(tokenizer_path)!r} is not a file"
            )
        return model, tokenizer
    # Beside the model, or one level up for the onnx/model.onnx layout of Optimum exports.
    for directory in (model.parent, model.parent.parent):
        if (directory / "tokenizer.json").is_file():
            return model, directory / "tokenizer.json"
    raise ConfigurationError(
        f"CrossEncoderReranker found no tokenizer.json beside {model}; set TOKENIZER_PATH"
    )


@one_per_process  # concurrent first searches load the model once
def _load_model(path: str, threads: int | None) -> _Model:
    # Idle threads wait without spinning, as LocalEmbedder's do by default.
    session, inputs, int_type = onnx_session(
        path, threads=threads, spin=False, backend="CrossEncoderReranker"
    )
    names = [o.name for o in session.get_outputs()]
    output = "logits" if "logits" in names else names[0]
    return _Model(session, frozenset(inputs), int_type, output)


@one_per_process
def _load_tokenizer(path: str, max_length: int) -> Any:
    from tokenizers import Tokenizer  # an optional dependency (the "local" extra)

    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:
        raise ConfigurationError(f"cannot load tokenizer {path} (check TOKENIZER_PATH): {exc}") from exc
    tokenizer.no_padding()  # batches are padded here, each to its longest pair
    # Longest first, as the models were trained and scored (sentence-transformers' CrossEncoder).
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    return tokenizer
