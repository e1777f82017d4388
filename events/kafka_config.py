"""Settings of a `kafka://` log: oncelog's own, and librdkafka's passed through to every client."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from events.errors import ConfigError, LogUnavailableError
from events.log import DEFAULT_TOPIC, int_setting

DEFAULT_PARTITIONS = 6
CLIENT_PREFIXES = ("producer.", "consumer.", "admin.")
TRANSIENT_CODES = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)
"""Errors that pass once leadership or metadata settles (a topic just created, a leader moving): librdkafka does
not flag them retriable when a metadata call (end offsets, say) returns them, so they are named here."""

Client = TypeVar("Client")


def is_transient(error: KafkaError) -> bool:
    """Whether a Kafka error may pass if the same call is made again (after a pause)."""
    return not error.fatal() and (error.retriable() or error.code() in TRANSIENT_CODES)


@dataclass(frozen=True)
class KafkaSettings:
    """Where the log is and how to reach it.

    `client` settings go to every client (SASL/SSL belong here); `producer.X` / `consumer.X` / `admin.X` to one kind.
    """

    url: str
    bootstrap: str
    topic: str = DEFAULT_TOPIC
    partitions: int | None = None
    replication: int | None = None
    write_timeout_s: float = 120.0
    read_timeout_s: float = 60.0
    client: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_url(cls, url: str, bootstrap: str, settings: dict[str, str]) -> KafkaSettings:
        """Split URL settings into oncelog's and librdkafka's; nonsense values are errors naming the setting."""
        settings = dict(settings)
        topic = settings.pop("topic", DEFAULT_TOPIC)
        if not topic:
            raise ConfigError(f"log URL {url!r}: setting 'topic' is empty")
        partitions = int_setting(settings, "partitions", url, None)
        replication = int_setting(settings, "replication", url, None)
        write_timeout = int_setting(settings, "write_timeout_s", url, 120)
        read_timeout = int_setting(settings, "read_timeout_s", url, 60)
        return cls(
            url=url,
            bootstrap=bootstrap,
            topic=topic,
            partitions=partitions,
            replication=replication,
            write_timeout_s=float(write_timeout or 120),
            read_timeout_s=float(read_timeout or 60),
            client=settings,
        )

    def config_for(self, kind: str, overrides: dict[str, Any]) -> dict[str, Any]:
        """librdkafka configuration for a client of `kind` (producer, consumer, admin)."""
        # librdkafka logs through Python logging rather than straight to stderr.
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": logging.getLogger(f"oncelog.kafka.{kind}")}
        for key, value in self.client.items():
            prefix = next((p for p in CLIENT_PREFIXES if key.startswith(p)), None)
            if prefix is None:
                config[key] = value
            elif prefix == f"{kind}.":
                config[key.removeprefix(prefix)] = value
        config.update(overrides)
        return config

    def make(self, kind: str, factory: Callable[[dict[str, Any]], Client], overrides: dict[str, Any]) -> Client:
        """Create a client; a setting librdkafka rejects becomes a ConfigError naming it."""
        try:
            return factory(self.config_for(kind, overrides))
        except KafkaException as e:
            error = e.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError._INVALID_ARG:
                raise ConfigError(f"log URL {self.url!r}: librdkafka rejected a setting: {error.str()}") from e
            raise LogUnavailableError(f"cannot create a Kafka {kind} for {self.bootstrap}: {e}") from e
        except (ValueError, TypeError) as e:
            raise ConfigError(f"log URL {self.url!r}: invalid Kafka {kind} setting: {e}") from e
