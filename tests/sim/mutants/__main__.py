"""The mutant table: each mutant applied to its own copy of the sources, the simulation run on a range of seeds.

    python -m tests.sim.mutants --first 0 --count 300 [--workers 2] [--store kafka [--bootstrap host:port]]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.sim.mutants import MUTANTS, Mutant, apply, copy_sources, simulate


def killed(mutant: Mutant, first: int, count: int, options: Sequence[str] = ()) -> dict[str, object]:
    """The simulation's summary on every seed of the range, with the mutant applied to a fresh copy."""
    with tempfile.TemporaryDirectory(prefix=f"oncelog-mutant-{mutant.name}-") as folder:
        tree = copy_sources(Path(folder))
        apply(mutant, tree)
        return simulate(tree, first, count, keep_going=True, options=options)


def unmutated(first: int, count: int, options: Sequence[str] = ()) -> dict[str, object]:
    """The simulation's summary on the same seeds without a mutant (a copy too: the same code path)."""
    with tempfile.TemporaryDirectory(prefix="oncelog-mutant-none-") as folder:
        return simulate(copy_sources(Path(folder)), first, count, keep_going=True, options=options)


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
    parser.add_argument("--store", choices=["sqlite", "kafka"], default="sqlite",
                        help="the simulation's log (kafka: on --bootstrap, else $KAFKA_BOOTSTRAP, else a local broker "
                             "each simulation starts)")
    parser.add_argument("--bootstrap", help="the Kafka broker of --store kafka")
    parser.add_argument("--table-rate", help="the share of seeds publishing into a table (the simulation's default)")
    parser.add_argument("--only", action="append", choices=[m.name for m in MUTANTS],
                        help="this mutant only (repeatable; default: every one)")
    args = parser.parse_args(argv)
    options = ["--store", args.store, *(["--bootstrap", args.bootstrap] if args.bootstrap else []),
               *(["--table-rate", args.table_rate] if args.table_rate else [])]
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    with ThreadPoolExecutor(args.workers) as pool:
        baseline = pool.submit(unmutated, args.first, args.count, options)
        results = list(pool.map(lambda m: killed(m, args.first, args.count, options), mutants))
        rows = [("(none: the code as it is)", baseline.result()),
                *((m.name, r) for m, r in zip(mutants, results, strict=True))]
    print(table(rows, args.first, args.count))
    print(f"\nfaults injected without a mutant, by kind: {json.dumps(baseline.result()['faults'])}")
    print(f"steps: {json.dumps(baseline.result()['steps'])}")
    survivors = [m.name for m, r in zip(mutants, results, strict=True) if not r["seeds_failed"]]
    if baseline.result()["seeds_failed"]:
        print(f"\nthe unmutated simulation failed: {baseline.result()['first_failure']}", file=sys.stderr)
    if survivors:
        print(f"\nsurviving mutants: {', '.join(survivors)}", file=sys.stderr)
    return 1 if survivors or baseline.result()["seeds_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
