"""The projected state of a log: every aggregate's view, and the fold that applies one event to it.

`State` is the fold's accumulator: a container of frozen views, keyed by aggregate. Applying an event hands the
affected views to the pure reducers (runs, tasks, commits) and puts back what they return. A repeated event
changes nothing; an event that cannot be placed (a task of a run never started) is reported as a Problem, with
its position, and skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from events.batch import CommitSequencesCompleted, CommitSequencesPlanned, ended_members, planned_member
from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    CommitStepRolledBack,
)
from events.completeness import EventTimeAdvanced, PartitionCompleted
from events.dataset import DatasetReleased, DatasetStateCommitted, WatermarkAdvanced
from events.errors import OncelogError
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
from events.keys import run_of_key
from events.model import DatasetEvent, Event, LoggedEvent, RunEvent
from events.published import DatasetPublished
from events.task import TaskEvent, TaskFailed, TaskRetried, TaskStarted, TaskSucceeded
from projections.commits import committed, reduce_dataset, reduce_sequence
from projections.runs import evolve, reduce_job, reduce_run
from projections.tasks import (
    planned_work_unit,
    reduce_task,
    work_unit_committed,
    work_unit_ended,
    work_unit_started,
)
from projections.views import (
    AttemptView,
    DatasetView,
    JobView,
    RunView,
    SequenceStatus,
    SequenceView,
    TaskView,
    WorkUnitView,
)

MAX_PROBLEMS = 1000
DETAIL_RUNS = 50
"""Runs per job whose tasks and work units the state keeps; older runs keep their summary (RunView)."""
PLANNING_DETAIL_RUNS = 2
"""The run being planned and the one before it (whose failed work units are retried)."""

RunKey = tuple[str, str]
DatasetKey = tuple[str, str]
SequenceKey = tuple[str, str, str]


class Where(Protocol):
    """A record's place in the log: a `Position`, or the `LoggedEvent` or `StoredRecord` read from there."""

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Problem:
    """A record the fold could not use, and where it lies."""

    partition: int | None
    offset: int | None
    kind: str
    message: str

    def where(self) -> str:
        return "(appended locally)" if self.partition is None else f"[{self.partition}]@{self.offset}"


