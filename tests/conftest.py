"""Shared fixtures: a real Kafka broker (tests.kafka_plugin) and fresh logs of every store."""

from __future__ import annotations

pytest_plugins = ["tests.kafka_plugin", "tests.log_fixtures", "tests.spark_plugin"]
