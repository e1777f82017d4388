"""The EventLog contract: one suite, run against every store (SQLite file, real Kafka 3.9.1 and Kafka 4.x brokers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import defaultdict
from collections.abc import Iterator

import pytest

from events.codec import Record
from events.commit import CommitStepApplied
from events.errors import (
    ConfigError,
    CorruptEventError,
    EventDecodeError,
    FencedError,
    UnknownEventTypeError,
)
from events.log import EventLog, Snapshot, open_log
from events.model import Event, LoggedEvent
from tests.factories import one_of_each, step_events
from tests.log_fixtures import LogFactory


@pytest.fixture(params=["sqlite", "kafka", "kafka4"])
def store(request: pytest.FixtureRequest) -> str:
    """Each store by name, the Kafka store on both supported lines: ``kafka`` (3.9.1) and ``kafka4`` (4.x)."""
    return str(request.param)


@pytest.fixture
def kafka_bootstrap(kafka_bootstrap: str, store: str, request: pytest.FixtureRequest) -> str:
    """The broker of the parametrized Kafka line: the session's 3.9.1 broker, or its Kafka 4 one."""
    return str(request.getfixturevalue("kafka4_bootstrap")) if store == "kafka4" else kafka_bootstrap


def index_of(event: Event) -> int:
    """The step index that numbers the sample events of tests.factories.step_events."""
    assert isinstance(event, CommitStepApplied)
    return event.step_index


def by_partition(logged: list[LoggedEvent]) -> dict[int, list[LoggedEvent]]:
    grouped: dict[int, list[LoggedEvent]] = defaultdict(list)
    for item in logged:
        grouped[item.partition].append(item)
    return grouped


def test_every_event_type_round_trips(event_log: EventLog) -> None:
    events = one_of_each()
    assert event_log.append(events) == len(events)
    read = [logged.event for logged in event_log.read()]
    assert sorted(read, key=lambda e: e.key) == sorted(events, key=lambda e: e.key)


def test_each_aggregate_keeps_its_order_across_batches(event_log: EventLog) -> None:
    events = step_events(3000, datasets=7)
    with event_log.writer("order") as writer:
        for start in range(0, len(events), 250):
            writer.append(events[start : start + 250])
    logged = list(event_log.read())
    per_aggregate: dict[str, list[int]] = defaultdict(list)
    for item in logged:
        assert isinstance(item.event, CommitStepApplied)
        per_aggregate[item.event.aggregate].append(item.event.step_index)
    assert len(per_aggregate) == 7
    for indexes in per_aggregate.values():
        assert indexes == sorted(indexes)
    for items in by_partition(logged).values():
        offsets = [i.offset for i in items]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert sum(len(v) for v in per_aggregate.values()) == 3000


def test_a_batch_that_fails_midway_is_invisible(event_log: EventLog) -> None:
    before = step_events(10)
    event_log.append(before)

    def failing() -> Iterator[Event]:
        yield from step_events(500, job="aborted")
        raise RuntimeError("the batch's source failed midway")

    with event_log.writer("atomic") as writer:
        with pytest.raises(RuntimeError, match="midway"):
            writer.append(failing())
        writer.append(step_events(5, job="after"))
    jobs = [logged.event.job for logged in event_log.read()]
    assert "aborted" not in jobs
    assert jobs.count("bench") == 10 and jobs.count("after") == 5


def test_re_appending_the_same_transition_is_harmless(event_log: EventLog) -> None:
    events = one_of_each()
    event_log.append(events)
    event_log.append(events[3:6])
    read = [logged.event for logged in event_log.read()]
    assert len(read) == len(events) + 3
    assert {e.key for e in read} == {e.key for e in events}
    assert {e.event_id for e in read} == {e.event_id for e in events}


def test_a_fenced_writer_cannot_append(event_log: EventLog) -> None:
    first = event_log.writer("job-a")
    first.append(step_events(3, job="first"))
    second = event_log.writer("job-a")
    with pytest.raises(FencedError, match="job-a"):
        first.append(step_events(3, job="fenced"))
    second.append(step_events(3, job="second"))
    jobs = [logged.event.job for logged in event_log.read()]
    assert "fenced" not in jobs
    assert jobs.count("first") == 3 and jobs.count("second") == 3
    first.close()
    second.close()


