"""The Kafka log on a real broker: a writer killed inside a transaction is reported, never silently waited out or
ignored; appends do not stall behind it; a topic that can lose history is refused; transient errors are retried."""

from __future__ import annotations

import logging
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from typer.testing import CliRunner

from events.codec import Record
from events.errors import ConfigError, LogNotStableError, LogUnavailableError
from events.log import open_log
from events.log.kafka.store import COMPACTION_CONFIGS, KafkaLog, check_topic_configs, compaction_warning
from oncelog.cli import app
from tests.factories import step_events
from tests.kafka_plugin import create_topic

KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Producer
    bootstrap, topic, transactional_id = sys.argv[1:4]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 120000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"never committed", key=b"k", partition=0)
    assert producer.flush(30) == 0
    print("open", flush=True)
    time.sleep(600)
    """
)


@dataclass(frozen=True)
class HeldLog:
    """A Kafka log whose partition 0 is held by the open transaction of a SIGKILLed writer."""

    log: KafkaLog
    bootstrap: str
    transactional_id: str


def kafka_log(bootstrap: str, partitions: int, topic: str | None = None) -> KafkaLog:
    """A fresh log on its own topic, created."""
    topic = topic or f"oncelog.test.{uuid.uuid4().hex[:12]}"
    log = open_log(f"kafka://{bootstrap}?topic={topic}&partitions={partitions}&write_timeout_s=60")
    assert isinstance(log, KafkaLog)
    log.ensure_topic()
    return log


def kill_inside_a_transaction(bootstrap: str, topic: str, transactional_id: str) -> None:
    """Run a writer that begins a transaction, produces to partition 0, and is SIGKILLed before committing."""
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, bootstrap, topic, transactional_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.getcwd(),
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout=60)
        line = proc.stdout.readline() if ready else b""
        assert line.strip() == b"open", (proc.stderr.read() if proc.poll() is not None and proc.stderr else line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def abort_as_its_restart_does(bootstrap: str, transactional_id: str) -> None:
    """What the error message advises: restart the writer (same transactional id), which aborts its transaction."""
    restarted = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    restarted.init_transactions(30)
    restarted.flush(5)


@pytest.fixture
def held_log(kafka_bootstrap: str) -> Iterator[HeldLog]:
    log = kafka_log(kafka_bootstrap, partitions=2)
    log.append(step_events(4, datasets=2))
    log.await_stable(timeout_s=30)  # stable before the killed writer: returns
    transactional_id = f"killed-{uuid.uuid4().hex[:8]}"
    kill_inside_a_transaction(kafka_bootstrap, log.topic, transactional_id)
    yield HeldLog(log, kafka_bootstrap, transactional_id)
    abort_as_its_restart_does(kafka_bootstrap, transactional_id)
    log.close()


@pytest.mark.kafka
def test_await_stable_names_the_partition_a_killed_writer_holds(held_log: HeldLog) -> None:
    log = held_log.log
    started = time.monotonic()
    with pytest.raises(LogNotStableError) as caught:
        log.await_stable(timeout_s=2)
    assert time.monotonic() - started < 30
    assert set(caught.value.stuck) == {0}, "partition 1 has no open transaction"
    stable, high = caught.value.stuck[0]
    assert stable < high
    message = str(caught.value)
    assert f"{log.topic}[0] last stable offset {stable}, high watermark {high}" in message
    assert "transaction.timeout.ms" in message and "restart" in message
    assert "oncelog recover <job file>" in message, "the one command that clears a killed run's task transaction"
    abort_as_its_restart_does(held_log.bootstrap, held_log.transactional_id)
    log.await_stable(timeout_s=30)  # what the message advises works


@pytest.mark.kafka
def test_an_append_returns_promptly_while_another_writer_holds_its_partition(held_log: HeldLog) -> None:
    """The visibility wait of an append does not wait out a transaction older than its batch (it stalled ~10 s)."""
    log = held_log.log
    event = step_events(1, job="after-the-kill")[0]
    record = log.codec.to_record(event, log.partitions)
    with log.writer("other-writer") as writer:
        for _ in range(2):
            started = time.monotonic()
            writer.append_records([Record(0, record.key, record.value, record.timestamp_ms)])
            assert time.monotonic() - started < 5, "a correctness bound, not a benchmark: it was 10 s per append"
    abort_as_its_restart_does(held_log.bootstrap, held_log.transactional_id)
    log.await_stable(timeout_s=30)
    assert [item.event.job for item in log.read()].count("after-the-kill") == 2  # committed all along


@pytest.mark.kafka
def test_an_events_topic_with_retention_is_refused(kafka_bootstrap: str) -> None:
    """By a run (ensure_topic) and by `state`, which used to answer from it silently."""
    topic = f"oncelog.test.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    configs = {"cleanup.policy": "compact,delete"}
    admin.create_topics([NewTopic(topic, 2, 1, config=configs)])[topic].result(30)
    log = open_log(f"kafka://{kafka_bootstrap}?topic={topic}")
    refused = r"cleanup\.policy=compact,delete.*kafka-configs.*cleanup\.policy=compact"
    with pytest.raises(ConfigError, match=refused) as caught:
        log.ensure_topic()
    assert f"topic {topic!r}" in str(caught.value)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "log_level": 0})
    producer.produce(topic, b"value", b"key")
    assert producer.flush(30) == 0
    log.close()
    shown = CliRunner().invoke(app, ["state", "--log", f"kafka://{kafka_bootstrap}?topic={topic}"])
    assert shown.exit_code == 2, shown.output  # a fold of it would miss what retention deleted: not answered
    assert "cleanup.policy=compact,delete" in shown.output and "does not exist" not in shown.output


@pytest.mark.kafka
def test_a_single_replica_topic_warns_once(kafka_bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    brokers = len(AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30).brokers)
    with caplog.at_level(logging.WARNING, logger="events.log.kafka.store"):
        log = kafka_log(kafka_bootstrap, partitions=1)
        log.ensure_topic()
        assert log.durability_warning == log.durability_warning
        logged = [r.getMessage() for r in caplog.records]
    again = open_log(log.url)
    if brokers >= 3:
        assert log.durability_warning is None and again.durability_warning is None
    else:
        assert log.durability_warning is not None and "replication factor" in log.durability_warning
        assert again.durability_warning == log.durability_warning  # found without ensure_topic too
        assert logged.count(log.durability_warning) == 1  # one log, two ensure_topic: logged once
    log.close()
    again.close()


@pytest.mark.parametrize(
    ("configs", "named"),
    [
        ({"cleanup.policy": "delete"}, "cleanup.policy=delete"),
        ({"cleanup.policy": "compact,delete"}, "cleanup.policy=compact,delete"),
        ({"cleanup.policy": "compact", "min.insync.replicas": "1"}, "min.insync.replicas=1"),
        (
            {"cleanup.policy": "compact", "min.insync.replicas": "2", "unclean.leader.election.enable": "true"},
            "unclean.leader.election.enable=true",
        ),
    ],
)
def test_a_replicated_topic_that_can_lose_events_is_refused(configs: dict[str, str], named: str) -> None:
    """Three replicas need a multi-broker cluster, so the rule itself is checked here, on described configs."""
    with pytest.raises(ConfigError, match=r"topic 'events'") as caught:
        check_topic_configs("events", 3, configs)
    assert named in str(caught.value) and "--entity-name events" in str(caught.value)


def test_durable_and_development_topics() -> None:
    safe = {"cleanup.policy": "compact", "min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert check_topic_configs("events", 3, safe) is None
    warning = check_topic_configs("events", 1, {**safe, "min.insync.replicas": "1"})
    assert warning is not None and "replication factor 1" in warning
    assert "could not be described" in (check_topic_configs("events", 3, None) or "")


@pytest.mark.kafka
def test_end_offsets_of_a_topic_just_created_are_retried_not_failed(kafka_bootstrap: str) -> None:
    """A consumer that knew the cluster before a topic was created answers UNKNOWN_PARTITION for a moment (it made
    test_commit_failures flaky as NOT_LEADER_FOR_PARTITION): retried; a topic that does not exist (a log nothing was
    written to yet) holds nothing, found out well before the read timeout."""
    log = kafka_log(kafka_bootstrap, partitions=1)
    log.end_offsets()  # its metadata consumer now exists, with the cluster's metadata of this moment
    for _ in range(5):
        topic = create_topic(kafka_bootstrap, 3, "fresh")
        assert log.end_offsets_of(topic, 3) == {0: 0, 1: 0, 2: 0}
    missing = f"missing.{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    assert log.end_offsets_of(missing, 2) == {0: 0, 1: 0}
    assert time.monotonic() - started < 30
    log.close()


class DroppingFirstCreate:
    """A real admin client whose first topic creation fails as it did in CI: the request's broker handle dropped
    (_DESTROY_BROKER) as the client replaced its bootstrap connection; optionally after the broker did create it."""

    def __init__(self, admin: AdminClient, created_anyway: bool) -> None:
        self._admin, self._created_anyway, self.calls = admin, created_anyway, 0

    def create_topics(self, topics: list[NewTopic]) -> dict[str, Future[None]]:
        self.calls += 1
        if self.calls > 1:
            return self._admin.create_topics(topics)
        if self._created_anyway:
            for future in self._admin.create_topics(topics).values():
                future.result(timeout=30)
        dropped: Future[None] = Future()
        dropped.set_exception(KafkaException(KafkaError(KafkaError._DESTROY_BROKER)))
        return {topic.topic: dropped for topic in topics}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admin, name)


@pytest.mark.kafka
@pytest.mark.parametrize("created_anyway", [False, True], ids=["lost-request", "lost-answer"])
def test_a_topic_creation_dropped_in_flight_is_retried(
        kafka_bootstrap: str, created_anyway: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI once failed to create a cluster's topic with _DESTROY_BROKER: a transient error, so the creation is retried
    (or found done) and the log works; a creation refused for good still fails at once, naming the topic."""
    topic = f"oncelog.test.{uuid.uuid4().hex[:12]}"
    log = open_log(f"kafka://{kafka_bootstrap}?topic={topic}&partitions=2")
    assert isinstance(log, KafkaLog)
    dropping = DroppingFirstCreate(log._admin, created_anyway)
    monkeypatch.setattr(log, "_admin", dropping)
    log.ensure_topic()
    assert dropping.calls >= 2 - created_anyway and log.partitions == 2
    log.append(step_events(1))
    assert len(list(log.read())) == 1
    log.close()
    refused = open_log(f"kafka://{kafka_bootstrap}?topic=bad..{uuid.uuid4().hex[:6]}&partitions=1&replication=9")
    started = time.monotonic()
    with pytest.raises(LogUnavailableError, match=r"cannot create topic 'bad\.\."):
        refused.ensure_topic()
    assert time.monotonic() - started < 10


