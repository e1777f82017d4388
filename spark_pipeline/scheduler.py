"""`oncelog schedule DIR`: runs a folder's jobs by their `job.schedule` cron expressions, one run at a time.

Every job file of the folder is validated before anything starts, and two jobs whose folders are equal or nested
refuse the start (naming both files): one job's cleanup would delete the other's task output. A job without a
schedule (or with job.runonce) runs once at start; job.disabled ones never run. A run that fails, or finds its job
locked, is reported and the scheduler goes on; one Spark session serves every run.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

from events.errors import OncelogError
from spark_pipeline.commit.faults import NO_FAULTS, FaultInjector
from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import load_job_dir
from spark_pipeline.launcher import JobLauncher, RunResult

Report = Callable[[RunResult, float], None]


class Scheduler:
    """Fires jobs at their next cron time; `once` runs every enabled job once, now, and returns."""

    def __init__(self, jobs: list[JobConfig], faults: FaultInjector = NO_FAULTS,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.jobs = [j for j in jobs if not j.job_disabled]
        self.faults = faults
        self.now = now
        self.sleep = sleep
        self._spark: SparkSession | None = None

    @classmethod
    def from_directory(cls, directory: Path, faults: FaultInjector = NO_FAULTS) -> Scheduler:
        """The scheduler of a folder's job files: all valid, no two sharing folders (errors list every problem)."""
        return cls(load_job_dir(directory), faults)

    def run(self, once: bool, report: Report, max_runs: int | None = None) -> int:
        """Run jobs when due; returns how many runs were made (`max_runs` bounds it, for tests)."""
        now = self.now()
        queue: list[tuple[datetime, int]] = []
        for index, job in enumerate(self.jobs):
            schedule = job.schedule
            first = now if once or schedule is None or job.job_runonce else schedule.next_after(now)
            heapq.heappush(queue, (first, index))
        runs = 0
        while queue and (max_runs is None or runs < max_runs):
            due, index = heapq.heappop(queue)
            wait = (due - self.now()).total_seconds()
            if wait > 0:
                self.sleep(wait)
            self._run(self.jobs[index], report)
            runs += 1
            schedule = self.jobs[index].schedule
            if not once and schedule is not None and not self.jobs[index].job_runonce:
                heapq.heappush(queue, (schedule.next_after(max(due, self.now())), index))
        return runs

    def _run(self, job: JobConfig, report: Report) -> None:
        started = time.perf_counter()
        if self._spark is None:
            self._spark = spark_session(job)
        try:
            result = JobLauncher(job, spark=self._spark, faults=self.faults).run()
        except OncelogError as e:
            print(f"oncelog schedule: {job.job_name}: {e}", flush=True)
            return
        report(result, time.perf_counter() - started)
