"""The projected state's values: frozen, one per aggregate (a job, a run, a task, a work unit, a dataset, a sequence).

Reducers build new values from old ones; nothing here changes in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import IntEnum, StrEnum
from typing import Any, TypeVar

from events.commit import CommitStepSpec
from events.job import WorkUnitSpec
from events.task import WorkUnitResult
from projections.completeness import Completeness


class Phase(StrEnum):
    """The steps of a run, in order (`start` is the engine's start-up: Spark's JVM, once the job lock is held and the
    run has tasks; a run with nothing to do has none); the audit and the progress display name them alike."""

    LOCK = "lock"
    START = "start"
    RECOVER = "recover"
    PLAN = "plan"
    TASKS = "tasks"
    COMMIT = "commit"
    CLEANUP = "cleanup"


class RunStatus(IntEnum):
    """Gobblin's job states, ranked: a run only moves forward, so a late duplicate cannot move it back."""

    PENDING = 0
    RUNNING = 1
    SUCCESSFUL = 2
    COMMITTED = 3
    FAILED = 4
    CANCELLED = 5

    @property
    def finished(self) -> bool:
        return self in (RunStatus.COMMITTED, RunStatus.FAILED, RunStatus.CANCELLED)


class AttemptStatus(IntEnum):
    """A task attempt's states, ranked the same way."""

    RUNNING = 0
    SUCCEEDED = 1
    FAILED = 2


class WorkUnitStatus(IntEnum):
    """Gobblin's WorkUnitState working states, ranked."""

    PENDING = 0
    RUNNING = 1
    SUCCESSFUL = 2
    FAILED = 3
    COMMITTED = 4


class SequenceStatus(IntEnum):
    """A commit sequence: planned (pending), then completed or abandoned for good."""

    PLANNED = 0
    COMPLETED = 1
    ABANDONED = 2


@dataclass(frozen=True, slots=True)
class JobView:
    """A job across its runs: the latest run and the consecutive failures Gobblin alerts on."""

    job: str
    last_run_id: str | None = None
    last_committed_run_id: str | None = None
    failed_streak: tuple[str, ...] = ()
    """Runs that failed since the last committed one (a run id once, however often its failure is replayed)."""
    lock_holder: str | None = None
    lock_run_id: str | None = None
    recent_runs: tuple[str, ...] = ()
    """The runs whose tasks and work units the state keeps in detail, oldest first."""
    properties: dict[str, str] = field(default_factory=dict)
    """The properties its latest run started with (its folders among them: other jobs must not share them)."""

    @property
    def consecutive_failures(self) -> int:
        return len(self.failed_streak)


@dataclass(frozen=True, slots=True)
class RunView:
    """One run of a job."""

    job: str
    run_id: str
    status: RunStatus = RunStatus.PENDING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    job_group: str | None = None
    work_units: int = 0
    tasks_succeeded: int = 0
    records_extracted: int = 0
    records_written: int = 0
    error: str | None = None
    failed_tasks: tuple[str, ...] = ()
    datasets_committed: tuple[str, ...] = ()
    datasets_abandoned: tuple[str, ...] = ()
    datasets_skipped: tuple[str, ...] = ()
    """Datasets the run did not pull: their history was not settled (a sequence pending, or abandoned with steps
    applied). A run that skipped any is not a plain success."""
    detail_dropped: bool = False
    """Its tasks and work units left the state (the job has run more often since); the log still has them."""
    plan_parts: int = 1
    """The parts its WorkUnitsPlanned came in, and how many of them are folded (in order: see `Parted`)."""
    plan_parts_folded: int = 0
    commit_parts: int = 1
    """The parts its JobRunCommitted came in, and how many of them are folded."""
    commit_parts_folded: int = 0

    @property
    def complete(self) -> bool:
        """Whether every part of its parted events is folded (missing parts mean a damaged log)."""
        return parts_complete(self.plan_parts, self.plan_parts_folded) and parts_complete(
            self.commit_parts, self.commit_parts_folded)


@dataclass(frozen=True, slots=True)
class AttemptView:
    """One attempt of a task."""

    attempt: int
    status: AttemptStatus
    started_at: datetime | None = None
    ended_at: datetime | None = None
    executor: str = ""
    error: str | None = None
    duration_ms: int = 0
    retry_delay_s: float | None = None
    results: tuple[WorkUnitResult, ...] = ()
    parts: int = 1
    """The parts its ending (TaskSucceeded / TaskFailed) came in, and how many of them are folded."""
    parts_folded: int = 0
    start_parts: int = 1
    """The parts its TaskStarted came in (its work unit ids), and how many of them are folded."""
    start_parts_folded: int = 0

    @property
    def complete(self) -> bool:
        """Whether every part of its start and its ending is folded: only then are its work units and results known."""
        return parts_complete(self.parts, self.parts_folded) and parts_complete(self.start_parts,
                                                                                self.start_parts_folded)


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task of a run and its attempts, by attempt number."""

    job: str
    run_id: str
    task_id: str
    work_unit_ids: tuple[str, ...] = ()
    attempts: tuple[AttemptView, ...] = ()

    @property
    def last(self) -> AttemptView | None:
        return self.attempts[-1] if self.attempts else None


@dataclass(frozen=True, slots=True)
class WorkUnitView:
    """A WorkUnit of a run and its state (Gobblin's WorkUnitState): what the next run's Source reads."""

    job: str
    run_id: str
    spec: WorkUnitSpec
    status: WorkUnitStatus = WorkUnitStatus.PENDING
    attempt: int = 0
    task_id: str | None = None
    actual_high_watermark: int | None = None
    records_written: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DatasetView:
    """A dataset's committed state (Gobblin's DatasetState): kept when a run skips the dataset."""

    job: str
    dataset_urn: str
    watermarks: dict[str, int] = field(default_factory=dict)
    last_sequence_id: str | None = None
    last_run_id: str | None = None
    committed_at: datetime | None = None
    records_published: int = 0
    files_published: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    blocked_by: str | None = None
    """The abandoned sequence that stops new runs from pulling this dataset until an operator retries it."""
    blocked_error: str | None = None
    completeness: Completeness | None = None
    """Its time partitions' completeness (None: no sequence of it has recorded an event time)."""


