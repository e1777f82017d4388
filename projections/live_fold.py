"""The live projector's fold, free of faust: one event against the few table entries it touches.

The live app keeps its state in key-value tables, not in one `State`. For each event this module loads the entries
the event can touch into a scratch `State`, lets `State.apply_event` (the very dispatch rules and reducers of the
batch projector) fold it, and returns what changed as table writes. Keys put the aggregate first: the table entry
of a key lives in the partition the events topic gives that aggregate (`events.keys.partition_for`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from events.job import JobRunStarted
from events.model import DatasetEvent, Event, Position, RunEvent
from events.task import TaskEvent
from events.keys import partition_for
from projections.snapshot_codec import view_from_json, view_to_json
from projections.state import Problem, State
from projections.views import AttemptStatus, DatasetView, JobView, RunView, SequenceView, TaskView

DATASETS = "datasets"
"""urn → {job: DatasetView}: a dataset's committed state, per job that publishes it."""
SEQUENCES = "commit_sequences"
"""urn␀job␀sequence → SequenceView: planned (pending) or abandoned sequences; a completed one leaves."""
COMPLETED = "completed_sequences"
"""urn␀job␀sequence → true: completed sequences, so that a late duplicate of their events changes nothing."""
JOBS = "jobs"
"""job → JobView."""
RUNS = "runs"
"""job␀run_id → {"run": RunView, "tasks": counts of tasks by the status of their last attempt}."""
TASKS = "tasks"
"""job␀run_id␀task_id → TaskView (what keeps the task counts right when an event repeats)."""
TABLES = (DATASETS, SEQUENCES, COMPLETED, JOBS, RUNS, TASKS)

SEPARATOR = "\x00"
TASK_STATUSES = tuple(s.name.lower() for s in AttemptStatus)

Read = Callable[[str, bytes], Any]
"""Reads a table entry: (table, key) → the stored JSON value, or None when there is none."""


@dataclass(frozen=True, slots=True)
class Change:
    """A table write: the new JSON value of a key, or None to delete it."""

    table: str
    key: bytes
    value: Any


def table_key(aggregate: str, *rest: str) -> bytes:
    """A table key: the aggregate (dataset URN or job name) first, so the key's partition is the aggregate's."""
    return SEPARATOR.join((aggregate, *rest)).encode("utf-8")


def key_parts(key: bytes) -> list[str]:
    """The parts a table key was made of."""
    return key.decode("utf-8").split(SEPARATOR)


