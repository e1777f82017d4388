"""Kafka client settings: secrets redacted wherever shown, security errors named, librdkafka's lines rate-limited."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Consumer, KafkaError

from events.errors import ConfigError, KafkaSecurityError
from events.log import open_log
from events.log.kafka.config import (
    ClientMonitor,
    KafkaSettings,
    is_transient,
    redact_message,
    redact_settings,
    redact_url,
    refresh_leaders,
    security_failure,
)
from spark_pipeline.sources.kafka_topic import KafkaSourceSettings

SECURED = ("kafka://b1:9093,b2:9093?topic=orders&security.protocol=SASL_SSL&sasl.mechanism=SCRAM-SHA-512"
           "&sasl.username=alice&sasl.password=hunter2&ssl.ca.location=/etc/ca.pem&ssl.key.password=k3y"
           "&sasl.jaas.config=secretjaas")
SECURITY = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": "hunter2", "ssl.ca.location": "/tmp/ca.pem"}


def test_redact_url_hides_every_secret_and_keeps_the_rest() -> None:
    shown = redact_url(SECURED)
    assert not {"hunter2", "k3y", "secretjaas"} & set(shown.replace("&", " ").replace("=", " ").split())
    assert "sasl.password=***" in shown and "ssl.key.password=***" in shown and "sasl.jaas.config=***" in shown
    assert "sasl.username=alice" in shown and "ssl.ca.location=/etc/ca.pem" in shown and shown.startswith("kafka://b1")
    assert redact_url("kafka://alice:hunter2@b1:9093?topic=t") == "kafka://alice:***@b1:9093?topic=t"
    assert "hunter2" not in redact_url("kafka//broken?sasl.password=hunter2&&x")  # malformed: redacted all the same


def test_redact_settings_and_messages() -> None:
    assert redact_settings({**SECURITY, "oauth.token": "t0k", "topic": "t"}) == {
        **SECURITY, "sasl.password": "***", "oauth.token": "***", "topic": "t"}
    message = redact_message(f"log URL {SECURED!r}: boom (password was hunter2)", SECURED)
    assert "hunter2" not in message and "k3y" not in message and "sasl.username=alice" in message


@pytest.mark.parametrize("url", [SECURED + "&partitions=many", SECURED + "&no.such.property=1"])
def test_log_url_errors_never_show_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        open_log(url)
    assert "hunter2" not in str(raised.value) and "sasl.password=***" in str(raised.value)


def test_a_refused_password_names_the_user_the_listener_and_the_setting() -> None:
    error = KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: "
                                                   "Authentication failed due to invalid credentials")
    failure = security_failure(error, "127.0.0.1:9093", SECURITY)
    assert isinstance(failure, KafkaSecurityError)
    assert str(failure).startswith("authentication failed for sasl.username=alice on SASL_SSL://127.0.0.1:9093: "
                                   "check sasl.password")
    assert "hunter2" not in str(failure)


def test_a_handshake_the_connection_broke_off_is_no_refused_credential() -> None:
    error = KafkaError(KafkaError._AUTHENTICATION, "GroupCoordinator: SASL PLAIN mechanism handshake failed: Local: "
                                                   "Broker transport failure: broker's supported mechanisms: (n/a) "
                                                   "(after 0ms in state DOWN)")
    assert security_failure(error, "127.0.0.1:9093", SECURITY) is None
    refused = KafkaError(KafkaError._AUTHENTICATION, "SASL PLAIN mechanism handshake failed: Broker: Unsupported SASL "
                                                     "mechanism: broker's supported mechanisms: SCRAM-SHA-512")
    assert isinstance(security_failure(refused, "127.0.0.1:9093", SECURITY), KafkaSecurityError)


def test_an_untrusted_certificate_names_the_host_and_ssl_ca_location() -> None:
    error = KafkaError(KafkaError._SSL, "ssl://127.0.0.1:9094/bootstrap: SSL handshake failed: error:0A000086:SSL "
                                        "routines::certificate verify failed: broker certificate could not be verified")
    failure = security_failure(error, "127.0.0.1:9094", {"security.protocol": "SSL", "ssl.ca.location": "/tmp/ca.pem"})
    assert failure is not None
    assert str(failure).startswith("certificate of 127.0.0.1:9094 not trusted: check ssl.ca.location=/tmp/ca.pem")
    assert security_failure(KafkaError(KafkaError._TRANSPORT, "Connection refused"), "h:1", SECURITY) is None


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_librdkafka_lines_about_a_fenced_producer_go_to_the_debug_log_only(caplog: pytest.LogCaptureFixture) -> None:
    """A fenced writer raises FencedError, which says it once: librdkafka's TXNERR and FATAL lines are not shown, nor
    the fencing writer's while the broker aborts the fenced one's transaction, nor a writer's while a new cluster's
    transaction coordinator loads (librdkafka retries both)."""
    monitor = ClientMonitor("h:1", SECURITY, {"write_timeout_s": 120})
    caplog.set_level(logging.DEBUG, logger="oncelog.kafka")
    fenced = "Local: This instance has been fenced by a newer instance"
    monitor.log(logging.ERROR, "%s [%s] %s", "TXNERR", "rdkafka#producer-7", f"Fatal transaction error: {fenced}")
    monitor.log(logging.CRITICAL, "%s [%s] %s", "FATAL", "rdkafka#producer-7", f"Fatal error: {fenced}")
    monitor.log(logging.WARNING, "%s [%s] %s", "ADDPARTS", "rdkafka#producer-7", 'TxnCoordinator/1: Failed to add '
                'partition "t" [2] to transaction: Broker: Producer attempted an operation with an old epoch')
    monitor.log(logging.WARNING, "%s [%s] %s", "GETPID", "rdkafka#producer-16", "Failed to acquire transactional PID "
                "from broker TxnCoordinator/1: Broker: Producer attempted to update a transaction while another "
                "concurrent operation on the same transaction was ongoing: retrying")  # the fencing writer's, retried
    monitor.log(logging.WARNING, "%s [%s] %s", "GETPID", "rdkafka#producer-6", "Failed to acquire transactional PID "
                "from broker TxnCoordinator/1: Broker: Coordinator load in progress: retrying")  # a new cluster's
    monitor.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-7", "h:1/bootstrap: Connect failed")
    assert [r.levelno for r in caplog.records] == [logging.DEBUG] * 5 + [logging.ERROR]


def test_librdkafka_lines_are_rate_limited_per_distinct_message(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    monitor = ClientMonitor("h:1", SECURITY, {"read_timeout_s": 30}, every_s=10, clock=clock)
    caplog.set_level(logging.DEBUG, logger="oncelog.kafka")
    for client, ms in [("rdkafka#consumer-1", 0), ("rdkafka#consumer-2", 3), ("rdkafka#producer-3", 12)]:
        monitor.log(40, "%s [%s] %s", "FAIL", client, f"h:1/bootstrap: Connect failed (after {ms}ms in state CONNECT)")
    monitor.log(40, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "auth with hunter2 failed")  # another message
    clock.now += 11
    monitor.log(40, "%s [%s] %s", "FAIL", "rdkafka#consumer-4", "h:1/bootstrap: Connect failed (after 1ms in state X)")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "***" in lines[1] and "hunter2" not in lines[1]
    assert lines[2].endswith("(2 more like it in the last 10s)")
    assert caplog.records[0].name == "oncelog.kafka.consumer"


def test_an_outage_is_announced_once_in_our_words(caplog: pytest.LogCaptureFixture) -> None:
    monitor = ClientMonitor("b1:9092,b2:9092", {}, {"read_timeout_s": 30, "write_timeout_s": 120})
    caplog.set_level(logging.WARNING, logger="oncelog.kafka")
    for _ in range(3):
        monitor.on_error(KafkaError(KafkaError._TRANSPORT, "b1:9092/1: Connect failed: Connection refused"))
        monitor.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "2/2 brokers are down"))
    monitor.reachable()
    monitor.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "2/2 brokers are down"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("Kafka at b1:9092,b2:9092 is unreachable (b1:9092/1: Connect failed: Connection refused)"
                               "; retrying: reads until ")
    assert "(read_timeout_s=30)" in lines[0] and "writes until" in lines[0] and "(write_timeout_s=120)" in lines[0]
    assert lines[1] == "Kafka at b1:9092,b2:9092 answers again" and "unreachable" in lines[2]


def test_a_security_failure_is_kept_and_raised_by_check() -> None:
    monitor = ClientMonitor("h:9093", SECURITY, {"read_timeout_s": 30})
    monitor.check()
    monitor.on_error(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "h:9093/1: invalid credentials"))
    with pytest.raises(KafkaSecurityError, match="sasl.username=alice on SASL_SSL://h:9093"):
        monitor.check()


def source(**keys: object) -> KafkaSourceSettings:
    return KafkaSourceSettings.model_validate({"kafka.brokers": ("b1:9093",), "topic.whitelist": ("t",), **keys})


def test_the_source_security_precedence() -> None:
    log_url = "kafka://b1:9093?topic=t&security.protocol=SASL_SSL&sasl.username=alice&sasl.password=hunter2"
    job_log = {"sasl.password": "from-job", "ssl.ca.location": "/ca.pem"}
    # No kafka.* security keys, same cluster as the log: the log's settings, job keys over the URL's.
    assert source().security(log_url, job_log) == {"security.protocol": "SASL_SSL", "sasl.username": "alice",
                                                   "sasl.password": "from-job", "ssl.ca.location": "/ca.pem"}
    # Its own keys: only those (another cluster may need other credentials).
    own = source(**{"kafka.security.protocol": "sasl_plaintext", "kafka.sasl.username": "bob"})
    assert own.security(log_url, job_log) == {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "bob"}
    # Another cluster, no keys of its own: PLAINTEXT; a SQLite log has no security to lend.
    assert source(**{"kafka.brokers": ("other:9092",)}).security(log_url, job_log) == {}
    assert source().security("sqlite:///x.db", job_log) == {}
    assert "from-job" not in repr(source(**{"kafka.sasl.password": "from-job"}))


def test_serve_never_repeats_the_password_of_the_log_url() -> None:
    from typer.testing import CliRunner

    from oncelog.cli.serve import app

    result = CliRunner().invoke(app, ["serve", "--log", SECURED + "&partitions=many"])
    assert result.exit_code == 2 and "partitions='many'" in result.output.replace('"', "'")
    assert "hunter2" not in result.output and "sasl.password=***" in result.output


def test_a_query_cut_off_by_a_dying_leader_is_retried_and_a_leader_lookup_never_raises() -> None:
    """A leader that died and left the metadata drops the offset query in flight (_DESTROY_BROKER): transient, so it
    is asked again of the new leader; looking the leaders up when no broker answers raises nothing (the query
    retried after it reports the cause, within its own deadline)."""
    assert is_transient(KafkaError(KafkaError._DESTROY_BROKER))
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "oncelog-unit", "log_level": 0})
    try:
        refresh_leaders(consumer, "oncelog.events", 0.2)
    finally:
        consumer.close()


def test_clients_reconnect_after_20_ms_unless_the_url_says_otherwise() -> None:
    """librdkafka's 100 ms default held every new client back 50 ms before it reached the broker it learned of."""
    mine = KafkaSettings.from_url("kafka://b1:9092?topic=t", "b1:9092", {})
    theirs = KafkaSettings.from_url("kafka://b1:9092?topic=t&reconnect.backoff.ms=250", "b1:9092",
                                    {"reconnect.backoff.ms": "250"})
    assert mine.config_for("producer", {}, mine.monitor())["reconnect.backoff.ms"] == 20
    assert theirs.config_for("consumer", {}, theirs.monitor())["reconnect.backoff.ms"] == "250"
