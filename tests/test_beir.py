"""BEIR loading and the metrics rag_eval prints, importable without Django (benchmarks use them so)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from django_rag.beir import load_beir, ndcg_at, recall_at, reciprocal_rank_at


def test_metrics_match_their_definitions() -> None:
    judged = {"a": 1, "b": 2}
    assert ndcg_at(["b", "a"], judged) == 1.0
    expected = (1 / math.log2(3) * 2 + 1) / (2 + 1 / math.log2(3))  # a at rank 1, b at rank 2
    assert math.isclose(ndcg_at(["a", "b"], judged), expected)
    assert recall_at(["a", "x"], judged, k=100) == 0.5
    assert reciprocal_rank_at(["x", "b"], judged) == 0.5


def test_a_beir_folder_keeps_only_judged_queries(tmp_path: Path) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "T", "text": "x"}) + "\n")
    queries = [{"_id": "q1", "text": "judged"}, {"_id": "q2", "text": "not judged"}]
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    dataset = load_beir(tmp_path)
    assert (list(dataset.queries), dataset.qrels) == (["q1"], {"q1": {"d1": 1}})
    assert [doc.text for doc in dataset.documents()] == ["T\n\nx"]


def test_the_module_imports_without_django_settings() -> None:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    code = "import django_rag.beir as b; print(b.ndcg_at(['a'], {'a': 1}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.0"
