"""The fold of a batched commit record: folded at once, a batch must leave the state its members leave one by one."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from events.batch import CommitSequencesCompleted, pack, unpack
from events.commit import CommitSequenceAbandoned
from events.model import LoggedEvent
from projections.state import State
from projections.synthetic import HistoryShape, synthetic_history
from tests.events.test_batch import shapes
from tests.events.test_event_parts import in_parts, views
from tests.projections.test_fold_properties import PARTITIONS, as_logged, fold, with_duplicates


def members(logged: list[LoggedEvent]) -> list[LoggedEvent]:
    """Each batch as a reader of the log hands it over: its members, each at the batch's offset."""
    return [LoggedEvent(record.topic, record.partition, record.offset, record.timestamp_ms, member, index)
            for record in logged for index, member in enumerate(unpack(record.event))]


def folded(state: State) -> tuple[object, ...]:
    """What a fold leaves."""
    return views(state), state.open_plans, state.problems, state.offsets


@settings(max_examples=150, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**32), copies=st.sampled_from([0, 3, 12]))
def test_a_batch_folds_to_the_state_of_its_members_folded_one_by_one(shape: HistoryShape, seed: int,
                                                                       copies: int) -> None:
    rng = random.Random(seed)
    records = pack(in_parts(synthetic_history(rng, shape), budget=2_000), PARTITIONS, budget=4_000)
    records = with_duplicates(rng, records, min(copies, len(records)))  # a crashed emitter's batches again, later
    at_once, one_by_one = fold(as_logged(records), 4), fold(members(as_logged(records)), 4)
    assert folded(at_once) == folded(one_by_one)


def test_completions_whose_plans_the_state_lacks_are_reported_as_their_members_are() -> None:
    shape = HistoryShape(runs=1, datasets=12, partitions=1, task_failure=0, run_failure=0, step_failure=0, crash=0,
                         plans_together=True)
    records = pack(synthetic_history(random.Random(7), shape), PARTITIONS)
    completions = [record for record in records if isinstance(record, CommitSequencesCompleted)]
    assert completions
    at_once, one_by_one = State(), State()
    for record in completions:
        at_once.apply_event(record)
        for member in unpack(record):
            one_by_one.apply_event(member)
    assert at_once.problem_count == one_by_one.problem_count > 0
    assert folded(at_once) == folded(one_by_one)


def test_a_completion_of_a_sequence_abandoned_meanwhile_folds_as_its_members() -> None:
    shape = HistoryShape(runs=1, datasets=12, partitions=1, task_failure=0, run_failure=0, step_failure=0, crash=0,
                         plans_together=True)
    records = pack(synthetic_history(random.Random(7), shape), PARTITIONS)
    batch = next(record for record in records if isinstance(record, CommitSequencesCompleted))
    end = batch.sequences[0]
    abandoned = CommitSequenceAbandoned(job=batch.job, run_id=batch.run_id, dataset_urn=end.dataset_urn,
                                        sequence_id=end.sequence_id, attempts=3, error="disk full")
    history = [*records[: records.index(batch)], abandoned, batch]
    at_once, one_by_one = fold(as_logged(history), 4), fold(members(as_logged(history)), 4)
    assert (batch.job, end.dataset_urn, end.sequence_id) in at_once.sequences  # abandoned, not completed
    assert folded(at_once) == folded(one_by_one)