def aggregate_partitioner(key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
    """Kafka producer partitioner: a table key goes where the events of its aggregate go (crc32, like the log)."""
    if key is None:
        return random.choice(list(available or all_partitions))
    aggregate = key.split(SEPARATOR.encode(), 1)[0].decode("utf-8", errors="replace")
    return sorted(all_partitions)[partition_for(aggregate, len(all_partitions))]


def task_status(task: TaskView | None) -> str | None:
    """A task's status for the counts: its last attempt's (running, succeeded, failed), None before any."""
    last = None if task is None else task.last
    return None if last is None else last.status.name.lower()


def empty_counts() -> dict[str, int]:
    """Task counts of a run no task has reported for yet."""
    return {status: 0 for status in TASK_STATUSES}


class _Scratch:
    """A State holding only the entries one event can touch, and what they were before the fold."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.state = State()
        self.before: dict[tuple[str, bytes], Any] = {}
        self.counts: dict[bytes, dict[str, int]] = {}

    def load(self, table: str, key: bytes) -> Any:
        """Read an entry once, remembering it as it was."""
        if (table, key) not in self.before:
            self.before[(table, key)] = self.read(table, key)
        return self.before[(table, key)]

    def load_dataset_event(self, event: DatasetEvent) -> None:
        """The dataset (every job's state of it), the event's sequence, and whether that sequence completed."""
        urn, job, seq = event.dataset_urn, event.job, event.sequence_id
        for j, data in (self.load(DATASETS, table_key(urn)) or {}).items():
            self.state.datasets[(j, urn)] = view_from_json(DatasetView, data)
        sequence = self.load(SEQUENCES, table_key(urn, job, seq))
        if sequence is not None:
            self.state.sequences[(job, urn, seq)] = view_from_json(SequenceView, sequence)
        if self.load(COMPLETED, table_key(urn, job, seq)) is not None:
            self.state.completed[(job, urn)] = {seq}

    def load_run(self, job: str, run_id: str) -> None:
        """A run and its task counts."""
        entry = self.load(RUNS, table_key(job, run_id))
        if entry is not None:
            self.state.runs[(job, run_id)] = view_from_json(RunView, entry["run"])
            self.counts[table_key(job, run_id)] = dict(entry["tasks"])

    def load_run_event(self, event: RunEvent) -> None:
        """The run, and its task (task events) or its job and the runs a new run may drop the detail of."""
        self.load_run(event.job, event.run_id)
        if isinstance(event, TaskEvent):
            task = self.load(TASKS, table_key(event.job, event.run_id, event.task_id))
            if task is not None:
                self.state.tasks[(event.job, event.run_id)] = {event.task_id: view_from_json(TaskView, task)}
            return
        job = self.load(JOBS, table_key(event.job))
        if job is None:
            return
        view = view_from_json(JobView, job)
        self.state.jobs[event.job] = view
        if isinstance(event, JobRunStarted):  # runs that may lose their detail to this one
            for run_id in view.recent_runs[: max(0, len(view.recent_runs) + 1 - self.state.detail_runs)]:
                self.load_run(event.job, run_id)

    def after(self, event: Event) -> dict[tuple[str, bytes], Any]:
        """The entries after the fold, for every key loaded (None: the entry is gone)."""
        state = self.state
        out: dict[tuple[str, bytes], Any] = {}
        for table, key in self.before:
            parts = key_parts(key)
            if table == DATASETS:
                found = {j: view_to_json(v) for (j, urn), v in state.datasets.items() if urn == parts[0]}
                out[(table, key)] = found or None
            elif table == SEQUENCES:
                sequence = state.sequences.get((parts[1], parts[0], parts[2]))
                out[(table, key)] = None if sequence is None else view_to_json(sequence)
            elif table == COMPLETED:
                done = parts[2] in state.completed.get((parts[1], parts[0]), ())
                out[(table, key)] = True if done else None
            elif table == JOBS:
                job = state.jobs.get(parts[0])
                out[(table, key)] = None if job is None else view_to_json(job)
            elif table == RUNS:
                out[(table, key)] = self._run_entry(event, key, parts)
            elif table == TASKS:
                task = state.tasks.get((parts[0], parts[1]), {}).get(parts[2])
                out[(table, key)] = None if task is None else view_to_json(task)
        return out

    def _run_entry(self, event: Event, key: bytes, parts: list[str]) -> Any:
        """A run's entry after the fold: the run, and its task counts moved by the task's change of status."""
        run = self.state.runs.get((parts[0], parts[1]))
        if run is None:
            return None
        counts = self.counts.get(key) or empty_counts()
        if isinstance(event, TaskEvent) and (event.job, event.run_id) == (parts[0], parts[1]):
            task_key = table_key(event.job, event.run_id, event.task_id)
            raw = self.before.get((TASKS, task_key))
            old = task_status(None if raw is None else view_from_json(TaskView, raw))
            new = task_status(self.state.tasks.get((event.job, event.run_id), {}).get(event.task_id))
            if old != new:
                counts = dict(counts)
                if old is not None:
                    counts[old] -= 1
                if new is not None:
                    counts[new] += 1
        return {"run": view_to_json(run), "tasks": counts}


def fold_event(event: Event, read: Read, position: Position | None = None) -> tuple[list[Change], list[Problem]]:
    """Fold one event through State's dispatch: the table writes it causes, and the problems it raised."""
    scratch = _Scratch(read)
    if isinstance(event, DatasetEvent):
        scratch.load_dataset_event(event)
    elif isinstance(event, RunEvent):
        scratch.load_run_event(event)
    scratch.state.apply_event(event, position)
    changes = [
        Change(table, key, value)
        for (table, key), value in scratch.after(event).items()
        if value != scratch.before[(table, key)]
    ]
    return changes, list(scratch.state.problems)
