"""The job lock: one run of a job at a time; a second run is refused while the first is alive.

Each store's lock knows its holder (run id, pid@host, since when) and whether it is alive:
- SQLite: an exclusive flock on a lock file beside the database, the holder written in it. The kernel drops the
  flock when its holder dies, so a crashed run cannot keep it.
- Kafka: a lease, the holder's claim in the compacted `<topic>.locks` topic (key: the job), renewed by a heartbeat
  every LEASE_S / 3. The holder is dead once its claim is older than LEASE_S, or at once when it ran on this host
  and its pid is gone.
A dead holder's lock is taken over by the next run; a live one only with `take_over` (`oncelog run --take-over`).
Either way the previous holder is then fenced: the new run opens the job's writer, and the old one can append and
publish nothing more. `JobLock.displaced` says whom an acquire took the lock from, so that the run records that
run's end. Each lock names its holder `pid@host`, so that `oncelog state` can say whether the holder recorded in
the log is still alive.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from events.errors import FencedError, LogUnavailableError, LogWriteError, OncelogError


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


LEASE_S = 30.0
"""How long a Kafka lease lasts without a heartbeat: a holder on another host is dead once its claim is older."""
HEARTBEAT_S = LEASE_S / 6
"""How often a Kafka lease's holder renews its claim (several heartbeats may fail before the lease is lost)."""

logger = logging.getLogger(__name__)


class RunEnd(StrEnum):
    """How the run that held a job's lock ended, when a newer run took the lock from it."""

    DEAD = "dead"
    """Its process is gone (or its lease expired): the lock was free to take."""
    FENCED = "fenced"
    """It was alive, and the lock was taken over (`--take-over`): it can append and publish nothing more."""


def iso_utc(seconds: float) -> str:
    """A moment as an ISO-8601 UTC timestamp to the second, as the lock records and shows it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True, slots=True)
class Claim:
    """Who holds, or last held, a job's lock: the run, its process (pid@host), since when, its latest heartbeat."""

    run_id: str
    holder: str
    since: str
    heartbeat_ms: int = 0
    released: bool = False

    def to_json(self) -> str:
        return json.dumps({"run_id": self.run_id, "holder": self.holder, "since": self.since,
                           "heartbeat_ms": self.heartbeat_ms, "released": self.released})

    @classmethod
    def from_json(cls, text: str | bytes) -> Claim | None:
        """The claim a lock record holds; None when it holds none (empty, being written, or not ours)."""
        try:
            record: Any = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("run_id"), str):
            return None
        return cls(record["run_id"], str(record.get("holder", "unknown")), str(record.get("since", "?")),
                   int(record.get("heartbeat_ms", 0)), bool(record.get("released", False)))

    def describe(self) -> str:
        """The claim as an error names it: run, pid, host, since when."""
        process = Holder.parse(self.holder)
        who = f"pid {process.pid} on host {process.host}" if process else self.holder
        return f"run {self.run_id} ({who}, since {self.since})"


@dataclass(frozen=True, slots=True)
class Displaced:
    """The run a lock was taken from, and how it ended: dead, or fenced by a take-over."""

    claim: Claim
    end: RunEnd

    def reason(self, by_run: str) -> str:
        """Why the displaced run ended, as its JobRunFailed says it."""
        who = self.claim.describe().split(" (", 1)[-1].rstrip(")")
        if self.end is RunEnd.FENCED:
            return (f"fenced: run {by_run} took the job's lock over (--take-over) while this run ({who}) was "
                    f"running; it could append and publish nothing more")
        return f"dead: this run's process ({who}) ended without recording its end; run {by_run} took the job's lock"


def locked_message(job: str, claim: Claim, where: str) -> str:
    """What a refused run is told: who holds the lock, and what to do."""
    return (f"job {job!r} is already running: {claim.describe()}; {where}. A second run is refused while the first "
            f"is alive: wait for it to end, or take the lock over with --take-over (the running run is fenced and "
            f"publishes nothing more)")


