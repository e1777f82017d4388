"""The job lock: one run of a job at a time.

On Kafka the lock is the job's transactional writer: a second run opening it fences the first, which can then
append nothing. On SQLite it is an exclusive flock on a lock file beside the database: the kernel drops it when
its holder dies, so a crashed run cannot keep it.
"""

from __future__ import annotations

import fcntl
from abc import ABC, abstractmethod
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from events.errors import OncelogError


class JobLockedError(OncelogError):
    """Another run of the job holds its lock."""


class JobLock(ABC):
    """One run of a job at a time: what `EventLog.job_lock` returns for the store it is."""

    @abstractmethod
    def acquire(self, run_id: str) -> str:
        """Take the lock for `run_id`; JobLockedError naming the holder if another run has it. Returns the holder."""

    @abstractmethod
    def release(self) -> None:
        """Give the lock back (a crashed holder's lock is dropped for it)."""

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
        return f"writer {self.job}"

    def release(self) -> None:
        """Nothing to give back: the next run's writer fences this one."""


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
        holder = f"{socket.gethostname()}:{os.getpid()}"
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
