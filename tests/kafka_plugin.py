"""Pytest plugin giving tests real Apache Kafka: one broker, a secured one, a Kafka 4 one, a three-node cluster.

Session fixtures (each started lazily, by the first test asking for it, and stopped at the end of the session):

- ``kafka_bootstrap -> str``: ``host:port`` of the shared Kafka 3.9.1 broker (see below).
- ``secure_kafka -> localservers.kafka.SecureEndpoints``, a frozen value object with:
  ``plaintext_bootstrap: str``, ``sasl_ssl_bootstrap: str``, ``sasl_plaintext_bootstrap: str`` (all
  ``127.0.0.1:<port>`` of one single-node Kafka 3.9.1 broker), ``ca_pem_path: Path`` (the CA, made at fixture time
  with openssl, that signed the SASL_SSL listener's certificate for IP 127.0.0.1 and DNS localhost),
  ``username: str``, ``password: str`` (random per session; not in the repr), ``mechanisms:
  tuple[SaslMechanism, ...]`` = (``SCRAM-SHA-512``, ``PLAIN``); the one user logs in with either mechanism on both
  SASL listeners. ``$SECURE_KAFKA_*`` are not read: it is always a local broker.
- ``kafka4_bootstrap -> str``: ``host:port`` of a single-node Kafka 4.x broker (``KAFKA4_VERSION``), or
  ``$KAFKA4_BOOTSTRAP``.
- ``kafka_cluster -> localservers.kafka.LocalKafkaCluster``: three KRaft nodes (Kafka 3.9.1), internal topics with
  replication 3 / min.insync 2; ``.bootstrap`` names all nodes, ``.partition_leaders(topic)``, ``.node(id).kill()``,
  ``.start_node(id)``. A test that kills a node must start it again before it ends.

Function fixture: ``restartable_kafka -> LocalKafkaBroker``, a broker of the test's own that it may stop and kill.

``kafka_bootstrap`` resolves, in order: ``$KAFKA_BOOTSTRAP``; a testcontainers ``KafkaContainer`` when a Docker
engine answers; a :class:`~localservers.kafka.LocalKafkaBroker` run from Maven Central jars (Java + Maven only).
When none works, tests skip with the reason, except under ``CI=true`` where they fail: CI must never go green
by silently skipping the Kafka suite. Enable with ``pytest_plugins = ["tests.kafka_plugin"]``.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from localservers.errors import KafkaProvisioningError
from localservers.kafka import (
    KAFKA4_VERSION,
    KAFKA_VERSION,
    LocalKafkaBroker,
     LocalKafkaCluster,
    SaslUser,
    SecureEndpoints,
)
from tests.unavailable import unavailable

if TYPE_CHECKING:
    from testcontainers.community.kafka import KafkaContainer

# Kafka 3.9 (as the local broker), configured like it: one node, transactions usable, no auto-created topics.
CONTAINER_IMAGE = "confluentinc/cp-kafka:7.9.0"


def create_topic(bootstrap: str, partitions: int, prefix: str) -> str:
    """Create a fresh plain topic named `<prefix>.<random>` (the brokers auto-create nothing) and return its name."""
    topic = f"{prefix}.{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30).values():
        future.result(timeout=30)
    return topic



def _docker_answers(reasons: list[str]) -> bool:
    """Whether a Docker engine answers a ping quickly; records why not in ``reasons``."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as e:
        reasons.append(f"the docker package is not importable ({e})")
        return False
    try:
        return bool(docker.from_env(timeout=3).ping())
    except (DockerException, OSError) as e:
        reasons.append(f"no Docker engine ({type(e).__name__}: {str(e)[:120]})")
        return False


def _start_container(reasons: list[str]) -> KafkaContainer | None:
    """A started testcontainers Kafka (KRaft) when Docker answers, else None with the reason recorded."""
    if not _docker_answers(reasons):
        return None
    try:
        from docker.errors import DockerException
        from testcontainers.community.kafka import KafkaContainer
    except ImportError as e:
        reasons.append(f"testcontainers is not importable ({e})")
        return None
    container = (
        KafkaContainer(CONTAINER_IMAGE)
        .with_kraft()
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
    )
    try:
        container.start(timeout=120)
    except (DockerException, OSError, TimeoutError, RuntimeError) as e:  # RuntimeError: ContainerStartException
        reasons.append(f"the Kafka container did not start ({type(e).__name__}: {str(e)[:200]})")
        try:
            container.stop()
        except (DockerException, OSError) as stop_error:
            reasons.append(f"removing it failed too ({type(stop_error).__name__}: {stop_error})")
        return None
    return container


def _start_local(work_dir: Path, reasons: list[str], version: str = KAFKA_VERSION,
                 sasl_user: SaslUser | None = None) -> LocalKafkaBroker | None:
    """A started local broker (of ``version``, with SASL listeners for ``sasl_user``), or None with the reason."""
    try:
        broker = LocalKafkaBroker(work_dir, version=version, sasl_user=sasl_user)
        broker.start()
    except KafkaProvisioningError as e:
        reasons.append(f"the local broker did not start: {e}")
        return None
    return broker


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Kafka broker shared by the whole session (see the module docstring for the order)."""
    if explicit := os.environ.get("KAFKA_BOOTSTRAP", "").strip():
        yield explicit.removeprefix("kafka://")
        return
    reasons: list[str] = []
    container = _start_container(reasons)
    if container is not None:
        try:
            yield container.get_bootstrap_server()
        finally:
            container.stop()
        return
    broker = _start_local(tmp_path_factory.mktemp("kafka"), reasons)
    if broker is None:
        unavailable("Kafka broker", "; ".join(reasons))
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def restartable_kafka(tmp_path: Path) -> Iterator[LocalKafkaBroker]:
    """A started broker of the test's own (own dir and port) that it may stop, kill and restart; stopped after."""
    reasons: list[str] = []
    broker = _start_local(tmp_path / "kafka", reasons)
    if broker is None:
        unavailable("Kafka broker", "; ".join(reasons))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureEndpoints]:
    """A broker with PLAINTEXT, SASL_SSL and SASL_PLAINTEXT listeners, its CA and its one user (module docstring)."""
    reasons: list[str] = []
    user = SaslUser("oncelog-test", secrets.token_hex(12))
    broker = _start_local(tmp_path_factory.mktemp("secure-kafka"), reasons, sasl_user=user)
    if broker is None:
        unavailable("secured Kafka broker", "; ".join(reasons))
    try:
        yield broker.secure_endpoints()
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka4_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Kafka 4.x broker shared by the session: ``$KAFKA4_BOOTSTRAP``, else a local one."""
    if explicit := os.environ.get("KAFKA4_BOOTSTRAP", "").strip():
        yield explicit.removeprefix("kafka://")
        return
    reasons: list[str] = []
    broker = _start_local(tmp_path_factory.mktemp("kafka4"), reasons, version=KAFKA4_VERSION)
    if broker is None:
        unavailable(f"Kafka {KAFKA4_VERSION} broker", "; ".join(reasons))
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    """A three-node local Kafka cluster shared by the session (module docstring); stopped at its end."""
    try:
        cluster = LocalKafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), nodes=3)
        cluster.start()
    except KafkaProvisioningError as e:
        unavailable("Kafka cluster", f"the local three-node cluster did not start: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()