class JobLock(ABC):
    """One run of a job at a time: what `EventLog.job_lock` returns for the store it is."""

    displaced: Displaced | None = None
    """Set by `acquire`: the run it took the lock from (dead, or fenced by a take-over), if any."""

    @abstractmethod
    def acquire(self, run_id: str, take_over: bool = False) -> str:
        """Take the lock for `run_id`; JobLockedError naming the holder if a live run has it (unless `take_over`:
        then it is taken from that run, which is fenced). Returns the holder (pid@host)."""

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


class ClaimWriter(ABC):
    """Writes a job's claims; opening one fences the previous one of the job (FencedError on its next put)."""

    @abstractmethod
    def put(self, claim: Claim) -> None:
        """Record the claim as the job's latest (FencedError once a newer writer of the job has opened)."""

    @abstractmethod
    def close(self) -> None:
        """Release the writer's connection."""


class LeaseStore(ABC):
    """Where a lease lock keeps each job's latest claim (the Kafka store: a compacted topic)."""

    where: str
    """Where the claims are kept, as an error names it."""

    @abstractmethod
    def latest(self, job: str) -> Claim | None:
        """The job's latest claim (None if it has none)."""

    @abstractmethod
    def writer(self, job: str) -> ClaimWriter:
        """A writer of the job's claims; the previous one is fenced from now on."""


