"""Idle consumers of one Kafka log, kept between its reads.

A new librdkafka client waits about 11 ms before it connects to the broker its bootstrap connection named (its
sparse-connection pause), and a run reads its log about ten times (its job lock, folds, the stable end): reusing a
consumer that finished a read skips that wait. Consumers are kept per topic: a running consumer first assigned a topic
it has not read waited about 0.8 s for that topic (librdkafka 2.16, one broker). Only a read that ended normally gives
its consumer back, unassigned and with nothing queued; any other closes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, KafkaException

DRAIN_BATCH = 1_000
"""Queued messages dropped at a time when a consumer goes back (normally none: unassigning purges its queues)."""

Key = tuple[str, tuple[tuple[str, Any], ...]]
"""A topic, and the settings a consumer reading it was made with (a consumer's settings cannot change)."""


class ReaderPool:
    """Idle consumers, by the topic they read and the settings they were made with."""

    def __init__(self, make: Callable[[Mapping[str, Any]], Consumer]) -> None:
        self._make = make
        self._idle: dict[Key, list[Consumer]] = {}
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def borrowed(self, topic: str, overrides: Mapping[str, Any]) -> Iterator[Consumer]:
        """An unassigned consumer with these settings, for `topic`: an idle one that read it, else a new one. It
        goes back after a use that ended normally; one that raised, or was given up half way (a generator closed), is
        closed."""
        key: Key = (topic, tuple(sorted(overrides.items())))
        with self._lock:
            idle = self._idle.get(key)
            consumer = idle.pop() if idle else None
        if consumer is None:
            consumer = self._make(overrides)
        finished = False
        try:
            yield consumer
            finished = True
        finally:
            if not (finished and self._put_back(key, consumer)):
                consumer.close()

    def _put_back(self, key: Key, consumer: Consumer) -> bool:
        """Unassign `consumer` (resumed first: a partition's pause outlives its assignment), drop anything queued,
        and keep it; False when it cannot be made clean or the pool is closed."""
        try:
            assigned = consumer.assignment()
            if assigned:
                consumer.resume(assigned)
                consumer.unassign()
            while consumer.consume(DRAIN_BATCH, 0):
                pass
        except KafkaException:
            return False
        with self._lock:
            if self._closed:
                return False
            self._idle.setdefault(key, []).append(consumer)
        return True

    def close(self) -> None:
        """Close every idle consumer; one still borrowed is closed when it comes back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for consumers in idle.values():
            for consumer in consumers:
                consumer.close()
