"""The embedded store: the log in one SQLite file (WAL), safe with several processes appending at once.

Offsets are the table's row ids: one sequence for the whole topic, so every partition's offsets increase but skip
the offsets of other partitions (as Kafka's skip transaction markers). One SQLite transaction is one atomic batch.

A missing record is noticed: each record holds `prev`, the offset of the record before it in its partition (0 for
the first), and `oncelog_heads` the offset of each partition's last record, both written in the append's
transaction. A read checks, per partition, that the first record has no predecessor and the head is there; then
each record's `prev` against the last offset it read; at its end, the next record's `prev`: a deleted row or a
truncated tail is a `MissingRecordsError`. Deleting by tombstone (`oncelog gc`) links each survivor to the record
now before it, in the same transaction as the delete, so retention is never mistaken for damage.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from events.codec import EventCodec, Record
from events.errors import ConfigError, FencedError, LogUnavailableError, LogWriteError, MissingRecordsError
from events.log.interface import (
    DEFAULT_TOPIC,
    ErrorHandler,
    EventLog,
    LogWriter,
    Offsets,
    Snapshot,
    StoredRecord,
    Subscription,
    int_setting,
    raise_error,
)
from events.log.lock import FileJobLock

SCHEMA = """
CREATE TABLE IF NOT EXISTS oncelog_topics (
    topic TEXT PRIMARY KEY, partitions INTEGER NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS oncelog_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    timestamp_ms INTEGER NOT NULL, key BLOB NOT NULL, value BLOB);
CREATE TABLE IF NOT EXISTS oncelog_writers (
    topic TEXT NOT NULL, name TEXT NOT NULL, epoch INTEGER NOT NULL, PRIMARY KEY (topic, name));
CREATE TABLE IF NOT EXISTS oncelog_group_offsets (
    topic TEXT NOT NULL, group_id TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, group_id, partition));
CREATE TABLE IF NOT EXISTS oncelog_snapshots (
    topic TEXT NOT NULL, name TEXT NOT NULL, offsets TEXT NOT NULL, data BLOB NOT NULL, created_ms INTEGER NOT NULL,
    PRIMARY KEY (topic, name));
CREATE TABLE IF NOT EXISTS oncelog_heads (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (topic, partition));
"""
CHAIN_COLUMN = "prev"
"""Each record's predecessor in its partition: added to logs written before it, filled from what they hold."""
LINK_EXISTING = """
UPDATE oncelog_records SET prev = linked.before FROM (
    SELECT seq, COALESCE(LAG(seq) OVER (PARTITION BY topic, partition ORDER BY seq), 0) AS before
    FROM oncelog_records) AS linked
WHERE oncelog_records.seq = linked.seq;
INSERT OR REPLACE INTO oncelog_heads (topic, partition, last_seq)
    SELECT topic, partition, MAX(seq) FROM oncelog_records GROUP BY topic, partition;
"""

READ_BATCH = 10_000
IDLE_CONNECTIONS = 4
"""Connections a log keeps open for its next reads and writers (a run opens a writer per commit shard to fence it and
reads the log several times: opening a connection, with its WAL set-up, cost more than most of those reads)."""
FOLLOW_POLL_S = 0.05
SYNCHRONOUS_MODES = ("full", "extra", "normal")
"""SQLite's `PRAGMA synchronous` levels a log may use (docs/log.md says what `normal` risks); `off` is not one."""
NORMAL_SYNC_WARNING = (
    "sqlite log setting synchronous=normal: a power loss or OS crash may forget the last committed batches "
    "(a process crash loses nothing); an exactly-once run is only safe with synchronous=full, see docs/log.md"
)


def now_ms() -> int:
    """Wall-clock milliseconds, for record and snapshot timestamps."""
    return time.time_ns() // 1_000_000


def follows(seq: int, prev: int) -> str:
    """What a record whose predecessor is gone says about it."""
    return f"the record at offset {seq} follows offset {prev}, which is not in the log"


