"""The crash matrix on HDFS (atomic rename) and S3 (copy, check, delete): the driver killed at every point of the
publish protocol while the job's folders are on a real remote store, then the job run again: every record is
published exactly once and `verify --publish-dir` passes on the remote folder.

Every point kills the driver in this process (tests/fault/in_process_crash.py); one canary per remote store kills a
real `oncelog run` process, mid-publication (after a rename: on S3, after a copy, check and delete)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from projections.views import RunStatus
from spark_pipeline.commit.faults import CRASH_EXIT_CODE, POINTS, FaultPoint
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.in_process_crash import driver_killed_in_process
from tests.fault.pipeline_checks import (
    DATASETS,
    PARTITIONS,
    RECORDS,
    assert_exactly_once,
    run_cli,
    write_job,
)
from tests.remote_fs_plugin import Remote

pytestmark = [pytest.mark.spark]


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_any_point_publishing_to_a_remote_store_then_a_rerun_publishes_exactly_once(
        point: FaultPoint, remote: Remote, tmp_path: Path, spark: SparkSession) -> None:
    url, job = remote_job(tmp_path, remote)
    with driver_killed_in_process(job, point, spark) as death:
        assert death.cause is not None and f"injected crash at {point}" in death.cause, death.cause
        rerun_publishes_exactly_once(job, point, url, tmp_path, remote, spark)


@pytest.mark.parametrize("point", [FaultPoint.AFTER_RENAME])
def test_a_process_killed_publishing_to_a_remote_store_then_a_rerun_publishes_exactly_once(
        point: FaultPoint, remote: Remote, tmp_path: Path, spark: SparkSession) -> None:
    url, job = remote_job(tmp_path, remote)
    crashed = run_cli(job, crash_at=point)
    assert crashed.returncode == CRASH_EXIT_CODE, f"exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
    assert f"injected crash at {point}" in crashed.stderr
    rerun_publishes_exactly_once(job, point, url, tmp_path, remote, spark)


def remote_job(base: Path, remote: Remote) -> tuple[str, Path]:
    """A SQLite log in `base` and a `full` job whose folders are on the remote store."""
    url = f"sqlite:///{base / 'events.db'}"
    return url, write_job(base, url, "full", root=remote.root, **remote.settings)


def rerun_publishes_exactly_once(job: Path, point: str, url: str, base: Path, remote: Remote,
                                 spark: SparkSession) -> None:
    """Run the crashed job again in this process: it commits, and every record of both runs (of the rerun alone,
    when the crash came before anything was planned) is published exactly once on the remote store."""
    again = JobLauncher(load_job_config(job), spark=spark).run()
    assert again.status is RunStatus.COMMITTED, again.error

    watermarks = assert_exactly_once(url, base, root=remote.root)
    published_runs = 1 if point == "after-task-output" else 2
    assert watermarks == {(f"ds.{d}", f"ds.{d}:{p}"): RECORDS * published_runs
                          for d in range(DATASETS) for p in range(PARTITIONS)}
