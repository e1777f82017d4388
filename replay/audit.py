"""`oncelog audit RUN_ID`: one run as a timeline — its phases (lock, recover, plan, tasks, commit, cleanup), work
units, task attempts and retries with records, bytes and throughput, commit steps with their timings, watermarks
moved — built by folding only that run's events (and the earlier runs' sequences its recovery finished).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import TypeVar

from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    CommitStepSpec,
    DatasetStateStep,
    DeltaCommitStep,
    FsRenameStep,
    HighWatermarkStep,
    TableCommitStep,
)
from events.dataset import WatermarkAdvanced
from events.errors import OncelogError
from events.job import (
    ENGINE_PROPERTY,
    REASON_PROPERTY,
    DatasetSkipped,
    JobLockAcquired,
    JobLockReleased,
    JobRunCancelled,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    JobRunSucceeded,
    WorkUnitSpec,
    WorkUnitsPlanned,
)
from events.log import EventLog, StoredRecord
from events.model import DatasetEvent, Event, LoggedEvent, RunEvent
from events.task import TaskFailed, TaskStarted, TaskSucceeded, WorkUnitResult
from projections.state import State
from projections.views import (
    AttemptStatus,
    AttemptView,
    Phase,
    RunView,
    TaskView,
    WorkUnitView,
)

Progress = Callable[[int], None]
E = TypeVar("E", bound=Event)

SPARK_APP_ID = "spark.app.id"
"""The JobRunStarted property naming the Spark application the run's tasks ran in."""

ENDINGS = (JobRunCommitted, JobRunFailed, JobRunCancelled)


class RunNotFoundError(OncelogError):
    """No run with that id in the log (or several jobs have one, and the job was not named)."""


AUDITED_PHASES = tuple(p for p in Phase if p is not Phase.START)
"""The phases an audit shows: those the log tells (the engine's start-up, Spark's JVM, is not recorded)."""


@dataclass(frozen=True)
class PhaseSpan:
    """When a run was in one phase, as its events tell, and what it did there."""

    phase: Phase
    start: datetime
    end: datetime
    detail: str

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True)
class StepRow:
    """One commit step of one dataset's sequence, and what happened to it."""

    dataset_urn: str
    index: int
    kind: str
    detail: str
    outcome: str
    applied_at: datetime | None
    duration_ms: float | None
    """None: not applied, or applied by a completion of an earlier version, which did not time its steps."""
    failures: tuple[str, ...]


@dataclass(frozen=True)
class SequenceRow:
    """One dataset's commit sequence, and what it publishes."""

    dataset_urn: str
    status: str
    planned_at: datetime | None
    """None for a recovered sequence: its plan lies in the log before the run."""
    ended_at: datetime | None
    error: str | None
    run_id: str = ""
    steps: int = 0
    records_published: int = 0
    files_published: int = 0
    bytes_published: int = 0


@dataclass(frozen=True)
class WatermarkMove:
    """A partition's committed watermark, moved by the run."""

    dataset_urn: str
    partition: str
    low: int
    value: int
    at: datetime


@dataclass(frozen=True)
class TaskRow:
    """A task with its work units, what its last attempt wrote, and how fast."""

    task_id: str
    status: str
    attempts: int
    work_unit_ids: tuple[str, ...]
    records: int
    bytes: int
    files: int
    started_at: datetime | None
    ended_at: datetime | None
    seconds: float
    executor: str

    @property
    def records_per_s(self) -> float | None:
        return self.records / self.seconds if self.seconds > 0 else None

    @property
    def bytes_per_s(self) -> float | None:
        return self.bytes / self.seconds if self.seconds > 0 else None


@dataclass(frozen=True)
class DatasetRow:
    """A dataset of the run: what its tasks wrote, and how its commit sequence went (its steps rolled up)."""

    dataset_urn: str
    work_units: int
    records: int
    bytes: int
    files: int
    status: str
    steps: int
    executed: int
    verified: int
    failures: int
    commit_ms: float | None
    records_published: int
    error: str | None


