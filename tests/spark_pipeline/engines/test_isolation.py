"""Failure isolation per work unit (engines.isolation): under `successful` and `partial` exactly the failing work
units' datasets fail, however the work units were packed into tasks, on both engines; `full` stays all or nothing.

The synthetic source's test hook makes the work units of the datasets it names fail at an offset, in every attempt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.log import open_log
from events.published import DatasetPublished
from events.task import TaskFailed, TaskSucceeded
from projections.views import RunStatus
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher, RunResult
from tests.fault.pipeline_checks import assert_exactly_once, run_cli, write_job

BIG = 3000
"""Datasets of the job an operator met: two of them failing sank every other one."""
FAILING = ("ds.17", "ds.25")
FAIL_AFTER = 1
RECORDS = 3


def failing_job(base: Path, policy: str, engine: str, datasets: int, partitions: int = 1) -> tuple[Path, str]:
    """A synthetic job whose FAILING datasets fail after FAIL_AFTER records in every attempt; its log's URL."""
    url = f"sqlite:///{base / 'events.db'}"
    job = write_job(base, url, policy, None, **{
        "task.engine": engine, "source.synthetic.datasets": datasets, "source.synthetic.partitions": partitions,
        "source.synthetic.records.per.run": RECORDS, "source.synthetic.payload.bytes": 8,
        "source.synthetic.fail.datasets": ",".join(FAILING), "source.synthetic.fail.attempts": 1000,
        "source.synthetic.fail.after.records": FAIL_AFTER, "task.maxretries": 1, "task.retry.intervalinsec": 0})
    return job, url


def published_datasets(url: str) -> set[str]:
    """The datasets some DatasetPublished says were published."""
    with open_log(url) as log:
        return {e.event.dataset_urn for e in log.read() if isinstance(e.event, DatasetPublished)}


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["records", "dataframe"])
def test_two_failing_datasets_of_3000_leave_the_other_2998_published(engine: str, tmp_path: Path) -> None:
    """`oncelog run` of the 3,000-dataset job under `successful`: its tasks hold 1,500 work units each (one per
    core), yet only the two failing datasets fail; the run ends FAILED naming them, everything else published once."""
    job, url = failing_job(tmp_path, "successful", engine, BIG)
    ran = run_cli(job, timeout=600)
    assert ran.returncode == 1, ran.stderr[-3000:]
    document = json.loads(ran.stdout)
    assert document["status"] == "FAILED"
    assert all(f"{urn}:0@0" in document["error"] for urn in FAILING), document["error"]

    everything = {f"ds.{d}" for d in range(BIG)}
    assert published_datasets(url) == everything - set(FAILING)
    watermarks = assert_exactly_once(url, tmp_path)
    assert watermarks == {(urn, f"{urn}:0"): RECORDS for urn in everything - set(FAILING)}
    with open_log(url) as log:
        events = [e.event for e in log.read()]
    packs = [e for e in events if isinstance(e, TaskFailed) and e.attempt == 1]
    assert packs and all(len(e.task_id.split(".")) == 1 for e in packs), "the packed tasks' first attempts failed"
    last_failures = {e.task_id: e for e in events if isinstance(e, TaskFailed)}
    assert sum("injected failure" in e.error for e in last_failures.values()) >= len(FAILING)
    succeeded_units = {r.work_unit_id for e in events if isinstance(e, TaskSucceeded) for r in e.results}
    assert not succeeded_units & {f"{urn}:0@0" for urn in FAILING}


def run_in_process(job: Path, url: str) -> RunResult:
    """One run of the job on the records engine in this process (no Spark)."""
    with open_log(url) as log:
        return JobLauncher(load_job_config(job), engine=InProcessTaskEngine(log.writer), log=log).run()


@pytest.mark.parametrize("policy", ["successful", "partial", "full"])
def test_each_commit_policy_on_the_records_engine(policy: str, tmp_path: Path) -> None:
    """Two work units per dataset, packed two tasks: `successful` publishes every other dataset, `partial` also what
    the failing work units fully wrote, `full` nothing."""
    job, url = failing_job(tmp_path, policy, "records", 40, partitions=2)
    result = run_in_process(job, url)
    assert result.status is RunStatus.FAILED
    others = {f"ds.{d}" for d in range(40)} - set(FAILING)
    watermarks = assert_exactly_once(url, tmp_path)
    if policy == "full":
        assert watermarks == {} and published_datasets(url) == set()
        return
    expected = {(urn, f"{urn}:{p}"): RECORDS for urn in others for p in range(2)}
    if policy == "partial":  # the failing work units' last attempts keep the records before the failure
        expected |= {(urn, f"{urn}:{p}"): FAIL_AFTER for urn in FAILING for p in range(2)}
    assert watermarks == expected
    assert {f.task_id for t in result.tasks for f in t.failures} and all(
        len(f.work_unit_ids) == 1 for t in result.tasks for f in t.failures), "each failure isolated to its unit"


@pytest.mark.parametrize("policy", ["partial", "full"])
def test_each_commit_policy_on_the_dataframe_engine(policy: str, tmp_path: Path, spark: SparkSession) -> None:
    """The DataFrame engine isolates the failing work units by halving its tasks (Spark does not say which unit
    failed): `partial` publishes every other dataset (a failed Spark job keeps nothing), `full` nothing."""
    job, url = failing_job(tmp_path, policy, "dataframe", 40, partitions=2)
    result = JobLauncher(load_job_config(job), spark=spark).run()
    assert result.status is RunStatus.FAILED
    others = {f"ds.{d}" for d in range(40)} - set(FAILING)
    watermarks = assert_exactly_once(url, tmp_path)
    if policy == "full":
        assert watermarks == {} and published_datasets(url) == set()
        return
    assert watermarks == {(urn, f"{urn}:{p}"): RECORDS for urn in others for p in range(2)}
    failed_units = {u for t in result.tasks for f in t.failures for u in f.work_unit_ids}
    assert failed_units == {f"{urn}:{p}@0" for urn in FAILING for p in range(2)}
