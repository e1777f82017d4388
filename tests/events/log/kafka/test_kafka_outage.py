"""An unreachable Kafka: one message of ours (what, that we retry, until when), a bounded number of librdkafka
lines, and a failure within the configured timeout naming the brokers and the topic the user gave."""

from __future__ import annotations

import logging
import time

import pytest

from events.errors import LogUnavailableError
from events.log import open_log
from localservers.errors import KafkaProvisioningError
from localservers.tools import free_port
from projections.projector import Projector

pytestmark = pytest.mark.kafka  # it starts and stops brokers of its own


def test_state_on_an_unreachable_broker_fails_within_the_read_timeout(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port("nothing", KafkaProvisioningError)  # nothing listens there
    caplog.set_level(logging.DEBUG, logger="oncelog.kafka")
    started = time.monotonic()
    with pytest.raises(LogUnavailableError) as raised, open_log(f"kafka://127.0.0.1:{port}?topic=mine&read_timeout_s=3"
                                                                 f"&sasl.password=hunter2") as log:
        Projector(log).rebuild()  # what `oncelog state` does: snapshot, then the log
    took = time.monotonic() - started
    message = str(raised.value)
    assert took < 3 + 2, f"took {took:.1f}s for read_timeout_s=3"
    assert message.startswith(f"Kafka at 127.0.0.1:{port} did not answer within 3s (setting read_timeout_s)")
    assert "log topic 'mine'" in message and ".snapshots" not in message and "hunter2" not in message
    ours = [r.getMessage() for r in caplog.records if r.name == "oncelog.kafka"]
    assert len(ours) == 1 and ours[0].startswith(f"Kafka at 127.0.0.1:{port} is unreachable (")
    assert "retrying: reads until " in ours[0] and "(read_timeout_s=3)" in ours[0]
    raw = [r for r in caplog.records if r.name.startswith("oncelog.kafka.")]
    assert 1 <= len(raw) <= 6, [r.getMessage() for r in raw]  # librdkafka's, rate-limited (unlimited: dozens)
