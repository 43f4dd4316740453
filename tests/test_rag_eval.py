"""rag_eval: self-hits dropped (BEIR's ignore_identical_ids), ingest time, configurations in one table."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_rag.evaluation import parse_configuration

pytestmark = pytest.mark.django_db

# ArguAna-like: each query is itself a corpus document (same id, same text); the answer is another.
CORPUS = [
    {"_id": "q1", "title": "", "text": "Solar panels lower household electricity bills over time."},
    {
        "_id": "d1",
        "title": "",
        "text": "Household solar panels pay back their cost through lower electricity bills.",
    },
    {"_id": "q2", "title": "", "text": "School uniforms reduce bullying among pupils."},
    {
        "_id": "d2",
        "title": "",
        "text": "Uniforms at school mean less bullying among pupils, teachers report.",
    },
    {"_id": "d3", "title": "", "text": "Trains are faster than buses on long routes."},
]
QUERIES = [{"_id": "q1", "text": CORPUS[0]["text"]}, {"_id": "q2", "text": CORPUS[2]["text"]}]


@pytest.fixture
def beir(tmp_path: Path) -> Path:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(row) for row in CORPUS))
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(row) for row in QUERIES))
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return tmp_path


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("rag_eval", *args, stdout=out, verbosity=0)
    return out.getvalue()


def row(output: str, name: str) -> list[float]:
    [line] = [line for line in output.splitlines() if line.split()[:1] == [name]]
    return [float(value) for value in line.split()[1:]]


def test_self_hits_are_dropped_by_default(beir: Path) -> None:
    output = run(str(beir), "--modes", "text")

    ndcg, recall, mrr = row(output, "text")[:3]
    assert (ndcg, recall, mrr) == (1.0, 1.0, 1.0)


def test_self_hits_count_when_kept(beir: Path) -> None:
    output = run(str(beir), "--modes", "text", "--keep-identical-ids", "--collection", "eval-kept")

    ndcg, recall, mrr = row(output, "text")[:3]
    assert mrr == 0.5  # each query's own document ranks first, its answer second
    assert ndcg < 1.0 and recall == 1.0


def test_ingest_time_and_rate_are_printed(beir: Path) -> None:
    output = run(str(beir), "--modes", "text")

    assert re.search(
        r"indexed: 5 chunks added, 0 unchanged, 5 embedded in \d+\.\d s \(\d+\.\d chunks/s\)", output
    )


def test_configurations_are_compared_in_one_table(beir: Path) -> None:
    output = run(
        str(beir),
        "--config", "plain:mode=text",
        "--config", "parents:mode=text,strategy=parent_document",
        "--config", "cut:mode=text,compress=true",
        "--config", "semantic:mode=text,chunker=semantic,semantic_threshold=0.3",
    )  # fmt: skip

    header = [line for line in output.splitlines() if line.startswith("config")]
    assert header and header[0].split() == ["config", "nDCG@10", "R@100", "MRR@10", "p50", "ms", "p95", "ms"]
    for name in ("plain", "parents", "cut", "semantic"):
        assert row(output, name)[:3] == [1.0, 1.0, 1.0]
    # The semantic chunker needs a collection of its own; the three others share one.
    assert len(re.findall(r"^collection '", output, re.MULTILINE)) == 2
    assert "collection 'eval-" in output and "-chunker-semantic-semantic_threshold-0.3'" in output


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (":mode=text", "has no name"),
        ("x:colour=blue", "unknown key 'colour'"),
        ("x:mode", "is not key=value"),
        ("x:strategy=hyde", "unknown retrieval strategy"),
        ("x:strategy=multi_query", "needs a chat model"),
        ("x:strategy=multi_query,n_queries=50", "n_queries must be an integer between 1 and 10"),
    ],
)
def test_a_bad_configuration_is_a_command_error(beir: Path, config: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        run(str(beir), "--config", config)


def test_configuration_values_are_typed() -> None:
    config = parse_configuration(
        "c:mode=hybrid,n_queries=3,min_score=0.2,compress=true,rerank=none,chunk_size=128"
    )

    assert config.search == {
        "mode": "hybrid",
        "n_queries": 3,
        "min_score": 0.2,
        "compress": True,
        "rerank": None,
    }
    assert config.index == {"chunk_size": 128}