@dataclass(frozen=True)
class FailureRow:
    """A task whose attempts failed: the work unit and dataset it failed on (when known), its root cause's first
    line, and how the task ended (`recovered`: a later attempt succeeded)."""

    task_id: str
    work_unit_id: str
    dataset_urn: str
    attempts_failed: int
    last_attempt: int
    cause: str
    retriable: bool
    recovered: bool
    work_units: int
    parts: tuple[str, ...] = ()
    """The parts a failed pack was split into to isolate the failure (engines/isolation.py); empty: not split."""
    failed_parts: tuple[str, ...] = ()
    """Those of `parts` (or of their parts) that stayed failed: where the culprits are."""

    @property
    def split(self) -> bool:
        """Whether the task was split into parts after this failure: its datasets' fate is its parts'."""
        return bool(self.parts)

    @property
    def culprit(self) -> bool:
        """Whether this row is a failure the run kept: it stayed failed and was not split into parts."""
        return not self.recovered and not self.split

    @property
    def where(self) -> str:
        """The dataset (and work unit) it failed on, or the task's size when the engine could not tell; for a split
        pack, its parts and which of them stayed failed."""
        if self.split:
            failed = f"; failed: {', '.join(self.failed_parts)}" if self.failed_parts else "; every part succeeded"
            return f"split into {len(self.parts)} parts ({', '.join(self.parts)}){failed}"
        if self.dataset_urn:
            return self.dataset_urn + (f" (work unit {self.work_unit_id})" if self.work_unit_id else "")
        return f"one of its {self.work_units:,} work units"


