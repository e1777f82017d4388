"""The fold finds a commit sequence whose end is gone (a later sequence of its dataset was planned after it, which a run
does only once the earlier one ended), and nothing a healthy log holds looks like that: re-emitted events, crashed
commits recovered by the next run, a key's older copy compacted away, abandoned and released sequences, snapshots.
`verify` reports what the fold finds (one rule); every command that folds refuses it (DamagedHistoryError)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepFailed,
    HighWatermarkStep,
)
from events.dataset import DatasetReleased
from events.log import EventLog, open_log
from events.model import Event, SequenceFields
from projections.projector import Projector
from projections.state import DamagedHistoryError, State
from projections.synthetic import HistoryShape, synthetic_history
from replay.verify import verify
from tests.factories import at
from tests.projections.test_fold_properties import as_logged, fold, fold_through_snapshots, shapes, with_duplicates


def ends_lost(state: State) -> list[tuple[str, str, str | None, str | None]]:
    """(dataset, sequence, the later sequence, where that one's plan lies) of each sequence the fold finds endless."""
    return [(s.dataset_urn, s.sequence_id, s.followed_by, None if s.followed_at is None else str(s.followed_at))
            for s in state.ends_missing()]


def compacted(events: list[Event]) -> list[Event]:
    """What Kafka's cleaner leaves of a log: each key's last record only."""
    last = {event.key: i for i, event in enumerate(events)}
    return [event for i, event in enumerate(events) if last[event.key] == i]


def re_emitted(rng: random.Random, events: list[Event], indexes: list[int]) -> list[Event]:
    """The history with a copy of each event at `indexes` appended anywhere after it."""
    result = list(events)
    for index in indexes:
        position = result.index(events[index]) + 1
        result.insert(rng.randint(position, len(result)), events[index])
    return result


def endings(events: list[Event]) -> list[int]:
    """Indexes of the completions of sequences after which their dataset planned another."""
    found = []
    for i, event in enumerate(events):
        if isinstance(event, CommitSequenceCompleted) and any(
                isinstance(later, CommitSequencePlanned) and (later.job, later.dataset_urn) == (event.job,
                                                                                                event.dataset_urn)
                and later.sequence_id != event.sequence_id for later in events[i:]):
            found.append(i)
    return found


@settings(max_examples=120, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32), duplicates=st.integers(0, 30), data=st.data())
def test_no_healthy_history_loses_an_end_however_it_is_folded(shape: HistoryShape, seed: int, duplicates: int,
                                                              data: st.DataObject) -> None:
    """Re-emitted events (anywhere later), recoveries, snapshots; a re-emitted end whose first copy was compacted."""
    rng = random.Random(seed)
    events = synthetic_history(rng, shape)
    ends = [i for i, e in enumerate(events) if isinstance(e, CommitSequenceCompleted)]
    ends_again = with_duplicates(rng, events, duplicates) if not ends else compacted(
        re_emitted(rng, events, [rng.choice(ends) for _ in range(duplicates)]))
    for history in (with_duplicates(rng, events, duplicates), ends_again):
        logged = as_logged(history)
        cuts = data.draw(st.lists(st.integers(0, len(logged)), max_size=4), label="snapshots at")
        for state in (fold(logged, 2), fold_through_snapshots(logged, cuts, 2)):
            assert state.ends_missing() == []
            state.check_ends()
            state.pending_sequences()


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32), data=st.data())
def test_a_lost_completion_is_found_once_its_dataset_plans_again_through_snapshots_too(seed: int,
                                                                                      data: st.DataObject) -> None:
    rng = random.Random(seed)
    events = synthetic_history(rng, HistoryShape(jobs=2, runs=3, datasets=2, task_failure=0.0, run_failure=0.0,
                                                 crash=0.3))
    index = data.draw(st.sampled_from(endings(events)), label="completion removed")
    lost = events[index]
    assert isinstance(lost, CommitSequenceCompleted)
    logged = as_logged(events[:index] + events[index + 1:])
    later = next(e for e in logged[index:] if isinstance(e.event, CommitSequencePlanned)
                 and (e.event.job, e.event.dataset_urn) == (lost.job, lost.dataset_urn))
    assert isinstance(later.event, CommitSequencePlanned)
    later_id = later.event.sequence_id
    cuts = data.draw(st.lists(st.integers(0, len(logged)), max_size=4), label="snapshots at")

    for state in (fold(logged, 2), fold_through_snapshots(logged, cuts, 2)):
        assert ends_lost(state) == [(lost.dataset_urn, lost.sequence_id, later_id,
                                     str((later.partition, later.offset)))]
        with pytest.raises(DamagedHistoryError) as raised:
            state.check_ends()
        said = str(raised.value)
        assert f"commit sequence {lost.sequence_id!r} of {lost.dataset_urn!r} ({lost.job})" in said, said
        assert f"{later_id!r} of its dataset was planned after it at [{later.partition}]@" \
               f"{later.offset}" in said, said
        with pytest.raises(DamagedHistoryError, match="its end is gone from the log"):
            state.pending_sequences(lost.job)


