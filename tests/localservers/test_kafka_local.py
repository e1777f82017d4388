"""The local Apache Kafka broker is real: it answers clients, honours transactions, survives restarts and crashes."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from typer.testing import CliRunner

from localservers import kafka as kafka_local
from localservers.errors import KafkaProvisioningError
from localservers.kafka import LocalKafkaBroker
from localservers.kafka_cli import app
from localservers.tools import find_tool
from tests.kafka_plugin import create_topic

pytestmark = pytest.mark.kafka


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Produce values durably (acks=all, flushed)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value, key=value)
    assert producer.flush(30) == 0


def _consume_all(bootstrap: str, topic: str, isolation: str = "read_committed", partitions: int = 1) -> list[bytes]:
    """Every value up to the (isolation-dependent) end of the topic, read from the start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        at_eof: set[int] = set()
        for _ in range(200):
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_eof.add(message.partition() or 0)
                if len(at_eof) == partitions:
                    return values
                continue
            value = message.value()
            assert error is None and value is not None, error
            values.append(value)
        raise AssertionError(f"did not reach the end of {topic}; got {values}")
    finally:
        consumer.close()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port some other process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def test_broker_answers_produce_and_consume(kafka_bootstrap: str) -> None:
    """A topic can be created, written and read back."""
    topic = create_topic(kafka_bootstrap, 1, "test")
    _produce(kafka_bootstrap, topic, [b"one", b"two"])
    assert _consume_all(kafka_bootstrap, topic) == [b"one", b"two"]


def test_aborted_records_are_invisible_to_read_committed(kafka_bootstrap: str) -> None:
    """Records of an aborted transaction never reach a read_committed consumer; committed ones do."""
    topic = create_topic(kafka_bootstrap, 2, "test")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(2):
        producer.produce(topic, value=b"aborted", partition=p)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for p in range(2):
        producer.produce(topic, value=b"committed", partition=p)
    producer.commit_transaction(30)

    assert _consume_all(kafka_bootstrap, topic, "read_committed", partitions=2) == [b"committed", b"committed"]
    # The aborted records really were written: a read_uncommitted consumer sees them.
    assert sorted(_consume_all(kafka_bootstrap, topic, "read_uncommitted", partitions=2)) == [
        b"aborted", b"aborted", b"committed", b"committed"]


def test_stop_then_start_keeps_data_and_port(restartable_kafka: LocalKafkaBroker) -> None:
    """A cleanly stopped broker comes back on the same port with its data, even from a new handle."""
    broker = restartable_kafka
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, "test")
    _produce(bootstrap, topic, [b"before"])

    broker.stop()
    assert not broker.is_running()
    assert kafka_local.status(broker.work_dir) is None
    broker.start()
    assert broker.bootstrap == bootstrap
    assert _consume_all(bootstrap, topic) == [b"before"]

    broker.restart()
    again = LocalKafkaBroker(broker.work_dir)
    assert (again.port, again.controller_port, again.cluster_id) == (
        broker.port, broker.controller_port, broker.cluster_id)
    assert again.is_running() and again.pid() == broker.pid()
    _produce(bootstrap, topic, [b"after"])
    assert _consume_all(bootstrap, topic) == [b"before", b"after"]


def test_kill_then_start_recovers(restartable_kafka: LocalKafkaBroker) -> None:
    """After a SIGKILL (a crash) the broker restarts, keeps acknowledged data and accepts writes."""
    broker = restartable_kafka
    topic = create_topic(broker.bootstrap, 1, "test")
    _produce(broker.bootstrap, topic, [b"acked"])

    broker.kill()
    assert not broker.is_running()
    broker.start()
    assert _consume_all(broker.bootstrap, topic) == [b"acked"]
    _produce(broker.bootstrap, topic, [b"later"])
    assert _consume_all(broker.bootstrap, topic) == [b"acked", b"later"]


def test_start_on_a_busy_port_fails_clearly(tmp_path: Path, busy_port: int) -> None:
    """A port held by another process is a KafkaProvisioningError naming the port; no broker is left behind."""
    broker = LocalKafkaBroker(tmp_path / "kafka", port=busy_port)
    with pytest.raises(KafkaProvisioningError, match=str(busy_port)):
        broker.start()
    assert not broker.is_running()


