"""The `EventLog` interface every store implements (the stores: events/log/sqlite.py, events/log/kafka/).

A log is one topic split into partitions; each aggregate (a job, a dataset) lives in one partition, so its events
are totally ordered. Stores deal in bytes (`Record`, `StoredRecord`); this interface adds the codec on top.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Self
from urllib.parse import parse_qsl, urlsplit

from events.batch import unpack
from events.codec import EventCodec, Record
from events.errors import ConfigError, EventDecodeError
from events.log.lock import JobLock
from events.model import Event, LoggedEvent

DEFAULT_TOPIC = "oncelog.events"
DEFAULT_URL = "sqlite:///.oncelog/events.db"

ErrorHandler = Callable[[EventDecodeError], None]
"""Called with each record that cannot be decoded; reading goes on after it returns (it may raise to stop)."""

TombstoneHandler = Callable[["StoredRecord"], None]
"""Called with each tombstone read (a deletion of its key's earlier records: `oncelog gc`)."""

Offsets = dict[int, int]
"""Per partition, an offset: where reading starts, or the next offset to be written."""


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as a store holds it: bytes, before decoding."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A projection's serialized state and the offsets it covers (the next offset to fold, per partition)."""

    name: str
    data: bytes
    offsets: Offsets
    created_ms: int


class Closing(ABC):
    """Something to close after use; usable in a `with` block."""

    @abstractmethod
    def close(self) -> None:
        """Release what it holds."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def raise_error(error: EventDecodeError) -> None:
    """The default ErrorHandler: stop at the first record that cannot be decoded."""
    raise error


class LogWriter(Closing):
    """Appends atomic batches under a name; opening a second writer with that name fences this one."""

    def __init__(self, name: str, codec: EventCodec, partitions: int) -> None:
        self.name = name
        self.codec = codec
        self.partitions = partitions

    def append(self, events: Iterable[Event]) -> int:
        """Append events as one atomic batch (all visible, or none); returns how many."""
        return self.append_records(self.codec.to_record(e, self.partitions) for e in events)

    @abstractmethod
    def append_records(self, records: Iterable[Record]) -> int:
        """Append encoded records (a None value is a tombstone) as one atomic batch; returns how many."""

    @abstractmethod
    def check_fenced(self) -> None:
        """FencedError if a newer writer has taken this writer's name; returns otherwise (nothing is appended).

        What a writer checks before an effect outside the log (a rename): a superseded writer must not publish.
        It says the writer was current when the check was answered; a newer writer opened after that is seen by
        the next check or append.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the writer's connection or producer."""


class Subscription(Closing):
    """A named consumer group's view of the log: resumes after the offsets it last committed."""

    def __init__(self, group: str, codec: EventCodec, on_error: ErrorHandler) -> None:
        self.group = group
        self.codec = codec
        self.on_error = on_error

    def poll(self, timeout: float = 1.0, max_records: int = 1000) -> list[LoggedEvent]:
        """The next events after what was returned before, waiting up to timeout seconds for some."""
        return list(decode_records(self.codec, self.poll_records(timeout, max_records), self.on_error))

    @abstractmethod
    def poll_records(self, timeout: float, max_records: int) -> list[StoredRecord]:
        """The next records (tombstones included) after what was returned before."""

    @abstractmethod
    def commit(self) -> None:
        """Record that everything returned so far is processed: a restarted group resumes after it."""

    @abstractmethod
    def committed(self) -> Offsets:
        """The group's committed offsets (the next offset to read, per partition)."""

    @abstractmethod
    def close(self) -> None:
        """Leave the group; uncommitted progress is delivered again to the next member."""


class EventLog(Closing):
    """An append-only, partitioned log of events, with atomic batches, consumer groups and snapshots."""

    url: str
    topic: str

    def __init__(self, codec: EventCodec | None = None) -> None:
        self.codec = codec or EventCodec()
        self._default_writer: LogWriter | None = None

    @property
    @abstractmethod
    def partitions(self) -> int:
        """How many partitions the topic has."""

    @abstractmethod
    def ensure_topic(self) -> None:
        """Create the topic (and the snapshot store) with explicit configs if missing; check them if present."""

    @abstractmethod
    def writer(self, name: str) -> LogWriter:
        """A writer with this name; any earlier writer with the same name is fenced from now on."""

    @abstractmethod
    def read_records(
        self, start: Mapping[int, int] | None = None, until: Mapping[int, int] | None = None, follow: bool = False
    ) -> Iterator[StoredRecord]:
        """Records from `start` (default: the beginning) up to `until` (exclusive; default: the end offsets at
        the call), or forever when `follow`. Only committed batches are read. A store that can tell a record deleted
        outside oncelog from retention (SQLite) raises MissingRecordsError rather than read past it."""

    @abstractmethod
    def end_offsets(self) -> Offsets:
        """The next offset to be written, per partition."""

    @abstractmethod
    def offsets_for_time(self, timestamp_ms: int) -> Offsets:
        """Per partition, the first offset whose record is at or after timestamp_ms (the end if none is)."""

    @abstractmethod
    def subscribe(self, group: str, on_error: ErrorHandler = raise_error) -> Subscription:
        """Join consumer group `group`, resuming after its committed offsets (a new group starts at the beginning)."""

    @abstractmethod
    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store a snapshot under its name, replacing the previous one atomically."""

    @abstractmethod
    def load_snapshot(self, name: str) -> Snapshot | None:
        """The latest snapshot stored under name, if any."""

    @abstractmethod
    def job_lock(self, job: str) -> JobLock:
        """The lock that lets one run of `job` at a time use this log (a file lock, or the fencing job writer)."""

    def await_stable(self, timeout_s: float = 10.0) -> None:
        """Wait until every batch begun before the call is decided (committed or aborted), so that a fold to the
        end offsets reads all of it; LogNotStableError (naming each stuck partition) after timeout_s.

        A store whose batches are visible at once (SQLite) is always stable.
        """

    @property
    def durability_warning(self) -> str | None:
        """Why the log may lose acknowledged events (a single-copy Kafka topic, say); None when it is durable.

        Shown to users in run summaries; a setup that loses history for sure is refused instead (ConfigError).
        """
        return None

    def close(self) -> None:
        """Release the store's connections."""
        if self._default_writer is not None:
            self._default_writer.close()
            self._default_writer = None

    def append(self, events: Iterable[Event]) -> int:
        """Append events as one atomic batch through this log's own writer (a unique name, never fenced)."""
        if self._default_writer is None:
            self._default_writer = self.writer(f"oncelog-{uuid.uuid4()}")
        return self._default_writer.append(events)

    def read(
        self,
        start: Mapping[int, int] | None = None,
        until: Mapping[int, int] | None = None,
        follow: bool = False,
        on_error: ErrorHandler = raise_error,
        on_tombstone: TombstoneHandler | None = None,
    ) -> Iterator[LoggedEvent]:
        """Events from start to until (or forever when follow); tombstones to on_tombstone (else skipped); bad
        records to on_error."""
        return decode_records(self.codec, self.read_records(start, until, follow), on_error, on_tombstone)


def decode_records(codec: EventCodec, records: Iterable[StoredRecord], on_error: ErrorHandler,
                   on_tombstone: TombstoneHandler | None = None) -> Iterator[LoggedEvent]:
    """Decode records into events (a batched commit record into its members, each at the record's offset), handing
    tombstones to on_tombstone (skipped without one) and undecodable records
    to on_error."""
    decode = codec.decode
    for r in records:
        if r.value is None:
            if on_tombstone is not None:
                on_tombstone(r)
            continue
        try:
            event = decode(r.value, r.topic, r.partition, r.offset, r.key)
        except EventDecodeError as e:
            on_error(e)
            continue
        for index, member in enumerate(unpack(event)):  # a batched commit record: the events it stands for
            yield LoggedEvent(r.topic, r.partition, r.offset, r.timestamp_ms, member, index)


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split a log URL into scheme, location and settings (query parameters, e.g. topic=, partitions=)."""
    parts = urlsplit(url)
    if parts.scheme not in ("sqlite", "kafka"):
        raise ConfigError(
            f"log URL {url!r}: unknown scheme {parts.scheme!r}; use sqlite:///path/events.db or kafka://host:port"
        )
    settings = dict(parse_qsl(parts.query, keep_blank_values=True))
    if parts.scheme == "sqlite":
        # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy spells them.
        location = parts.path[1:] if parts.path.startswith("/") else parts.path
        if parts.netloc or not location:
            raise ConfigError(f"log URL {url!r}: expected sqlite:///relative/path.db or sqlite:////absolute/path.db")
    else:
        location = parts.netloc
        if not location:
            raise ConfigError(f"log URL {url!r}: expected kafka://host:port[,host:port]")
    return parts.scheme, location, settings


def int_setting(settings: dict[str, str], name: str, url: str, default: int | None) -> int | None:
    """An integer URL setting, removed from settings; a clear error naming it if it is not a positive integer."""
    raw = settings.pop(name, None)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as e:
        raise ConfigError(f"log URL {url!r}: {name}={raw!r} is not an integer") from e
    if value < 1:
        raise ConfigError(f"log URL {url!r}: {name}={value} must be at least 1")
    return value
