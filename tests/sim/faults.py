"""The simulation's faults: a seeded plan, and the file system and event log that obey it; and the damage done
behind the protocol's back (task output changed after its task recorded it, records damaged in the log).

Every file operation of publishing and clean-up, and every append to the log, asks the plan first; the plan may
answer with an `OSError` (the operation did not happen), a failed append after it became durable, or a
`SimulatedCrash` — the driver dies between two I/O calls, with everything in memory lost.
"""

from __future__ import annotations

import errno
import hashlib
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO, TypeVar

from events.codec import Record
from events.errors import LogWriteError
from events.log import (
    ErrorHandler,
    EventLog,
    LogWriter,
    Offsets,
    Snapshot,
    StoredRecord,
    Subscription,
    raise_error,
)
from events.log.lock import JobLock
from filesystems.base import FileInfo, FileSystem, FolderMove, WritableFile
from filesystems.movers import NOT_TRIED, FolderMover, MadeBatch, MoveBatch, MoveOutcome, move_within

T = TypeVar("T")


class SimulatedCrash(BaseException):
    """The driver died here: nothing after this point of the process runs (not an Exception: nothing catches it)."""


class Fault(StrEnum):
    """What the plan may do to one I/O call."""

    IO_ERROR = "io-error"
    APPEND_LOST = "append-failed-before-durable"
    APPEND_DURABLE_THEN_ERROR = "append-failed-after-durable"
    CRASH_BEFORE = "crash-before-io"
    CRASH_AFTER = "crash-after-io"


class OutputChange(StrEnum):
    """What happens to a task-output file after its task recorded its size and SHA-256 (counted as
    `output-changed:<change>`): the commit must refuse to publish it, never publish other content."""

    BIT_FLIP = "bit-flip"
    """One bit flipped: same size, another SHA-256."""
    TRUNCATED = "truncated"
    """Cut short: another size and SHA-256."""
    DELETED = "deleted"
    """Gone (a clean-up from outside, a lost disk): nothing to publish."""


class RecordDamage(StrEnum):
    """What happens to one record in the log (counted as `record-damaged:<damage>`): every strict fold must refuse the
    log, never skip the record."""

    BIT_FLIP = "bit-flip"
    TORN_WRITE = "torn-write"
    """Only a prefix of the record's value reached the disk."""
    MISSING = "missing"
    """The record is gone (a deleted row): the SQLite log notices the broken chain (MissingRecordsError)."""


@dataclass
class FaultPlan:
    """Seeded decisions, one per I/O call while armed; counts what it injected."""

    rng: random.Random
    io_error_rate: float = 0.03
    crash_rate: float = 0.02
    armed: bool = True
    injected: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    failing: frozenset[str] = frozenset()
    """Calls that fail with an I/O error every time while armed (a store refusing every publish for a while)."""

    def decide(self, call: str) -> Fault | None:
        """The fault for this call, if any (never one while disarmed)."""
        self.calls += 1
        if not self.armed:
            return None
        if call in self.failing:
            self.injected[f"{call}:{Fault.IO_ERROR}"] += 1
            return Fault.IO_ERROR
        roll = self.rng.random()
        if roll < self.crash_rate:
            fault = Fault.CRASH_BEFORE if self.rng.random() < 0.5 else Fault.CRASH_AFTER
        elif roll < self.crash_rate + self.io_error_rate:
            fault = Fault.IO_ERROR
        else:
            return None
        self.injected[f"{call}:{fault}"] += 1
        return fault


class FaultyMover(FolderMover):
    """Folder moves made ahead as local disk's child process makes them, here at once through the failing file system,
    with the child's own faults: it dies before a move (`mover:crash-before-io`) or just after one
    (`mover:crash-after-io`), leaving that move and the rest of its batch UNKNOWN and taking no more batches, or the
    lease runs out before a move (`mover:io-error`: not tried)."""

    def __init__(self, fs: FaultyFileSystem) -> None:
        self.fs = fs
        self.lost = False

    def ready(self) -> bool:
        return not self.lost

    def start(self, moves: Sequence[FolderMove], deadline: float) -> MoveBatch:
        made: list[MoveOutcome] = []
        for move in moves:
            fault = self.fs.plan.decide("mover") if not self.lost else None
            if self.lost or fault is Fault.CRASH_BEFORE or fault is Fault.IO_ERROR:
                self.lost = self.lost or fault is Fault.CRASH_BEFORE
                made.append(NOT_TRIED)
                continue
            outcome = move_within(self.fs, move, deadline)
            self.lost = fault is Fault.CRASH_AFTER
            made.append(NOT_TRIED if self.lost else outcome)
        return MadeBatch(made)


