"""The mutant table: each mutant applied to its own copy of the sources, the simulation run on a range of seeds.

    python -m tests.sim.mutants --first 0 --count 300 [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.sim.mutants import MUTANTS, Mutant, apply, copy_sources, simulate


def killed(mutant: Mutant, first: int, count: int) -> dict[str, object]:
    """The simulation's summary on every seed of the range, with the mutant applied to a fresh copy."""
    with tempfile.TemporaryDirectory(prefix=f"oncelog-mutant-{mutant.name}-") as folder:
        tree = copy_sources(Path(folder))
        apply(mutant, tree)
        return simulate(tree, first, count, keep_going=True)


def unmutated(first: int, count: int) -> dict[str, object]:
    """The simulation's summary on the same seeds without a mutant (a copy too: the same code path)."""
    with tempfile.TemporaryDirectory(prefix="oncelog-mutant-none-") as folder:
        return simulate(copy_sources(Path(folder)), first, count, keep_going=True)


def table(rows: list[tuple[str, dict[str, object]]], first: int, count: int) -> str:
    """Markdown: mutant, seeds failed of seeds run, first failing seed."""
    lines = [f"| mutant | seeds failed (of {count}, seeds {first}–{first + count - 1}) | first failing seed |",
             "|---|---|---|"]
    for name, summary in rows:
        lines.append(f"| {name} | {summary['seeds_failed']} of {summary['seeds_run']} | "
                     f"{summary['first_failing_seed'] if summary['first_failing_seed'] is not None else '—'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2, help="simulations at once (one process each)")
    args = parser.parse_args(argv)
    with ThreadPoolExecutor(args.workers) as pool:
        baseline = pool.submit(unmutated, args.first, args.count)
        results = list(pool.map(lambda m: killed(m, args.first, args.count), MUTANTS))
        rows = [("(none: the code as it is)", baseline.result()),
                *((m.name, r) for m, r in zip(MUTANTS, results, strict=True))]
    print(table(rows, args.first, args.count))
    print(f"\nfaults injected without a mutant, by kind: {json.dumps(baseline.result()['faults'])}")
    print(f"steps: {json.dumps(baseline.result()['steps'])}")
    survivors = [m.name for m, r in zip(MUTANTS, results, strict=True) if not r["seeds_failed"]]
    if baseline.result()["seeds_failed"]:
        print(f"\nthe unmutated simulation failed: {baseline.result()['first_failure']}", file=sys.stderr)
    if survivors:
        print(f"\nsurviving mutants: {', '.join(survivors)}", file=sys.stderr)
    return 1 if survivors or baseline.result()["seeds_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