NOT_PUBLISHED = "not published"
"""A dataset whose tasks wrote it but whose run failed before committing it (job.commit.policy full)."""
FAILED_WITH_TASK = "failed with its task"
"""A dataset packed into a task that failed on another dataset."""
FAILED = "failed"
"""A dataset a task failed on: a culprit."""


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """A key sorting names as people read them: ds.2 before ds.10 (digit runs compare as numbers)."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in re.split(r"(\d+)", text) if part)


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
    recovered: list[SequenceRow] = field(default_factory=list)
    """Sequences of earlier runs that this run's recovery finished (or gave up), before it planned anything."""
    recovered_steps: list[StepRow] = field(default_factory=list)
    recovery_events: list[LoggedEvent] = field(default_factory=list)

    @property
    def attempts(self) -> list[tuple[TaskView, AttemptView]]:
        return [(task, attempt) for task in self.tasks for attempt in task.attempts]

    @property
    def started(self) -> JobRunStarted | None:
        return _first(self._own(), JobRunStarted)

    @cached_property
    def ending(self) -> JobRunCommitted | JobRunFailed | JobRunCancelled | None:
        """The event that ended the run, if the log has one (asked once per dataset row: found once)."""
        return next((e for e in self._own() if isinstance(e, ENDINGS)), None)

    @property
    def properties(self) -> dict[str, str]:
        """The job's properties as the run started with them."""
        started = self.started
        return dict(started.properties) if started else {}

    @property
    def spark_app_id(self) -> str | None:
        """The Spark application the run's tasks ran in, when the launcher recorded it."""
        return self.properties.get(SPARK_APP_ID)

    @property
    def engine(self) -> tuple[str, str] | None:
        """The task engine the run ran on and why (dataframe or records), when the launcher recorded it."""
        properties = self.properties
        kind = properties.get(ENGINE_PROPERTY)
        return None if kind is None else (kind, properties.get(REASON_PROPERTY, ""))

    def axis(self) -> tuple[datetime, datetime]:
        """The run's time span: from JobRunStarted to its end (its ending event, or releasing the lock after
        cleanup); a run that never ended spans to its last event."""
        own = [e for e in self._own() if isinstance(e, RunEvent)]
        moments = [e.emitted_at for e in own] or [logged.event.emitted_at for logged in self.events]
        started = self.started
        start = started.emitted_at if started else min(moments)
        ends = [e.emitted_at for e in own if isinstance(e, (*ENDINGS, JobLockReleased))]
        end = max(ends) if ends else max(moments)
        return start, max(start, end)

    def phases(self) -> list[PhaseSpan]:
        """The phases the run's events show, in order; a phase it never reached is left out."""
        own = list(self._own())
        start, end = self.axis()
        phases: list[PhaseSpan] = []
        acquired, released = _first(own, JobLockAcquired), _first(own, JobLockReleased)
        if acquired is not None:
            phases.append(PhaseSpan(Phase.LOCK, max(start, acquired.emitted_at), released.emitted_at if released
                                    else end, f"held by {acquired.holder}" if released
                                    else f"held by {acquired.holder}; its release is not in the log"))
        planned = _first(own, WorkUnitsPlanned)
        recovery_end = max((logged.event.emitted_at for logged in self.recovery_events), default=start)
        if self.started is not None:
            recovered = f"{len(self.recovered)} sequence(s) of earlier runs finished" if self.recovered \
                else "nothing to recover"
            phases.append(PhaseSpan(Phase.RECOVER, start, recovery_end, recovered))
        if planned is not None:
            skipped = sum(1 for e in own if isinstance(e, DatasetSkipped))
            phases.append(PhaseSpan(Phase.PLAN, recovery_end, max(recovery_end, planned.emitted_at),
                                    f"{self.run.work_units:,} work units"
                                    + (f", {skipped} dataset(s) skipped" if skipped else "")))
        task_events = [e for e in own if isinstance(e, (TaskStarted, TaskSucceeded, TaskFailed))]
        if task_events:
            first = planned.emitted_at if planned else min(e.emitted_at for e in task_events)
            succeeded = _first(own, JobRunSucceeded)
            last = max([e.emitted_at for e in task_events] + ([succeeded.emitted_at] if succeeded else []))
            records = sum(t.records for t in self.task_rows())
            phases.append(PhaseSpan(Phase.TASKS, first, max(first, last),
                                    f"{len(self.tasks)} tasks, {len(self.attempts)} attempts, {records:,} records"))
        if self.sequences:
            first = min(s.planned_at or start for s in self.sequences)
            ended = [s.ended_at for s in self.sequences if s.ended_at is not None and s.ended_at <= end]
            ending = self.ending
            last = max(ended + ([ending.emitted_at] if isinstance(ending, JobRunCommitted) else []), default=first)
            counts = Counter(s.status for s in self.sequences)
            phases.append(PhaseSpan(Phase.COMMIT, first, max(first, last), f"{len(self.sequences):,} datasets: "
                                    + ", ".join(f"{n:,} {status}" for status, n in sorted(counts.items()))))
        ending = self.ending
        if ending is not None and released is not None:
            phases.append(PhaseSpan(Phase.CLEANUP, ending.emitted_at, max(ending.emitted_at, released.emitted_at),
                                    "staging and task output removed, lock released"))
        return phases

    def failed_attempts(self) -> dict[tuple[str, int], TaskFailed]:
        """Each failed attempt's TaskFailed (its first part), by (task, attempt)."""
        return {(e.task_id, e.attempt): e for e in self._own() if isinstance(e, TaskFailed) and e.part == 0}

    def failures(self) -> list[FailureRow]:
        """The tasks whose attempts failed, those that stayed failed first, each by dataset (naturally sorted)."""
        failed = self.failed_attempts()
        by_task: dict[str, list[TaskFailed]] = {}
        for event in failed.values():
            by_task.setdefault(event.task_id, []).append(event)
        tasks = {t.task_id: t for t in self.tasks}
        specs = {w.spec.work_unit_id: w.spec for w in self.work_units}
        parts = self.parts()
        stayed = self._stayed_failed(parts)
        rows = []
        for task_id, events in by_task.items():
            last = max(events, key=lambda e: e.attempt)
            view = tasks.get(task_id)
            ended = view.last if view is not None else None
            unit_ids = view.work_unit_ids if view is not None else ()
            unit, urn = last.failed_work_unit, last.failed_dataset
            if not urn:
                unit, urn = _named_unit(last, [specs[u] for u in unit_ids if u in specs])
            recovered = ended is not None and ended.status is AttemptStatus.SUCCEEDED
            split = () if recovered else parts.get(task_id, ())
            rows.append(FailureRow(task_id, unit, urn, len(events), last.attempt, last.cause_line, last.retriable,
                                   recovered, len(unit_ids), split,
                                   tuple(p for p in self._descendants(task_id, parts) if p in stayed)))
        return sorted(rows, key=lambda r: (r.recovered, r.split, natural_key(r.dataset_urn or "~"),
                                           natural_key(r.task_id)))

    def parts(self) -> dict[str, tuple[str, ...]]:
        """Each task split into parts (engines/isolation.py: part `<task>.<n>`) -> its parts, naturally sorted."""
        ids = {t.task_id for t in self.tasks}
        found: dict[str, list[str]] = {}
        for task_id in ids:
            parent, _, number = task_id.rpartition(".")
            if parent in ids and number.isdigit():
                found.setdefault(parent, []).append(task_id)
        return {parent: tuple(sorted(children, key=natural_key)) for parent, children in found.items()}

    def _stayed_failed(self, parts: dict[str, tuple[str, ...]]) -> set[str]:
        """The tasks whose last attempt failed and that were not split: the failures the run kept."""
        return {t.task_id for t in self.tasks if t.task_id not in parts and t.last is not None
                and t.last.status is AttemptStatus.FAILED}

    @staticmethod
    def _descendants(task_id: str, parts: dict[str, tuple[str, ...]]) -> list[str]:
        """A task's parts, their parts and so on, in order."""
        found = []
        for part in parts.get(task_id, ()):
            found += [part, *AuditTimeline._descendants(part, parts)]
        return found

    def task_rows(self) -> list[TaskRow]:
        """Each task with its work units, records and bytes (of its last attempt) and its duration."""
        rows = []
        parts = self.parts()
        for task in self.tasks:
            last = task.last
            if last is None:
                continue
            status = last.status.name.lower()
            if task.task_id in parts and last.status is AttemptStatus.FAILED:
                status = f"split into {len(parts[task.task_id])} parts"
            seconds = last.duration_ms / 1000 if last.duration_ms else (
                (last.ended_at - last.started_at).total_seconds() if last.ended_at and last.started_at else 0.0)
            rows.append(TaskRow(
                task.task_id, status, len(task.attempts), task.work_unit_ids,
                sum(r.records_written for r in last.results), sum(result_bytes(r) for r in last.results),
                sum(len(r.output_files) for r in last.results), task.attempts[0].started_at, last.ended_at,
                seconds, last.executor,
            ))
        return rows

    def dataset_rows(self) -> list[DatasetRow]:
        """Every dataset of the run (planned, written or committed): what was written and how its commit went; those
        a task failed on first (with their error's first line), then the others needing attention, then the rest,
        each group naturally sorted (ds.2 before ds.10)."""
        units = Counter(w.spec.dataset_urn for w in self.work_units)
        written: dict[str, list[WorkUnitResult]] = {}
        for task in self.tasks:
            last = task.last
            if last is not None and (last.status is AttemptStatus.SUCCEEDED or last.results):
                for result in last.results:
                    written.setdefault(result.dataset_urn, []).append(result)
        sequences = {s.dataset_urn: s for s in self.sequences}
        steps: dict[str, list[StepRow]] = {}
        for step in self.steps:
            steps.setdefault(step.dataset_urn, []).append(step)
        culprits = {f.dataset_urn: f for f in self.failures() if f.culprit and f.dataset_urn}
        along = self._failed_along(culprits)
        rows = []
        for urn in set(units) | set(written) | set(sequences):
            results, sequence, its_steps = written.get(urn, []), sequences.get(urn), steps.get(urn, [])
            status, error = self._unplanned(urn, culprits, along, urn in written)
            rows.append(DatasetRow(
                urn, units.get(urn, 0), sum(r.records_written for r in results), sum(result_bytes(r) for r in results),
                sum(len(r.output_files) for r in results), sequence.status if sequence else status,
                len(its_steps), sum(1 for s in its_steps if s.outcome == "executed"),
                sum(1 for s in its_steps if s.outcome == "verified"), sum(len(s.failures) for s in its_steps),
                (sequence.ended_at - sequence.planned_at).total_seconds() * 1000
                if sequence and sequence.ended_at and sequence.planned_at else None,
                sequence.records_published if sequence else 0,
                (sequence.error or error) if sequence else error,
            ))
        return sorted(rows, key=_attention)

    def _failed_along(self, culprits: dict[str, FailureRow]) -> dict[str, str]:
        """Datasets of the work units of tasks that stayed failed, that are no culprit: what their task failed on."""
        specs = {w.spec.work_unit_id: w.spec for w in self.work_units}
        failed = {f.task_id: f for f in self.failures() if f.culprit}
        along: dict[str, str] = {}
        for task in self.tasks:
            failure = failed.get(task.task_id)
            if failure is None:
                continue
            for unit_id in task.work_unit_ids:
                spec = specs.get(unit_id)
                if spec is not None and spec.dataset_urn not in culprits:
                    along.setdefault(spec.dataset_urn, f"its task {task.task_id} failed on {failure.where}")
        return along

    def _unplanned(self, urn: str, culprits: dict[str, FailureRow], along: dict[str, str], written: bool
                   ) -> tuple[str, str | None]:
        """A dataset without a commit sequence: why, and the error's first line when a task failed."""
        if urn in culprits:
            return FAILED, culprits[urn].cause
        if urn in along:
            return FAILED_WITH_TASK, along[urn]
        if written and self.run.status.finished and self.ending is not None and not isinstance(
                self.ending, JobRunCommitted):
            return NOT_PUBLISHED, None
        return "not planned", None

    def _own(self) -> Iterator[Event]:
        return (logged.event for logged in self.events)


