"""The public API's job functions: run a job, recover it — composed of the packages' parts as the `run` and `recover`
commands are. Loaded by `oncelog` only when one of them is used (it imports PySpark)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from events.log import open_log
from filesystems.router import FileSystems
from spark_pipeline.commit.sequence import CommitResult
from spark_pipeline.commit.session import open_session
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobfile.paths import absolute_config
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher, RunResult, commit_settings


def job_config(job: JobConfig | str | Path) -> JobConfig:
    """A job given as a loaded JobConfig or as its job file (validated: JobConfigError lists every problem)."""
    return absolute_config(job if isinstance(job, JobConfig) else load_job_config(job))


def run_job(job: JobConfig | str | Path, spark: SparkSession | None = None) -> RunResult:
    """Run a job once (lock → recover → plan → tasks on Spark → commit → release) and say how it ended."""
    return JobLauncher(job_config(job), spark=spark).run()


def recover(job: JobConfig | str | Path) -> list[CommitResult]:
    """Finish the job's planned-but-unfinished commit sequences, extracting nothing (what a run does first)."""
    config = job_config(job)
    with open_log(config.log_url, config.log_settings) as log, open_session(
            log, config.job_name, commit_settings(config), FileSystems.of(config.properties)) as session:
        return session.committer.recover(config.job_name)

