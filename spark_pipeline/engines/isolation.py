"""Failure isolation per work unit: a packed task whose attempt fails is split, so that only the failing work units
fail (`job.commit.policy` `successful` and `partial`); `full` keeps the whole task's retries (any failure fails the
run anyway).

In Gobblin every WorkUnit is its own Task; packing them (one task per core) is oncelog's optimisation and must not
change which datasets publish. So, on either engine, a task (MultiWorkUnit) runs its work units in one attempt; if
that attempt fails, its work units run again at once in two parts, each a task of its own (`<task>.<n>`, attempt
numbers going on from the part it came from): the failing work unit alone and the rest when the engine names it (the
records engine does), else two halves (the second split at once when the first succeeded: it holds the failure);
and so on until each failing work unit has failed alone. A work unit that failed alone gets `task.maxretries`
retries, `task.retry.intervalinsec` apart: every failing part of the task waits one pause per round, then each is
retried. Once `GIVE_UP_ALONE` work units have failed alone and no more work units succeeded than that, the failure
is taken for the task's own (a missing bucket, a broker down): the parts left are no longer split, only retried.

Exactly once: a work unit's results count only from an attempt that succeeded (or, under `partial`, from its last
attempt); every attempt has its own folder, so a failed attempt's output is never published.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from events.job import WorkUnitSpec
from events.task import WorkUnitResult
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.engines.attempts import (
    AttemptPlan,
    Emit,
    Ended,
    RunAttempt,
    Sleep,
    TaskFailure,
    TaskOutcome,
    attempt_once,
    retried,
    run_attempts,
)
from spark_pipeline.jobfile.config import JobCommitPolicy, JobConfig

GIVE_UP_ALONE = 3
"""Work units failing alone (with no more work units succeeding) after which a task's parts are no longer split."""
FAILURES_SHOWN = 3
"""The failed work units a TaskOutcome's error names before it says how many more there are."""


def isolates(config: JobConfig) -> bool:
    """Whether the job's tasks isolate failing work units: under every commit policy but `full`."""
    return config.job_commit_policy is not JobCommitPolicy.FULL


def most_attempts(config: JobConfig, units: int) -> int:
    """An upper bound of the attempt numbers one run of a task of `units` work units uses (a part's attempts number
    on from its parent's: at most one more per work unit split off, then the retries)."""
    return units + config.task_max_retries + 1


def run_task_attempts(config: JobConfig, run_id: str, mwu: MultiWorkUnit, attempt: RunAttempt, plan: AttemptPlan,
                      emit: Emit, sleep: Sleep = time.sleep) -> TaskOutcome:
    """A task's attempts, recorded through `emit`: isolating its failing work units (`isolates`), else retried
    whole (engines.attempts)."""
    if not isolates(config) or len(mwu.work_units) == 1:
        return run_attempts(config, run_id, mwu, attempt, plan, emit, sleep)
    return Isolation(config, run_id, mwu, attempt, plan, emit, sleep).run()


@dataclass
class Failing:
    """A part of the task whose last attempt failed: its retries are still to come."""

    part: MultiWorkUnit
    number: int
    ended: Ended
    attempts: int = 1

    @property
    def retriable(self) -> bool:
        """Whether a next attempt may still fix it (not after a failure no retry can fix)."""
        return not self.ended.final


