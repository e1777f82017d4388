"""Where a run's tasks execute: on Spark (executors), or in this process (the seeded fault simulation, tests).

Both run the records engine's task (`records.task.run_task`) and record the same events; the launcher sees only this
interface. A cancelled run waits for `stop()` before it records its end, so that no task event follows it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

from pyspark.sql import SparkSession

from events.log import EventLog, LogWriter
from filesystems.base import FileSystem
from spark_pipeline.commit.engine import CommitEngine, InProcessCommitEngine
from spark_pipeline.commit.session import fence_writers
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.engines.attempts import AttemptsCancelled, TaskOutcome
from spark_pipeline.engines.choice import EngineChoice
from spark_pipeline.engines.records.task import run_task
from spark_pipeline.engines.spark import (
    SparkCommitEngine,
    TaskProgress,
    run_tasks,
    slots,
    spark_session,
    task_writer_name,
)
from spark_pipeline.jobfile.config import JobConfig

STOP_WAIT_S = 30.0
STOP_POLL_S = 0.1


class TaskEngine(ABC):
    """Runs a run's MultiWorkUnits and brings back their outcomes."""

    def start(self) -> None:
        """Acquire what the engine needs before the run starts (the launcher installs its signal handlers after)."""

    @abstractmethod
    def slots(self) -> int:
        """How many tasks run at once."""

    @abstractmethod
    def run(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], progress: TaskProgress
            ) -> list[TaskOutcome]:
        """Run every task; each records its attempts in the log itself. `progress` hears how many tasks ended, and
        the records they wrote, as they end."""

    def commit_engine(self, log: EventLog, fs: FileSystem) -> CommitEngine:
        """Where this engine's runs commit their shards: in this process, through the launcher's log and `fs`."""
        return InProcessCommitEngine(log, fs)

    def cancel(self, run_id: str) -> None:
        """Ask the run's tasks to stop (called from a signal handler's thread)."""

    def halt(self, run_id: str) -> None:
        """Stop the run's tasks now, waiting for nothing (a second signal; called from the handler: must not block)."""

    def identity(self) -> dict[str, str]:
        """What identifies the engine's application for the audit (recorded in JobRunStarted): none by default."""
        return {}

    def stop(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], log: EventLog) -> None:
        """After a cancellation: return once no task of the run can append anything any more."""


class SparkTaskEngine(TaskEngine):
    """One Spark task per MultiWorkUnit, on the cluster of the job's Spark session; `choice` says why this engine
    runs the job (`task.engine`), for the run's JobRunStarted."""

    def __init__(self, config: JobConfig, spark: SparkSession | None = None, choice: EngineChoice | None = None
                 ) -> None:
        self.config = config
        self._spark = spark
        self.choice = choice
        self.cancelled = threading.Event()
        """Set by `cancel`: no attempt starts after it, no retry pause lasts beyond it."""
        self.halted = threading.Event()
        """Set by `halt`: `stop` waits for no task any more."""

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = spark_session(self.config)
        return self._spark

    def identity(self) -> dict[str, str]:
        """The engine chosen and why, and the Spark application's id (its name in Spark's UI and history server) once
        Spark runs: asking never starts it (a run with nothing to do never does)."""
        chosen = self.choice.properties() if self.choice else {}
        running = {} if self._spark is None else {"spark.app.id": self._spark.sparkContext.applicationId}
        return {**running, **chosen}

    def commit_engine(self, log: EventLog, fs: FileSystem) -> CommitEngine:
        """Shards commit on the executors (each opens the job's log and file systems there)."""
        return SparkCommitEngine(self.spark)

    def start(self) -> None:
        _ = self.spark  # Spark installs its own SIGINT handler when it starts: before the launcher installs its own

    def slots(self) -> int:
        return slots(self.spark)

    def run(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], progress: TaskProgress
            ) -> list[TaskOutcome]:
        return run_tasks(self.spark, config, run_id, mwus, config.log_url, config.log_settings, progress)

    def cancel(self, run_id: str) -> None:
        self.cancelled.set()
        if self._spark is not None:
            cancel_job_group(self._spark, job_group(run_id))

    def halt(self, run_id: str) -> None:
        """Wait for no task any more, and cancel the run's Spark jobs again (those a task started meanwhile): from
        the signal handler itself, so nothing here blocks (py4j is called from a thread of its own)."""
        self.cancelled.set()
        self.halted.set()
        # the main thread leaves a py4j call half-way: py4j's own report of that broken call is no news to the user
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        logging.getLogger().addFilter(not_from_py4j)  # py4j also reports through the root logger
        if self._spark is not None:
            threading.Thread(target=cancel_job_group, args=(self._spark, job_group(run_id)), daemon=True,
                             name="oncelog-halt").start()

    def pause(self, seconds: float) -> None:
        """A retry's pause, cut short by a cancellation: AttemptsCancelled then (no attempt starts after a cancel)."""
        if self.cancelled.wait(seconds):
            raise AttemptsCancelled("the run is cancelled: no further attempt")

    def stop(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], log: EventLog) -> None:
        """Wait until Spark reports no running task of the run (unless halted), then fence every task's writer."""
        if self._spark is None:
            return
        if self.halted.is_set():  # a second signal: no Spark call (the main thread may have left one half-way)
            fence_task_writers(config, run_id, mwus, log)
            return
        tracker = self._spark.sparkContext.statusTracker()
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and not self.halted.is_set():
            jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(job_group(run_id))]
            if all(j is None or j.status != "RUNNING" for j in jobs):
                break
            time.sleep(STOP_POLL_S)
        fence_task_writers(config, run_id, mwus, log)


def job_group(run_id: str) -> str:
    """The Spark job group of a run's tasks: what a cancellation cancels."""
    return f"oncelog-{run_id}"


def cancel_job_group(spark: SparkSession, group: str) -> None:
    """Cancel the group's Spark jobs, and those it submits from now on: a signal that comes while a task's Spark job
    is still being planned (not yet submitted) must not leave that job to run to its end. A group names one run."""
    spark.sparkContext._jsc.sc().cancelJobGroupAndFutureJobs(group)


def fence_task_writers(config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], log: EventLog) -> None:
    """Open (and close) a writer under each task's name: a task still holding its writer can append nothing more."""
    fence_writers(log, [task_writer_name(config.job_name, run_id, mwu.multi_work_unit_id) for mwu in mwus])


class InProcessTaskEngine(TaskEngine):
    """Runs the tasks one after another in this process, each with a writer from `open_writer` (by task name)."""

    def __init__(self, open_writer: Callable[[str], LogWriter], slots: int = 2,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.open_writer = open_writer
        self._slots = slots
        self.sleep = sleep

    def slots(self) -> int:
        return self._slots

    def run(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], progress: TaskProgress
            ) -> list[TaskOutcome]:
        outcomes = []
        records = 0
        for mwu in mwus:
            with self.open_writer(task_writer_name(config.job_name, run_id, mwu.multi_work_unit_id)) as writer:
                outcomes.append(run_task(config, run_id, mwu, writer.append, self.sleep))
            records += sum(r.records_written for r in outcomes[-1].written)
            progress(len(outcomes), records)
        return outcomes


def not_from_py4j(record: logging.LogRecord) -> bool:
    """Whether a log record was not written by py4j's own modules (which log to the root logger too)."""
    return f"{os.sep}py4j{os.sep}" not in record.pathname