def test_broker_exiting_at_start_up_reports_its_log(tmp_path: Path) -> None:
    """A broker dying during start-up raises with the tail of its log (here: a log dir of another node id)."""
    broker = LocalKafkaBroker(tmp_path / "kafka")
    broker.start()
    broker.stop()
    meta = tmp_path / "kafka" / "data" / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))
    with pytest.raises(KafkaProvisioningError, match="exited during start-up") as raised:
        broker.start()
    assert "broker.log" in str(raised.value) and "node" in str(raised.value).lower()
    assert not broker.is_running()


def test_up_status_down_detached(tmp_path: Path) -> None:
    """``up`` starts a detached broker once; ``status`` finds it; ``down`` stops it."""
    state_dir = tmp_path / "state"
    assert kafka_local.status(state_dir) is None
    assert kafka_local.down(state_dir) is False
    try:
        bootstrap = kafka_local.up(state_dir, None)
        assert kafka_local.status(state_dir) == bootstrap
        pid = LocalKafkaBroker(state_dir).pid()
        assert kafka_local.up(state_dir, None) == bootstrap
        assert LocalKafkaBroker(state_dir).pid() == pid
        topic = create_topic(bootstrap, 1, "test")
        _produce(bootstrap, topic, [b"detached"])
        assert _consume_all(bootstrap, topic) == [b"detached"]
    finally:
        stopped = kafka_local.down(state_dir)
    assert stopped is True
    assert kafka_local.status(state_dir) is None
    assert kafka_local.down(state_dir) is False


def test_cli_up_status_down(tmp_path: Path, busy_port: int) -> None:
    """The CLI prints ``kafka://host:port``, reports status with its exit code and fails in one line."""
    runner = CliRunner()
    state = str(tmp_path / "cli")
    assert runner.invoke(app, ["status", "--state-dir", state]).exit_code == 1
    try:
        started = runner.invoke(app, ["up", "--state-dir", state])
        assert started.exit_code == 0, started.output
        url = started.stdout.strip().splitlines()[-1]
        assert url.startswith("kafka://127.0.0.1:")
        status = runner.invoke(app, ["status", "--state-dir", state])
        assert status.exit_code == 0 and status.stdout.strip() == url
    finally:
        stopped = runner.invoke(app, ["down", "--state-dir", state])
    assert stopped.exit_code == 0, stopped.output
    assert runner.invoke(app, ["status", "--state-dir", state]).exit_code == 1

    failed = runner.invoke(app, ["up", "--state-dir", str(tmp_path / "busy"), "--port", str(busy_port)])
    assert failed.exit_code == 1
    assert failed.stderr.count("\n") == 1 and failed.stderr.startswith("error: ") and str(busy_port) in failed.stderr


def test_missing_maven_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an empty cache and no ``mvn`` on PATH, ensure_jars says what to install."""
    java = find_tool("java", "", KafkaProvisioningError)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(KafkaProvisioningError, match="`mvn` was not found on PATH: install Apache Maven"):
        kafka_local.ensure_jars(tmp_path / "cache")
    assert not (tmp_path / "cache" / f"kafka-{kafka_local.KAFKA_VERSION}" / "libs").exists()


class _SameDraws:
    """A SystemRandom that draws the same ports, in the same order, in every instance: what made two nodes of one
    cluster draw one port each (a clash CI met) before each node's draw avoided the ports of the nodes before it."""

    def __init__(self) -> None:
        self.next = 21_000

    def randint(self, low: int, high: int) -> int:
        self.next += 1
        return self.next


def test_the_nodes_of_a_cluster_draw_distinct_ports_even_from_the_same_draws(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("localservers.tools.random.SystemRandom", _SameDraws)
    monkeypatch.setattr("localservers.tools.port_is_free", lambda port: True)
    cluster = kafka_local.LocalKafkaCluster(tmp_path / "cluster", nodes=3)
    ports = [port for node in cluster.nodes for port in (node.port, node.controller_port)]
    assert len(set(ports)) == 6
