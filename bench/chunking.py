"""Chunking throughput and peak memory for 1, 10 and 100 MB of text, with the local tokenizer.

    .venv/bin/python bench/chunking.py [--sizes 1,10,100] [--peer-mb 1]

The chunker is ``django_rag.ingest.chunking.iter_chunks`` as the pipeline calls it for a
collection of the local embedder (all-MiniLM-L6-v2's WordPiece tokenizer, 256-token chunks,
32 tokens of overlap): ``token_counter=count_tokens``, ``batch_counter=count_tokens_batch``,
``additive=tokens_add_up``. The text is SciFact abstracts (``common.load_abstracts``) cut into
sentences and dealt, seeded, into paragraphs of 1-8 sentences until the size is reached: new
paragraphs and chunks throughout, in the corpus's own vocabulary (a large collection of one
field reuses its words, which the counter remembers: its cache starts empty in every run).

Every size runs in a process of its own. Seconds are wall-clock; CPU seconds are the
process's (user + system, all its threads), the fairer figure on a machine whose cores other
work shares. Memory is the process's peak resident set (VmHWM, reset through
/proc/self/clear_refs once the text is built and the tokenizer loaded) less the resident set
at that moment: what chunking adds on top of the text. Two ways to consume:

- streamed: chunks are counted and dropped as they come (the chunker's own memory);
- kept: every chunk is kept in a list (what a caller holding one document's chunks pays).

"sha256" (kept rows only, taken after the clock stops): the first hex digits of a SHA-256 over
every chunk's ``char_start,char_end,token_count,content_hash;``, which a change to the chunker
that must not change its chunks must leave as it is (10 MB: ``eed37e15``, 100 MB: ``78a90a26``).

For scale, the tokenizer alone: ``tokenizers``' ``encode_batch`` over every paragraph once (64
a call), what counting the text with the tokenizer costs before any splitting.

Peer, in the same run: the chunker of the commit before this one (``git show
d7ceaa1:django_rag/ingest/chunking.py``), which counts the whole text first, on ``--peer-mb`` MB
(it needs about 230 MB and 7 s per MB of text; 100 MB would need 23 GB).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, load_abstracts, machine_line

PEER_COMMIT = "d7ceaa1"
SIZE, OVERLAP = 256, 32


def make_text(megabytes: float, seed: int = 7) -> str:
    sentences = [s for _, _, text in load_abstracts() for s in re.split(r"(?<=[.!?])\s+", text) if s]
    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    paragraphs: list[str] = []
    size = 0
    while size < target:
        paragraph = " ".join(rng.choice(sentences) for _ in range(rng.randint(1, 8)))
        paragraphs.append(paragraph)
        size += len(paragraph.encode()) + 2
    return "\n\n".join(paragraphs)


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def measure(megabytes: float, mode: str, chunker: str) -> dict[str, Any]:
    """One measurement, run in this process (called in a child process by ``main``)."""
    from django_rag.embedders.local import LocalEmbedder

    embedder = LocalEmbedder()
    text = make_text(megabytes)
    embedder.count_tokens("warm up")
    if chunker == "tokenizer":
        # Not a chunker: the tokenizer's own encode_batch over every paragraph once, for scale.
        from django_rag.embedders.local import _load_tokenizer

        tokenizer = _load_tokenizer(str(embedder.tokenizer_file), embedder.tokenizer_sha256, None).tokenizer
        paragraphs = text.split("\n\n")
        _reset_peak()
        base = _rss_kb("VmRSS")
        start, cpu = time.perf_counter(), time.process_time()
        count = tokens = 0
        for i in range(0, len(paragraphs), 64):
            encodings = tokenizer.encode_batch(paragraphs[i : i + 64])
            count += len(encodings)
            tokens += sum(len(e.ids) for e in encodings)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        digest = "-"
    elif chunker == "peer":
        module = _peer_module()
        _reset_peak()
        base = _rss_kb("VmRSS")
        start, cpu = time.perf_counter(), time.process_time()
        chunks = module.split_text(
            text, chunk_size=SIZE, chunk_overlap=OVERLAP, token_counter=embedder.count_tokens
        )
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        count, tokens = len(chunks), sum(c.token_count for c in chunks)
        digest = summary_hash(chunks)
    else:
        from django_rag.ingest.chunking import iter_chunks

        _reset_peak()
        base = _rss_kb("VmRSS")
        start, cpu = time.perf_counter(), time.process_time()
        stream = iter_chunks(
            text,
            chunk_size=SIZE,
            chunk_overlap=OVERLAP,
            token_counter=embedder.count_tokens,
            batch_counter=embedder.count_tokens_batch,
            additive=embedder.tokens_add_up,
        )
        kept: list[Any] = []
        count = tokens = 0
        for chunk in stream:
            count += 1
            tokens += chunk.token_count
            if mode == "kept":
                kept.append(chunk)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        digest = summary_hash(kept) if mode == "kept" else "-"
    peak = _rss_kb("VmHWM")
    return {
        "mb": len(text.encode()) / 1e6,
        "seconds": seconds,
        "cpu": cpu,
        "extra_mb": (peak - base) / 1024,
        "chunks": count,
        "tokens": tokens,
        "sha256": digest,
    }


def summary_hash(chunks: list[Any]) -> str:
    """SHA-256 over every chunk's offsets, token count and content hash (first 8 hex digits)."""
    summary = "".join(f"{c.char_start},{c.char_end},{c.token_count},{c.content_hash};" for c in chunks)
    return hashlib.sha256(summary.encode()).hexdigest()[:8]


