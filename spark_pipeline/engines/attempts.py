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
RunAttempt = Callable[[int, bool], Sequence[WorkUnitResult]]
"""One attempt of a task: (attempt number, whether it is the last) -> its results; raises when it fails."""


@dataclass(frozen=True)
class TaskOutcome:
    """How a task ended: its last attempt's results (complete, or partial when it failed)."""

    task_id: str
    succeeded: bool
    attempts: int
    results: tuple[WorkUnitResult, ...]
    error: str | None = None


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


class AttemptFailed(Exception):
    """An attempt failed, with what it got done (`results`: work units before, and a partial one).

    `cleanup` is a second error met while keeping or dropping the failed work unit's output (its partial commit).
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
        """The work unit it failed on, when the engine knows it."""


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
    """Run a task's attempts until one succeeds or the last fails, recording each through `emit`."""
    task: TaskFields = {"job": config.job_name, "run_id": run_id, "task_id": mwu.multi_work_unit_id}
    unit_ids = tuple(u.work_unit_id for u in mwu.work_units)
    for number in range(plan.first, plan.last + 1):
        started = time.perf_counter()
        last = number == plan.last
        emit(TaskStarted(**task, attempt=number, work_unit_ids=unit_ids, executor=executor_name()).in_parts())
        try:
            results = tuple(attempt(number, last))
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
                            retry_delay_s=0.0 if final else plan.retry_interval_s).in_parts())
            if final:
                return TaskOutcome(mwu.multi_work_unit_id, False, number, failure.results,
                                   outcome_error(judged, unit, failure.cleanup))
            emit([TaskRetried(**task, attempt=number, next_attempt=number + 1, delay_s=plan.retry_interval_s,
                              reason=judged.cause)])
            sleep(plan.retry_interval_s)
            continue
        except BaseException as stopped:  # interrupted (KeyboardInterrupt, SystemExit): the attempt still ends
            error = f"attempt stopped by {error_summary(stopped)}\n{last_frames(stopped)}"
            emit([TaskFailed(**task, attempt=number, error=error[:ERROR_CHARS], results=(),
                             duration_ms=_since(started))])
            raise
        # In parts when the results are many (one atomic batch): no event grows with the work units of a task.
        emit(TaskSucceeded(**task, attempt=number, results=results, duration_ms=_since(started)).in_parts())
        return TaskOutcome(mwu.multi_work_unit_id, True, number, results)
    raise AssertionError("unreachable: the last attempt returns")


def _since(started: float) -> int:
    """Milliseconds since a perf_counter reading."""
    return int((time.perf_counter() - started) * 1000)
