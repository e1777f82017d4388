"""Reducers of tasks, their attempts, and the work units they run: pure functions of (view, event)."""

from __future__ import annotations

from events.job import WorkUnitSpec
from events.task import (
    TaskEvent,
    TaskFailed,
    TaskRetried,
    TaskStarted,
    TaskSucceeded,
    WorkUnitResult,
)
from projections.views import (
    AttemptStatus,
    AttemptView,
    TaskView,
    WorkUnitStatus,
    WorkUnitView,
    evolve,
)


def _attempt_of(view: TaskView, number: int) -> AttemptView | None:
    """The task's attempt with this number, if it has one."""
    for attempt in view.attempts:
        if attempt.attempt == number:
            return attempt
    return None


def _with_attempt(attempts: tuple[AttemptView, ...], attempt: AttemptView) -> tuple[AttemptView, ...]:
    """The attempts with `attempt` put in its place (they stay ordered by number, one per number)."""
    if not attempts or attempts[-1].attempt < attempt.attempt:  # the usual case: a new attempt, the latest
        return (*attempts, attempt)
    others = [a for a in attempts if a.attempt != attempt.attempt]
    return tuple(sorted([*others, attempt], key=lambda a: a.attempt))


def reduce_task(view: TaskView | None, event: TaskEvent) -> TaskView:
    """The next state of a task after an event of one of its attempts (duplicates change nothing)."""
    if view is None:
        if type(event) is TaskStarted and event.part == 0:  # the usual first event of a task: one view built
            return TaskView(event.job, event.run_id, event.task_id, event.work_unit_ids, (_started(event),))
        view = TaskView(event.job, event.run_id, event.task_id)
    current = _attempt_of(view, event.attempt)
    match event:
        case TaskStarted() if event.part > 0:
            if current is None or not 0 < current.start_parts_folded == event.part < event.parts == current.start_parts:
                return view  # a repeat, or a later part without the first
            more = evolve(current, start_parts_folded=event.part + 1)
            return evolve(view, work_unit_ids=(*view.work_unit_ids, *event.work_unit_ids),
                          attempts=_with_attempt(view.attempts, more))
        case TaskStarted():
            if current is not None and current.started_at is not None:
                return view
            started = _started(event)
            if current is not None:  # its end was folded first: keep it
                started = evolve(current, started_at=event.emitted_at, executor=event.executor,
                                 start_parts=started.start_parts, start_parts_folded=started.start_parts_folded)
            return evolve(view, work_unit_ids=event.work_unit_ids, attempts=_with_attempt(view.attempts, started))
        case TaskSucceeded() | TaskFailed():
            if current is not None and current.status != AttemptStatus.RUNNING:
                return _with_part(view, current, event)
            if event.part > 0:
                return view  # a later part without the first: ignored, the attempt's ending stays incomplete
            return evolve(view, attempts=_with_attempt(view.attempts, _ended(current, event)))
        case TaskRetried():
            base = current or AttemptView(event.attempt, AttemptStatus.FAILED)
            return evolve(view, attempts=_with_attempt(view.attempts, evolve(base, retry_delay_s=event.delay_s)))
    return view


def _started(event: TaskStarted) -> AttemptView:
    """An attempt as its start (the first part of it, when in parts) leaves it."""
    return AttemptView(event.attempt, AttemptStatus.RUNNING, event.emitted_at, executor=event.executor,
                       start_parts=event.parts, start_parts_folded=1 if event.parts > 1 else 0)


def _with_part(view: TaskView, current: AttemptView, event: TaskSucceeded | TaskFailed) -> TaskView:
    """A later part of an attempt's ending adds its results (parts fold in order, once each); anything else, nothing."""
    failed = isinstance(event, TaskFailed)
    if not 0 < current.parts_folded == event.part < event.parts == current.parts or failed != (
            current.status == AttemptStatus.FAILED):
        return view
    more = evolve(current, results=(*current.results, *event.results), parts_folded=event.part + 1)
    return evolve(view, attempts=_with_attempt(view.attempts, more))


def _ended(current: AttemptView | None, event: TaskSucceeded | TaskFailed) -> AttemptView:
    """The attempt as its end leaves it (current: the attempt as it was, None when its start is not folded yet)."""
    return evolve(
        current or AttemptView(event.attempt, AttemptStatus.RUNNING),
        status=AttemptStatus.FAILED if isinstance(event, TaskFailed) else AttemptStatus.SUCCEEDED,
        ended_at=event.emitted_at,
        error=event.error if isinstance(event, TaskFailed) else None,
        duration_ms=event.duration_ms,
        results=event.results,
        parts=event.parts,
        parts_folded=1 if event.parts > 1 else 0,
    )


def planned_work_unit(job: str, run_id: str, spec: WorkUnitSpec) -> WorkUnitView:
    """A work unit as the Source planned it, before any task ran it."""
    return WorkUnitView(job, run_id, spec)


def _newer(view: WorkUnitView, attempt: int, status: WorkUnitStatus) -> bool:
    """Whether (attempt, status) comes after the work unit's current one; COMMITTED is final."""
    if view.status == WorkUnitStatus.COMMITTED:
        return False
    return (attempt, status) > (view.attempt, view.status)


def work_unit_started(view: WorkUnitView, task_id: str, attempt: int) -> WorkUnitView:
    """A task attempt began running the work unit."""
    if not _newer(view, attempt, WorkUnitStatus.RUNNING):
        return view
    return evolve(view, status=WorkUnitStatus.RUNNING, attempt=attempt, task_id=task_id)


def work_unit_ended(view: WorkUnitView, task_id: str, attempt: int, result: WorkUnitResult | None,
                    error: str | None) -> WorkUnitView:
    """A task attempt finished the work unit: SUCCESSFUL, or FAILED with what it got done."""
    status = WorkUnitStatus.FAILED if error is not None else WorkUnitStatus.SUCCESSFUL
    if not _newer(view, attempt, status):
        return view
    return evolve(
        view,
        status=status,
        attempt=attempt,
        task_id=task_id,
        error=error,
        actual_high_watermark=result.actual_high_watermark if result else view.actual_high_watermark,
        records_written=result.records_written if result else view.records_written,
    )


def work_unit_committed(view: WorkUnitView) -> WorkUnitView:
    """The work unit's output was published."""
    if view.status != WorkUnitStatus.SUCCESSFUL:
        return view
    return evolve(view, status=WorkUnitStatus.COMMITTED)
