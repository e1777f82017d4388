"""Local Kafka beyond one plain broker: a secured broker's listeners, and a three-node cluster losing its leader.

The cluster tests SIGKILL the node leading a partition of the events topic: a log's reads and appends follow the new
leader; and a real job whose leader dies while it commits still commits with the default timeouts, a next run
publishes exactly once, and no event committed before the kill is missing after it.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource
from pyspark.sql import SparkSession

from events.codec import Record
from events.commit import CommitSequencePlanned
from events.log import EventLog, open_log
from events.model import LoggedEvent
from localservers.kafka import LocalKafkaCluster, SaslMechanism, SecureEndpoints
from projections.views import RunStatus
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher, RunResult
from tests.fault.pipeline_checks import assert_exactly_once, write_job

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

RAW_LIBRDKAFKA_LINE = re.compile(r"^%\d\|[\d.]+\|[A-Z_]+\|rdkafka#.*$", re.MULTILINE)
"""A line librdkafka prints itself (`%3|1795453406.017|FAIL|rdkafka#producer-5| ...`): a client without our logger."""


def _client_settings(endpoints: SecureEndpoints, listener: str, mechanism: SaslMechanism,
                     password: str) -> dict[str, str | int | float | bool]:
    """librdkafka settings logging into one SASL listener of the secured broker."""
    secure = listener == "SASL_SSL"
    settings: dict[str, str | int | float | bool] = {
        "bootstrap.servers": endpoints.sasl_ssl_bootstrap if secure else endpoints.sasl_plaintext_bootstrap,
        "security.protocol": listener, "sasl.mechanism": str(mechanism), "sasl.username": endpoints.username,
        "sasl.password": password, "log_level": 0}
    if secure:
        settings["ssl.ca.location"] = str(endpoints.ca_pem_path)
    return settings


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("mechanism", list(SaslMechanism))
def test_the_secured_broker_admits_its_user_and_refuses_a_wrong_password(
        secure_kafka: SecureEndpoints, listener: str, mechanism: SaslMechanism) -> None:
    """Each SASL listener takes the fixture's user under both mechanisms (TLS verified against its CA) and only
    with the right password; the plaintext listener stays open for set-up."""
    good = AdminClient(_client_settings(secure_kafka, listener, mechanism, secure_kafka.password))
    assert len(good.list_topics(timeout=15).brokers) == 1
    bad = AdminClient(_client_settings(secure_kafka, listener, mechanism, secure_kafka.password + "x"))
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=3)
    assert AdminClient({"bootstrap.servers": secure_kafka.plaintext_bootstrap}).list_topics(timeout=15).brokers
    assert secure_kafka.password not in repr(secure_kafka)


def test_the_sasl_ssl_listener_is_refused_without_its_ca(secure_kafka: SecureEndpoints) -> None:
    """A client trusting only the system CAs does not accept the broker's certificate."""
    settings = _client_settings(secure_kafka, "SASL_SSL", SaslMechanism.SCRAM_SHA_512, secure_kafka.password)
    del settings["ssl.ca.location"]
    with pytest.raises(KafkaException):
        AdminClient(settings).list_topics(timeout=3)


def _partition_of_first_plan(log: EventLog, kill: Callable[[int], None], seen: list[LoggedEvent],
                             ready: threading.Event) -> None:
    """Follow the log; at the first CommitSequencePlanned (the commit's point of no return: its steps come next),
    SIGKILL the leader of its partition (``kill``), then stop."""
    try:
        for logged in log.read(follow=True):
            seen.append(logged)
            if isinstance(logged.event, CommitSequencePlanned):
                kill(logged.partition)
                return
    finally:
        ready.set()


def _run(job: Path, spark: SparkSession) -> RunResult:
    """One run of the job file on the session's Spark, in this process (the broker dies, not the run)."""
    return JobLauncher(load_job_config(job), spark=spark).run()


def _durability(bootstrap: str, topic: str) -> tuple[int, str]:
    """The topic's smallest replication factor and its min.insync.replicas, as the brokers report them."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    partitions = admin.list_topics(topic, timeout=15).topics[topic].partitions.values()
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    return min(len(p.replicas) for p in partitions), configs["min.insync.replicas"].value


def _every_broker_listed(cluster: LocalKafkaCluster, timeout: float = 60) -> None:
    """Wait until a metadata request lists all three brokers: a node the controller fenced for a late heartbeat (its
    session is 4 s, and these 2 cores run other tests beside it) is left out of new topics' replicas."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    while len(admin.list_topics(timeout=10).brokers) < len(cluster.nodes):
        assert time.monotonic() < deadline, f"the cluster did not list its {len(cluster.nodes)} brokers in {timeout}s"
        time.sleep(0.5)


