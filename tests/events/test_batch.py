"""Batched commit records: packed and unpacked, a history is the same events in each partition's order, folds to the
same state, and its records shrink from several per dataset to a few per batch."""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from events.batch import (
    BATCH_TYPES,
    CommitSequencesCompleted,
    CommitSequencesPlanned,
    end_keys,
    ended_members,
    entry_size,
    lone_completion,
    pack,
    stands_for,
    unpack,
)
from events.codec import EventCodec
from events.commit import CommitSequenceCompleted, CommitSequencePlanned
from events.keys import partition_for
from events.model import DatasetEvent, Event, SequenceFields, approx_size
from projections.synthetic import HistoryShape, synthetic_history
from tests.events.test_event_parts import in_parts, views
from tests.projections.test_fold_properties import PARTITIONS, as_logged, fold

shapes = st.builds(
    HistoryShape,
    jobs=st.integers(1, 2),
    runs=st.integers(1, 4),
    datasets=st.integers(1, 12),
    partitions=st.integers(1, 3),
    task_failure=st.sampled_from([0.0, 0.3]),
    run_failure=st.sampled_from([0.0, 0.2]),
    step_failure=st.sampled_from([0.0, 0.3]),
    crash=st.sampled_from([0.0, 0.5]),
    plans_together=st.booleans(),
)


def by_partition(events: list[Event]) -> dict[int, list[Event]]:
    """Each partition's events, in order (the only order a log keeps)."""
    partitions: dict[int, list[Event]] = defaultdict(list)
    for event in events:
        partitions[partition_for(event.aggregate, PARTITIONS)].append(event)
    return dict(partitions)


def unpacked(records: list[Event]) -> list[Event]:
    return [member for record in records for member in unpack(record)]


def as_read(events: list[Event], records: list[Event]) -> list[Event]:
    """`events` with the emitted_at a reader of the packed records sees (a batch's members carry the batch's)."""
    emitted = {member.key: member.emitted_at for member in unpacked(records)}
    return [event.model_copy(update={"emitted_at": emitted[event.key]}) for event in events]


@settings(max_examples=150, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32), budget=st.sampled_from([600, 4_000, 128 * 1024]))
def test_packed_records_unpack_to_the_same_events_in_each_partitions_order(shape: HistoryShape, seed: int,
                                                                           budget: int) -> None:
    events = in_parts(synthetic_history(random.Random(seed), shape), budget=2_000)
    records = pack(events, PARTITIONS, budget)
    assert by_partition(unpacked(records)) == by_partition(as_read(events, records))
    assert len(records) <= len(events)
    for record in records:
        if isinstance(record, BATCH_TYPES):
            members = unpack(record)
            assert len(record.sequences) > 1
            assert len({partition_for(m.aggregate, PARTITIONS) for m in members}) == 1
            assert len({(m.job, m.run_id) for m in members}) == 1


@settings(max_examples=100, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32))
def test_a_packed_history_folds_to_the_state_of_its_events(shape: HistoryShape, seed: int) -> None:
    events = in_parts(synthetic_history(random.Random(seed), shape), budget=2_000)
    records = pack(events, PARTITIONS)
    packed, plain = fold(as_logged(records), 4), fold(as_logged(as_read(events, records)), 4)
    assert packed.problems == [] and plain.problems == []
    assert views(packed) == views(plain)


def test_a_batch_survives_the_codec_and_keeps_each_members_key() -> None:
    events = synthetic_history(random.Random(7), HistoryShape(
        jobs=1, runs=2, datasets=40, partitions=1, task_failure=0.0, run_failure=0.0, step_failure=0.0, crash=0.0,
        plans_together=True))
    records = pack(events, 1)
    batches = [r for r in records if isinstance(r, BATCH_TYPES)]
    assert {type(b) for b in batches} == {CommitSequencesPlanned, CommitSequencesCompleted}
    codec = EventCodec()
    for offset, batch in enumerate(batches):
        stored = codec.to_record(batch, 1)
        read = codec.decode(stored.value or b"", "t", 0, offset, stored.key)
        assert unpack(read) == unpack(batch)
        assert stored.key == batch.key.encode()
    plans = sum(isinstance(e, CommitSequencePlanned) for e in events)
    ends = sum(isinstance(e, CommitSequenceCompleted) for e in events)
    assert plans >= 80 and ends >= 40
    commit_records = [r for r in records if isinstance(r, (DatasetEvent, *BATCH_TYPES))]
    assert len(commit_records) == 4  # per run: one record of plans, one of completions (there were 400 events)
    assert sum(isinstance(e, DatasetEvent) for e in events) == 400


def test_a_lone_sequence_keeps_its_own_records() -> None:
    events = synthetic_history(random.Random(3), HistoryShape(jobs=1, runs=1, datasets=1, partitions=1,
                                                              task_failure=0.0, run_failure=0.0, step_failure=0.0,
                                                              crash=0.0))
    assert pack(events, 1) == events


@settings(max_examples=60, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32))
def test_an_entrys_quick_size_is_never_below_its_estimate(shape: HistoryShape, seed: int) -> None:
    events = in_parts(synthetic_history(random.Random(seed), shape), budget=2_000)
    for record in pack(events, PARTITIONS, budget=600):
        for entry in getattr(record, "sequences", ()):
            assert entry_size(entry) >= approx_size(entry)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32))
def test_a_completion_recorded_as_a_batch_of_one_packs_as_its_events_would(shape: HistoryShape, seed: int) -> None:
    """A sequence records its completion as a batch of one (`lone_completion`), its events never built: packed with
    others it is the same entry under the same keys, alone it is its events; `stands_for` and `end_keys` count and
    name them without building them."""
    events = in_parts(synthetic_history(random.Random(seed), shape), budget=2_000)
    for record in pack(events, PARTITIONS, budget=600):
        assert stands_for(record) == len(unpack(record))
        if not isinstance(record, CommitSequencesCompleted):
            continue
        assert [key for end in record.sequences for key in end_keys(record.job, end)] == [
            member.key for member in unpack(record)]
        sequences = [SequenceFields(job=record.job, run_id=record.run_id, dataset_urn=end.dataset_urn,
                                    sequence_id=end.sequence_id) for end in record.sequences]
        lone = [lone_completion(fields, end).model_copy(update={"emitted_at": record.emitted_at})
                for fields, end in zip(sequences, record.sequences, strict=True)]
        repacked = pack(lone, PARTITIONS, budget=128 * 1024)
        assert unpacked(repacked) == list(unpack(record))
        if len(lone) > 1:
            assert repacked == [record]
        else:
            assert repacked == [*ended_members(lone[0], lone[0].sequences[0])]