FINE_DATASET_STATUSES = ("completed",)
ATTENTION_ORDER = (FAILED, FAILED_WITH_TASK, "abandoned", "pending", NOT_PUBLISHED, "not planned")
"""Datasets in the order an operator looks at them: culprits, then unfinished commits, then the rest."""


def _attention(row: DatasetRow) -> tuple[int, tuple[tuple[int, int | str], ...]]:
    """Culprits first, then datasets needing attention (failed steps count), then the rest; each naturally sorted."""
    rank = ATTENTION_ORDER.index(row.status) if row.status in ATTENTION_ORDER else len(ATTENTION_ORDER)
    if row.status in FINE_DATASET_STATUSES:
        rank = len(ATTENTION_ORDER) + (0 if row.failures else 1)
    return rank, natural_key(row.dataset_urn)


def _named_unit(event: TaskFailed, specs: list[WorkUnitSpec]) -> tuple[str, str]:
    """The work unit (and dataset) a TaskFailed that names none failed on: the task's only one, else the one whose
    partition its error names (Spark's error names it, not which work unit it was); ("", "") if none can tell."""
    if len(specs) == 1:
        return specs[0].work_unit_id, specs[0].dataset_urn
    text = f"{event.cause}\n{event.error}"
    named = [s for s in specs if re.search(rf"(?<![\w.]){re.escape(s.partition)}(?![\w.])", text)]
    if len({s.dataset_urn for s in named}) == 1:
        return (named[0].work_unit_id if len(named) == 1 else ""), named[0].dataset_urn
    return "", ""