class FaultyFileSystem(FileSystem):
    """A file system whose every call may fail or crash, as the plan says.

    With `object_store`, it behaves as S3 does for publishing: no rename (a move is copy, check, delete), a copy
    that fails may leave part of the object behind, and a listing may be stale (it may miss what was just made).
    """

    def __init__(self, inner: FileSystem, plan: FaultPlan, object_store: bool = False) -> None:
        self.inner = inner
        self.plan = plan
        self.object_store = object_store
        self._listed: dict[str, list[str]] = {}
        self.scope: str | None = None
        """The folder of the job whose run or command is working: a deletion outside it is a violation."""
        self.violations: list[str] = []
        self.half_copies: dict[str, tuple[str, str]] = {}
        """Each destination a copy cut short left behind: the SHA-256 of what it holds, and the copy's source."""

    def _guarded(self, call: str, path: str, action: Callable[[], T], partial: Callable[[], None] | None = None) -> T:
        """Run one file operation as the plan says: an OSError or a crash before it, a crash after it, or neither.

        An I/O error on an operation with a `partial` effect may leave that effect behind (half a copy)."""
        fault = self.plan.decide(call)
        if fault is Fault.CRASH_BEFORE:
            raise SimulatedCrash(f"{call} {path}")
        if fault is Fault.IO_ERROR:
            if partial is not None and self.plan.rng.random() < 0.5:
                partial()
                self.plan.injected[f"{call}:partial"] += 1
            raise OSError(errno.EIO, f"simulated I/O error in {call}", path)
        result = action()
        if fault is Fault.CRASH_AFTER:
            raise SimulatedCrash(f"after {call} {path}")
        return result

    def size(self, path: str) -> int | None:
        return self._guarded("size", path, lambda: self.inner.size(path))

    def checksum(self, path: str) -> str:
        return self._guarded("checksum", path, lambda: self.inner.checksum(path))

    def open_read(self, path: str, start: int = 0) -> BinaryIO:
        return self._guarded("open", path, lambda: self.inner.open_read(path, start))

    def open_write(self, path: str) -> WritableFile:
        return self._guarded("create", path, lambda: self.inner.open_write(path))

    def renames_atomically(self, path: str) -> bool:
        return not self.object_store and self.inner.renames_atomically(path)

    def rename(self, src: str, dst: str) -> None:
        if self.object_store:
            raise AssertionError(f"an object store has no rename, yet {src} was renamed")
        self._guarded("rename", src, lambda: self.inner.rename(src, dst))

    def is_folder(self, path: str) -> bool:
        return self._guarded("size", path, lambda: self.inner.is_folder(path))

    def moves_folders(self, path: str) -> bool:
        return not self.object_store and self.inner.moves_folders(path)

    def move_folder(self, move: FolderMove, before_move: Callable[[], None]) -> bool:
        if self.object_store:
            return False
        return self._guarded("rename", move.src, lambda: self.inner.move_folder(move, before_move))

    def folder_mover(self, path: str) -> FolderMover:
        return FaultyMover(self)

    def copy(self, src: str, dst: str) -> None:
        self._guarded("copy", src, lambda: self.inner.copy(src, dst), partial=lambda: self._half_copy(src, dst))

    def _half_copy(self, src: str, dst: str) -> None:
        """What a copy cut short leaves: the destination with the first half of the source."""
        with self.inner.open_read(src) as reader:
            data = reader.read()
        writer = self.inner.open_write(dst)
        writer.write(data[: len(data) // 2])
        writer.close()
        self.half_copies[dst] = (hashlib.sha256(data[: len(data) // 2]).hexdigest(), src)

    def _check_scope(self, path: str) -> None:
        """Record a deletion outside the working job's folder (a clean-up must never touch another job's)."""
        if self.scope is not None and not path.startswith(self.scope.rstrip("/") + "/"):
            self.violations.append(f"{path} was deleted while only {self.scope} was being worked on")

    def delete(self, path: str) -> None:
        self._check_scope(path)
        self._guarded("delete", path, lambda: self.inner.delete(path))

    def sync_folders(self, folders: Iterable[str]) -> None:
        unique = sorted(set(folders))
        self._guarded("fsync", ",".join(unique), lambda: self.inner.sync_folders(unique))

    def list_folders(self, path: str) -> list[str]:
        fresh = self._guarded("list", path, lambda: self.inner.list_folders(path))
        stale = self._listed.get(path)
        self._listed[path] = fresh
        if self.object_store and stale is not None and self.plan.armed and self.plan.rng.random() < 0.3:
            self.plan.injected["list:stale"] += 1
            return stale
        return fresh

    def list_files(self, path: str) -> list[FileInfo]:
        return self._guarded("list", path, lambda: self.inner.list_files(path))

    def remove_tree(self, path: str) -> None:
        self._check_scope(path)
        self._guarded("delete", path, lambda: self.inner.remove_tree(path))


def sha256_of(path: Path) -> str:
    """The file's SHA-256 (hex), as the commit records it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def change_output(path: Path, change: OutputChange, rng: random.Random) -> str | None:
    """Change a task-output file as `change` says; returns its new SHA-256 (None once deleted)."""
    if change is OutputChange.DELETED:
        path.unlink()
        return None
    data = bytearray(path.read_bytes())
    if not data:
        data = bytearray(b"\x00")  # an empty file can be neither cut nor flipped: one byte appears instead
    elif change is OutputChange.TRUNCATED:
        data = data[: rng.randrange(len(data))]
    else:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return hashlib.sha256(data).hexdigest()


def damaged_value(value: bytes, damage: RecordDamage, rng: random.Random) -> bytes:
    """A record's value as `damage` leaves it (a flipped bit, or only a prefix written)."""
    if damage is RecordDamage.TORN_WRITE:
        return value[: rng.randrange(len(value))]
    flipped = bytearray(value)
    flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
    return bytes(flipped)


class FaultyWriter(LogWriter):
    """A log writer whose every append may be lost, fail after it became durable, or crash either side."""

    def __init__(self, inner: LogWriter, plan: FaultPlan) -> None:
        super().__init__(inner.name, inner.codec, inner.partitions)
        self.inner = inner
        self.plan = plan

    def append_records(self, records: Iterable[Record]) -> int:
        batch = list(records)
        fault = self.plan.decide("append")
        if fault is Fault.CRASH_BEFORE:
            raise SimulatedCrash(f"append by {self.name}")
        if fault is Fault.IO_ERROR and self.plan.rng.random() < 0.5:
            self.plan.injected[Fault.APPEND_LOST] += 1
            raise LogWriteError(f"simulated: the append by {self.name} failed; nothing of it is in the log")
        count = self.inner.append_records(batch)
        if fault is Fault.CRASH_AFTER:
            raise SimulatedCrash(f"after append by {self.name}")
        if fault is Fault.IO_ERROR:
            self.plan.injected[Fault.APPEND_DURABLE_THEN_ERROR] += 1
            raise LogWriteError(f"simulated: the append by {self.name} is durable, but its caller saw an error")
        return count

    def check_fenced(self) -> None:
        """A read of the fence: it may fail (nothing moves then) or the driver die before it."""
        fault = self.plan.decide("fence-check")
        if fault in (Fault.CRASH_BEFORE, Fault.CRASH_AFTER):
            raise SimulatedCrash(f"fence check by {self.name}")
        if fault is Fault.IO_ERROR:
            raise LogWriteError(f"simulated: the fence check by {self.name} failed")
        self.inner.check_fenced()

    def close(self) -> None:
        self.inner.close()


class FaultyEventLog(EventLog):
    """A log whose writers are faulty; reading is exact (a damaged record is simulated by writing one)."""

    def __init__(self, inner: EventLog, plan: FaultPlan) -> None:
        super().__init__(inner.codec)
        self.inner = inner
        self.plan = plan
        self.url = inner.url
        self.topic = inner.topic

    @property
    def partitions(self) -> int:
        return self.inner.partitions

    @property
    def durability_warning(self) -> str | None:
        return self.inner.durability_warning

    def job_lock(self, job: str) -> JobLock:
        return self.inner.job_lock(job)

    def ensure_topic(self) -> None:
        self.inner.ensure_topic()

    def writer(self, name: str) -> LogWriter:
        return FaultyWriter(self.inner.writer(name), self.plan)

    def read_records(self, start: Mapping[int, int] | None = None, until: Mapping[int, int] | None = None,
                     follow: bool = False) -> Iterator[StoredRecord]:
        return self.inner.read_records(start, until, follow)

    def end_offsets(self) -> Offsets:
        return self.inner.end_offsets()

    def offsets_for_time(self, timestamp_ms: int) -> Offsets:
        return self.inner.offsets_for_time(timestamp_ms)

    def subscribe(self, group: str, on_error: ErrorHandler = raise_error) -> Subscription:
        return self.inner.subscribe(group, on_error)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self.inner.save_snapshot(snapshot)

    def load_snapshot(self, name: str) -> Snapshot | None:
        return self.inner.load_snapshot(name)

    def await_stable(self, timeout_s: float = 10.0) -> None:
        self.inner.await_stable(timeout_s)

    def close(self) -> None:
        """The inner log belongs to the simulation, which closes it."""
