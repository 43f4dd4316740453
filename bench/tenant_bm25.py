"""What ``RAG["BM25"]["TENANT_STATISTICS"]`` costs against shared statistics (issue 24).

    .venv/bin/python bench/tenant_bm25.py [--tenants 10] [--queries 300] [--repeat 3]

SciFact's abstracts (5,183, ``../shared/data/scifact-train``, or ``$BENCH_SCIFACT``) are split
over ``--tenants`` tenants of one collection (round robin), with the hashing embedder (no model
time). Then, in the same run and interleaved:

- ingest: the abstracts are indexed in batches of 64 documents, each batch with the option
  on or off in turn, into two collections (chunks/s for each setting). Nothing is kept apart
  with the option on (the statistics are counted at query time), so the two should match;
  this measures that they do;
- queries: ``--queries`` SciFact queries, each searched in text mode scoped to one tenant
  (the tenant cycles), with the option off then on (the order alternates between queries),
  repeated ``--repeat`` times; p50 and p95 of each, and the ratio of the p50s.

``--tenants 1`` is the worst case for the option: one tenant holds the whole collection, so
counting its statistics reads every posting of every query term and every chunk's length.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from common import (
    SCIFACT,
    bench_database,
    checkpoint,
    load_abstracts,
    machine_line,
    percentiles,
    setup_django,
)

QUERIES = SCIFACT.parent / "queries.jsonl"  # beside the corpus ($BENCH_SCIFACT)

RAG: dict[str, Any] = {
    "EMBEDDERS": {"default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}},
    "COLLECTIONS": {
        "shared": {"TEXT_CONFIG": "english"},
        "own": {"TEXT_CONFIG": "english"},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    queries = [json.loads(line)["text"] for line in QUERIES.read_text().splitlines()][: args.queries]

    with bench_database("django_rag_tenant_bm25") as db:
        setup_django(db, RAG)
        from django.test import override_settings

        import django_rag as rag

        def option(on: bool) -> Any:
            return override_settings(RAG={**RAG, "BM25": {"TENANT_STATISTICS": on}})

        abstracts = load_abstracts()
        kbs = {False: rag.collection("shared"), True: rag.collection("own")}
        ingest = {False: [0, 0.0], True: [0, 0.0]}  # chunks, seconds
        for number, start in enumerate(range(0, len(abstracts), 64)):
            batch = abstracts[start : start + 64]
            for on in (False, True) if number % 2 == 0 else (True, False):
                for tenant in range(args.tenants):
                    docs = [
                        rag.RagDocument(sid, text, {"title": title})
                        for i, (sid, title, text) in enumerate(batch)
                        if (start + i) % args.tenants == tenant
                    ]
                    with option(on):
                        began = time.perf_counter()
                        result = kbs[on].index(docs, tenant=f"t{tenant}")
                        ingest[on][1] += time.perf_counter() - began
                    ingest[on][0] += result.added
        checkpoint(db)

        kb = kbs[False]
        timings: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeat):
            for number, query in enumerate(queries):
                tenant = f"t{number % args.tenants}"
                for on in (False, True) if number % 2 == 0 else (True, False):
                    with option(on):
                        began = time.perf_counter()
                        kb.search(query, mode="text", tenant=tenant, k=10)
                        timings[on].append(time.perf_counter() - began)

        print(machine_line())
        print(f"server: {db.server}")
        print(
            f"{len(abstracts):,} SciFact abstracts over {args.tenants} tenant(s) "
            f"(~{len(abstracts) // args.tenants:,} each), hashing embedder; "
            f"{len(queries)} queries x {args.repeat}, text mode, k=10, scoped to one tenant"
        )
        print(f"{'statistics':<12} {'ingest chunks/s':>16} {'query p50 ms':>13} {'p95 ms':>8}")
        p50s = {}
        for on in (False, True):
            chunks, seconds = ingest[on]
            p50, p95 = percentiles(timings[on])
            p50s[on] = p50
            name = "per tenant" if on else "shared"
            print(f"{name:<12} {chunks / seconds:>16,.0f} {p50:>13.2f} {p95:>8.2f}")
        print(f"per-tenant p50 / shared p50: {p50s[True] / p50s[False]:.2f}x")


if __name__ == "__main__":
    main()
