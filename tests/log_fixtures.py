"""Fixtures that open fresh logs of every store: the contract suite runs once per store."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from events.log import EventLog, open_log

LogFactory = Callable[..., EventLog]

STORES = ["sqlite", "kafka"]


def log_url(store: str, tmp_path: Path, request: pytest.FixtureRequest, partitions: int) -> str:
    """A URL naming a log no other test uses: its own SQLite file, or its own Kafka topic."""
    topic = f"oncelog.test.{uuid.uuid4().hex[:12]}"
    if store == "sqlite":
        return f"sqlite:///{tmp_path / f'{topic}.db'}?topic={topic}&partitions={partitions}"
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    return f"kafka://{bootstrap}?topic={topic}&partitions={partitions}&write_timeout_s=60"


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    """Each store by name; a test using it runs once per store."""
    return str(request.param)


@pytest.fixture
def log_factory(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LogFactory]:
    """Opens fresh logs (topic created) of the parametrized store; closes them after the test."""
    opened: list[EventLog] = []

    def make(partitions: int = 3, url: str | None = None) -> EventLog:
        log = open_log(url or log_url(store, tmp_path, request, partitions))
        log.ensure_topic()
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


@pytest.fixture
def event_log(log_factory: LogFactory) -> EventLog:
    """A fresh log of the parametrized store, 3 partitions."""
    return log_factory()