def test_a_hundred_thousand_events_round_trip_intact(event_log: EventLog) -> None:
    events = step_events(100_000, datasets=50)
    with event_log.writer("bulk") as writer:
        for start in range(0, len(events), 10_000):
            writer.append(events[start : start + 10_000])
    read = [logged.event for logged in event_log.read()]
    assert len(read) == 100_000
    assert sorted(read, key=index_of) == events


def test_a_corrupt_record_names_its_offset_and_the_rest_is_still_read(event_log: EventLog) -> None:
    good = step_events(4)
    with event_log.writer("corrupt") as writer:
        writer.append(good[:2])
        writer.append_records([Record(0, b"garbage/key", b"\x0b\x10CommitStepApplied\x00\x01\xff\xff", 0)])
        writer.append_records([Record(0, b"unknown/key", b"\x0b\x07Mystery\x00\x01abc", 0)])
        writer.append(good[2:])
    errors: list[EventDecodeError] = []
    read = [logged.event for logged in event_log.read(on_error=errors.append)]
    assert sorted(read, key=lambda e: e.key) == sorted(good, key=lambda e: e.key)
    assert len(errors) == 2
    assert all(e.partition == 0 and e.topic == event_log.topic for e in errors)
    assert isinstance(errors[1], UnknownEventTypeError) and "Mystery" in str(errors[1])
    assert errors[0].offset < errors[1].offset
    with pytest.raises(EventDecodeError, match=rf"\[0\]@{errors[0].offset}"):
        list(event_log.read())
    past_the_bad_ones = [logged.event for logged in event_log.read(start={0: errors[1].offset + 1})]
    assert set(good[2:]) <= set(past_the_bad_ones) <= set(good)


def test_a_record_changed_after_encoding_is_refused_naming_its_offset(event_log: EventLog) -> None:
    """The codec's checksum travels with the record through every store: a changed byte is found on read."""
    good = step_events(3)
    record = event_log.codec.to_record(good[0], event_log.partitions)
    value = bytearray(record.value or b"")
    value[-1] ^= 0x01
    with event_log.writer("damage") as writer:
        writer.append(good[1:])
        writer.append_records([Record(record.partition, record.key, bytes(value), record.timestamp_ms)])
    errors: list[EventDecodeError] = []
    read = [logged.event for logged in event_log.read(on_error=errors.append)]
    assert sorted(read, key=lambda e: e.key) == sorted(good[1:], key=lambda e: e.key)
    assert len(errors) == 1 and isinstance(errors[0], CorruptEventError)
    assert errors[0].partition == record.partition and good[0].key in str(errors[0])
    with pytest.raises(CorruptEventError, match=rf"\[{record.partition}\]@{errors[0].offset}: checksum mismatch"):
        list(event_log.read())


def test_await_stable_returns_on_a_quiet_log(event_log: EventLog) -> None:
    event_log.append(step_events(5))
    event_log.await_stable(timeout_s=30)
    assert len(list(event_log.read())) == 5


def test_read_from_offsets_until_offsets(event_log: EventLog) -> None:
    event_log.append(step_events(30))
    middle = event_log.end_offsets()
    event_log.append(step_events(20, job="later"))
    later = list(event_log.read(start=middle))
    assert [i.event.job for i in later] == ["later"] * 20
    earlier = list(event_log.read(until=middle))
    assert [i.event.job for i in earlier] == ["bench"] * 30


def test_offsets_for_time(event_log: EventLog) -> None:
    events = step_events(100)  # emitted 1 ms apart from T0
    event_log.append(events)
    cut = event_log.offsets_for_time(int(events[60].emitted_at.timestamp() * 1000))
    before = [i.event for i in event_log.read(until=cut)]
    assert sorted(index_of(e) for e in before) == list(range(60))


