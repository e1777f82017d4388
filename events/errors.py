"""oncelog's exception types: every library error is mapped to one of these, with a message a user can act on."""

from __future__ import annotations


class OncelogError(Exception):
    """Base of every error oncelog raises on purpose."""


class ConfigError(OncelogError):
    """A configuration value (URL, key, setting) is missing or invalid; the message names it."""


class LogUnavailableError(OncelogError):
    """The event log (SQLite file or Kafka cluster) cannot be reached or used."""


class KafkaSecurityError(LogUnavailableError):
    """Kafka refused our credentials or we refused its certificate; names the listener and the setting to check."""


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


class CorruptEventError(EventDecodeError):
    """A record's bytes (key or value) differ from what was written: its checksum does not match."""

    def __init__(self, topic: str, partition: int, offset: int, key: bytes, stored: int, computed: int) -> None:
        self.key = key
        self.stored = stored
        self.computed = computed
        super().__init__(
            topic,
            partition,
            offset,
            f"checksum mismatch for key {key.decode('utf-8', 'replace')!r}: the record holds crc32 {stored:#010x}, "
            f"its bytes give {computed:#010x}; the record (key or value) was changed after it was written (disk "
            f"damage, a manual edit): restore the log from a backup or a replica, do not plan from it",
        )


class MissingRecordsError(OncelogError):
    """Records are gone from the log that nothing of oncelog deleted (a deleted row, a truncated file): every fold
    of it would be wrong, so none is answered; names the log, the partition and the offsets."""

    def __init__(self, log: str, topic: str, partition: int, first: int, last: int, detail: str) -> None:
        self.log = log
        self.topic = topic
        self.partition = partition
        self.first = first
        self.last = last
        """The offsets between which records of the partition are missing (both included; `last` for sure)."""
        self.detail = detail
        gone = f"offset {last}" if first == last else f"offsets {first}-{last}"
        super().__init__(
            f"records are missing from the log {log}: {topic}[{partition}] {gone} ({detail}). They were deleted "
            f"outside oncelog (oncelog gc records its own deletions): a fold without them would be wrong, so nothing "
            f"is planned or answered from this log. Restore it from a backup or a replica, then run again"
        )

    def __reduce__(self) -> tuple[type[MissingRecordsError], tuple[str, str, int, int, int, str]]:
        """Pickled with its arguments, so that it crosses process boundaries (a worker's error) intact."""
        return type(self), (self.log, self.topic, self.partition, self.first, self.last, self.detail)


class LogNotStableError(OncelogError):
    """The log's stable end stays short of its end: another writer's transaction is open on some partitions."""

    def __init__(self, topic: str, stuck: dict[int, tuple[int, int]], waited_s: float) -> None:
        self.topic = topic
        self.stuck = stuck
        """Per partition still not stable: (last stable offset, high watermark)."""
        partitions = ", ".join(
            f"{topic}[{p}] last stable offset {stable}, high watermark {high}"
            for p, (stable, high) in sorted(stuck.items())
        )
        super().__init__(
            f"the log is not stable after {waited_s:.0f}s: {partitions}. Another writer's transaction is open on "
            f"these partitions (a writer killed between begin and commit: another job's driver, a task process); "
            f"read_committed readers cannot read past it, so a fold would stop short. If it is a killed run's task "
            f"writer, `oncelog recover <job file>` of that job (or its next run, with the job lock on) aborts it at "
            f"once. Otherwise the broker aborts it after that writer's transaction.timeout.ms; or restart that "
            f"writer (same transactional id) or abort its transaction; then run again"
        )