def sequence(sequence_id: str) -> SequenceFields:
    return {"job": "J", "run_id": sequence_id, "dataset_urn": "ds", "sequence_id": sequence_id}


def planned(sequence_id: str, low: int, t: float) -> CommitSequencePlanned:
    steps = (HighWatermarkStep(partition="ds:0", low_watermark=low, value=low + 10),)
    return CommitSequencePlanned(**sequence(sequence_id), steps=steps, emitted_at=at(t))


@pytest.fixture
def log(tmp_path: Path) -> EventLog:
    opened = open_log(f"sqlite:///{tmp_path / 'events.db'}?partitions=2")
    opened.ensure_topic()
    return opened


def test_an_abandoned_or_released_sequence_and_an_end_that_came_late_are_no_damage(log: EventLog) -> None:
    """`recover --release` frees only an abandoned sequence; an end that follows the next plan (a re-emitted copy
    that compaction kept) still ends it: what counts is the history as a whole, as verify has always read it."""
    log.append([planned("s1", 0, 1), CommitStepFailed(**sequence("s1"), step_index=0, attempt=1, error="x",
                                                      emitted_at=at(2)),
                CommitSequenceAbandoned(**sequence("s1"), attempts=3, error="x", emitted_at=at(3)),
                DatasetReleased(**sequence("s1"), reason="released with oncelog recover --release", emitted_at=at(4)),
                planned("s2", 0, 5)])
    assert Projector(log).rebuild(use_snapshot=False)[0].ends_missing() == []
    log.append([planned("s3", 10, 6)])  # s2 lost its end: until it turns up
    with pytest.raises(DamagedHistoryError, match="'s2' of 'ds' \\(J\\), planned at \\[0\\]@5, .* 's3' of its "
                                                  "dataset was planned after it at \\[0\\]@6"):
        Projector(log).rebuild(use_snapshot=False)
    assert [v.kind for v in verify(log).violations] == ["sequence-end-missing"]
    log.append([CommitSequenceCompleted(**sequence("s2"), emitted_at=at(7))])
    state, _ = Projector(log).rebuild(use_snapshot=False)
    assert state.ends_missing() == [] and [s.sequence_id for s in state.pending_sequences()] == ["s3"]
    assert "sequence-end-missing" not in {v.kind for v in verify(log).violations}


def test_a_fold_up_to_a_point_before_the_later_plan_sees_no_damage(log: EventLog) -> None:
    """`replay --until`: the state as it stood before the next plan has the sequence pending, rightly."""
    log.append([planned("s1", 0, 1)])
    before = log.end_offsets()
    log.append([planned("s2", 10, 2)])
    state, _ = Projector(log).rebuild(use_snapshot=False, until=before)
    assert [s.sequence_id for s in state.pending_sequences()] == ["s1"]
    with pytest.raises(DamagedHistoryError):
        Projector(log).catch_up(state)  # and the fold that goes on from there finds it
