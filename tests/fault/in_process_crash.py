"""The crash matrix's driver killed in this process: the simulation's way of dying, made to hold at a named point.

`InProcessCrash` is the `FaultInjector` of `ONCELOG_CRASH_AT`, with one difference: in the process that created it
(the driver: this test process) its crash raises `SimulatedCrash` instead of exiting. Everywhere else (a commit shard
task in a Python worker of an executor, which gets a pickled copy) it exits with os._exit as before, so the shard
really dies and the driver learns of it through `shard_lost`, and dies in turn.

A dead driver does nothing more, yet an exception unwinds through `finally` blocks and handlers that would append to
the log, close writers or remove folders. So the driver's log and file system are the simulation's faulty wrappers
(tests/sim/faults.py) under a plan, `DriverDeath`, that injects no fault until the driver dies and refuses every call
after it (the refusal is itself a `SimulatedCrash`, as in the simulation): what the dead driver leaves is exactly
what a kill at that point leaves. What a kill would also take away is taken away here, or made harmless:

- the job lock: a SQLite job lock is an flock, which the kernel drops when its holder dies; the launcher's `finally`
  releases it here (the lock's release is the one call a dead driver still makes: the kernel's). On Kafka the lock
  is the job writer itself, fenced by the rerun's;
- the driver's open writers (a SQLite connection, a Kafka transactional producer) stay open, unused, until the rerun
  has fenced them as it fences a dead process's; only then are they closed (`driver_killed_in_process` on exit);
- Spark jobs of the dead run (shard tasks of the stage a killed shard failed): cancelled, and waited for, before the
  rerun (a real kill takes the local executors down with the driver).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from events.log import (
    ErrorHandler,
    EventLog,
    LogWriter,
    Offsets,
    Snapshot,
    StoredRecord,
    Subscription,
    open_log,
    raise_error,
)
from events.log.lock import HolderStatus, JobLock
from filesystems.router import FileSystems
from spark_pipeline.commit.faults import FaultInjector, FaultPoint
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.sim.faults import Fault, FaultPlan, FaultyEventLog, FaultyFileSystem, FaultyWriter, SimulatedCrash

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_IDLE_WAIT_S = 120.0


@dataclass
class DriverDeath(FaultPlan):
    """The plan of a driver that dies once, where the injector says: no fault before; after, every I/O call of the
    driver crashes before it happens. Counts the calls it refused (`injected`)."""

    rng: random.Random = field(default_factory=lambda: random.Random(0))
    cause: str | None = None
    """Why the driver died (the injector's message); None while it lives."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def decide(self, call: str) -> Fault | None:
        with self._lock:
            self.calls += 1
            if self.cause is None:
                return None
            self.injected[call] += 1
        return Fault.CRASH_BEFORE

    def refuse(self, call: str) -> None:
        """Return if the driver lives; SimulatedCrash (the call does not happen) if it died."""
        if self.decide(call) is not None:
            raise SimulatedCrash(f"{call} after the driver died ({self.cause})")

    def die(self, message: str) -> NoReturn:
        """The driver dies here: from now on it does nothing."""
        with self._lock:
            if self.cause is None:
                self.cause = message
        raise SimulatedCrash(message)

    @property
    def refused(self) -> int:
        """How many I/O calls the dead driver still tried (and did not make)."""
        return sum(self.injected.values())


class InProcessCrash(FaultInjector):
    """`ONCELOG_CRASH_AT` for a driver in this process: its crash kills the driver in-process (`DriverDeath`); in any
    other process (a commit shard task, which carries a pickled copy) it exits as FaultInjector's does."""

    def __init__(self, point: FaultPoint | None = None, nth: int = 1, driver_pid: int | None = None) -> None:
        super().__init__(point, nth)
        self.driver_pid = os.getpid() if driver_pid is None else driver_pid
        self.death = DriverDeath()

    def __reduce__(self) -> tuple[type[InProcessCrash], tuple[FaultPoint | None, int, int]]:
        """Pickled for shard tasks with the driver's pid (there: another process, which really exits)."""
        return type(self), (self.point, self.nth, self.driver_pid)

    def crash(self, message: str) -> None:
        if os.getpid() != self.driver_pid:
            super().crash(message)  # os._exit: a shard task's process dies for real
        self.death.die(message)


class DeadDriverWriter(FaultyWriter):
    """A writer of the driver: appends and fence checks refused once it died; not closed by a dead driver."""

    def __init__(self, inner: LogWriter, death: DriverDeath) -> None:
        super().__init__(inner, death)
        self.death = death
        self.closed = False

    def close(self) -> None:
        if self.death.cause is None:
            self.closed = True
            self.inner.close()

    def bury(self) -> None:
        """Close what the dead driver left open (once the rerun fenced it)."""
        if not self.closed:
            self.closed = True
            with suppress(Exception):
                self.inner.close()


class DeadDriverLock(JobLock):
    """The driver's job lock: taken only while it lives; released even once it died, as the kernel releases a dead
    process's flock (for SQLite; the Kafka lock releases nothing)."""

    def __init__(self, inner: JobLock, death: DriverDeath) -> None:
        self.inner = inner
        self.death = death

    def acquire(self, run_id: str, take_over: bool = False) -> str:
        self.death.refuse("lock")
        holder = self.inner.acquire(run_id, take_over)
        self.displaced = self.inner.displaced
        return holder

    def release(self) -> None:
        self.inner.release()

    def holder_status(self, holder: str, run_id: str) -> HolderStatus:
        return self.inner.holder_status(holder, run_id)


class DeadDriverLog(FaultyEventLog):
    """The driver's log: every call refused once the driver died (reads too: a dead process does nothing); its
    writers are kept, to be buried after the rerun."""

    def __init__(self, inner: EventLog, death: DriverDeath) -> None:
        super().__init__(inner, death)
        self.death = death
        self.writers: list[DeadDriverWriter] = []

    @property
    def partitions(self) -> int:
        self.death.refuse("partitions")
        return self.inner.partitions

    def job_lock(self, job: str) -> JobLock:
        self.death.refuse("lock")
        return DeadDriverLock(self.inner.job_lock(job), self.death)

    def ensure_topic(self) -> None:
        self.death.refuse("ensure-topic")
        self.inner.ensure_topic()

    def writer(self, name: str) -> LogWriter:
        self.death.refuse("open-writer")  # opening a writer fences its name's other holder: a write
        writer = DeadDriverWriter(self.inner.writer(name), self.death)
        self.writers.append(writer)
        return writer

    def read_records(self, start: Mapping[int, int] | None = None, until: Mapping[int, int] | None = None,
                     follow: bool = False) -> Iterator[StoredRecord]:
        self.death.refuse("read")
        return self.inner.read_records(start, until, follow)

    def end_offsets(self) -> Offsets:
        self.death.refuse("end-offsets")
        return self.inner.end_offsets()

    def offsets_for_time(self, timestamp_ms: int) -> Offsets:
        self.death.refuse("offsets-for-time")
        return self.inner.offsets_for_time(timestamp_ms)

    def subscribe(self, group: str, on_error: ErrorHandler = raise_error) -> Subscription:
        self.death.refuse("subscribe")
        return self.inner.subscribe(group, on_error)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self.death.refuse("save-snapshot")
        self.inner.save_snapshot(snapshot)

    def load_snapshot(self, name: str) -> Snapshot | None:
        self.death.refuse("load-snapshot")
        return self.inner.load_snapshot(name)

    def await_stable(self, timeout_s: float = 10.0) -> None:
        self.death.refuse("await-stable")
        self.inner.await_stable(timeout_s)

    def bury(self) -> None:
        """Close every writer the dead driver left open."""
        for writer in self.writers:
            writer.bury()


class DeadDriverFileSystem(FaultyFileSystem):
    """The driver's file system: every call refused once the driver died (a move is refused step by step, as the
    base class makes it of size, checksum, rename or copy and delete)."""

    def holds(self, path: str, size: int, checksum: str) -> bool:
        return self._guarded("holds", path, lambda: self.inner.holds(path, size, checksum))


@contextmanager
def driver_killed_in_process(job: Path, point: FaultPoint, spark: SparkSession) -> Iterator[DriverDeath]:
    """Run the job once on `spark`, its driver killed in this process at `point` (at a point a commit shard reaches,
    the shard task's process exits and the driver dies on hearing it was lost). Yields once the run is dead and its
    Spark jobs are over: the rerun goes inside the block; on leaving it, the dead driver's connections are closed."""
    config = load_job_config(job)
    faults = InProcessCrash(point)
    death = faults.death
    inner = open_log(config.log_url, config.log_settings)
    log = DeadDriverLog(inner, death)
    try:
        try:
            result = JobLauncher(config, spark=spark, faults=faults, log=log,
                                 fs=DeadDriverFileSystem(FileSystems.of(config.properties), death)).run()
        except SimulatedCrash:
            pass
        else:
            raise AssertionError(f"the run was not killed at {point}: it ended {result.status} ({result.error})")
        assert death.cause is not None, "a SimulatedCrash came, yet the driver did not die"
        await_spark_idle(spark)
        yield death
    finally:
        log.bury()
        inner.close()


def await_spark_idle(spark: SparkSession, timeout_s: float = SPARK_IDLE_WAIT_S) -> None:
    """Cancel whatever the dead run left running on Spark, and wait until no job runs (as after a kill, which takes
    a local executor down with its driver)."""
    context = spark.sparkContext
    context.cancelAllJobs()
    tracker = context.statusTracker()
    deadline = time.monotonic() + timeout_s
    while tracker.getActiveJobsIds():
        if time.monotonic() > deadline:
            raise AssertionError(f"Spark jobs {tracker.getActiveJobsIds()} still run {timeout_s:.0f}s after the "
                                 f"driver died")
        time.sleep(0.05)
