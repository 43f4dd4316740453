"""A long fuzz of every loader and the chunker: the suite's hypothesis strategies, many more examples.

    .venv/bin/python bench/fuzz_loaders.py [--examples 5000] [--targets pdf,html] [--seed-random]

The strategies and the confined child are tests/hostile.py's, the ones
tests/test_hostile_files.py runs for 100-150 examples per target: the property is that a call
raises nothing but ``LoaderError`` (the chunker nothing at all) and leaves storable text. All
targets run in one child process whose address space (``--memory-mb``) and CPU time are capped
with ``resource.setrlimit``, with a per-example hypothesis deadline (``--deadline-ms``).

Examples are derandomized (the same inputs every run, like the suite) unless ``--seed-random``
is given; a failure prints hypothesis's smallest failing example. Prints, per target, the number
of examples, the time, the slowest call and the child's peak resident memory. Not a test: run it
by hand, e.g. after changing a loader or upgrading pdfminer.six.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the strategies live with the tests

from tests import hostile  # noqa: E402

TARGETS = ["text", "html", "bytes", "web", "pdf", "chunker"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--examples", type=int, default=5000, help="hypothesis examples per target")
    add("--targets", default=",".join(TARGETS), help=f"comma-separated, of {TARGETS}")
    add("--memory-mb", type=int, default=hostile.MEMORY_BYTES // 2**20, help="RLIMIT_AS of the child")
    add("--deadline-ms", type=int, default=5000, help="hypothesis deadline per example")
    add("--seed-random", action="store_true", help="new inputs each run (default: derandomized)")
    args = parser.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {TARGETS}")
    plan = dict.fromkeys(targets, args.examples)
    began = time.perf_counter()
    runs = hostile.fuzz_confined(
        plan,
        deadline_ms=args.deadline_ms,
        memory_bytes=args.memory_mb * 2**20,
        cpu_seconds=24 * 3600,
        wall_seconds=24 * 3600.0,
        derandomize=not args.seed_random,
    )
    total = time.perf_counter() - began
    failed = 0
    print(f"{'target':8} {'examples':>9} {'seconds':>8} {'slowest':>8} {'peak MB':>8}  result")
    for target in targets:
        run = runs[target]
        failed += bool(run.error)
        result = "ok" if not run.error else "FAILED"
        figures = f"{run.examples:9d} {run.seconds:8.1f} {run.slowest:8.2f} {run.peak_rss_mb:8.0f}"
        print(f"{target:8} {figures}  {result}")
    print(f"{sum(r.examples for r in runs.values())} examples in {total:.0f} s, {failed} target(s) failed")
    for target in targets:
        if runs[target].error:
            print(f"\n--- {target} ---\n{runs[target].error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