@dataclass(frozen=True, slots=True)
class SequenceView:
    """A commit sequence in the CommitStepStore (pending or abandoned): its steps, which are applied, its failures."""

    job: str
    dataset_urn: str
    sequence_id: str
    run_id: str
    status: SequenceStatus
    steps: tuple[CommitStepSpec, ...] = ()
    applied: frozenset[int] = frozenset()
    rolled_back: frozenset[int] = frozenset()
    """Applied steps undone before the dataset was released (abandoned sequences only)."""
    failures: frozenset[tuple[int, int]] = frozenset()
    """(step index, attempt) of each recorded failure."""
    last_error: str | None = None
    planned_at: datetime | None = None
    ended_at: datetime | None = None
    plan_parts: int = 1
    """The parts its plan came in, and how many of them are folded: steps are all known only when all are."""
    plan_parts_folded: int = 0
    plan_position: tuple[int, int] | None = None
    """(partition, offset) of its plan's first part, when read from the log and the plan is in parts (or its end was
    found gone: `followed_by`)."""
    followed_by: str | None = None
    """The first sequence of its dataset planned while this one was pending. A run plans a dataset only once its last
    sequence ended, so one still pending once the fold is over has lost its end (`State.ends_missing`)."""
    followed_at: tuple[int, int] | None = None
    """(partition, offset) of that later sequence's plan, when read from the log."""

    @property
    def plan_complete(self) -> bool:
        """Whether every part of its plan is folded; an incomplete plan is never applied."""
        return parts_complete(self.plan_parts, self.plan_parts_folded)

    @property
    def pending(self) -> bool:
        return self.status == SequenceStatus.PLANNED

    @property
    def attempts_failed(self) -> int:
        return len(self.failures)

    @property
    def settled(self) -> bool:
        """Whether the dataset's history is settled by this sequence: over, and nothing of it left published half-way
        (an abandoned sequence must have every applied step rolled back)."""
        return self.status == SequenceStatus.COMPLETED or (
            self.status == SequenceStatus.ABANDONED and self.applied <= self.rolled_back)


def parts_complete(parts: int, folded: int) -> bool:
    """Whether an event in `parts` parts, `folded` of them folded, is whole (an event in one part always is)."""
    return parts == 1 or folded == parts


V = TypeVar("V")
Copier = Callable[[Any, dict[str, Any]], Any]
_COPIERS: dict[type, Copier] = {}
_new = object.__new__
_set = object.__setattr__


def evolve(view: V, **changes: Any) -> V:
    """`dataclasses.replace` for the frozen, slotted views, without its per-call checks; a change naming no field
    raises AttributeError (the views have no __dict__)."""
    copier = _COPIERS.get(type(view)) or _copier(type(view))
    result: V = copier(view, changes)
    return result


def _copier(cls: type) -> Copier:
    """The function `evolve` copies a view of this class with, made once per class: each field read by name and set
    through its slot's own setter, in one generated body (as dataclasses makes `__init__`), then the changes set.

    A loop over the field names (getattr, object.__setattr__) cost twice as much: the fold makes ~1.6 copies an event
    (docs/benchmarks.md, rebuild). Only slotted dataclasses without __post_init__ (a copy skips __init__)."""
    if "__slots__" not in vars(cls) or hasattr(cls, "__post_init__"):
        raise TypeError(f"evolve() copies slotted dataclasses without __post_init__, not {cls.__name__}")
    names = [f.name for f in fields(cls)]
    scope: dict[str, Any] = {"_new": _new, "_set": _set, "cls": cls}
    scope |= {f"_set_{i}": vars(cls)[name].__set__ for i, name in enumerate(names)}
    body = "".join(f"    _set_{i}(copy, view.{name})\n" for i, name in enumerate(names))
    exec(  # noqa: S102 - the source is made of the dataclass's own field names, nothing else
        f"def copy_view(view, changes):\n    copy = _new(cls)\n{body}"
        "    for name, value in changes.items():\n        _set(copy, name, value)\n    return copy\n", scope)
    copier: Copier = scope["copy_view"]
    _COPIERS[cls] = copier
    return copier