def result_bytes(result: WorkUnitResult) -> int:
    """The bytes a work unit wrote: as the task counted them, else the size of its output files."""
    return result.bytes_written or sum(f.size for f in result.output_files)


def describe_step(step: CommitStepSpec) -> str:
    """A step in a few words: what it moves or sets."""
    match step:
        case FsRenameStep():
            return f"{step.src} → {step.dst} ({step.size} B)"
        case HighWatermarkStep():
            return f"{step.partition}: {step.low_watermark} → {step.value}"
        case DatasetStateStep():
            return f"{step.records_published} records, {step.files_published} files"
        case TableCommitStep():
            group = f", run's snapshot {step.group} #{step.member}" if step.group is not None else ""
            return f"commit {step.table} ({step.commit_id}{group})"
        case DeltaCommitStep():
            return f"commit Delta table {step.table} ({step.commit_id}, app transaction {step.app_id} v{step.version})"
    return repr(step)


def audit(log: EventLog, run_id: str, job: str | None = None, progress: Progress | None = None) -> AuditTimeline:
    """The timeline of a run; RunNotFoundError when the log has no such run (or it is ambiguous)."""
    events: list[LoggedEvent] = []
    deleted: dict[tuple[int, bytes], int] = {}
    """(partition, key) -> offset of its latest tombstone (`oncelog gc`): what came before it is deleted."""

    def forget(record: StoredRecord) -> None:
        deleted[(record.partition, record.key)] = record.offset

    for count, logged in enumerate(log.read(on_tombstone=forget), start=1):
        if logged.event.run_id == run_id and (job is None or logged.event.job == job):
            events.append(logged)
        if progress is not None and count % 10_000 == 0:
            progress(count)
    if deleted:
        events = [e for e in events if e.offset > deleted.get((e.partition, e.event.key.encode()), -1)]
    jobs = sorted({logged.event.job for logged in events})
    if not jobs:
        raise RunNotFoundError(f"no run {run_id!r}" + (f" of job {job!r}" if job else "") + f" in {log.url}")
    if len(jobs) > 1:
        raise RunNotFoundError(f"run id {run_id!r} belongs to several jobs ({', '.join(jobs)}): name one with --job")
    return _timeline(jobs[0], run_id, events, _recovery_events(log, jobs[0], run_id, events))


