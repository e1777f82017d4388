"""Security configured once (log URL or job file) and used by every client: the event store, its snapshots and
subscriptions (what `tail` follows), the Kafka topic source; refused credentials or certificates named clearly."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer

from events.errors import KafkaSecurityError
from events.log import Snapshot, open_log
from events.model import LoggedEvent
from localservers.kafka import SecureEndpoints
from spark_pipeline.constructs import SourceState, WorkUnitState
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.sources.kafka_topic import KafkaTopicSource
from tests.factories import one_of_each
from tests.kafka_plugin import create_topic

pytestmark = pytest.mark.kafka


def secured_url(kafka: SecureEndpoints, tls: bool, mechanism: str, password: str | None = None,
                ca: str | None = None) -> str:
    """A log URL on one of the broker's SASL listeners, with the settings that listener needs."""
    bootstrap = kafka.sasl_ssl_bootstrap if tls else kafka.sasl_plaintext_bootstrap
    url = (f"kafka://{bootstrap}?topic=sec.{uuid.uuid4().hex[:10]}&partitions=2&read_timeout_s=15"
           f"&security.protocol={'SASL_SSL' if tls else 'SASL_PLAINTEXT'}&sasl.mechanism={mechanism}"
           f"&sasl.username={kafka.username}&sasl.password={password or kafka.password}")
    return url + f"&ssl.ca.location={ca or kafka.ca_pem_path}" if tls else url


@pytest.mark.parametrize(("mechanism", "tls"), [("SCRAM-SHA-512", True), ("PLAIN", True),
                                                ("SCRAM-SHA-512", False), ("PLAIN", False)])
def test_the_event_store_appends_reads_snapshots_and_subscribes_over_sasl(
        secure_kafka: SecureEndpoints, mechanism: str, tls: bool) -> None:
    events = one_of_each()
    with open_log(secured_url(secure_kafka, tls, mechanism)) as log:
        log.ensure_topic()
        assert log.append(events) == len(events)
        assert sorted(e.event.event_id for e in log.read()) == sorted(e.event_id for e in events)
        log.save_snapshot(Snapshot("p", b"state", log.end_offsets(), 1))
        assert (loaded := log.load_snapshot("p")) is not None and loaded.data == b"state"
        with log.subscribe(f"tail-{uuid.uuid4().hex[:6]}") as group:  # what `oncelog tail` follows
            seen: list[LoggedEvent] = []
            deadline = time.monotonic() + 20
            while len(seen) < len(events) and time.monotonic() < deadline:
                seen += group.poll(1.0)
        assert len(seen) == len(events)


def test_the_kafka_source_reads_with_the_log_security_settings_of_the_job(secure_kafka: SecureEndpoints) -> None:
    topic = create_topic(secure_kafka.plaintext_bootstrap, 1, "secsrc")
    producer = Producer({"bootstrap.servers": secure_kafka.plaintext_bootstrap})
    for i in range(3):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    producer.flush(30)
    # The job gives its log's security once (oncelog.log.*); the source, on the same brokers, uses it too.
    config = config_from_properties({
        "job.name": "secured", "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "writer.staging.dir": "unused/s", "writer.output.dir": "unused/o", "data.publisher.final.dir": "unused/f",
        "kafka.brokers": secure_kafka.sasl_ssl_bootstrap, "topic.whitelist": topic,
        "oncelog.log.url": f"kafka://{secure_kafka.sasl_ssl_bootstrap}?topic=x&security.protocol=SASL_SSL",
        "oncelog.log.sasl.mechanism": "SCRAM-SHA-512", "oncelog.log.sasl.username": secure_kafka.username,
        "oncelog.log.sasl.password": secure_kafka.password,
        "oncelog.log.ssl.ca.location": str(secure_kafka.ca_pem_path),
    })
    source = KafkaTopicSource(config)
    (unit,) = source.get_work_units(SourceState(config, "run-1", {}))
    extractor = source.get_extractor(WorkUnitState(unit, config, "run-1", "task-1", 1))
    try:
        values = [record["value"] for record in iter(extractor.read_record, None)]
    finally:
        extractor.close()
    assert values == [b"v0", b"v1", b"v2"]


@pytest.mark.parametrize("wrong", ["password", "ca"])
def test_a_wrong_password_or_an_untrusted_ca_names_the_listener_and_the_setting(
        secure_kafka: SecureEndpoints, wrong: str) -> None:
    if wrong == "ca":  # a CA that did not sign the broker's certificate: the system's own bundle
        url = secured_url(secure_kafka, True, "SCRAM-SHA-512", ca="/etc/ssl/certs/ca-certificates.crt")
    else:
        url = secured_url(secure_kafka, True, "SCRAM-SHA-512", password="not-the-password")
    started = time.monotonic()
    with pytest.raises(KafkaSecurityError) as raised, open_log(url) as log:
        log.ensure_topic()
    message = str(raised.value)
    assert time.monotonic() - started < 10, "refused at once, not retried until the timeout"
    assert "not-the-password" not in message and secure_kafka.password not in message
    if wrong == "ca":
        assert message.startswith(f"certificate of {secure_kafka.sasl_ssl_bootstrap} not trusted: check "
                                  f"ssl.ca.location=/etc/ssl/certs/ca-certificates.crt")
    else:
        assert message.startswith(f"authentication failed for sasl.username={secure_kafka.username} on "
                                  f"SASL_SSL://{secure_kafka.sasl_ssl_bootstrap}: check sasl.password")
