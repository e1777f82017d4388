"""A task on the records engine: the work units of one MultiWorkUnit run in order through Gobblin's record flow,
its attempts recorded by the one attempt loop (engines.attempts).

It runs on a Spark executor (or in this process) and records each attempt in the log itself. A failed attempt's
staged output is dropped, except the last attempt's: what it fully wrote stays, for the `partial` commit policy.
"""

from __future__ import annotations

import time

from events.task import WorkUnitResult
from spark_pipeline.constructs import MultiWorkUnit, WorkUnitState
from spark_pipeline.engines.attempts import AttemptFailed, AttemptPlan, Emit, Sleep, TaskOutcome
from spark_pipeline.engines.isolation import run_task_attempts
from spark_pipeline.engines.policies import TaskQualityError
from spark_pipeline.engines.records.flow import Constructs, WorkUnitFlow, build_constructs
from spark_pipeline.jobfile.config import JobConfig


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
            try:  # a work unit its task-level policy refused keeps nothing, whatever the commit policy
                partial = _end_failed(flow, last and not isinstance(e, TaskQualityError))
            except Exception as cleanup:
                raise AttemptFailed(e, results, cleanup, unit.work_unit_id) from cleanup
            if partial is not None:
                results.append(partial)
            raise AttemptFailed(e, results, work_unit_id=unit.work_unit_id) from e
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
    """Run a task with its retries (its failing work units isolated: engines.isolation), recording every attempt
    through `emit` (`first_attempt`: AttemptPlan.of)."""
    constructs = build_constructs(config)
    return run_task_attempts(config, run_id, mwu,
                             lambda part, attempt, last: run_attempt(constructs, run_id, part, attempt, last),
                             AttemptPlan.of(config, first_attempt), emit, sleep)