def _peer_module() -> Any:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{PEER_COMMIT}:django_rag/ingest/chunking.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # The old module's relative imports resolve against the installed package.
    source = source.replace("from ..exceptions", "from django_rag.exceptions").replace(
        "from ..types", "from django_rag.types"
    )
    path = Path(tempfile.mkdtemp()) / "old_chunking.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_chunking", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_chunking"] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def run_child(megabytes: float, mode: str, chunker: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", f"{megabytes}:{mode}:{chunker}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1,10,100", help="megabytes of text, comma-separated")
    parser.add_argument("--peer-mb", type=float, default=1.0, help="megabytes for the old chunker (0: skip)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        megabytes, mode, chunker = args.child.split(":")
        print(json.dumps(measure(float(megabytes), mode, chunker)))
        return

    print(f"chunking, all-MiniLM-L6-v2 tokenizer, chunk_size {SIZE}, overlap {OVERLAP}; one process per row")
    print(
        f"{'chunker':<22} {'MB':>7} {'seconds':>8} {'MB/s':>7} {'CPU s':>7} {'MB/CPU s':>8} "
        f"{'extra MB':>9} {'chunks':>8} {'tokens/chunk':>12} {'sha256':>8}"
    )
    rows: list[tuple[str, dict[str, Any]]] = []
    if args.peer_mb:
        rows.append((f"old ({PEER_COMMIT}), list", run_child(args.peer_mb, "kept", "peer")))
        _print(*rows[-1])
        rows.append(("tokenizer encode_batch", run_child(args.peer_mb, "kept", "tokenizer")))
        _print(*rows[-1])
    for megabytes in [float(s) for s in args.sizes.split(",")]:
        for mode in ("streamed", "kept"):
            rows.append((f"new, {mode}", run_child(megabytes, mode, "new")))
            _print(*rows[-1])
    if args.peer_mb:
        old = rows[0][1]
        same = next((r for name, r in rows if name == "new, kept" and abs(r["mb"] - old["mb"]) < 0.1), None)
        if same is not None:
            print(
                f"\nnew vs old on {old['mb']:.1f} MB: {old['seconds'] / same['seconds']:.0f}x faster, "
                f"{old['extra_mb'] / max(same['extra_mb'], 0.1):.0f}x less extra memory"
            )
    print(machine_line())


def _print(name: str, r: dict[str, Any]) -> None:
    print(
        f"{name:<22} {r['mb']:7.1f} {r['seconds']:8.2f} {r['mb'] / r['seconds']:7.2f} {r['cpu']:7.2f} "
        f"{r['mb'] / r['cpu']:8.2f} {r['extra_mb']:9.1f} "
        f"{r['chunks']:8} {r['tokens'] / max(r['chunks'], 1):12.1f} {r['sha256']:>8}",
        flush=True,
    )


if __name__ == "__main__":
    main()