def _identities(logged: list[LoggedEvent]) -> set[tuple[int, int, str]]:
    """(partition, offset, key) of each logged event: what must survive a broker's death unchanged."""
    return {(item.partition, item.offset, item.event.key) for item in logged}


def _records(run: str) -> list[Record]:
    """One raw record per partition of a three-partition topic, keyed by ``run``."""
    now = int(time.time() * 1000)
    return [Record(p, f"{run}/{p}".encode(), b"value", now) for p in range(3)]


def test_a_log_follows_a_new_leader_when_the_old_one_is_killed(kafka_cluster: LocalKafkaCluster) -> None:
    """A log whose clients know the leaders (they have read and written) SIGKILLs one: with the default timeouts, end
    offsets, a stable wait, offsets by time, an append and a read all answer from the new leader, nothing lost."""
    topic = f"oncelog.failover.{uuid.uuid4().hex[:8]}"
    _every_broker_listed(kafka_cluster)
    with open_log(f"kafka://{kafka_cluster.bootstrap}?topic={topic}&partitions=3&replication=3") as log:
        log.ensure_topic()
        assert _durability(kafka_cluster.bootstrap, topic) == (3, "2"), "a replica per node: one may die"
        writer = log.writer("failover")
        writer.append_records(_records("before"))
        before = log.end_offsets()
        leader = kafka_cluster.partition_leaders(topic)[0]
        kafka_cluster.node(leader).kill()
        try:
            assert log.end_offsets() == before
            log.await_stable()
            assert log.offsets_for_time(0) == {p: 0 for p in range(3)}
            writer.append_records(_records("after"))
            keys = {record.key for record in log.read_records()}
        finally:
            kafka_cluster.start_node(leader)
    assert keys == {record.key for record in _records("before") + _records("after")}


def test_killing_the_events_leader_mid_commit_loses_nothing_and_publishes_once(
        kafka_cluster: LocalKafkaCluster, spark: SparkSession, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL the node leading the partition of the run's first planned commit sequence while the run commits: with
    the default timeouts the run still commits (a new leader takes over within seconds, and every client follows it), a
    rerun publishes every record exactly once, every event the log held at the kill is still at its offset
    afterwards, and librdkafka printed none of its own lines (they go through logging, rate-limited)."""
    topic = f"oncelog.cluster.{uuid.uuid4().hex[:8]}"
    url = f"kafka://{kafka_cluster.bootstrap}?topic={topic}&partitions=3&replication=3"
    _every_broker_listed(kafka_cluster)
    with open_log(url) as log:
        log.ensure_topic()
        assert _durability(kafka_cluster.bootstrap, topic) == (3, "2")
        job = write_job(tmp_path, url)
        killed: list[int] = []

        def kill(partition: int) -> None:
            leader = kafka_cluster.partition_leaders(topic)[partition]
            kafka_cluster.node(leader).kill()
            killed.append(leader)

        seen: list[LoggedEvent] = []
        ready = threading.Event()
        watcher = threading.Thread(target=_partition_of_first_plan, args=(log, kill, seen, ready), daemon=True)
        watcher.start()
        try:
            first = _run(job, spark)
            assert ready.wait(30) and killed, f"no commit step was seen (run {first.status.name}: {first.error})"
            assert first.status is RunStatus.COMMITTED, (
                f"the run whose leader died ended {first.status.name}: {first.error}")
            rerun = _run(job, spark)
            assert rerun.status is RunStatus.COMMITTED, rerun.error
            assert_exactly_once(url, tmp_path)
            after = list(log.read())
        finally:
            for node_id in killed:
                kafka_cluster.start_node(node_id)
    raw = RAW_LIBRDKAFKA_LINE.findall("".join(capfd.readouterr()))
    assert not raw, f"librdkafka printed {len(raw)} lines of its own, e.g. {raw[:3]}"
    lost = _identities(seen) - _identities(after)
    assert not lost, f"events committed before the kill are gone: {sorted(lost)[:5]}"
    kill_offsets = {item.partition: item.offset for item in seen}
    assert any(item.offset > kill_offsets.get(item.partition, -1) and item.event.run_id == seen[-1].event.run_id
               for item in after), "the run wrote nothing after the kill: it was not killed mid-commit"
