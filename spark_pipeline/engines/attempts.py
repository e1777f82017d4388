"""The one attempt loop of a task, on either engine: TaskStarted, the attempt, then TaskSucceeded, or TaskFailed
(and TaskRetried, a pause, the next attempt) up to `task.maxretries` retries.

An engine gives only what one attempt does (`RunAttempt`); how attempts are recorded, retried, and how their
errors read is decided here once, so that both engines record the same events for the same failure.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from events.job import WorkUnitSpec
from events.model import Event, TaskFields
from events.task import TaskFailed, TaskRetried, TaskStarted, TaskSucceeded, WorkUnitResult
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.engines.failures import Failure, classify
from spark_pipeline.jobfile.config import JobConfig

ERROR_CHARS = 4000
"""The longest error a TaskFailed records (its message first, then where it was raised)."""
MESSAGE_CHARS = 2000
"""The longest message of an error kept before its frames."""

log = logging.getLogger(__name__)
"""Each failed attempt's full trace: to the run's log file (`oncelog run` sends this logger there)."""

Emit = Callable[[Sequence[Event]], object]
Sleep = Callable[[float], None]
RunAttempt = Callable[[MultiWorkUnit, int, bool], Sequence[WorkUnitResult]]
"""One attempt of work units as a task: (the task, attempt number, whether a failed work unit keeps what it fully
wrote: a task's last attempt) -> their results; raises when it fails (AttemptFailed: with what it got done)."""


@dataclass(frozen=True)
class TaskFailure:
    """Work units that failed for good, as the task (or part of a task, engines.isolation) that last ran them."""

    task_id: str
    work_unit_ids: tuple[str, ...]
    attempts: int
    error: str


@dataclass(frozen=True)
class TaskOutcome:
    """How a task ended: the results of its work units that succeeded, and those that failed (`failures`) with what
    their last attempt fully wrote (`partial`: for the `partial` commit policy)."""

    task_id: str
    succeeded: bool
    attempts: int
    results: tuple[WorkUnitResult, ...]
    error: str | None = None
    partial: tuple[WorkUnitResult, ...] = ()
    failures: tuple[TaskFailure, ...] = ()

    @property
    def written(self) -> tuple[WorkUnitResult, ...]:
        """Every result the task recorded in the end: its succeeded work units', then its failed ones' partial."""
        return self.results + self.partial


@dataclass(frozen=True)
class Ended:
    """How one attempt ended: its results, or its failure (with what it got done), what the failure comes down to,
    whether it was the task's last attempt (`final`) and the error its outcome reports."""

    number: int
    results: tuple[WorkUnitResult, ...]
    failure: AttemptFailed | None = None
    judged: Failure | None = None
    final: bool = False
    error: str = ""

    @property
    def cause(self) -> str:
        """The failure's root cause's first line ("" when the attempt succeeded)."""
        return self.judged.cause if self.judged else ""


@dataclass(frozen=True)
class AttemptPlan:
    """Which attempts a task makes and how long it waits between them."""

    first: int
    last: int
    retry_interval_s: float

    @classmethod
    def of(cls, config: JobConfig, first_attempt: int = 1) -> AttemptPlan:
        """`task.maxretries` retries after the first attempt; `first_attempt` numbers on after an earlier run of
        the same task (Spark re-runs a task whose executor was lost: each attempt keeps its own events and folder)."""
        return cls(first_attempt, first_attempt + config.task_max_retries, float(config.task_retry_interval_s))

    @property
    def retries(self) -> int:
        """How many attempts follow the first."""
        return self.last - self.first


class AttemptsCancelled(Exception):  # noqa: N818 (a signal, not an error: the launcher makes it RunCancelled)
    """The run is cancelled: a task starts no further attempt (raised where a retry would pause, or by an attempt
    its cancellation cut short, which is then recorded as stopped, not as a failure to retry). Internal."""


class AttemptFailed(Exception):
    """An attempt failed, with what it got done (`results`: work units before, and a partial one).

    `cleanup` is a second error met while keeping or dropping the failed work unit's output (its partial commit);
    `unit` the work unit that failed, when the engine knows it (engines.isolation then runs it alone).
    """

    def __init__(self, error: BaseException, results: Sequence[WorkUnitResult],
                 cleanup: BaseException | None = None, work_unit_id: str | None = None) -> None:
        summary = error_summary(error)
        if cleanup is not None:
            summary += f"; then handling the failed work unit's output failed: {error_summary(cleanup)}"
        super().__init__(summary)
        self.error = error
        self.results = tuple(results)
        self.where = "\n".join(last_frames(e) for e in (error, cleanup) if e is not None)
        self.cleanup = cleanup
        self.work_unit_id = work_unit_id
        """The work unit it failed on, when the engine knows it (engines.isolation then runs it alone)."""


def error_summary(error: BaseException) -> str:
    """An error as `Type: message`, the message cut before a Java stack trace (Spark's errors carry one)."""
    message = str(error).strip().split("\n\tat ", 1)[0][:MESSAGE_CHARS]
    return f"{type(error).__name__}: {message}"


def last_frames(error: BaseException) -> str:
    """Where an error was raised: the last lines of its traceback."""
    return "".join(traceback.format_exception(error)[-3:]).strip()[-1500:]


def failed_unit(mwu: MultiWorkUnit, failure: AttemptFailed) -> WorkUnitSpec | None:
    """The work unit an attempt failed on: the one its engine names, or the task's only one."""
    if failure.work_unit_id is not None:
        return next((u for u in mwu.work_units if u.work_unit_id == failure.work_unit_id), None)
    return mwu.work_units[0] if len(mwu.work_units) == 1 else None


def outcome_error(judged: Failure, unit: WorkUnitSpec | None, cleanup: BaseException | None) -> str:
    """A failed task's error as its outcome (and the run's error) says it: where, the root cause, why it was not
    retried when no retry could fix it, and a second error met handling its output."""
    where = f"work unit {unit.work_unit_id} of {unit.dataset_urn}: " if unit else ""
    why = f" (not retried: {judged.permanent.value})" if judged.permanent else ""
    then = f"; then handling the failed work unit's output failed: {error_summary(cleanup)}" if cleanup else ""
    return f"{where}{judged.cause}{why}{then}"


def executor_name() -> str:
    """host:pid of the process running the task, for the audit."""
    return f"{socket.gethostname()}:{os.getpid()}"


def run_attempts(config: JobConfig, run_id: str, mwu: MultiWorkUnit, attempt: RunAttempt, plan: AttemptPlan,
                 emit: Emit, sleep: Sleep = time.sleep) -> TaskOutcome:
    """Run a task's attempts until one succeeds, the last fails, or one fails in a way no retry can fix, recording
    each through `emit`."""
    unit_ids = tuple(u.work_unit_id for u in mwu.work_units)
    for number in range(plan.first, plan.last + 1):
        ended = attempt_once(config, run_id, mwu, attempt, number, number == plan.last, emit, plan.retry_interval_s)
        failure = ended.failure
        if failure is None:
            return TaskOutcome(mwu.multi_work_unit_id, True, number, ended.results)
        if ended.final:
            return TaskOutcome(mwu.multi_work_unit_id, False, number, (), ended.error, failure.results,
                               (TaskFailure(mwu.multi_work_unit_id, unit_ids, number, ended.error),))
        emit([retried(config, run_id, mwu, number, plan.retry_interval_s, ended.cause)])
        sleep(plan.retry_interval_s)
    raise AssertionError("unreachable: the last attempt returns")


def attempt_once(config: JobConfig, run_id: str, mwu: MultiWorkUnit, attempt: RunAttempt, number: int,
                 last: bool, emit: Emit, retry_delay_s: float) -> Ended:
    """One attempt of `mwu`'s work units, recorded: TaskStarted, then TaskSucceeded or TaskFailed (saying whether
    and when a next attempt follows: not after the `last`, nor after a failure no retry can fix)."""
    task = task_fields(config, run_id, mwu)
    unit_ids = tuple(u.work_unit_id for u in mwu.work_units)
    started = time.perf_counter()
    emit(TaskStarted(**task, attempt=number, work_unit_ids=unit_ids, executor=executor_name()).in_parts())
    try:
        results = tuple(attempt(mwu, number, last))
    except AttemptsCancelled as cancelled:  # the run's cancellation cut the attempt short: no retry follows
        emit([TaskFailed(**task, attempt=number, error=f"attempt stopped: {cancelled}"[:ERROR_CHARS], results=(),
                         duration_ms=_since(started))])
        raise
    except Exception as e:
        failure = e if isinstance(e, AttemptFailed) else AttemptFailed(e, ())
        judged = classify(failure.error)
        final = last or not judged.retriable  # a failure no retry can fix ends the task at once
        unit = failed_unit(mwu, failure)
        log.warning("task %s attempt %d failed%s", mwu.multi_work_unit_id, number,
                    f" on work unit {unit.work_unit_id}" if unit else "", exc_info=failure.error)
        emit(TaskFailed(**task, attempt=number, error=f"{failure}\n{failure.where}"[:ERROR_CHARS],
                        results=failure.results, duration_ms=_since(started), cause=judged.cause,
                        failed_work_unit=unit.work_unit_id if unit else "",
                        failed_dataset=unit.dataset_urn if unit else "", retriable=judged.retriable,
                        next_attempt=0 if final else number + 1,
                        retry_delay_s=0.0 if final else retry_delay_s).in_parts())
        return Ended(number, failure.results, failure, judged, final, outcome_error(judged, unit, failure.cleanup))
    except BaseException as stopped:  # interrupted (KeyboardInterrupt, SystemExit): the attempt still ends
        error = f"attempt stopped by {error_summary(stopped)}\n{last_frames(stopped)}"
        emit([TaskFailed(**task, attempt=number, error=error[:ERROR_CHARS], results=(),
                         duration_ms=_since(started))])
        raise
    # In parts when the results are many (one atomic batch): no event grows with the work units of a task.
    emit(TaskSucceeded(**task, attempt=number, results=results, duration_ms=_since(started)).in_parts())
    return Ended(number, results)


def retried(config: JobConfig, run_id: str, mwu: MultiWorkUnit, number: int, delay_s: float,
            cause: str) -> TaskRetried:
    """The event saying that a failed attempt of `mwu` is retried after `delay_s`, and why it failed."""
    return TaskRetried(**task_fields(config, run_id, mwu), attempt=number, next_attempt=number + 1, delay_s=delay_s,
                       reason=cause)


def task_fields(config: JobConfig, run_id: str, mwu: MultiWorkUnit) -> TaskFields:
    """The job, run and task every event of the task's attempts carries."""
    return {"job": config.job_name, "run_id": run_id, "task_id": mwu.multi_work_unit_id}


def _since(started: float) -> int:
    """Milliseconds since a perf_counter reading."""
    return int((time.perf_counter() - started) * 1000)
