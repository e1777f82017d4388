"""A log's Kafka clients connect to every broker they learn of at once (librdkafka's sparse connections off): a new
client's first request, and a writer's start, then wait for no connection of their own."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from events.log.kafka.config import KafkaSettings
from localservers.kafka import LocalKafkaCluster


def learned_brokers_up(stats: list[dict[str, Any]]) -> bool:
    """Whether the latest statistics show the three brokers the client learned of (not its bootstrap entries) up."""
    if not stats:
        return False
    learned = [b for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0]
    return len(learned) == 3 and all(b["state"] == "UP" for b in learned)


@pytest.mark.kafka
def test_a_log_client_connects_to_the_brokers_it_learns_of_before_a_request_needs_them(
        kafka_cluster: LocalKafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap
    settings = KafkaSettings.from_url(f"kafka://{bootstrap}?topic=t", bootstrap, {})
    stats: list[dict[str, Any]] = []
    config = settings.config_for("producer", {"statistics.interval.ms": 50,
                                              "stats_cb": lambda text: stats.append(json.loads(text))},
                                 settings.monitor())
    producer = Producer(config)  # asked nothing: only its bootstrap metadata request connects it
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not learned_brokers_up(stats):
            producer.poll(0.05)
        assert learned_brokers_up(stats), stats[-1]["brokers"] if stats else "no statistics"
    finally:
        producer.flush(5)
