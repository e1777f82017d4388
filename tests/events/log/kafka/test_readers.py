"""A Kafka log reuses the consumer of a finished read (a new one waits for its first connection), and the reused one
reads exactly what it is asked: from its start, to its end, each partition whole, whatever the read before paused or
left queued; a read given up half way closes its consumer."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer

from events.log.interface import Snapshot
from events.log.kafka.store import KafkaLog
from tests.events.log.kafka.test_log_stability import kafka_log
from tests.factories import step_events

PARTITIONS = 3


@pytest.fixture
def counted(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[KafkaLog, list[Consumer]]]:
    """A log holding 300 events, and every consumer its reads make from now on."""
    log = kafka_log(kafka_bootstrap, PARTITIONS)
    log.append(step_events(300))
    made: list[Consumer] = []
    make = log.consumer

    def consumer(overrides: Mapping[str, Any]) -> Consumer:
        made.append(make(overrides))
        return made[-1]

    monkeypatch.setattr(log._readers, "_make", consumer)
    try:
        yield log, made
    finally:
        log.close()


def offsets(log: KafkaLog, start: Mapping[int, int] | None = None,
            until: Mapping[int, int] | None = None) -> list[tuple[int, int]]:
    """(partition, offset) of every record a bounded read returns, in the order read per partition."""
    return sorted((r.partition, r.offset) for r in log.read_records(start, until))


def test_a_finished_read_gives_its_consumer_to_the_next(counted: tuple[KafkaLog, list[Consumer]]) -> None:
    log, made = counted
    whole = offsets(log)
    assert len(whole) == 300
    assert len(made) == 1
    log.await_stable()
    log.await_stable()
    assert len(made) == 2  # one more: the stable end's read_uncommitted consumer, reused in turn
    assert offsets(log) == whole
    assert len(made) == 2


def test_a_reused_consumer_reads_each_partition_from_its_start_to_its_end(
        counted: tuple[KafkaLog, list[Consumer]]) -> None:
    log, made = counted
    end = log.end_offsets()
    whole = offsets(log)
    middle = {p: end[p] // 2 for p in end}
    # the first read ended each partition paused at its end: a reused consumer must read from further back
    assert offsets(log, start=middle) == [(p, o) for p, o in whole if o >= middle[p]]
    assert offsets(log, until=middle) == [(p, o) for p, o in whole if o < middle[p]]
    log.append(step_events(30, job="later"))
    assert len(later := offsets(log, start=end)) == 30
    assert offsets(log) == sorted([*whole, *later])
    assert len(made) == 1


def test_a_read_given_up_half_way_closes_its_consumer(counted: tuple[KafkaLog, list[Consumer]]) -> None:
    log, made = counted
    records = log.read_records()
    assert isinstance(records, Generator)
    next(records)
    records.close()
    assert len(offsets(log)) == 300
    assert len(made) == 2  # the abandoned read's consumer was not reused: it may hold what it had fetched


def test_a_consumer_is_reused_for_its_own_topic_only(counted: tuple[KafkaLog, list[Consumer]]) -> None:
    log, made = counted
    whole = offsets(log)
    snapshots = f"{log.topic}.snapshots"
    assert list(log.read_topic(snapshots, 1)) == []  # created empty by ensure_topic: nothing to assign, nothing made
    log.save_snapshot(Snapshot("s", b"state", {0: 1}, 0))
    assert {r.topic for r in log.read_topic(snapshots, 1)} == {snapshots}
    assert len(made) == 2  # a consumer that read the events topic, given another, waited ~0.8 s for its metadata
    assert offsets(log) == whole
    assert len(made) == 2
