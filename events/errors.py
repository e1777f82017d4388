"""oncelog's exception types: every library error is mapped to one of these, with a message a user can act on."""

from __future__ import annotations


class OncelogError(Exception):
    """Base of every error oncelog raises on purpose."""


class ConfigError(OncelogError):
    """A configuration value (URL, key, setting) is missing or invalid; the message names it."""


class LogUnavailableError(OncelogError):
    """The event log (SQLite file or Kafka cluster) cannot be reached or used."""


class LogWriteError(OncelogError):
    """An atomic batch could not be appended; nothing of it is visible to readers."""


class FencedError(LogWriteError):
    """A newer writer with the same name took over: this writer can no longer append."""

    def __init__(self, writer: str, detail: str = "") -> None:
        self.writer = writer
        message = (
            f"writer {writer!r} was fenced: another writer with the same name (for a job: another run of the "
            f"same job) has started since; this one can no longer append"
        )
        super().__init__(f"{message} ({detail})" if detail else message)


class EventDecodeError(OncelogError):
    """A record in the log could not be decoded into an event; names where it lies."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.reason = reason
        super().__init__(f"cannot decode the record at {topic}[{partition}]@{offset}: {reason}")


class UnknownEventTypeError(EventDecodeError):
    """The record names an event type (or schema version) this version of oncelog does not know."""


class KafkaProvisioningError(OncelogError):
    """The local Kafka broker could not be resolved, formatted, started or stopped."""
