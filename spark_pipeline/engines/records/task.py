"""A task: the work units of one MultiWorkUnit, run in order, with `task.maxretries` in-run retries.

It runs on a Spark executor and records each attempt in the log itself: TaskStarted, then exactly one TaskSucceeded
or TaskFailed whatever raises, and TaskRetried before a retry. A failed attempt's staged output is dropped, except the
last attempt's: what it fully wrote stays, for the `partial` commit policy to publish.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from events.model import Event, TaskFields
from events.task import (
    TaskFailed,
    TaskRetried,
    TaskStarted,
    TaskSucceeded,
    WorkUnitResult,
)
from spark_pipeline.constructs import MultiWorkUnit, WorkUnitState
from spark_pipeline.engines.records.flow import (
    Constructs,
    WorkUnitFlow,
    build_constructs,
)
from spark_pipeline.jobfile.config import JobConfig

Emit = Callable[[Sequence[Event]], object]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class TaskOutcome:
    """How a task ended: its last attempt's results (complete, or partial when it failed)."""

    task_id: str
    succeeded: bool
    attempts: int
    results: tuple[WorkUnitResult, ...]
    error: str | None = None


class AttemptFailed(Exception):
    """An attempt failed; `results` holds what it got done (the work units before, and a partial one).

    `cleanup` is a second error met while keeping or dropping the failed work unit's output (its partial commit).
    """

    def __init__(self, error: BaseException, results: list[WorkUnitResult],
                 cleanup: BaseException | None = None) -> None:
        message = f"{type(error).__name__}: {error}"
        if cleanup is not None:
            message += f"; then handling the failed work unit's output failed: {type(cleanup).__name__}: {cleanup}"
        super().__init__(message)
        self.results = results
        self.detail = "\n".join(_last_frames(e) for e in (error, cleanup) if e is not None)


def _last_frames(error: BaseException) -> str:
    """Where an error was raised: the last lines of its traceback."""
    return "".join(traceback.format_exception(error)[-3:]).strip()


def executor_name() -> str:
    """host:pid of the process running the task, for the audit."""
    return f"{socket.gethostname()}:{os.getpid()}"


def run_attempt(constructs: Constructs, run_id: str, mwu: MultiWorkUnit, attempt: int, last: bool
                ) -> list[WorkUnitResult]:
    """One attempt over every work unit of the task; AttemptFailed carries the partial results when `last`."""
    results: list[WorkUnitResult] = []
    for unit in mwu.work_units:
        flow: WorkUnitFlow | None = None
        try:
            state = WorkUnitState(unit, constructs.config, run_id, mwu.multi_work_unit_id, attempt)
            extractor = constructs.source.get_extractor(state)
            try:
                flow = WorkUnitFlow(constructs, state, extractor)
                results.append(flow.run())
            finally:
                extractor.close()
        except Exception as e:
            try:
                partial = _end_failed(flow, last)
            except Exception as cleanup:
                raise AttemptFailed(e, results, cleanup) from cleanup
            if partial is not None:
                results.append(partial)
            raise AttemptFailed(e, results) from e
    return results


def _end_failed(flow: WorkUnitFlow | None, last: bool) -> WorkUnitResult | None:
    """After a work unit failed: the last attempt keeps what it fully wrote (partial commit), others drop it."""
    if flow is None:
        return None
    if last:
        return flow.commit_partial()
    flow.abort()
    return None


def run_task(config: JobConfig, run_id: str, mwu: MultiWorkUnit, emit: Emit, sleep: Sleep = time.sleep,
             first_attempt: int = 1) -> TaskOutcome:
    """Run a task with its retries, recording every attempt through `emit`.

    `first_attempt` numbers the attempts after those of an earlier run of the same task (Spark re-runs a task whose
    executor was lost): each attempt keeps its own events and staging folder."""
    task: TaskFields = {"job": config.job_name, "run_id": run_id, "task_id": mwu.multi_work_unit_id}
    unit_ids = tuple(u.work_unit_id for u in mwu.work_units)
    attempts = first_attempt + config.task_max_retries
    constructs = build_constructs(config)
    for attempt in range(first_attempt, attempts + 1):
        started = time.perf_counter()
        emit(TaskStarted(**task, attempt=attempt, work_unit_ids=unit_ids, executor=executor_name()).in_parts())
        try:
            results = run_attempt(constructs, run_id, mwu, attempt, last=attempt == attempts)
        except AttemptFailed as failure:
            emit(TaskFailed(**task, attempt=attempt, error=f"{failure}\n{failure.detail}"[:4000],
                            results=tuple(failure.results), duration_ms=_since(started)).in_parts())
            if attempt == attempts:
                return TaskOutcome(mwu.multi_work_unit_id, False, attempt, tuple(failure.results), str(failure))
            delay = float(config.task_retry_interval_s)
            emit([TaskRetried(**task, attempt=attempt, next_attempt=attempt + 1, delay_s=delay, reason=str(failure))])
            sleep(delay)
            continue
        except BaseException as stopped:  # interrupted (KeyboardInterrupt, SystemExit): the attempt still ends
            error = f"attempt stopped by {type(stopped).__name__}: {stopped}\n{_last_frames(stopped)}"
            emit([TaskFailed(**task, attempt=attempt, error=error[:4000], results=(), duration_ms=_since(started))])
            raise
        # In parts when the results are many (one atomic batch): no event grows with the work units of a task.
        emit(TaskSucceeded(**task, attempt=attempt, results=tuple(results), duration_ms=_since(started)).in_parts())
        return TaskOutcome(mwu.multi_work_unit_id, True, attempt, tuple(results))
    raise AssertionError("unreachable: the last attempt returns")


def _since(started: float) -> int:
    """Milliseconds since a perf_counter reading."""
    return int((time.perf_counter() - started) * 1000)
