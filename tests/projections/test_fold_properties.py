"""Property tests of the fold: any history gives one state, however it is folded, and repeats change nothing."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from events.keys import partition_for
from events.model import Event, LoggedEvent
from projections.snapshot_codec import decode_state, encode_state
from projections.state import State
from projections.synthetic import HistoryShape, synthetic_history

PARTITIONS = 3

shapes = st.builds(
    HistoryShape,
    jobs=st.integers(1, 2),
    runs=st.integers(1, 5),
    datasets=st.integers(1, 3),
    partitions=st.integers(1, 2),
    task_failure=st.sampled_from([0.0, 0.2, 0.6]),
    run_failure=st.sampled_from([0.0, 0.2]),
    step_failure=st.sampled_from([0.0, 0.3]),
    crash=st.sampled_from([0.0, 0.3, 0.7]),
)


def as_logged(events: list[Event]) -> list[LoggedEvent]:
    """Events as a log of PARTITIONS partitions would hold them (per-aggregate order kept)."""
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    logged = []
    for event in events:
        partition = partition_for(event.aggregate, PARTITIONS)
        logged.append(LoggedEvent("t", partition, next_offset[partition], 0, event))
        next_offset[partition] += 1
    return logged


def with_duplicates(rng: random.Random, events: list[Event], count: int) -> list[Event]:
    """The history with `count` copies of its events re-appended later (as a crashed emitter re-emits)."""
    result = list(events)
    for _ in range(count):
        original = rng.randrange(len(events))
        position = result.index(events[original]) + 1
        result.insert(rng.randint(position, len(result)), events[original])
    return result


def fold(logged: list[LoggedEvent], detail_runs: int) -> State:
    state = State(detail_runs=detail_runs)
    for item in logged:
        state.apply(item)
    return state


def fold_through_snapshots(logged: list[LoggedEvent], cuts: list[int], detail_runs: int) -> State:
    """Fold up to each cut, snapshot (encode + decode), and go on from the snapshot."""
    state = State(detail_runs=detail_runs)
    start = 0
    for cut in [*sorted(cuts), len(logged)]:
        for item in logged[start:cut]:
            state.apply(item)
        state = decode_state(encode_state(state))
        start = max(start, cut)
    return state


@settings(max_examples=150, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32), duplicates=st.integers(0, 30), data=st.data(),
       detail_runs=st.integers(1, 4))
def test_full_replay_snapshot_plus_tail_and_incremental_agree(shape: HistoryShape, seed: int, duplicates: int,
                                                             data: st.DataObject, detail_runs: int) -> None:
    rng = random.Random(seed)
    events = synthetic_history(rng, shape)
    logged = as_logged(with_duplicates(rng, events, duplicates))
    full = fold(logged, detail_runs)
    cut = data.draw(st.integers(0, len(logged)), label="snapshot at")
    assert fold_through_snapshots(logged, [cut], detail_runs) == full
    cuts = data.draw(st.lists(st.integers(0, len(logged)), max_size=6), label="incremental cuts")
    assert fold_through_snapshots(logged, cuts, detail_runs) == full


@settings(max_examples=150, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32), duplicates=st.integers(1, 40), detail_runs=st.integers(1, 4))
def test_a_repeated_event_changes_nothing(shape: HistoryShape, seed: int, duplicates: int, detail_runs: int) -> None:
    rng = random.Random(seed)
    events = synthetic_history(rng, shape)
    plain = fold(as_logged(events), detail_runs)
    repeated = fold(as_logged(with_duplicates(rng, events, duplicates)), detail_runs)
    assert plain.problems == [] and repeated.problems == []
    for name in ("jobs", "runs", "tasks", "work_units", "datasets", "sequences", "completed"):
        assert getattr(repeated, name) == getattr(plain, name), name


@settings(max_examples=60, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32))
def test_watermarks_follow_the_last_commit_and_never_go_backwards(shape: HistoryShape, seed: int) -> None:
    events = synthetic_history(random.Random(seed), shape)
    state = State()
    highest: dict[tuple[str, str, str], int] = {}
    for item in as_logged(events):
        state.apply(item)
        for (job, urn), dataset in state.datasets.items():
            for partition, value in dataset.watermarks.items():
                key = (job, urn, partition)
                assert value >= highest.get(key, value)
                highest[key] = value
    assert state.problems == []


@settings(max_examples=100, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32), duplicates=st.integers(0, 20))
def test_the_planning_fold_answers_what_planning_asks_as_the_full_fold_does(shape: HistoryShape, seed: int,
                                                                          duplicates: int) -> None:
    rng = random.Random(seed)
    logged = as_logged(with_duplicates(rng, synthetic_history(rng, shape), duplicates))
    full, lean = State(), State.for_planning()
    for item in logged:
        full.apply(item)
        lean.apply(item)
    assert lean.problems == full.problems and lean.offsets == full.offsets
    assert lean.pending_sequences() == full.pending_sequences()
    assert lean.sequences == full.sequences and lean.completed == full.completed
    for job in full.jobs:
        assert lean.unsettled_datasets(job) == full.unsettled_datasets(job)
        assert lean.dataset_states(job) == full.dataset_states(job)
        assert [r.run_id for r in lean.runs_of(job)] == [r.run_id for r in full.runs_of(job)]
        for run in full.runs_of(job):
            assert (lean.previous_work_unit_states(job, run.run_id)
                    == full.previous_work_unit_states(job, run.run_id)), (job, run.run_id)