@dataclass
class State:
    """Every view of a log's history, and the offsets it covers (next offset to fold, per partition)."""

    jobs: dict[str, JobView] = field(default_factory=dict)
    runs: dict[RunKey, RunView] = field(default_factory=dict)
    tasks: dict[RunKey, dict[str, TaskView]] = field(default_factory=dict)
    work_units: dict[RunKey, dict[str, WorkUnitView]] = field(default_factory=dict)
    datasets: dict[DatasetKey, DatasetView] = field(default_factory=dict)
    sequences: dict[SequenceKey, SequenceView] = field(default_factory=dict)
    """Sequences pending or abandoned; a completed one leaves only its id in `completed`."""
    completed: dict[DatasetKey, set[str]] = field(default_factory=dict)
    """Per dataset, the ids of its completed sequences: a late duplicate of their events changes nothing."""
    offsets: dict[int, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0
    detail_runs: int = DETAIL_RUNS
    lean: bool = False
    """Keep only what planning a run reads (see `for_planning`)."""
    open_plans: OpenPlans | None = field(default=None, compare=False, repr=False)
    """Which sequences are pending per dataset: derived from `sequences` on first use (snapshots do not store it)."""

    @classmethod
    def for_planning(cls) -> State:
        """The state a run plans from: detail of the latest runs only (the previous one's work units: the retries),
        no work-unit results in the attempts, no dataset lists in the runs (each dataset's events say it). At
        100,000 datasets a run's detail weighs gigabytes over fifty runs; this keeps a few hundred bytes a dataset."""
        return cls(detail_runs=PLANNING_DETAIL_RUNS, lean=True)

    def apply(self, logged: LoggedEvent) -> None:
        """Fold one event read from the log, and move the offsets past it (a later member of a batched record: once
        its first member was folded here, it is folded too, the offsets already past it)."""
        if not logged.member:
            self.apply_at(logged.event, logged)
        elif self.offsets.get(logged.partition) == logged.offset + 1:
            self.apply_event(logged.event, logged)

    def apply_at(self, event: Event, where: Where) -> None:
        """Fold one event read from `where` in the log (a LoggedEvent, a StoredRecord...); move the offsets past it."""
        partition, offset = where.partition, where.offset
        if offset < self.offsets.get(partition, 0):
            return  # already folded: catching up from a position this state covers
        handler = HANDLERS.get(type(event))  # apply_event's dispatch, inlined: this runs once per event of a replay
        if handler is None:
            self.report(where, "unknown-event", f"no reducer for event type {type(event).__name__}")
        else:
            handler(self, event, where)
        self.offsets[partition] = offset + 1

    def apply_tombstone(self, key: bytes, where: Where) -> None:
        """Fold a tombstone read from `where`: it deletes its key's events. `oncelog gc` tombstones every event of a
        run at once (the run's start last), so a tombstone of a run's event deletes the run: its view, tasks and
        work units, and its mentions in its job's view. Other keys' tombstones delete nothing the state keeps."""
        partition, offset = where.partition, where.offset
        if offset < self.offsets.get(partition, 0):
            return
        run = run_of_key(key.decode("utf-8", errors="replace"))
        if run is not None:
            self.forget_run(*run)
        self.offsets[partition] = offset + 1

    def forget_run(self, job: str, run_id: str) -> None:
        """Delete a run from the state, as if its events had never been folded (its datasets' events stay)."""
        key = (job, run_id)
        if self.runs.pop(key, None) is None:
            return
        self.tasks.pop(key, None)
        self.work_units.pop(key, None)
        view = self.jobs.get(job)
        if view is None:
            return
        changes: dict[str, object] = {}
        if run_id in view.recent_runs:
            changes["recent_runs"] = tuple(r for r in view.recent_runs if r != run_id)
        if run_id in view.failed_streak:
            changes["failed_streak"] = tuple(r for r in view.failed_streak if r != run_id)
        if view.lock_run_id == run_id:
            changes.update(lock_holder=None, lock_run_id=None)
        if view.last_run_id == run_id:
            remaining = self.runs_of(job)
            changes["last_run_id"] = remaining[-1].run_id if remaining else None
        if changes:
            self.jobs[job] = evolve(view, **changes)

    def apply_event(self, event: Event, position: Where | None = None) -> None:
        """Fold one event (position None: appended by this process and not read back)."""
        handler = HANDLERS.get(type(event))
        if handler is None:
            self.report(position, "unknown-event", f"no reducer for event type {type(event).__name__}")
            return
        handler(self, event, position)

    def skip_to(self, offsets: dict[int, int]) -> None:
        """Record that everything before `offsets` is folded (a record that could not be decoded, say)."""
        for partition, offset in offsets.items():
            self.offsets[partition] = max(self.offsets.get(partition, 0), offset)

    def report(self, position: Where | None, kind: str, message: str) -> None:
        """Keep a problem (the first MAX_PROBLEMS of them; all are counted)."""
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            partition = None if position is None else position.partition
            offset = None if position is None else position.offset
            self.problems.append(Problem(partition, offset, kind, message))

    # Queries: what the launcher, the CLI and the live views ask of the state.

    def pending_sequences(self, job: str | None = None) -> list[SequenceView]:
        """Commit sequences planned and neither completed nor abandoned, oldest first.

        DamagedHistoryError if one of them has parts of its plan missing, or has lost its end (`ends_missing`): it
        must not be applied, and the log that lost them must be looked at first."""
        pending = [s for s in self.sequences.values() if s.pending and (job is None or s.job == job)]
        damaged = [s for s in pending if not s.plan_complete or s.followed_by is not None]
        if damaged:
            raise DamagedHistoryError("; ".join(
                f"commit sequence {s.sequence_id!r} of {s.dataset_urn!r} ({s.job}): its {missing_plan_parts(s)}"
                if not s.plan_complete else missing_end(s) for s in damaged[:5])
                + f" ({len(damaged)} sequence(s)); none of them is applied")
        return sorted(pending, key=lambda s: (s.planned_at is None, s.planned_at, s.dataset_urn))

    def ends_missing(self) -> list[SequenceView]:
        """Sequences whose end is gone from the log: still pending, although a later sequence of their dataset was
        planned after them, which a run does only once the dataset's last sequence ended (completed, or abandoned).
        Nothing else looks like this: gc never deletes a sequence's events, `recover --release` frees only an
        abandoned sequence's dataset, and a dataset's events are one partition's, in order. On Kafka, where records
        can vanish (compaction after a wrong tombstone, retention, deleted records), this is how a lost end shows."""
        plans = self._open_plans()
        return [self.sequences[key] for key in sorted(plans.unended)]

    def check_ends(self) -> None:
        """DamagedHistoryError naming each sequence whose end is gone from the log (`ends_missing`): planning from
        such a history, or showing it, would take the sequence for pending and the dataset for unsettled."""
        if self.open_plans is not None and not self.open_plans.unended:
            return  # the common case, once the index exists: O(1)
        lost = self.ends_missing()
        if lost:
            raise DamagedHistoryError(
                f"the log is damaged: {'; '.join(missing_end(s) for s in lost[:5])}"
                + (f" (and {len(lost) - 5} more)" if len(lost) > 5 else "")
                + ". Restore the log from a replica or a backup; `oncelog verify` lists every damaged sequence")

    def _open_plans(self) -> OpenPlans:
        """The index of pending sequences by dataset, built from `sequences` the first time it is needed."""
        if self.open_plans is None:
            plans = self.open_plans = OpenPlans()
            for key, sequence in self.sequences.items():
                if not sequence.pending:
                    continue
                if sequence.followed_by is not None:
                    plans.unended.add(key)
                else:
                    plans.latest[(sequence.job, sequence.dataset_urn)] = (sequence.sequence_id,
                                                                          sequence.plan_position)
        return self.open_plans

    def note_planned(self, planned: SequenceView, position: Where | None) -> None:
        """A new sequence is planned: a sequence of its dataset still pending has lost its end (`ends_missing`)."""
        plans = self._open_plans()
        dataset = (planned.job, planned.dataset_urn)
        at = None if position is None else (position.partition, position.offset)
        earlier_id, earlier_at = plans.latest.get(dataset, (None, None))
        plans.latest[dataset] = (planned.sequence_id, at)
        key = (planned.job, planned.dataset_urn, earlier_id or "")
        earlier = self.sequences.get(key) if earlier_id is not None else None
        if earlier is None or not earlier.pending or earlier.followed_by is not None:
            return
        self.sequences[key] = evolve(earlier, followed_by=planned.sequence_id, followed_at=at,
                                     plan_position=earlier.plan_position or earlier_at)
        plans.unended.add(key)

    def note_ended(self, ended: SequenceView) -> None:
        """A sequence completed or was abandoned: no longer its dataset's pending one, nor one whose end is lost."""
        plans = self._open_plans()
        key = (ended.job, ended.dataset_urn, ended.sequence_id)
        plans.unended.discard(key)
        if plans.latest.get(key[:2], (None, None))[0] == ended.sequence_id:
            del plans.latest[key[:2]]

    def unsettled_datasets(self, job: str) -> dict[str, SequenceView]:
        """A job's datasets whose history is not settled, with the sequence that keeps it so: one pending, or one
        abandoned with steps applied and not rolled back (published half-way). Runs must not pull them."""
        found: dict[str, SequenceView] = {}
        for sequence in self.pending_sequences(job):
            found.setdefault(sequence.dataset_urn, sequence)
        for (j, urn), dataset in self.datasets.items():
            blocked = self.sequences.get((j, urn, dataset.blocked_by)) if dataset.blocked_by else None
            if j == job and blocked is not None:
                found.setdefault(urn, blocked)
        for sequence in self.sequences.values():
            if sequence.job == job and not sequence.pending and not sequence.settled:
                found.setdefault(sequence.dataset_urn, sequence)
        return found

    def dataset_states(self, job: str) -> dict[str, DatasetView]:
        """The latest committed state of each of a job's datasets, by URN (Gobblin's state by dataset URN)."""
        return {urn: view for (j, urn), view in self.datasets.items() if j == job}

    def previous_work_unit_states(self, job: str, current_run: str) -> list[WorkUnitView]:
        """The work units of the job's latest run before `current_run` (whose own start is already folded), with
        their states and actual high watermarks."""
        earlier = [run for run in self.runs_of(job) if run.run_id != current_run]
        if not earlier:
            return []
        return list(self.work_units.get((job, earlier[-1].run_id), {}).values())

    def runs_of(self, job: str) -> list[RunView]:
        """A job's runs, oldest first."""
        runs = [r for (j, _), r in self.runs.items() if j == job]
        return sorted(runs, key=lambda r: (r.started_at is None, r.started_at, r.run_id))

    def task_ids(self, job: str, run_id: str) -> set[str]:
        """The ids of a run's tasks (its MultiWorkUnits) that its plan or its tasks' events name."""
        key = (job, run_id)
        planned = {u.spec.multi_work_unit_id for u in self.work_units.get(key, {}).values()}
        return {task for task in planned if task is not None} | set(self.tasks.get(key, {}))


Handler = Callable[[State, Event, Where | None], None]


@dataclass
class OpenPlans:
    """Per dataset, its latest sequence while pending; and the pending sequences a later plan of their dataset
    followed (their end is gone: `State.ends_missing`)."""

    latest: dict[DatasetKey, tuple[str, tuple[int, int] | None]] = field(default_factory=dict)
    """Per dataset: its latest sequence while pending, and where its plan lies (when read from the log)."""
    unended: set[SequenceKey] = field(default_factory=set)


class DamagedHistoryError(OncelogError):
    """The log lacks part of an event appended in parts (they go in one atomic batch), or the end of a commit sequence
    its dataset planned past: it was damaged."""


def missing_end(sequence: SequenceView) -> str:
    """What shows a sequence's end is gone: where it was planned, and the later sequence of its dataset."""
    planned = (f"by run {sequence.run_id!r}" if sequence.plan_position is None
               else "at [{}]@{}".format(*sequence.plan_position))
    later = "" if sequence.followed_at is None else " at [{}]@{}".format(*sequence.followed_at)
    return (f"commit sequence {sequence.sequence_id!r} of {sequence.dataset_urn!r} ({sequence.job}), planned "
            f"{planned}, has no completion or abandonment in the log, yet sequence {sequence.followed_by!r} of its "
            f"dataset was planned after it{later}, which a run does only once the earlier one ended: its end is gone "
            f"from the log")


def missing_plan_parts(sequence: SequenceView) -> str:
    """What is missing of a sequence's plan in parts, and where its first part lies."""
    where = "" if sequence.plan_position is None else " at [{}]@{}".format(*sequence.plan_position)
    return (f"plan has {sequence.plan_parts_folded} of its {sequence.plan_parts} parts in the log (first part"
            f"{where or ' appended locally'}): the log is damaged")


def _run_event(state: State, event: Event, position: Where | None) -> None:
    assert isinstance(event, RunEvent)
    key = (event.job, event.run_id)
    before = state.runs.get(key)
    if before is None and not isinstance(event, (JobLockAcquired, JobRunStarted)):
        state.report(position, "unknown-run", f"{event.event_type()} for run {event.run_id!r} of job "
                     f"{event.job!r}, which never started")
        return
    run = reduce_run(before, event)
    if state.lean and (run.datasets_committed or run.datasets_abandoned):
        run = evolve(run, datasets_committed=(), datasets_abandoned=())  # the dataset events say it
    state.runs[key] = run
    job = reduce_job(state.jobs.get(event.job), event, before)
    if isinstance(event, JobRunStarted) and event.run_id not in job.recent_runs and (
        before is None or before.started_at is None
    ):
        job = _keep_detail_of(state, job, event.run_id)
    state.jobs[event.job] = job
    if state.runs[key].detail_dropped:
        return
    if isinstance(event, WorkUnitsPlanned):
        units = state.work_units.setdefault(key, {})
        for spec in event.work_units:
            units.setdefault(spec.work_unit_id, planned_work_unit(event.job, event.run_id, spec))
    elif isinstance(event, JobRunCommitted):
        committed = set(event.datasets_committed)
        units = state.work_units.get(key, {})
        for unit_id, unit in units.items():
            if unit.spec.dataset_urn in committed:
                units[unit_id] = work_unit_committed(unit)


def _keep_detail_of(state: State, job: JobView, run_id: str) -> JobView:
    """Add a run to the job's detailed runs; the oldest beyond `detail_runs` keep their summary only."""
    recent = (*job.recent_runs, run_id)
    for dropped in recent[: max(0, len(recent) - state.detail_runs)]:
        key = (job.job, dropped)
        state.tasks.pop(key, None)
        state.work_units.pop(key, None)
        run = state.runs.get(key)
        if run is not None:
            state.runs[key] = evolve(run, detail_dropped=True)
    return evolve(job, recent_runs=recent[-state.detail_runs :])


def _task_event(state: State, event: Event, position: Where | None) -> None:
    assert isinstance(event, TaskEvent)
    key = (event.job, event.run_id)
    run = state.runs.get(key)
    if run is None:
        state.report(position, "unknown-run", f"{event.event_type()} of task {event.task_id!r} for run "
                     f"{event.run_id!r} of job {event.job!r}, which never started")
        return
    if run.detail_dropped:
        return
    tasks = state.tasks.get(key)
    if tasks is None:
        tasks = state.tasks[key] = {}
    tasks[event.task_id] = reduce_task(tasks.get(event.task_id), event)
    units = state.work_units.get(key)
    if units is None:
        units = state.work_units[key] = {}
    # HANDLERS dispatches on the exact type: comparing it does what isinstance() would, and costs less.
    if type(event) is TaskStarted:
        for unit_id in event.work_unit_ids:
            unit = units.get(unit_id)
            if unit is not None:
                units[unit_id] = work_unit_started(unit, event.task_id, event.attempt)
    elif type(event) is TaskSucceeded or type(event) is TaskFailed:
        error = event.error if isinstance(event, TaskFailed) else None
        for result in event.results:
            unit = units.get(result.work_unit_id)
            if unit is not None:
                units[result.work_unit_id] = work_unit_ended(unit, event.task_id, event.attempt, result, error)
        if type(event) is TaskSucceeded and not state.lean:
            return  # the usual success: nothing more to do, no attempt to look up (a generator over the attempts)
        attempt = _attempt(tasks[event.task_id], event.attempt)
        if isinstance(event, TaskFailed) and attempt is not None and attempt.complete:
            # Once every part is in, the work units no part has a result for got nothing done (those with one
            # already stand at this attempt's FAILED: ending them again changes nothing).
            for unit_id in tasks[event.task_id].work_unit_ids:
                unit = units.get(unit_id)
                if unit is not None:
                    units[unit_id] = work_unit_ended(unit, event.task_id, event.attempt, None, event.error)
        if state.lean and attempt is not None and attempt.results:
            tasks[event.task_id] = _without_results(tasks[event.task_id])


def _without_results(task: TaskView) -> TaskView:
    """A task whose attempts keep no work-unit results (planning reads them from the work units' views)."""
    return evolve(task, attempts=tuple(evolve(a, results=()) if a.results else a for a in task.attempts))


def _attempt(task: TaskView, number: int) -> AttemptView | None:
    """A task's attempt by number."""
    return next((a for a in reversed(task.attempts) if a.attempt == number), None)


def _dataset_event(state: State, event: Event, position: Where | None) -> None:
    assert isinstance(event, DatasetEvent)
    dataset_key = (event.job, event.dataset_urn)
    if event.sequence_id in state.completed.get(dataset_key, ()):
        return  # a late duplicate of a completed sequence's event
    sequence_key = (event.job, event.dataset_urn, event.sequence_id)
    sequence = state.sequences.get(sequence_key)
    if sequence is None and not isinstance(event, CommitSequencePlanned):
        state.report(position, "unknown-sequence", f"{event.event_type()} for commit sequence "
                     f"{event.sequence_id!r} of {event.dataset_urn!r}, which was never planned")
        return
    if sequence is not None and not sequence.plan_complete and not isinstance(event, CommitSequencePlanned):
        state.report(position, "incomplete-plan", f"{event.event_type()} for commit sequence {event.sequence_id!r} "
                     f"of {event.dataset_urn!r}, whose {missing_plan_parts(sequence)}")
        return
    kind = type(event)  # HANDLERS dispatches on the exact type: a set lookup does what isinstance() would, cheaper
    if kind in DATASET_STATE_EVENTS:
        state.datasets[dataset_key] = reduce_dataset(state.datasets.get(dataset_key), event, sequence)
        if kind is DatasetReleased:
            return
    updated = reduce_sequence(sequence, event)
    if updated is None or updated is sequence:
        if isinstance(event, CommitSequencePlanned) and event.part > 0 and updated is None:
            state.report(position, "incomplete-plan", f"part {event.part} of {event.parts} of the plan of commit "
                         f"sequence {event.sequence_id!r} of {event.dataset_urn!r}, whose first part is not in the log")
        return  # unchanged
    if sequence is None:
        if position is not None and updated.plan_parts > 1:
            updated = evolve(updated, plan_position=(position.partition, position.offset))
        state.note_planned(updated, position)
    elif sequence.pending and not updated.pending:
        state.note_ended(updated)
    if updated.status == SequenceStatus.COMPLETED:
        state.sequences.pop(sequence_key, None)
        state.completed.setdefault(dataset_key, set()).add(event.sequence_id)
    else:
        state.sequences[sequence_key] = updated


DATASET_STATE_EVENTS = frozenset({WatermarkAdvanced, DatasetStateCommitted, CommitSequenceAbandoned, DatasetReleased,
                                  PartitionCompleted, EventTimeAdvanced})
"""The dataset events that change the dataset's committed state (`reduce_dataset`), not only its sequence."""

def _for_consumers(state: State, event: Event, position: Where | None) -> None:
    """DatasetPublished is for downstream consumers: the state has what it says already (the plan and its steps)."""


NOT_FOLDED: frozenset[type[Event]] = frozenset({DatasetPublished})
"""Event types the fold does nothing with: the projector reads only their envelope (`EventCodec.decode_unless`)."""


def _plans(state: State, event: Event, position: Where | None) -> None:
    """A batch of plans, each folded as its `CommitSequencePlanned` would be: a new sequence (the usual case) at once,
    without building the event; any other (its sequence already known) through the event."""
    assert isinstance(event, CommitSequencesPlanned)
    for plan in event.sequences:
        key = _unended(state, event.job, plan.dataset_urn, plan.sequence_id)
        if key is None:
            continue
        if key in state.sequences:
            _dataset_event(state, planned_member(event, plan), position)
            continue
        planned = SequenceView(event.job, plan.dataset_urn, plan.sequence_id, event.run_id, SequenceStatus.PLANNED,
                               steps=plan.steps, planned_at=event.emitted_at)
        state.note_planned(planned, position)
        state.sequences[key] = planned


def _unended(state: State, job: str, dataset_urn: str, sequence_id: str) -> SequenceKey | None:
    """A sequence's key, or None once it completed (what a batch says of it then is a late duplicate)."""
    return None if sequence_id in state.completed.get((job, dataset_urn), ()) else (job, dataset_urn, sequence_id)


def _completions(state: State, event: Event, position: Where | None) -> None:
    """A batch of completions, each folded as its events would be one by one: a sequence pending with its whole plan
    (the usual case) at once, without building the events; any other through its events."""
    assert isinstance(event, CommitSequencesCompleted)
    for end in event.sequences:
        key = _unended(state, event.job, end.dataset_urn, end.sequence_id)
        if key is None:
            continue
        dataset_key, sequence = (event.job, end.dataset_urn), state.sequences.get(key)
        if sequence is None or not sequence.pending or not sequence.plan_complete:
            for member in ended_members(event, end):
                HANDLERS[type(member)](state, member, position)
            continue
        if end.advanced or end.state is not None:
            state.datasets[dataset_key] = committed(state.datasets.get(dataset_key), event, end)
        state.note_ended(sequence)
        del state.sequences[key]
        state.completed.setdefault(dataset_key, set()).add(end.sequence_id)


HANDLERS: dict[type[Event], Handler] = {
    **{t: _for_consumers for t in NOT_FOLDED},
    CommitSequencesPlanned: _plans,
    CommitSequencesCompleted: _completions,
    **{t: _run_event for t in (JobRunStarted, WorkUnitsPlanned, JobRunSucceeded, JobRunCommitted, JobRunFailed,
                               JobRunCancelled, JobLockAcquired, JobLockReleased, DatasetSkipped)},
    **{t: _task_event for t in (TaskStarted, TaskSucceeded, TaskFailed, TaskRetried)},
    **{t: _dataset_event for t in (CommitSequencePlanned, CommitStepApplied, CommitStepFailed, CommitStepRolledBack,
                                   CommitSequenceCompleted, CommitSequenceAbandoned, WatermarkAdvanced,
                                   DatasetStateCommitted, DatasetReleased, PartitionCompleted,
                                   EventTimeAdvanced)},
}