class Isolation:
    """One task's attempts, split until each failure is a work unit's own, then retried in rounds."""

    def __init__(self, config: JobConfig, run_id: str, mwu: MultiWorkUnit, attempt: RunAttempt, plan: AttemptPlan,
                 emit: Emit, sleep: Sleep) -> None:
        self.config, self.run_id, self.mwu, self.attempt = config, run_id, mwu, attempt
        self.plan, self.emit, self.sleep = plan, emit, sleep
        self.names: Iterator[int] = itertools.count(1)
        self.results: dict[str, WorkUnitResult] = {}
        self.failing: list[Failing] = []
        self.attempts = 0
        self.splitting = True

    def run(self) -> TaskOutcome:
        """Split until every failure is isolated, then retry the failing parts; the task's outcome."""
        self._search()
        for round_ in range(1, self.plan.retries + 1):
            if not any(f.retriable for f in self.failing):
                break
            self._retry(final=round_ == self.plan.retries)
        return self._outcome()

    def _search(self) -> None:
        """Run the task, and every failing part of it split, depth first (the rest before the failing unit). Of two
        halves, the second holds the failure when the first succeeded: it is split without being run whole."""
        stack: list[tuple[MultiWorkUnit, int, str | None]] = [(self.mwu, self.plan.first, None)]
        passed: set[str] = set()
        while stack:
            part, number, sibling = stack.pop()
            alone = len(part.work_units) == 1
            if sibling in passed and not alone and self.splitting:
                stack += self._halves(part.work_units, number)
                continue
            settled = alone or not self.splitting  # a failure is retried in rounds, not split
            final = self.plan.retries == 0 and settled
            delay = self.plan.retry_interval_s if settled else 0.0
            ended = attempt_once(self.config, self.run_id, part, self.attempt, number, final, self.emit, delay)
            self.attempts += 1
            if ended.failure is None:
                self._succeeded(ended.results)
                passed.add(part.multi_work_unit_id)
                continue
            if settled or ended.final:  # no retry can fix it: the task's own failure, not a work unit's
                self.failing.append(Failing(part, number, ended))
                self._check_spread()
                continue
            culprit = ended.failure.work_unit_id
            if culprit is not None and any(u.work_unit_id == culprit for u in part.work_units):
                stack += [(self._part([u for u in part.work_units if u.work_unit_id == culprit]), number + 1, None),
                          (self._part([u for u in part.work_units if u.work_unit_id != culprit]), number + 1, None)]
            else:
                stack += self._halves(part.work_units, number + 1)

    def _halves(self, units: Sequence[WorkUnitSpec], number: int) -> list[tuple[MultiWorkUnit, int, str | None]]:
        """A failed part's two halves as the stack takes them (the first on top), the second knowing the first."""
        middle = len(units) // 2
        first, second = self._part(units[:middle]), self._part(units[middle:])
        return [(second, number, first.multi_work_unit_id), (first, number, None)]

    def _check_spread(self) -> None:
        """Stop splitting once the failures look like the task's own rather than its work units'."""
        alone = sum(1 for f in self.failing if len(f.part.work_units) == 1)
        if alone >= GIVE_UP_ALONE and len(self.results) <= alone:
            self.splitting = False

    def _retry(self, final: bool) -> None:
        """One round: every failing part's TaskRetried, one pause, then each part's next attempt."""
        delay = self.plan.retry_interval_s
        retrying = [f for f in self.failing if f.retriable]
        still = [f for f in self.failing if not f.retriable]
        self.emit([retried(self.config, self.run_id, f.part, f.number, delay, f.ended.cause) for f in retrying])
        self.sleep(delay)
        for failing in retrying:
            number = failing.number + 1
            ended = attempt_once(self.config, self.run_id, failing.part, self.attempt, number, final, self.emit,
                                 delay)
            self.attempts += 1
            if ended.failure is None:
                self._succeeded(ended.results)
            else:
                still.append(Failing(failing.part, number, ended, failing.attempts + 1))
        self.failing = still

    def _succeeded(self, results: Sequence[WorkUnitResult]) -> None:
        self.results.update((r.work_unit_id, r) for r in results)

    def _part(self, units: Sequence[WorkUnitSpec]) -> MultiWorkUnit:
        """A part of the task as a task of its own: `<task>.<n>`."""
        return MultiWorkUnit(f"{self.mwu.multi_work_unit_id}.{next(self.names)}", tuple(units))

    def _outcome(self) -> TaskOutcome:
        order = {u.work_unit_id: i for i, u in enumerate(self.mwu.work_units)}
        results = tuple(sorted(self.results.values(), key=lambda r: order[r.work_unit_id]))
        failures = tuple(TaskFailure(f.part.multi_work_unit_id, tuple(u.work_unit_id for u in f.part.work_units),
                                     f.attempts, f.ended.error) for f in self.failing)
        partial = tuple(r for f in self.failing for r in f.ended.results)
        return TaskOutcome(self.mwu.multi_work_unit_id, not failures, self.attempts, results,
                           failures_summary(failures) if failures else None, partial, failures)


def failures_summary(failures: Sequence[TaskFailure]) -> str:
    """The failed work units, the first few with their error."""
    shown = "; ".join(f"{units_named(f.work_unit_ids)} (task {f.task_id}, {f.attempts} attempt(s)): {f.error}"
                      for f in failures[:FAILURES_SHOWN])
    more = len(failures) - FAILURES_SHOWN
    return shown + (f"; and {more} more failed part(s)" if more > 0 else "")


def units_named(ids: Sequence[str]) -> str:
    """Work unit ids, the first few named."""
    more = len(ids) - FAILURES_SHOWN
    return ", ".join(ids[:FAILURES_SHOWN]) + (f" and {more} more" if more > 0 else "")
