"""Reducers of jobs and their runs: pure functions from (view, event) to the next view."""

from __future__ import annotations

from events.job import (
    DatasetSkipped,
    JobLockAcquired,
    JobLockReleased,
    JobRunCancelled,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    JobRunSucceeded,
    WorkUnitsPlanned,
)
from events.model import RunEvent
from projections.views import JobView, RunStatus, RunView, evolve


def advance(view: RunView, status: RunStatus) -> bool:
    """Whether a run may move to `status`: only forward, and never out of a finished state."""
    return not view.status.finished and status > view.status


def next_part(part: int, parts: int, expected_parts: int, folded: int) -> bool:
    """Whether a part is the next one of its event: parts fold in order, once each (the first part starts it)."""
    return part == 0 if folded == 0 else (parts == expected_parts and part == folded)


def reduce_run(view: RunView | None, event: RunEvent) -> RunView:
    """The next state of a run after one of its job-level events (duplicates change nothing)."""
    view = view or RunView(event.job, event.run_id)
    match event:
        case JobRunStarted():
            if view.started_at is not None:
                return view
            status = RunStatus.RUNNING if advance(view, RunStatus.RUNNING) else view.status
            return evolve(view, status=status, started_at=event.emitted_at, job_group=event.job_group)
        case WorkUnitsPlanned() if event.parts == 1:
            return evolve(view, work_units=len(event.work_units))
        case WorkUnitsPlanned():
            if not next_part(event.part, event.parts, view.plan_parts, view.plan_parts_folded):
                return view
            before = view.work_units if event.part else 0
            return evolve(view, work_units=before + len(event.work_units), plan_parts=event.parts,
                          plan_parts_folded=event.part + 1)
        case JobRunCommitted() if event.parts > 1 and event.part > 0:
            if not next_part(event.part, event.parts, view.commit_parts, view.commit_parts_folded):
                return view
            return evolve(
                view,
                commit_parts_folded=event.part + 1,
                datasets_committed=(*view.datasets_committed, *event.datasets_committed),
                datasets_abandoned=(*view.datasets_abandoned, *event.datasets_abandoned),
                datasets_skipped=tuple(dict.fromkeys((*view.datasets_skipped, *event.datasets_skipped))),
            )
        case JobRunSucceeded() if advance(view, RunStatus.SUCCESSFUL):
            return evolve(
                view,
                status=RunStatus.SUCCESSFUL,
                tasks_succeeded=event.tasks,
                records_extracted=event.records_extracted,
                records_written=event.records_written,
            )
        case JobRunCommitted() if advance(view, RunStatus.COMMITTED):
            return evolve(
                view,
                status=RunStatus.COMMITTED,
                ended_at=event.emitted_at,
                datasets_committed=event.datasets_committed,
                datasets_abandoned=event.datasets_abandoned,
                datasets_skipped=tuple(dict.fromkeys((*view.datasets_skipped, *event.datasets_skipped))),
                commit_parts=event.parts,
                commit_parts_folded=1 if event.parts > 1 else 0,
            )
        case DatasetSkipped() if event.dataset_urn not in view.datasets_skipped:
            return evolve(view, datasets_skipped=(*view.datasets_skipped, event.dataset_urn))
        case JobRunFailed() if advance(view, RunStatus.FAILED):
            return evolve(
                view, status=RunStatus.FAILED, ended_at=event.emitted_at, error=event.error,
                failed_tasks=event.failed_tasks,
            )
        case JobRunCancelled() if advance(view, RunStatus.CANCELLED):
            return evolve(view, status=RunStatus.CANCELLED, ended_at=event.emitted_at, error=event.reason)
    return view


def reduce_job(view: JobView | None, event: RunEvent, run_before: RunView | None) -> JobView:
    """The next state of a job after an event of one of its runs; run_before is that run before the event."""
    view = view or JobView(event.job)
    first_time = run_before is None or not run_before.status.finished
    match event:
        case JobLockAcquired() if first_time:
            return evolve(view, lock_holder=event.holder, lock_run_id=event.run_id)
        case JobLockReleased() if view.lock_run_id == event.run_id:
            return evolve(view, lock_holder=None, lock_run_id=None)
        case JobRunStarted() if run_before is None or run_before.started_at is None:
            return evolve(view, last_run_id=event.run_id, properties=event.properties)
        case JobRunCommitted() if first_time:
            return evolve(view, last_committed_run_id=event.run_id, failed_streak=())
        case JobRunFailed() if first_time and event.run_id not in view.failed_streak:
            return evolve(view, failed_streak=(*view.failed_streak, event.run_id))
    return view
