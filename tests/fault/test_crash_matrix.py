"""The crash matrix: the driver killed at every point of the publish protocol, then the job run again.

For both stores and both the `full` and `partial` commit policies: every source record is published exactly
once, watermarks are exact, no published file is orphaned or duplicated, and `oncelog verify` passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.log import EventLog
from spark_pipeline.commit.faults import CRASH_EXIT_CODE, POINTS
from projections.views import RunStatus
from spark_pipeline.config_validation import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import DATASETS, PARTITIONS, RECORDS, assert_exactly_once, run_cli, write_job

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

FAIL_AFTER = 30
"""With `partial`, dataset ds.1 fails every attempt after this many records: its partial output is published."""


@pytest.mark.parametrize("policy", ["full", "partial"])
@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_any_point_then_a_rerun_publishes_exactly_once(point: str, policy: str, event_log: EventLog,
                                                                   tmp_path: Path, spark: SparkSession) -> None:
    failing = {"source.synthetic.fail.attempts": 99, "source.synthetic.fail.after.records": FAIL_AFTER,
               "source.synthetic.fail.datasets": "ds.1"} if policy == "partial" else {}
    job = write_job(tmp_path, event_log.url, policy, **failing)

    crashed = run_cli(job, crash_at=point)
    assert crashed.returncode == CRASH_EXIT_CODE, f"exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
    assert f"injected crash at {point}" in crashed.stderr

    again = JobLauncher(load_job_config(job), spark=spark).run()
    assert again.status is (RunStatus.COMMITTED if policy == "full" else RunStatus.FAILED), again.error

    watermarks = assert_exactly_once(event_log.url, tmp_path)
    published_runs = 1 if point == "after-task-output" else 2  # before planning, the crashed run published nothing
    for d in range(DATASETS):
        for p in range(PARTITIONS):
            per_run = FAIL_AFTER if policy == "partial" and d == 1 else RECORDS
            assert watermarks[(f"ds.{d}", f"ds.{d}:{p}")] == per_run * published_runs