def test_compaction_settings_other_than_oncelogs_are_named_with_the_command_that_sets_them() -> None:
    assert compaction_warning("events", dict(COMPACTION_CONFIGS), "b:9092") is None
    assert compaction_warning("events", None, "b:9092") is None  # not described: durability says so
    warning = compaction_warning("events", {**COMPACTION_CONFIGS, "segment.ms": "604800000"}, "b:9092")
    assert warning is not None and "segment.ms=604800000 (oncelog sets 3600000)" in warning
    assert warning.endswith("kafka-configs.sh --bootstrap-server b:9092 --alter --entity-type topics --entity-name "
                            "events --add-config segment.ms=3600000")


@pytest.mark.kafka
def test_an_existing_topic_with_older_compaction_settings_is_warned_about_once_per_log(
        kafka_bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    """A topic made before oncelog set compaction (Kafka's defaults: segment.ms of a week, no max.compaction.lag.ms)
    keeps gc's deletions on disk for days: said once per log object, with the command that fixes it."""
    topic = f"oncelog.test.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(30)
    with caplog.at_level(logging.WARNING, logger="events.log.kafka.store"):
        with open_log(f"kafka://{kafka_bootstrap}?topic={topic}") as log:
            log.ensure_topic()
            log.ensure_topic()
        about = [r.getMessage() for r in caplog.records if "compaction settings" in r.getMessage()]
    assert len(about) == 1, about  # the snapshots and locks topics oncelog created have its settings
    assert f"topic {topic!r} keeps compaction settings other than oncelog's" in about[0]
    assert "segment.ms=604800000 (oncelog sets 3600000)" in about[0]
    assert about[0].endswith(f"kafka-configs.sh --bootstrap-server {kafka_bootstrap} --alter --entity-type topics "
                             f"--entity-name {topic} --add-config max.compaction.lag.ms=3600000,segment.ms=3600000"
                             ), about[0]


@pytest.mark.kafka
def test_state_and_verify_say_so_while_another_writers_open_transaction_pins_the_log(held_log: HeldLog) -> None:
    """A read_committed fold stops at the last stable offset: without a word, `state` and `verify` showed the log as
    it was before the open transaction, however long it stayed open."""
    log = held_log.log
    for command in ("state", "verify"):
        shown = CliRunner().invoke(app, [command, "--log", log.url, "--json"])
        said = " ".join(shown.stderr.split())
        assert f"{log.topic}[0] last stable offset" in said, shown.stderr
        assert f"What `{command}` shows stops at the last stable offset" in said and "transaction.timeout.ms" in said
        assert "oncelog recover" in said
    abort_as_its_restart_does(held_log.bootstrap, held_log.transactional_id)
    calm = CliRunner().invoke(app, ["state", "--log", log.url, "--json"])
    assert "last stable offset" not in calm.stderr, calm.stderr