def _recovery_events(log: EventLog, job: str, run_id: str, events: list[LoggedEvent]) -> list[LoggedEvent]:
    """The dataset events of the job's earlier runs that this run's recovery appended: those between its start and
    its plan (or its end), read from that stretch of the log only."""
    started = next((logged for logged in events if isinstance(logged.event, JobRunStarted)), None)
    if started is None:
        return []
    until = next((logged for logged in events if isinstance(logged.event, (WorkUnitsPlanned, *ENDINGS))), None)
    start_at = started.event.emitted_at
    until_at = until.event.emitted_at if until else None
    found = []
    window = log.read(log.offsets_for_time(started.timestamp_ms),
                      log.offsets_for_time(until.timestamp_ms + 1) if until else None)
    for logged in window:
        event = logged.event
        if (isinstance(event, DatasetEvent) and event.job == job and event.run_id != run_id
                and start_at <= event.emitted_at and (until_at is None or event.emitted_at <= until_at)):
            found.append(logged)
    return found


def _timeline(job: str, run_id: str, events: list[LoggedEvent], recovery: list[LoggedEvent]) -> AuditTimeline:
    state = State()
    for logged in events:
        if isinstance(logged.event, RunEvent):  # runs, tasks and work units; _commit_rows reads the dataset events
            state.apply(logged)
    run = state.runs.get((job, run_id)) or RunView(job, run_id)
    sequences, steps, watermarks = _commit_rows(logged.event for logged in events)
    recovered, recovered_steps, _ = _commit_rows(logged.event for logged in recovery)
    return AuditTimeline(
        job, run_id, run, events,
        work_units=sorted(state.work_units.get((job, run_id), {}).values(),
                          key=lambda w: natural_key(w.spec.work_unit_id)),
        tasks=sorted(state.tasks.get((job, run_id), {}).values(), key=lambda t: natural_key(t.task_id)),
        sequences=sequences, steps=steps, watermarks=watermarks, recovered=recovered, recovered_steps=recovered_steps,
        recovery_events=recovery,
    )


