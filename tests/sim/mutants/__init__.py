"""Every exactly-once fix as a reversible mutant: the simulation must fail on each.

A mutant is a unified diff (`<name>.patch` here, a header naming what it breaks and the fix it reverts) that undoes
one fix. It is applied with `git apply` to a copy of the source tree in a temporary folder, and the simulation runs
in a subprocess against that copy: the working tree is never touched. A fix of the publish path without a mutant is
not done; a refactor that stops a patch from applying fails `test_mutants.py` naming the mutant (rewrite the patch).

    python -m tests.sim.mutants --first 0 --count 300     # the mutant table (make mutants)
    python -m tests.sim.mutants --first 100000 --count 50 --store kafka --table-rate 0.3   # on Kafka (a broker each)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SOURCES = ("events", "filesystems", "localservers", "oncelog", "projections", "replay", "spark_pipeline", "tests")
"""What a copy holds: every package the simulation imports, and the tests (the simulation itself)."""


class MutantError(Exception):
    """A mutant could not be applied or its simulation could not run (not: the simulation failed on it)."""


@dataclass(frozen=True)
class Mutant:
    """One reverted fix, and the CI seeds on which the simulation must fail on it."""

    name: str
    description: str
    reverts: str
    ci_first: int
    ci_count: int
    """The CI seeds: ci_first onward; chosen so the mutant dies within the first few (see docs/exactly-once.md)."""

    @property
    def patch(self) -> Path:
        return HERE / f"{self.name}.patch"


MUTANTS = (
    Mutant("pending-not-skipped", "a run pulls a dataset whose commit sequence is still pending after recovery",
           "0070818: unsettled datasets skipped", 0, 40),
    Mutant("strict-fold-skips", "the strict fold skips a record it cannot decode instead of refusing the log",
           "0070818: the strict fold", 0, 40),
    Mutant("release-without-rollback", "`recover --release` frees a dataset without rolling back what its abandoned "
           "sequence published", "0070818: release rolls back", 0, 40),
    Mutant("rename-unchecked", "the rename publishes task output without checking the size and SHA-256 its task "
           "recorded", "0070818: the rename's source-checksum check", 0, 40),
    Mutant("cleanup-ignores-unsettled", "clean-up deletes a run's task output while a sequence of that run is "
           "unsettled", "0070818: clean-up by the log (runs_holding_output)", 0, 40),
    Mutant("shared-attempt-folder", "every attempt of a task writes the run's one task-output folder, so a zombie "
           "attempt overwrites the output recorded for the attempt that succeeded",
           "5ef0fe4: a task-output folder per attempt (writers.attempt_output_dir)", 0, 40),
    Mutant("reads-ignore-gaps", "a SQLite read folds a log with a deleted row or a cut-off tail as if nothing were "
           "missing", "2778c43: the SQLite log's chain of predecessors and heads", 0, 40),
    Mutant("lost-ends-unnoticed", "the fold takes a commit sequence whose end is gone (its dataset planned another "
           "after it) for pending, and runs plan from that log", "b529560: every fold refuses a lost sequence end",
           0, 40),
    Mutant("table-commit-unverified", "the TableCommit step never finds its snapshot by its commit id, so a table "
           "commit made before a crash, or whose answer was lost, is made again",
           "the TableCommit step found done by the table's history (tables/iceberg.py: snapshot_of)", 0, 40),
    Mutant("batch-members-skipped", "a fold of events read one by one (verify, audit) takes each member of a batched "
           "commit record after the first for one already folded (they share the record's offset) and skips it",
           "projections/state.py: State.apply folds a batch's later members (LoggedEvent.member)", 0, 40),
    Mutant("delta-commit-any-version", "the Delta commit takes any app transaction of its dataset for its own (not "
           "its version), so a dataset's later sequences add nothing to the table",
           "the app transaction's version decides whether a DeltaCommit is done (tables/delta.py: _holds)", 0, 80),
    Mutant("table-group-per-run", "the commit shards of a run share one table group (`job/run`), each numbering its "
           "members from 0, so a shard takes another shard's snapshot for its own: its files never reach the table, "
           "or its sequence, never given up, blocks its dataset",
           "cc0ecc5: a table group per planning, the run's or each commit shard's (tables/base.py: group_of)", 0, 40),
    Mutant("folder-move-unchecked", "a first run publishes a dataset's task-output folder by one move without "
           "checking each file's recorded SHA-256, so a file changed after its task wrote it is published",
           "the folder move checks each file as its rename would (filesystems/local.py: LocalFileSystem.move_folder)",
           0, 40),
    Mutant("run-committed-unfinished", "a run records JobRunCommitted with its last completions although a sequence "
           "of it failed or was abandoned, so the run reads as committed while a dataset of it is unsettled",
           "the run's JobRunCommitted in its last batch only when every sequence completed (launcher.py: "
           "JobLauncher._committed)", 0, 40),
)


def copy_sources(dest: Path) -> Path:
    """A copy of the working tree's sources under `dest` (what a patch applies to); returns its root."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache")
    for name in SOURCES:
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    return dest


def apply(mutant: Mutant, tree: Path, check_only: bool = False) -> None:
    """Apply the mutant's patch to the copy at `tree` (`check_only`: only whether it applies); MutantError naming the
    mutant when it does not."""
    command = ["git", "apply", *(["--check"] if check_only else []), str(mutant.patch)]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise MutantError(f"mutant {mutant.name} ({mutant.patch.name}) no longer applies to the source: "
                          f"{done.stderr.strip()}; rewrite the patch so it still reverts {mutant.reverts}")


def simulate(tree: Path, first: int, count: int, keep_going: bool = False, options: Sequence[str] = ()
             ) -> dict[str, object]:
    """Run the simulation of the copy at `tree` on seeds first.. in a subprocess (stopping at the first failing seed
    unless `keep_going`; `options`: more of its arguments, `--store kafka` say); returns its summary (seeds run and
    failed, first failing seed, faults by kind)."""
    command = [sys.executable, "-m", "tests.sim.simulation", "--first", str(first), "--count", str(count), "--json",
               *(["--keep-going"] if keep_going else []), *options]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, env=copy_env(tree))
    lines = done.stdout.strip().splitlines()
    if done.returncode not in (0, 1) or not lines:
        raise MutantError(f"the simulation in {tree} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    summary: dict[str, object] = json.loads(lines[-1])
    return summary


def copy_env(tree: Path) -> dict[str, str]:
    """The environment of a process that must import the copy at `tree`, not the working tree."""
    return {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}


def imported_from(tree: Path) -> str:
    """Where a process started like the simulation's imports `spark_pipeline` from (it must be the copy)."""
    done = subprocess.run([sys.executable, "-c", "import spark_pipeline; print(spark_pipeline.__file__)"],
                          cwd=tree, capture_output=True, text=True, env=copy_env(tree), check=True)
    return done.stdout.strip()
