"""Embedder switch: filling the new space vs indexing the same documents, and dual-write cost.

    .venv/bin/python bench/switch.py [--docs 2000] [--batch-size 64]

SciFact abstracts (one document each), hashing embedders (no model time: the figures are the
database and pipeline work a real model would add its own time to). One run, one scratch
database:

1. index ``--docs`` abstracts into a collection on embedder "old" (64 dims): documents/s;
2. change its EMBEDDER to "new" (96 dims) and time ``rag_reindex``'s fill of the new space
   (chunks copied as stored, embedded, written a batch per transaction, progress committed
   with each batch) and the flip: documents/s, and the ratio against step 1;
3. index 500 more abstracts into the collection while a switch is open (every batch embedded
   and written into both spaces) vs 500 into a second collection with no switch: the
   dual-write cost as a ratio.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from common import Timer, bench_database, load_abstracts, machine_line, setup_django

HASHING = "django_rag.embedders.hashing.HashingEmbedder"
EMBEDDERS = {
    "default": {"BACKEND": HASHING, "DIMENSIONS": 64},
    "old": {"BACKEND": HASHING, "DIMENSIONS": 64},
    "new": {"BACKEND": HASHING, "MODEL": "new", "DIMENSIONS": 96},
}


def rag(embedder: str) -> dict[str, object]:
    return {
        "EMBEDDERS": EMBEDDERS,
        "COLLECTIONS": {
            "switching": {"EMBEDDER": embedder, "TEXT_CONFIG": "english"},
            "steady": {"EMBEDDER": "old", "TEXT_CONFIG": "english"},
        },
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)
    abstracts = load_abstracts()
    extra = 500
    if len(abstracts) < args.docs + 2 * extra:
        raise SystemExit(f"only {len(abstracts)} abstracts")
    with bench_database() as db:
        setup_django(db, rag("old"))
        from django.test import override_settings

        import django_rag as django_rag_api
        from django_rag.ingest import switch

        def docs(rows: list[tuple[str, str, str]]) -> list[django_rag_api.RagDocument]:
            return [django_rag_api.RagDocument(i, text, {"title": title}) for i, title, text in rows]

        first = docs(abstracts[: args.docs])
        during = docs(abstracts[args.docs : args.docs + extra])
        steady_docs = docs(abstracts[args.docs + extra : args.docs + 2 * extra])

        kb = django_rag_api.collection("switching")
        with Timer() as index_time:
            kb.index(first, batch_size=args.batch_size)
        chunks = kb.chunks().count()
        with override_settings(RAG=rag("new")):
            kb = django_rag_api.collection("switching")
            pending = switch.get_switch(kb)
            assert pending is not None
            steady = django_rag_api.collection("steady")
            with Timer() as steady_time:
                steady.index(steady_docs, batch_size=args.batch_size)
            with Timer() as dual_time:
                kb.index(during, batch_size=args.batch_size)
            embedder = switch.target_embedder(pending, kb)
            switch.start_run(kb, using=kb.using)
            with Timer() as fill_time:
                filled = switch.fill(kb, pending.space, embedder, batch_size=args.batch_size)
            with Timer() as flip_time:
                flipped = switch.flip(kb)
            assert flipped and filled.complete
    index_rate = args.docs / index_time.seconds
    fill_rate = filled.documents / fill_time.seconds
    steady_rate = extra / steady_time.seconds
    dual_rate = extra / dual_time.seconds
    print(f"# bench/switch.py --docs {args.docs} --batch-size {args.batch_size}")
    print(f"# {machine_line()}")
    print(f"# {db.server}; hashing embedders 64 -> 96 dims; {chunks} chunks in the old space")
    rows = [
        ("index into 'old' (kb.index)", args.docs, f"{index_time.seconds:.2f}", f"{index_rate:.0f}"),
        (
            "fill 'new' (rag_reindex batches)",
            filled.documents,
            f"{fill_time.seconds:.2f}",
            f"{fill_rate:.0f}",
        ),
        ("flip (one transaction)", "-", f"{flip_time.seconds * 1000:.1f} ms", "-"),
        ("index, no switch open", extra, f"{steady_time.seconds:.2f}", f"{steady_rate:.0f}"),
        ("index during the switch (both spaces)", extra, f"{dual_time.seconds:.2f}", f"{dual_rate:.0f}"),
    ]
    print("| step | documents | seconds | documents/s |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    print(
        f"fill / index: {fill_rate / index_rate:.2f}x; "
        f"dual-write / single write: {dual_rate / steady_rate:.2f}x"
    )


if __name__ == "__main__":
    main()