def test_follow_sees_events_appended_later(event_log: EventLog) -> None:
    event_log.append(step_events(5))
    seen: list[LoggedEvent] = []
    done = threading.Event()

    def follow() -> None:
        for logged in event_log.read(follow=True):
            seen.append(logged)
            if len(seen) == 12:
                done.set()
                return

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    event_log.append(step_events(7, job="later"))
    assert done.wait(60), f"follow saw {len(seen)} of 12 events"
    assert [i.event.job for i in seen].count("later") == 7


SUBSCRIBER = textwrap.dedent(
    """
    import json, sys
    from events.log import open_log
    log = open_log(sys.argv[1])
    sub = log.subscribe("auditors")
    seen = []
    while len(seen) < 60:
        seen += sub.poll(timeout=2.0, max_records=60 - len(seen))
    sub.commit()
    extra = []
    while len(extra) < 10:
        extra += sub.poll(timeout=2.0, max_records=10 - len(extra))
    sub.close()  # leaves the group without committing the extra 10
    print(json.dumps([i.event.step_index for i in seen]))
    """
)


def test_a_consumer_group_resumes_after_a_restart(event_log: EventLog) -> None:
    event_log.append(step_events(100, datasets=1))
    done = subprocess.run(
        [sys.executable, "-c", SUBSCRIBER, event_log.url],
        capture_output=True, text=True, timeout=180, cwd=os.getcwd(), check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads(done.stdout.strip().splitlines()[-1])
    assert first == list(range(60))
    with event_log.subscribe("auditors") as again:
        resumed: list[LoggedEvent] = []
        for _ in range(30):
            resumed += again.poll(timeout=2.0)
            if len(resumed) >= 40:
                break
        assert [index_of(i.event) for i in resumed] == list(range(60, 100))
        again.commit()
        assert sum(again.committed().values()) > 0


WRITER = textwrap.dedent(
    """
    import sys
    from events.log import open_log
    from tests.factories import step_events
    log = open_log(sys.argv[1])
    name = sys.argv[2]
    with log.writer(name) as writer:
        events = step_events(600, job=name, datasets=3)
        for start in range(0, 600, 50):
            writer.append(events[start:start + 50])
    """
)


def test_several_processes_append_at_once(event_log: EventLog) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, event_log.url, f"writer-{n}"], stderr=subprocess.PIPE)
        for n in range(3)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()[-3000:]
    per_writer: dict[str, list[int]] = defaultdict(list)
    for logged in event_log.read():
        per_writer[logged.event.job].append(index_of(logged.event))
    assert set(per_writer) == {"writer-0", "writer-1", "writer-2"}
    for indexes in per_writer.values():
        assert sorted(indexes) == list(range(600))
        per_dataset: dict[int, list[int]] = defaultdict(list)
        for i in indexes:
            per_dataset[i % 3].append(i)
        assert all(v == sorted(v) for v in per_dataset.values())


def test_snapshots_replace_each_other(event_log: EventLog) -> None:
    assert event_log.load_snapshot("datasets") is None
    big = os.urandom(1_700_000)  # several chunks on Kafka
    event_log.save_snapshot(Snapshot("datasets", big, {0: 10, 1: 20, 2: 30}, 1))
    event_log.save_snapshot(Snapshot("other", b"x", {0: 1}, 2))
    event_log.save_snapshot(Snapshot("datasets", big[:900_000], {0: 11, 1: 21, 2: 31}, 3))
    loaded = event_log.load_snapshot("datasets")
    assert loaded is not None
    assert loaded.data == big[:900_000] and loaded.offsets == {0: 11, 1: 21, 2: 31} and loaded.created_ms == 3
    other = event_log.load_snapshot("other")
    assert other is not None and other.data == b"x"


def test_ensure_topic_is_idempotent_and_keeps_partitioning(event_log: EventLog, log_factory: LogFactory) -> None:
    event_log.ensure_topic()
    assert event_log.partitions == 3
    with pytest.raises(ConfigError, match="partitions"):
        log_factory(partitions=5, url=event_log.url.replace("partitions=3", "partitions=5"))


def test_a_second_reader_sees_the_same_log(event_log: EventLog) -> None:
    event_log.append(one_of_each())
    with open_log(event_log.url) as other:
        assert [i.event for i in other.read()] == [i.event for i in event_log.read()]