class LeaseJobLock(JobLock):
    """A lease: the holder's claim, renewed every `heartbeat_s` by a thread; dead once older than `lease_s`, or at
    once when its process ran on this host and is gone."""

    def __init__(self, job: str, store: LeaseStore, lease_s: float = LEASE_S, heartbeat_s: float = HEARTBEAT_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.job = job
        self.store = store
        self.lease_s = lease_s
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self._writer: ClaimWriter | None = None
        self._claim: Claim | None = None
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None

    def lease_status(self, claim: Claim) -> HolderStatus:
        """ALIVE while the claim's lease runs and its process (if on this host) exists; DEAD otherwise."""
        process = Holder.parse(claim.holder)
        if claim.released or (process is not None and process_status(process) is HolderStatus.DEAD):
            return HolderStatus.DEAD
        age_s = self.clock() - claim.heartbeat_ms / 1000
        return HolderStatus.DEAD if age_s > self.lease_s else HolderStatus.ALIVE

    def acquire(self, run_id: str, take_over: bool = False) -> str:
        previous = self.store.latest(self.job)
        self.displaced = None
        if previous is not None and not previous.released:
            alive = self.lease_status(previous) is HolderStatus.ALIVE
            if alive and not take_over:
                raise JobLockedError(locked_message(self.job, previous, f"its lease in {self.store.where}"))
            self.displaced = Displaced(previous, RunEnd.FENCED if alive else RunEnd.DEAD)
        now = self.clock()
        claim = Claim(run_id, str(Holder.this_process()), iso_utc(now), int(now * 1000))
        writer = self.store.writer(self.job)  # fences the previous holder's heartbeats
        try:
            writer.put(claim)
            latest = self.store.latest(self.job)
            if latest != claim:  # another run claimed the job at the same moment, after us
                raise FencedError(f"lock {self.job}", f"{latest.describe() if latest else 'another run'} claimed it")
        except FencedError as e:
            writer.close()
            raise JobLockedError(f"job {self.job!r} was claimed by another run at the same moment: {e}") from e
        except BaseException:
            writer.close()
            raise
        self._writer, self._claim = writer, claim
        self._stop.clear()
        self._beating = threading.Thread(target=self._beat, name=f"lease-{self.job}", daemon=True)
        self._beating.start()
        return claim.holder

    def _beat(self) -> None:
        """Renew the claim until released, or until a newer run took the lock (fenced: nothing more to renew)."""
        while not self._stop.wait(self.heartbeat_s):
            writer, claim = self._writer, self._claim
            if writer is None or claim is None:
                return
            try:
                writer.put(Claim(claim.run_id, claim.holder, claim.since, int(self.clock() * 1000)))
            except FencedError:
                logger.warning("the lock of job %r was taken over by another run: this run is fenced", self.job)
                return
            except (LogWriteError, LogUnavailableError) as e:
                logger.warning("could not renew the lease of job %r (retrying): %s", self.job, e)

    def release(self) -> None:
        """Stop renewing and record the claim as released (unless a newer run took the lock meanwhile)."""
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
            self._beating = None
        writer, claim = self._writer, self._claim
        self._writer = self._claim = None
        if writer is None or claim is None:
            return
        try:
            writer.put(Claim(claim.run_id, claim.holder, claim.since, int(self.clock() * 1000), released=True))
        except (LogWriteError, LogUnavailableError) as e:  # fenced: the lock is another run's already
            logger.info("the lock of job %r was not released as such: %s", self.job, e)
        finally:
            writer.close()

    def holder_status(self, holder: str, run_id: str) -> HolderStatus:
        """From the job's latest claim: fenced if another run claimed it since, else alive while its lease runs;
        by the holder's process when the store keeps no claim (a log older than leases)."""
        claim = self.store.latest(self.job)
        if claim is None:
            process = Holder.parse(holder)
            return HolderStatus.UNKNOWN if process is None else process_status(process)
        if claim.run_id != run_id:
            return HolderStatus.FENCED
        return self.lease_status(claim)


class FileJobLock(JobLock):
    """An exclusive, non-blocking flock; the file holds the holder's claim (marked released when given back)."""

    def __init__(self, path: Path, job: str) -> None:
        self.path = path
        self.job = job
        self._file: IO[str] | None = None
        self._claim: Claim | None = None

    def acquire(self, run_id: str, take_over: bool = False) -> str:
        """Take the lock for `run_id`; JobLockedError naming the holder if another run has it, unless `take_over`:
        then the lock file is replaced (the holder keeps an flock on a file no run looks at any more; opening the
        job's writer fences it). Returns the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle: IO[str] = self.path.open("a+", encoding="utf-8")
        self.displaced = None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            handle.seek(0)
            claim = Claim.from_json(handle.read()) or Claim("(unknown)", "unknown", "?")
            handle.close()
            if not take_over:
                raise JobLockedError(locked_message(self.job, claim, f"lock file {self.path}")) from e
            handle = self._replace_file()
            self.displaced = Displaced(claim, RunEnd.FENCED)
        else:
            handle.seek(0)
            previous = Claim.from_json(handle.read())
            if previous is not None and not previous.released:
                self.displaced = Displaced(previous, RunEnd.DEAD)  # the kernel dropped its flock: it died
        now = time.time()
        claim = Claim(run_id, str(Holder.this_process()), iso_utc(now), int(now * 1000))
        self._write(handle, claim)
        self._file, self._claim = handle, claim
        return claim.holder

    def _replace_file(self) -> IO[str]:
        """A new lock file in place of one a live run holds, flocked (JobLockedError if another run beat us to it)."""
        self.path.unlink(missing_ok=True)
        handle = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            handle.close()
            raise JobLockedError(f"job {self.job!r}: another run took the lock over at the same moment; lock file "
                                 f"{self.path}") from e
        return handle

    @staticmethod
    def _write(handle: IO[str], claim: Claim) -> None:
        handle.seek(0)
        handle.truncate()
        handle.write(claim.to_json())
        handle.flush()

    def release(self) -> None:
        if self._file is not None:
            if self._claim is not None:
                claim = self._claim
                self._write(self._file, Claim(claim.run_id, claim.holder, claim.since, claim.heartbeat_ms, True))
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = self._claim = None

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
            claim = Claim.from_json(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return None if claim is None else claim.run_id
