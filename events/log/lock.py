"""The job lock: one run of a job at a time.

On Kafka the lock is the job's transactional writer: a second run opening it fences the first, which can then
append nothing. On SQLite it is an exclusive flock on a lock file beside the database: the kernel drops it when
its holder dies, so a crashed run cannot keep it. Each lock names its holder `pid@host`, so that `oncelog state`
can say whether the holder recorded in the log is still alive.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from events.errors import OncelogError


class JobLockedError(OncelogError):
    """Another run of the job holds its lock."""


class HolderStatus(StrEnum):
    """What became of the holder of a job's lock that the log records."""

    ALIVE = "alive"
    """Its process runs and still holds the lock."""
    DEAD = "dead"
    """Its process is gone (the lock is free, or it would be on the next run)."""
    FENCED = "fenced"
    """A newer run took the job's lock over: the holder can publish nothing more."""
    UNKNOWN = "unknown"
    """It runs on another host (or was recorded without pid@host), where this one cannot look."""


_PID_AT_HOST = re.compile(r"(?:^|\s)(\d+)@(\S+)$")
_HOST_COLON_PID = re.compile(r"^(\S+):(\d+)$")
"""How runs before pid@host named a SQLite lock's holder; their events stay in the log."""


@dataclass(frozen=True, slots=True)
class Holder:
    """The process that holds a lock: its pid on its host."""

    pid: int
    host: str

    def __str__(self) -> str:
        return f"{self.pid}@{self.host}"

    @classmethod
    def this_process(cls) -> Holder:
        """The calling process, as a holder."""
        return cls(os.getpid(), socket.gethostname())

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        """The holder a lock's holder text names (`… pid@host`, or `host:pid`), None if it names no process."""
        if match := _PID_AT_HOST.search(text):
            return cls(int(match[1]), match[2])
        if match := _HOST_COLON_PID.match(text):
            return cls(int(match[2]), match[1])
        return None


def process_status(holder: Holder) -> HolderStatus:
    """Whether the holder's process exists: only on this host can we look (a pid may be reused: locks check more)."""
    if holder.host != socket.gethostname():
        return HolderStatus.UNKNOWN
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return HolderStatus.DEAD
    except PermissionError:
        return HolderStatus.ALIVE  # it exists, under another user
    return HolderStatus.ALIVE


def flock_held(path: Path, locks_table: Path = Path("/proc/locks")) -> bool | None:
    """Whether some process holds an flock on path, read from the kernel's lock table without touching the lock
    (trying it could make a starting run fail); None where there is no such table (not Linux)."""
    try:
        inode = path.stat().st_ino
        table = locks_table.read_text(encoding="ascii")
    except FileNotFoundError:
        return False if locks_table.exists() else None
    for line in table.splitlines():
        fields = line.split()
        # "N: FLOCK ADVISORY WRITE pid maj:min:inode start end"; waiters ("N: -> FLOCK …") hold nothing.
        # The inode alone is compared: on overlay file systems the device the table names differs from stat's.
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            return True
    return False


class JobLock(ABC):
    """One run of a job at a time: what `EventLog.job_lock` returns for the store it is."""

    @abstractmethod
    def acquire(self, run_id: str) -> str:
        """Take the lock for `run_id`; JobLockedError naming the holder if another run has it. Returns the holder."""

    @abstractmethod
    def release(self) -> None:
        """Give the lock back (a crashed holder's lock is dropped for it)."""

    @abstractmethod
    def holder_status(self, holder: str, run_id: str) -> HolderStatus:
        """What became of `holder` (as `acquire` returned it, for run `run_id`): alive, dead, fenced or unknown."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


class FencingJobLock(JobLock):
    """The lock of a store whose job writer fences: opening it fences any earlier run, which can append nothing."""

    def __init__(self, job: str) -> None:
        self.job = job

    def acquire(self, run_id: str) -> str:
        """Nothing to take: the run's writer fences any earlier one. Returns the holder: the writer and the process."""
        return f"writer {self.job} {Holder.this_process()}"

    def release(self) -> None:
        """Nothing to give back: the next run's writer fences this one."""

    def holder_status(self, holder: str, run_id: str) -> HolderStatus:
        """Whether the holder's process is alive; a newer run of the job is recorded as the holder itself."""
        process = Holder.parse(holder)
        return HolderStatus.UNKNOWN if process is None else process_status(process)


class FileJobLock(JobLock):
    """An exclusive, non-blocking flock; the file says who holds it."""

    def __init__(self, path: Path, job: str) -> None:
        self.path = path
        self.job = job
        self._file: IO[str] | None = None

    def acquire(self, run_id: str) -> str:
        """Take the lock for `run_id`; JobLockedError naming the holder if another run has it. Returns the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise JobLockedError(f"job {self.job!r} is already running ({holder}); lock file {self.path}") from e
        holder = str(Holder.this_process())
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"run_id": run_id, "holder": holder, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                            time.gmtime())}))
        handle.flush()
        self._file = handle
        return holder

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def holder_status(self, holder: str, run_id: str) -> HolderStatus:
        """From the kernel's lock table: alive while the flock is held for `run_id`, fenced if another run holds it,
        dead once it is free; by the holder's pid where the kernel keeps no table."""
        process = Holder.parse(holder)
        if process is None or process.host != socket.gethostname():
            return HolderStatus.UNKNOWN  # an flock is seen only by the kernel of the host that took it
        held = flock_held(self.path)
        if held is None:
            return process_status(process)
        if not held:
            return HolderStatus.DEAD
        return HolderStatus.FENCED if self.recorded_run() not in (run_id, None) else HolderStatus.ALIVE

    def recorded_run(self) -> str | None:
        """The run the lock file names as the last to take the lock (None if it has no readable record, as while
        a run writes it)."""
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        run_id = record.get("run_id") if isinstance(record, dict) else None
        return run_id if isinstance(run_id, str) else None