class SqliteLog(EventLog):
    """A log kept in a SQLite file; `sqlite:///path/events.db?topic=...&partitions=N&synchronous=full`."""

    def __init__(
        self,
        path: Path,
        topic: str = DEFAULT_TOPIC,
        partitions: int | None = None,
        codec: EventCodec | None = None,
        busy_timeout_s: float = 60.0,
        synchronous: str = "full",
        url: str | None = None,
    ) -> None:
        super().__init__(codec)
        self.url = url or f"sqlite:///{path}?topic={topic}" + (f"&partitions={partitions}" if partitions else "")
        if synchronous not in SYNCHRONOUS_MODES:
            raise ConfigError(
                f"log URL {self.url!r}: sqlite setting synchronous={synchronous!r} is not one of "
                f"{', '.join(SYNCHRONOUS_MODES)} (full is the default; normal may lose the last batches on power loss)"
            )
        self.path = path
        self.topic = topic
        self.busy_timeout_s = busy_timeout_s
        self.synchronous = synchronous
        self._requested_partitions = partitions
        self._partitions: int | None = None
        """The topic's partition count once it is in the file (it never changes after)."""
        self._idle: list[sqlite3.Connection] = []
        self._idle_lock = threading.Lock()
        self._closed = False
        self._conn = self.connect()
        self._conn.executescript(SCHEMA)
        self._link_existing()

    def _link_existing(self) -> None:
        """A log written before records named their predecessor: link what it holds (silently, once)."""
        if self._has_chain():
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if not self._has_chain():  # another process may have linked it meanwhile
                    self._conn.execute(f"ALTER TABLE oncelog_records ADD COLUMN {CHAIN_COLUMN} INTEGER")
                    for statement in LINK_EXISTING.split(";"):
                        if statement.strip():
                            self._conn.execute(statement)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise LogUnavailableError(f"cannot prepare the SQLite log {self.path} (linking its records): {e}") from e

    def _has_chain(self) -> bool:
        columns = self._conn.execute("PRAGMA table_info(oncelog_records)").fetchall()
        return any(column[1] == CHAIN_COLUMN for column in columns)

    @classmethod
    def from_url(cls, url: str, location: str, settings: dict[str, str], codec: EventCodec | None) -> SqliteLog:
        """Open the log a sqlite:// URL names; unknown settings are an error naming them."""
        settings = dict(settings)
        topic = settings.pop("topic", DEFAULT_TOPIC)
        partitions = int_setting(settings, "partitions", url, None)
        busy_timeout = int_setting(settings, "busy_timeout_s", url, 60)
        synchronous = settings.pop("synchronous", "full")
        if settings:
            raise ConfigError(
                f"log URL {url!r}: unknown sqlite setting(s) {sorted(settings)}; "
                f"known: topic, partitions, busy_timeout_s, synchronous"
            )
        return cls(Path(location), topic, partitions, codec, float(busy_timeout or 60), synchronous, url)

    @property
    def durability_warning(self) -> str | None:
        """None with synchronous=full or extra (each batch is on disk when append returns); a warning with normal."""
        return NORMAL_SYNC_WARNING if self.synchronous == "normal" else None

    def connect(self) -> sqlite3.Connection:
        """A new connection in autocommit mode (transactions are explicit), WAL journal, busy timeout."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
        except (sqlite3.Error, OSError) as e:
            raise LogUnavailableError(f"cannot open the SQLite log {self.path}: {e}") from e
        return conn

    def _borrow(self) -> sqlite3.Connection:
        """An idle connection of this log, else a new one."""
        with self._idle_lock:
            if self._idle:
                return self._idle.pop()
        return self.connect()

    def _give_back(self, conn: sqlite3.Connection) -> None:
        """Keep a connection for the next read or writer; closed instead if it is inside a transaction (a statement
        failed half-way), the log is closed, or enough are idle."""
        with self._idle_lock:
            if not self._closed and not conn.in_transaction and len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append(conn)
                return
        conn.close()

    @property
    def partitions(self) -> int:
        if self._partitions is not None:
            return self._partitions
        row = self._conn.execute("SELECT partitions FROM oncelog_topics WHERE topic = ?", (self.topic,)).fetchone()
        if row is not None:
            self._partitions = int(row[0])
            return self._partitions
        return self._requested_partitions or 1

    def ensure_topic(self) -> None:
        with self._conn:
            row = self._conn.execute("SELECT partitions FROM oncelog_topics WHERE topic = ?", (self.topic,)).fetchone()
            if row is None:
                self._conn.execute(
                    "INSERT INTO oncelog_topics (topic, partitions, created_ms) VALUES (?, ?, ?)",
                    (self.topic, self._requested_partitions or 1, now_ms()),
                )
            elif self._requested_partitions is not None and row[0] != self._requested_partitions:
                raise ConfigError(
                    f"topic {self.topic!r} in {self.path} has {row[0]} partitions, not the "
                    f"{self._requested_partitions} asked for (setting 'partitions'); an existing log's partitioning "
                    f"cannot change"
                )

    def job_lock(self, job: str) -> FileJobLock:
        """An flock on a file beside the database: the kernel drops it when its holder dies."""
        return FileJobLock(self.path.parent / f"{self.path.name}.locks" / f"{job}.lock", job)

    def writer(self, name: str) -> SqliteWriter:
        conn = self._borrow()
        try:
            conn.execute("BEGIN IMMEDIATE")
            (epoch,) = conn.execute(
                "INSERT INTO oncelog_writers (topic, name, epoch) VALUES (?, ?, 1) "
                "ON CONFLICT (topic, name) DO UPDATE SET epoch = epoch + 1 RETURNING epoch",
                (self.topic, name),
            ).fetchone()
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            conn.close()
            raise LogUnavailableError(f"cannot register writer {name!r} in {self.path}: {e}") from e
        return SqliteWriter(name, self.codec, self.partitions, conn, self.topic, epoch, self._give_back)

    def read_records(
        self, start: Mapping[int, int] | None = None, until: Mapping[int, int] | None = None, follow: bool = False
    ) -> Iterator[StoredRecord]:
        partitions = self.partitions
        first = {p: (start or {}).get(p, 0) for p in range(partitions)}
        if until is None and not follow:
            until = self.end_offsets()
        last = None if until is None else {p: until.get(p, 0) for p in range(partitions)}
        conn = self._borrow()
        try:
            yield from self._scan(conn, first, last, follow)
        finally:
            self._give_back(conn)

    def _scan(
        self, conn: sqlite3.Connection, first: dict[int, int], last: dict[int, int] | None, follow: bool
    ) -> Iterator[StoredRecord]:
        self._check_ends(conn, [p for p in first if last is None or last[p] > 0])
        wanted = [p for p in first if last is None or first[p] < last[p]]
        if not wanted:
            return
        position = min(first[p] for p in wanted)
        stop = None if last is None else max(last[p] for p in wanted)
        topic = self.topic
        read = {p: max(first[p] - 1, 0) for p in first}
        """Per partition, the offset of the last record read (before the first: anything older is not ours)."""
        # A read of some partitions only (a commit shard's) selects their rows alone: the others are not decoded.
        only = "" if len(wanted) == len(first) else f" AND partition IN ({', '.join(map(str, wanted))})"
        while stop is None or position < stop:
            rows = conn.execute(
                "SELECT seq, partition, timestamp_ms, key, value, IFNULL(prev, 0) FROM oncelog_records "
                f"WHERE topic = ? AND seq >= ? AND seq < ?{only} ORDER BY seq LIMIT ?",
                (topic, position, stop if stop is not None else 2**63 - 1, READ_BATCH),
            ).fetchall()
            for seq, partition, timestamp_ms, key, value, prev in rows:
                if seq >= first[partition] and (last is None or seq < last[partition]):
                    if prev > read[partition]:  # its predecessor is one this read never met: deleted
                        raise self.missing_error(partition, read[partition], prev, follows(seq, prev))
                    read[partition] = seq
                    yield StoredRecord(topic, partition, seq, timestamp_ms, key, value)
            if rows:
                position = rows[-1][0] + 1
            elif follow:
                time.sleep(FOLLOW_POLL_S)
            else:
                break
        if last is not None:
            self._check_after(conn, wanted, last, read)

    def _check_ends(self, conn: sqlite3.Connection, wanted: list[int]) -> None:
        """Before a read, whatever its range: per partition, its first record has none before it and its last is
        the one last written (its head), so a deleted first row or a cut-off tail is seen also by a fold that starts
        from a snapshot."""
        for p in wanted:
            first_prev, head, head_kept = conn.execute(
                "SELECT (SELECT IFNULL(prev, 0) FROM oncelog_records WHERE topic = ?1 AND partition = ?2 "
                "ORDER BY seq LIMIT 1), head.last_seq, EXISTS (SELECT 1 FROM oncelog_records WHERE seq = head.last_seq "
                "AND topic = ?1 AND partition = ?2) FROM (SELECT 1) LEFT JOIN oncelog_heads AS head "
                "ON head.topic = ?1 AND head.partition = ?2",
                (self.topic, p),
            ).fetchone()
            if first_prev:
                raise self.missing_error(p, 0, first_prev, f"the partition's first record left follows offset "
                                         f"{first_prev}, which is not in the log")
            if head and not head_kept:  # looked up by offset: no scan unless it is gone (0: the partition was emptied)
                (last_seq,) = conn.execute(
                    "SELECT IFNULL(MAX(seq), 0) FROM oncelog_records WHERE topic = ? AND partition = ? AND seq < ?",
                    (self.topic, p, head),
                ).fetchone()
                raise self.missing_error(p, last_seq, head, f"the partition's last record was written at offset "
                                         f"{head}, the last one left is at {last_seq or 'none'}: its tail was cut off")

    def _check_after(self, conn: sqlite3.Connection, wanted: list[int], last: dict[int, int],
                     read: dict[int, int]) -> None:
        """After a read up to `last`: per partition, the next record follows the last record read, so nothing just
        before the end of the read is missing."""
        for p in wanted:
            (successor,) = conn.execute(
                "SELECT IFNULL(prev, 0) FROM oncelog_records WHERE topic = ? AND partition = ? AND seq >= ? "
                "ORDER BY seq LIMIT 1",
                (self.topic, p, last[p]),
            ).fetchone() or (None,)
            if successor is not None and successor > read[p]:
                raise self.missing_error(p, read[p], successor, f"the record after offset {last[p] - 1} follows "
                                         f"offset {successor}, which is not in the log")

    def missing_error(self, partition: int, read: int, gone: int, detail: str) -> MissingRecordsError:
        """The error for records of `partition` missing after offset `read`, `gone` for sure."""
        return MissingRecordsError(str(self.path), self.topic, partition, read + 1, gone, detail)

    def end_offsets(self) -> Offsets:
        row = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'oncelog_records'").fetchone()
        next_offset = (int(row[0]) if row else 0) + 1
        return {p: next_offset for p in range(self.partitions)}

    def offsets_for_time(self, timestamp_ms: int) -> Offsets:
        end = self.end_offsets()
        found: Offsets = {}
        for p in range(self.partitions):
            row = self._conn.execute(
                "SELECT MIN(seq) FROM oncelog_records WHERE topic = ? AND partition = ? AND timestamp_ms >= ?",
                (self.topic, p, timestamp_ms),
            ).fetchone()
            found[p] = int(row[0]) if row and row[0] is not None else end[p]
        return found

    def subscribe(self, group: str, on_error: ErrorHandler = raise_error) -> SqliteSubscription:
        return SqliteSubscription(group, self, on_error)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO oncelog_snapshots (topic, name, offsets, data, created_ms) "
                "VALUES (?, ?, ?, ?, ?)",
                (self.topic, snapshot.name, json.dumps(snapshot.offsets), snapshot.data, snapshot.created_ms),
            )

    def load_snapshot(self, name: str) -> Snapshot | None:
        row = self._conn.execute(
            "SELECT offsets, data, created_ms FROM oncelog_snapshots WHERE topic = ? AND name = ?", (self.topic, name)
        ).fetchone()
        if row is None:
            return None
        offsets = {int(p): int(o) for p, o in json.loads(row[0]).items()}
        return Snapshot(name, bytes(row[1]), offsets, int(row[2]))

    def close(self) -> None:
        super().close()
        with self._idle_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        self._conn.close()


class SqliteWriter(LogWriter):
    """Appends a batch in one IMMEDIATE transaction, after checking that no newer writer took its name."""

    def __init__(
        self, name: str, codec: EventCodec, partitions: int, conn: sqlite3.Connection, topic: str, epoch: int,
        release: Callable[[sqlite3.Connection], None],
    ) -> None:
        super().__init__(name, codec, partitions)
        self._conn = conn
        self._topic = topic
        self._epoch = epoch
        self._release = release
        """Takes the connection back when the writer closes (its log keeps it for the next reader or writer)."""
        self._closed = False
        self._lock = threading.Lock()
        """One statement at a time on the connection: appends and fence checks may come from different threads."""

    def append_records(self, records: Iterable[Record]) -> int:
        with self._lock:
            self._check_open()
            return self._append(records)

    def _check_open(self) -> None:
        """A closed writer's connection may serve another writer now: it must not be used."""
        if self._closed:
            raise LogWriteError(f"writer {self.name!r} of the SQLite log is closed")

    def _append(self, records: Iterable[Record]) -> int:
        conn = self._conn
        topic = self._topic
        partitions = self.partitions
        tombstones: list[bytes] = []
        heads: dict[int, int] = {}
        touched: set[int] = set()

        def rows() -> Iterator[tuple[int, str, int, int, bytes, bytes | None, int]]:
            seq = before
            for r in records:
                if not 0 <= r.partition < partitions:
                    raise LogWriteError(f"partition {r.partition} is outside topic {topic!r} (0..{partitions - 1})")
                if r.value is None:
                    tombstones.append(r.key)
                seq += 1
                prev = heads.get(r.partition, 0)
                heads[r.partition] = seq
                touched.add(r.partition)
                yield seq, topic, r.partition, r.timestamp_ms, r.key, r.value, prev

        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise LogWriteError(f"cannot start a transaction on the SQLite log: {e}") from e
        try:
            self._check_epoch()
            before = self._last_seq()
            heads.update(conn.execute("SELECT partition, last_seq FROM oncelog_heads WHERE topic = ?", (topic,)))
            count = conn.executemany(
                "INSERT INTO oncelog_records (seq, topic, partition, timestamp_ms, key, value, prev) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows(),
            ).rowcount
            conn.executemany(
                "INSERT INTO oncelog_heads (topic, partition, last_seq) VALUES (?, ?, ?) "
                "ON CONFLICT (topic, partition) DO UPDATE SET last_seq = excluded.last_seq",
                [(topic, p, heads[p]) for p in touched],
            )
            if tombstones:
                self._drop_tombstoned(tombstones, before)
            conn.execute("COMMIT")
        except BaseException as e:
            conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error):
                raise LogWriteError(f"cannot append to the SQLite log: {e}") from e
            raise
        return max(count, 0)

    def check_fenced(self) -> None:
        """One read of the writer's epoch (microseconds): FencedError once a newer writer took the name."""
        with self._lock:
            self._check_open()
            try:
                self._check_epoch()
            except sqlite3.Error as e:
                raise LogWriteError(f"cannot check writer {self.name!r} in the SQLite log: {e}") from e

    def _check_epoch(self) -> None:
        row = self._conn.execute(
            "SELECT epoch FROM oncelog_writers WHERE topic = ? AND name = ?", (self._topic, self.name)
        ).fetchone()
        if row is None or row[0] != self._epoch:
            raise FencedError(self.name, f"epoch {self._epoch}, now {row[0] if row else 'gone'}")

    def _last_seq(self) -> int:
        row = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'oncelog_records'").fetchone()
        return int(row[0]) if row else 0

    def _drop_tombstoned(self, keys: list[bytes], before: int) -> None:
        """Remove what a tombstone deletes, as Kafka's compaction eventually does: earlier records of its key; then
        link each record (and head) that followed a removed one to the record now before it, so that readers do not
        take retention for damage."""
        conn = self._conn
        topic = self._topic
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS oncelog_gc_keys (key BLOB PRIMARY KEY)")
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS oncelog_gc_links (gone INTEGER PRIMARY KEY, now INTEGER)")
        conn.execute("DELETE FROM oncelog_gc_keys")
        conn.execute("DELETE FROM oncelog_gc_links")
        conn.executemany("INSERT OR IGNORE INTO oncelog_gc_keys (key) VALUES (?)", ((k,) for k in keys))
        doomed = conn.execute(
            "SELECT seq, IFNULL(prev, 0) FROM oncelog_records WHERE topic = ? AND seq <= ? "
            "AND key IN (SELECT key FROM oncelog_gc_keys) ORDER BY seq",
            (topic, before),
        ).fetchall()
        if not doomed:
            return
        links: dict[int, int] = {}
        for seq, prev in doomed:  # by offset: a run of removed records links past all of them
            links[seq] = links.get(prev, prev)
        conn.executemany("INSERT INTO oncelog_gc_links (gone, now) VALUES (?, ?)", links.items())
        conn.execute(
            "DELETE FROM oncelog_records WHERE topic = ? AND seq <= ? AND key IN (SELECT key FROM oncelog_gc_keys)",
            (topic, before),
        )
        conn.execute(
            "UPDATE oncelog_records SET prev = link.now FROM oncelog_gc_links AS link "
            "WHERE oncelog_records.topic = ? AND oncelog_records.seq > ? AND oncelog_records.prev = link.gone",
            (topic, doomed[0][0]),
        )
        conn.execute(
            "UPDATE oncelog_heads SET last_seq = link.now FROM oncelog_gc_links AS link "
            "WHERE oncelog_heads.topic = ? AND oncelog_heads.last_seq = link.gone",
            (topic,),
        )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._release(self._conn)


