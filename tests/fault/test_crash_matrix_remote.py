"""The crash matrix on HDFS (atomic rename) and S3 (copy, check, delete): the driver killed at every point of the
publish protocol while the job's folders are on a real remote store, then the job run again: every record is
published exactly once and `verify --publish-dir` passes on the remote folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from projections.views import RunStatus
from spark_pipeline.commit.faults import CRASH_EXIT_CODE, POINTS
from spark_pipeline.jobfile.validation import load_job_config
from spark_pipeline.launcher import JobLauncher
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
        point: str, remote: Remote, tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", root=remote.root, **remote.settings)

    crashed = run_cli(job, crash_at=point)
    assert crashed.returncode == CRASH_EXIT_CODE, f"exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
    assert f"injected crash at {point}" in crashed.stderr

    again = JobLauncher(load_job_config(job), spark=spark).run()
    assert again.status is RunStatus.COMMITTED, again.error

    watermarks = assert_exactly_once(url, tmp_path, root=remote.root)
    published_runs = 1 if point == "after-task-output" else 2
    assert watermarks == {(f"ds.{d}", f"ds.{d}:{p}"): RECORDS * published_runs
                          for d in range(DATASETS) for p in range(PARTITIONS)}
