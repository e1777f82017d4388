"""Events in parts: a history whose big events are appended in parts folds to the state of the whole events, a part
missing leaves its run, attempt or sequence incomplete (a damaged log, named), and nothing grows past the codec's
limit."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.commit import CommitSequencePlanned, CommitStepApplied, FsRenameStep
from events.job import JobRunCommitted, JobRunStarted, WorkUnitSpec, WorkUnitsPlanned
from events.log import open_log
from events.model import Event, Parted, Position, RunFields, SequenceFields, TaskFields
from events.task import (
    OutputFile,
    TaskFailed,
    TaskStarted,
    TaskSucceeded,
    WorkUnitResult,
)
from projections.state import DamagedHistoryError, State
from projections.synthetic import HistoryShape, synthetic_history
from projections.views import AttemptView, RunView, SequenceView, TaskView
from replay.verify import verify
from tests.projections.test_fold_properties import as_logged, fold, fold_through_snapshots

TINY_BUDGET = 24
"""Small enough that any list of two items or more is cut into parts."""

BOOKKEEPING: dict[type, tuple[str, ...]] = {
    RunView: ("plan_parts", "plan_parts_folded", "commit_parts", "commit_parts_folded"),
    AttemptView: ("parts", "parts_folded", "start_parts", "start_parts_folded"),
    SequenceView: ("plan_parts", "plan_parts_folded", "plan_position"),
}


def in_parts(events: list[Event], budget: int = TINY_BUDGET) -> list[Event]:
    """The history as appended with every big event in parts."""
    return [part for event in events for part in event.in_parts(budget)]


def without_bookkeeping(view: Any) -> Any:
    """A view with the fields that count parts reset (the only thing a history in parts may change)."""
    if isinstance(view, TaskView):
        return dataclasses.replace(view, attempts=tuple(without_bookkeeping(a) for a in view.attempts))
    names = BOOKKEEPING.get(type(view))
    if names is None:
        return view
    defaults = {f.name: f.default for f in dataclasses.fields(view) if f.name in names}
    return dataclasses.replace(view, **defaults)


def views(state: State) -> dict[str, Any]:
    """Everything a fold projects, bookkeeping of parts left out."""
    return {
        "jobs": state.jobs,
        "runs": {k: without_bookkeeping(v) for k, v in state.runs.items()},
        "tasks": {k: {t: without_bookkeeping(v) for t, v in tasks.items()} for k, tasks in state.tasks.items()},
        "work_units": state.work_units,
        "datasets": state.datasets,
        "sequences": {k: without_bookkeeping(v) for k, v in state.sequences.items()},
        "completed": state.completed,
    }


shapes = st.builds(
    HistoryShape,
    jobs=st.integers(1, 2),
    runs=st.integers(1, 4),
    datasets=st.integers(1, 4),
    partitions=st.integers(1, 3),
    task_failure=st.sampled_from([0.0, 0.3]),
    run_failure=st.sampled_from([0.0, 0.2]),
    step_failure=st.sampled_from([0.0, 0.3]),
    crash=st.sampled_from([0.0, 0.5]),
)


def big_task_history() -> list[Event]:
    """A run whose tasks each run several work units: one succeeds, one fails half-way (partial results)."""
    run: RunFields = {"job": "j", "run_id": "r1"}
    specs = [WorkUnitSpec(work_unit_id=f"work-unit-{i:04d}", dataset_urn=f"ds-{i % 3}", partition=f"p{i}",
                          low_watermark=0, expected_high_watermark=10, multi_work_unit_id=f"t{i % 2}")
             for i in range(12)]
    events: list[Event] = [JobRunStarted(**run), WorkUnitsPlanned(**run, work_units=tuple(specs))]
    for t in range(2):
        task: TaskFields = {**run, "task_id": f"t{t}"}
        mine = [s for s in specs if s.multi_work_unit_id == f"t{t}"]
        results = tuple(WorkUnitResult(work_unit_id=s.work_unit_id, dataset_urn=s.dataset_urn, partition=s.partition,
                                       low_watermark=0, expected_high_watermark=10, actual_high_watermark=10,
                                       output_files=(OutputFile(path=f"/o/{s.work_unit_id}", size=1, checksum="c"),))
                        for s in mine)
        events.append(TaskStarted(**task, attempt=1, work_unit_ids=tuple(s.work_unit_id for s in mine)))
        events.append(TaskSucceeded(**task, attempt=1, results=results) if t == 0
                      else TaskFailed(**task, attempt=1, error="boom", results=results[:4]))
    return events


@settings(max_examples=120, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32), data=st.data())
def test_a_history_in_parts_folds_to_the_state_of_the_whole_events(shape: HistoryShape, seed: int,
                                                                   data: st.DataObject) -> None:
    events = synthetic_history(random.Random(seed), shape)
    logged = as_logged(in_parts(events))
    whole, parted = fold(as_logged(events), 4), fold(logged, 4)
    assert whole.problems == [] and parted.problems == []
    assert views(parted) == views(whole)
    cuts = data.draw(st.lists(st.integers(0, len(logged)), max_size=3), label="snapshots at")
    assert fold_through_snapshots(logged, cuts, 4) == parted  # a snapshot may fall between two parts
    assert all(run.complete for run in parted.runs.values())
    assert all(s.plan_complete for s in parted.sequences.values())


@settings(max_examples=60, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32), repeats=st.integers(1, 10))
def test_repeated_parts_change_nothing(shape: HistoryShape, seed: int, repeats: int) -> None:
    rng = random.Random(seed)
    batches = [event.in_parts(TINY_BUDGET) for event in synthetic_history(rng, shape)]
    repeated = list(batches)
    for _ in range(repeats):  # a crashed emitter appends a whole batch again, later
        batch = rng.choice(batches)
        repeated.insert(rng.randint(repeated.index(batch) + 1, len(repeated)), batch)
    plain = fold(as_logged([e for b in batches for e in b]), 4)
    again = fold(as_logged([e for b in repeated for e in b]), 4)
    assert again.problems == [] and views(again) == views(plain)


def test_tasks_of_many_work_units_fold_the_same_in_parts() -> None:
    events = big_task_history()
    parted = in_parts(events)
    assert len(parted) > 2 * len(events)  # the plan, both starts and both endings are in parts
    whole, folded = fold(as_logged(events), 4), fold(as_logged(parted), 4)
    assert folded.problems == [] and views(folded) == views(whole)
    task = folded.tasks[("j", "r1")]["t1"]
    assert task.last is not None and task.last.complete and len(task.last.results) == 4
    assert len(task.work_unit_ids) == 6


@pytest.mark.parametrize("event_type", [WorkUnitsPlanned, TaskStarted, TaskSucceeded, TaskFailed])
def test_a_run_or_attempt_with_a_part_missing_is_not_complete(event_type: type[Event]) -> None:
    parted = in_parts(big_task_history())
    dropped = next(e for e in parted if type(e) is event_type and isinstance(e, Parted) and e.part == 1)
    state = fold(as_logged([e for e in parted if e is not dropped]), 4)
    run = state.runs[("j", "r1")]
    attempts = [a for task in state.tasks[("j", "r1")].values() for a in task.attempts]
    assert not (run.complete and all(a.complete for a in attempts))


def test_a_plan_with_a_part_missing_is_never_pending_and_the_fold_names_where() -> None:
    sequence: SequenceFields = {"job": "j", "run_id": "r1", "dataset_urn": "ds", "sequence_id": "r1"}
    steps = tuple(FsRenameStep(src=f"/o/{i}", dst=f"/p/{i}", size=1, checksum="c") for i in range(6))
    parts = CommitSequencePlanned(**sequence, steps=steps).in_parts(TINY_BUDGET)
    assert len(parts) > 2 and len({p.key for p in parts}) == len(parts)
    state = fold(as_logged([JobRunStarted(job="j", run_id="r1"), *parts[:-1]]), 4)
    with pytest.raises(DamagedHistoryError, match=r"plan has \d of its \d parts .* at \[\d\]@\d+"):
        state.pending_sequences("j")
    state.apply_event(CommitStepApplied(**sequence, step_index=0, outcome="executed"), Position(0, 99))
    assert [(p.kind, p.offset) for p in state.problems] == [("incomplete-plan", 99)]


def test_a_plan_in_parts_has_keys_of_its_own_and_the_whole_plan_step_count() -> None:
    sequence: SequenceFields = {"job": "j", "run_id": "r1", "dataset_urn": "ds", "sequence_id": "r1"}
    steps = tuple(FsRenameStep(src=f"/o/{i}", dst=f"/p/{i}", size=1, checksum="c") for i in range(6))
    whole = CommitSequencePlanned(**sequence, steps=steps)
    parts = whole.in_parts(TINY_BUDGET)
    assert {p.step_count for p in parts if isinstance(p, CommitSequencePlanned)} == {6}
    assert [p.key for p in parts] == [f"{whole.key}/part/{i}" for i in range(len(parts))]
    assert whole.in_parts() == (whole,)


def test_a_run_committed_in_parts_keeps_every_dataset() -> None:
    run: RunFields = {"job": "j", "run_id": "r1"}
    committed = JobRunCommitted(**run, datasets_committed=tuple(f"ds-{i}" for i in range(30)),
                                datasets_skipped=("x", "y"))
    state = fold(as_logged([JobRunStarted(**run), *committed.in_parts(TINY_BUDGET)]), 4)
    view = state.runs[("j", "r1")]
    assert view.complete and view.datasets_committed == committed.datasets_committed
    assert view.datasets_skipped == ("x", "y")


def test_verify_names_a_plan_whose_parts_are_not_all_in_the_log(tmp_path: Path) -> None:
    sequence: SequenceFields = {"job": "j", "run_id": "r1", "dataset_urn": "ds", "sequence_id": "r1"}
    steps = tuple(FsRenameStep(src=f"/o/{i}", dst=f"/p/{i}", size=1, checksum="c") for i in range(6))
    parts = CommitSequencePlanned(**sequence, steps=steps).in_parts(TINY_BUDGET)
    with open_log(f"sqlite:///{tmp_path / 'events.db'}") as log:
        log.ensure_topic()
        with log.writer("w") as writer:
            writer.append([JobRunStarted(job="j", run_id="r1"), *parts[:-1]])
        report = verify(log)
    assert not report.ok
    assert [v.kind for v in report.violations] == ["incomplete-plan"]
    assert f"{len(parts) - 1} of the {len(parts)} parts" in report.violations[0].message