def _commit_rows(events: Iterable[Event]) -> tuple[list[SequenceRow], list[StepRow], list[WatermarkMove]]:
    """The sequences, their steps and the watermarks they moved, from the dataset events among `events`."""
    planned: dict[tuple[str, str], CommitSequencePlanned] = {}
    applied: dict[tuple[str, str, int], CommitStepApplied] = {}
    failures: dict[tuple[str, str, int], list[str]] = {}
    ends: dict[tuple[str, str], tuple[str, datetime, str | None]] = {}
    completions: dict[tuple[str, str], CommitSequenceCompleted] = {}
    watermarks: list[WatermarkMove] = []
    runs: dict[tuple[str, str], str] = {}
    for event in events:
        if not isinstance(event, DatasetEvent):
            continue
        sequence = (event.dataset_urn, event.sequence_id)
        runs.setdefault(sequence, event.run_id)
        match event:
            case CommitSequencePlanned() if event.part > 0:
                first = planned.get(sequence)
                if first is not None and first.parts == event.parts:  # the next part of a plan in parts
                    planned[sequence] = first.model_copy(update={"steps": (*first.steps, *event.steps)})
            case CommitSequencePlanned():
                planned[sequence] = event  # a plan extended by CommitStepStore.put: the longest, latest one
            case CommitStepApplied():
                applied.setdefault((*sequence, event.step_index), event)
            case CommitStepFailed():
                failures.setdefault((*sequence, event.step_index), []).append(f"#{event.attempt}: {event.error}")
            case CommitSequenceCompleted():
                ends.setdefault(sequence, ("completed", event.emitted_at, None))
                completions.setdefault(sequence, event)
            case CommitSequenceAbandoned():
                ends.setdefault(sequence, ("abandoned", event.emitted_at, event.error))
            case WatermarkAdvanced():
                watermarks.append(WatermarkMove(event.dataset_urn, event.partition, event.low_watermark, event.value,
                                                event.emitted_at))
    sequences: list[SequenceRow] = []
    steps: list[StepRow] = []
    for urn, sequence_id in sorted(set(planned) | set(ends) | {k[:2] for k in (*applied, *failures)},
                                   key=lambda k: (natural_key(k[0]), k[1])):
        plan = planned.get((urn, sequence_id))
        status, ended_at, error = ends.get((urn, sequence_id), ("pending", None, None))
        if plan is None:  # planned before the events read (a recovered sequence): its steps as they were applied
            indices = sorted({i for u, s, i in (*applied, *failures) if (u, s) == (urn, sequence_id)})
            sequences.append(SequenceRow(urn, status, None, ended_at, error, runs.get((urn, sequence_id), "")))
            specs: list[tuple[int, str, str]] = [(i, "", "") for i in indices]
        else:
            state_steps = [s for s in plan.steps if isinstance(s, DatasetStateStep)]
            sequences.append(SequenceRow(
                urn, status, plan.emitted_at, ended_at, error, plan.run_id, len(plan.steps),
                sum(s.records_published for s in state_steps), sum(s.files_published for s in state_steps),
                sum(s.size for s in plan.steps if isinstance(s, FsRenameStep)),
            ))
            specs = [(i, step.kind, describe_step(step)) for i, step in enumerate(plan.steps)]
        completion = completions.get((urn, sequence_id))
        for index, kind, detail in specs:
            done = applied.get((urn, sequence_id, index))
            outcome, at, duration = ((done.outcome, done.emitted_at, done.duration_ms) if done
                                     else _applied_by(completion, index))
            steps.append(StepRow(urn, index, kind, detail, outcome, at, duration,
                                 tuple(failures.get((urn, sequence_id, index), []))))
    return sequences, steps, watermarks


def _applied_by(completion: CommitSequenceCompleted | None, index: int) -> tuple[str, datetime | None, float | None]:
    """A step with no CommitStepApplied of its own: executed by the attempt that completed its sequence, if that
    completion (v2) counts it, in the time it says (v3; None: an earlier version did not record it); else not
    applied."""
    if completion is None or completion.steps_applied is None or index >= completion.steps_applied:
        return "not applied", None, None
    timed = completion.step_ms
    return "executed", completion.emitted_at, timed[index] if index < len(timed) else None


def _first(events: Iterable[Event], kind: type[E]) -> E | None:
    return next((e for e in events if isinstance(e, kind)), None)

