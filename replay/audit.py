"""`oncelog audit RUN_ID`: one run as a timeline — work units, task attempts and retries, commit steps with their
timings, watermarks moved — built by folding only that run's events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    CommitStepSpec,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.dataset import WatermarkAdvanced
from events.errors import OncelogError
from events.log import EventLog
from events.model import DatasetEvent, LoggedEvent
from projections.state import State
from projections.views import AttemptView, RunView, TaskView, WorkUnitView

Progress = Callable[[int], None]


class RunNotFoundError(OncelogError):
    """No run with that id in the log (or several jobs have one, and the job was not named)."""


@dataclass(frozen=True)
class Span:
    """A bar of the timeline: a task attempt or a commit step, from start to end."""

    group: str
    lane: str
    start: datetime
    end: datetime
    status: str
    detail: str


@dataclass(frozen=True)
class StepRow:
    """One commit step of one dataset's sequence, and what happened to it."""

    dataset_urn: str
    index: int
    kind: str
    detail: str
    outcome: str
    applied_at: datetime | None
    duration_ms: float
    failures: tuple[str, ...]


@dataclass(frozen=True)
class SequenceRow:
    """One dataset's commit sequence in the run."""

    dataset_urn: str
    status: str
    planned_at: datetime
    ended_at: datetime | None
    error: str | None


@dataclass(frozen=True)
class WatermarkMove:
    """A partition's committed watermark, moved by the run."""

    dataset_urn: str
    partition: str
    low: int
    value: int
    at: datetime


@dataclass
class AuditTimeline:
    """Everything the log says about one run."""

    job: str
    run_id: str
    run: RunView
    events: list[LoggedEvent]
    work_units: list[WorkUnitView]
    tasks: list[TaskView]
    sequences: list[SequenceRow] = field(default_factory=list)
    steps: list[StepRow] = field(default_factory=list)
    watermarks: list[WatermarkMove] = field(default_factory=list)

    @property
    def attempts(self) -> list[tuple[TaskView, AttemptView]]:
        return [(task, attempt) for task in self.tasks for attempt in task.attempts]

    def spans(self) -> list[Span]:
        """The bars of the Gantt chart: task attempts, then commit steps, in time order."""
        bars = []
        for task, a in self.attempts:
            start, end = a.started_at or a.ended_at, a.ended_at or a.started_at
            if start is not None and end is not None:
                bars.append(Span("tasks", f"{task.task_id} #{a.attempt}", start, end, a.status.name.lower(),
                                 a.error or a.executor))
        for step in self.steps:
            if step.applied_at is not None:
                start = step.applied_at - timedelta(milliseconds=step.duration_ms)
                bars.append(Span("commit", f"{step.dataset_urn} · {step.index} {step.kind}", start, step.applied_at,
                                 step.outcome, step.detail))
        return sorted(bars, key=lambda b: (b.group != "tasks", b.start))


def describe_step(step: CommitStepSpec) -> str:
    """A step in a few words: what it moves or sets."""
    match step:
        case FsRenameStep():
            return f"{step.src} → {step.dst} ({step.size} B)"
        case HighWatermarkStep():
            return f"{step.partition}: {step.low_watermark} → {step.value}"
        case DatasetStateStep():
            return f"{step.records_published} records, {step.files_published} files"
    return repr(step)


def audit(log: EventLog, run_id: str, job: str | None = None, progress: Progress | None = None) -> AuditTimeline:
    """The timeline of a run; RunNotFoundError when the log has no such run (or it is ambiguous)."""
    events: list[LoggedEvent] = []
    for count, logged in enumerate(log.read(), start=1):
        if logged.event.run_id == run_id and (job is None or logged.event.job == job):
            events.append(logged)
        if progress is not None and count % 10_000 == 0:
            progress(count)
    jobs = sorted({logged.event.job for logged in events})
    if not jobs:
        raise RunNotFoundError(f"no run {run_id!r}" + (f" of job {job!r}" if job else "") + f" in {log.url}")
    if len(jobs) > 1:
        raise RunNotFoundError(f"run id {run_id!r} belongs to several jobs ({', '.join(jobs)}): name one with --job")
    return _timeline(jobs[0], run_id, events)


def _timeline(job: str, run_id: str, events: list[LoggedEvent]) -> AuditTimeline:
    state = State()
    for logged in events:
        state.apply(logged)
    run = state.runs.get((job, run_id)) or RunView(job, run_id)
    timeline = AuditTimeline(
        job, run_id, run, events,
        work_units=sorted(state.work_units.get((job, run_id), {}).values(), key=lambda w: w.spec.work_unit_id),
        tasks=sorted(state.tasks.get((job, run_id), {}).values(), key=lambda t: t.task_id),
    )
    _commit_rows(timeline, [logged.event for logged in events if isinstance(logged.event, DatasetEvent)])
    return timeline


def _commit_rows(timeline: AuditTimeline, events: list[DatasetEvent]) -> None:
    planned: dict[str, CommitSequencePlanned] = {}
    applied: dict[tuple[str, int], CommitStepApplied] = {}
    failures: dict[tuple[str, int], list[str]] = {}
    ends: dict[str, tuple[str, datetime, str | None]] = {}
    for event in events:
        urn = event.dataset_urn
        match event:
            case CommitSequencePlanned():
                planned[urn] = event
            case CommitStepApplied():
                applied.setdefault((urn, event.step_index), event)
            case CommitStepFailed():
                failures.setdefault((urn, event.step_index), []).append(f"#{event.attempt}: {event.error}")
            case CommitSequenceCompleted():
                ends.setdefault(urn, ("completed", event.emitted_at, None))
            case CommitSequenceAbandoned():
                ends.setdefault(urn, ("abandoned", event.emitted_at, event.error))
            case WatermarkAdvanced():
                timeline.watermarks.append(
                    WatermarkMove(urn, event.partition, event.low_watermark, event.value, event.emitted_at))
    for urn, plan in sorted(planned.items()):
        status, ended_at, error = ends.get(urn, ("pending", None, None))
        timeline.sequences.append(SequenceRow(urn, status, plan.emitted_at, ended_at, error))
        for index, step in enumerate(plan.steps):
            done = applied.get((urn, index))
            timeline.steps.append(StepRow(
                urn, index, step.kind, describe_step(step), done.outcome if done else "not applied",
                done.emitted_at if done else None, done.duration_ms if done else 0.0,
                tuple(failures.get((urn, index), [])),
            ))