class SqliteSubscription(Subscription):
    """A consumer group over a SQLite log: one member reads every partition; offsets kept in a table."""

    def __init__(self, group: str, log: SqliteLog, on_error: ErrorHandler) -> None:
        super().__init__(group, log.codec, on_error)
        self._log = log
        self._conn = log.connect()
        self._positions = {p: 0 for p in range(log.partitions)}
        self._positions.update(self.committed())

    def committed(self) -> Offsets:
        rows = self._conn.execute(
            "SELECT partition, next_offset FROM oncelog_group_offsets WHERE topic = ? AND group_id = ?",
            (self._log.topic, self.group),
        ).fetchall()
        return {int(p): int(o) for p, o in rows}

    def poll_records(self, timeout: float, max_records: int) -> list[StoredRecord]:
        deadline = time.monotonic() + timeout
        while True:
            found = self._next(max_records)
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(min(FOLLOW_POLL_S, max(0.0, deadline - time.monotonic())))

    def _next(self, max_records: int) -> list[StoredRecord]:
        positions = self._positions
        rows = self._conn.execute(
            "SELECT seq, partition, timestamp_ms, key, value, IFNULL(prev, 0) FROM oncelog_records "
            "WHERE topic = ? AND seq >= ? ORDER BY seq LIMIT ?",
            (self._log.topic, min(positions.values()), max_records),
        ).fetchall()
        found = []
        read = {p: max(o - 1, 0) for p, o in positions.items()}
        for seq, partition, timestamp_ms, key, value, prev in rows:
            if seq >= positions[partition]:
                if prev > read[partition]:
                    raise self._log.missing_error(partition, read[partition], prev, follows(seq, prev))
                read[partition] = seq
                found.append(StoredRecord(self._log.topic, partition, seq, timestamp_ms, key, value))
        if rows:
            last_seq = rows[-1][0]
            for p in positions:
                positions[p] = max(positions[p], last_seq + 1)
        return found

    def commit(self) -> None:
        with self._conn:
            self._conn.executemany(
                "INSERT INTO oncelog_group_offsets (topic, group_id, partition, next_offset) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (topic, group_id, partition) DO UPDATE SET next_offset = excluded.next_offset",
                [(self._log.topic, self.group, p, o) for p, o in self._positions.items()],
            )

    def close(self) -> None:
        self._conn.close()
