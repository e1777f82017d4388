"""Deterministic identities: keys, event ids and partitions."""

from __future__ import annotations

import uuid

from events.commit import CommitStepApplied
from events.keys import (
    EVENT_ID_NAMESPACE,
    event_id_bytes,
    event_id_for,
    key_of,
    partition_for,
)
from events.task import TaskSucceeded
from tests.factories import one_of_each


def test_keys_follow_the_design() -> None:
    succeeded = TaskSucceeded(job="MyJob", run_id="r1", task_id="t0", attempt=2, results=())
    assert succeeded.key == "run/MyJob/r1/task/t0/attempt/2/SUCCEEDED"
    applied = CommitStepApplied(job="MyJob", run_id="r1", dataset_urn="MyTopic", sequence_id="r1", step_index=3,
                                outcome="executed")
    assert applied.key == "commit/MyJob/MyTopic/r1/step/3/APPLIED"


def test_re_emitting_a_transition_yields_the_same_key_and_id() -> None:
    first, again = one_of_each(), one_of_each()
    assert [e.key for e in first] == [e.key for e in again]
    assert [e.event_id for e in first] == [e.event_id for e in again]


def test_distinct_transitions_have_distinct_keys() -> None:
    keys = [e.key for e in one_of_each()]
    assert len(set(keys)) == len(keys)


def test_slashes_in_names_cannot_make_keys_collide() -> None:
    assert key_of("a/b", "c") != key_of("a", "b/c")
    assert key_of("a%2Fb") != key_of("a/b")


def test_event_id_is_uuid5_of_the_key() -> None:
    key = "commit/j/urn/s/COMPLETED"
    assert event_id_for(key) == uuid.uuid5(EVENT_ID_NAMESPACE, key)
    assert uuid.UUID(bytes=event_id_bytes(key.encode())) == event_id_for(key)


def test_an_aggregate_always_lands_in_the_same_partition() -> None:
    assert partition_for("MyTopic", 6) == partition_for("MyTopic", 6)
    assert {partition_for(f"ds.{i}", 6) for i in range(100)} == set(range(6))
    job_events = [e for e in one_of_each() if e.urn is None]
    assert {partition_for(e.aggregate, 6) for e in job_events} == {partition_for("MyJob", 6)}
