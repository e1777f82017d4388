"""Failure isolation per work unit (engines.isolation): under `successful` and `partial` exactly the failing work
units' datasets fail, however the work units were packed into tasks, on both engines; `full` stays all or nothing.

The synthetic source's test hook makes the work units of the datasets it names fail at an offset, in every attempt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.job import WorkUnitSpec
from events.log import open_log
from events.model import Event
from events.published import DatasetPublished
from events.task import TaskFailed, TaskRetried, TaskStarted, TaskSucceeded, WorkUnitResult
from projections.views import RunStatus
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.engines.attempts import AttemptFailed, AttemptPlan, TaskOutcome
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.engines.isolation import run_task_attempts
from spark_pipeline.jobs import config_from_properties, load_job_config
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


def units_of(count: int) -> MultiWorkUnit:
    """A task of `count` work units, one dataset each."""
    return MultiWorkUnit("task-00000", tuple(
        WorkUnitSpec(work_unit_id=f"u{i}", dataset_urn=f"ds.{i}", partition=f"ds.{i}:0", low_watermark=0,
                     expected_high_watermark=1, estimated_records=1) for i in range(count)))


class Units:
    """An engine's attempt over work units: those in `failing` fail it (named when `names`), the others succeed."""

    def __init__(self, failing: set[str], names: bool) -> None:
        self.failing, self.names = failing, names
        self.runs: list[tuple[str, int, int]] = []

    def __call__(self, part: MultiWorkUnit, attempt: int, last: bool) -> list[WorkUnitResult]:
        self.runs.append((part.multi_work_unit_id, len(part.work_units), attempt))
        bad = [u.work_unit_id for u in part.work_units if u.work_unit_id in self.failing]
        if bad:
            raise AttemptFailed(RuntimeError(f"{bad[0]} is broken"), (), work_unit_id=bad[0] if self.names else None)
        return [WorkUnitResult(work_unit_id=u.work_unit_id, dataset_urn=u.dataset_urn, partition=u.partition,
                               low_watermark=0, expected_high_watermark=1, actual_high_watermark=1,
                               records_extracted=1, records_written=1, bytes_written=1, output_files=())
                for u in part.work_units]


def isolated(count: int, failing: set[str], names: bool, retries: int = 1) -> tuple[TaskOutcome, Units, list[Event],
                                                                                    list[float]]:
    """One task of `count` units under `successful`, its events and its pauses."""
    config = config_from_properties({
        "job.name": "iso", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "writer.staging.dir": "/tmp/unused-s", "writer.output.dir": "/tmp/unused-o",
        "data.publisher.final.dir": "/tmp/unused-f", "job.commit.policy": "successful",
        "task.maxretries": str(retries), "task.retry.intervalinsec": "7"})
    attempt = Units(failing, names)
    events: list[Event] = []
    pauses: list[float] = []
    outcome = run_task_attempts(config, "run", units_of(count), attempt, AttemptPlan.of(config), events.extend,
                                pauses.append)
    return outcome, attempt, events, pauses


@pytest.mark.parametrize("names", [True, False])
def test_only_the_failing_work_units_fail_whether_or_not_the_engine_names_them(names: bool) -> None:
    outcome, attempt, events, pauses = isolated(64, {"u5", "u40"}, names)
    assert not outcome.succeeded
    assert {r.work_unit_id for r in outcome.results} == {f"u{i}" for i in range(64)} - {"u5", "u40"}
    assert sorted(f.work_unit_ids for f in outcome.failures) == [("u40",), ("u5",)]
    assert all(f.attempts == 2 for f in outcome.failures), "alone, then its one retry"
    assert pauses == [7.0], "one pause for the round of retries, not one per failing unit"
    retried_ = [e for e in events if isinstance(e, TaskRetried)]
    assert sorted(e.task_id for e in retried_) == sorted(f.task_id for f in outcome.failures)
    # Every part's attempt numbers go on from the part it came from: a unit's attempts only grow.
    seen: dict[str, int] = {}
    for e in events:
        if isinstance(e, TaskStarted):
            for unit in e.work_unit_ids:
                assert e.attempt > seen.get(unit, 0)
                seen[unit] = e.attempt
    if names:  # the records engine names the failing unit: pack, rest, alone, rest, alone, and two retries
        assert len(attempt.runs) == 7
    else:  # halving: about 2·log2(64) attempts per failing unit, the second half split at once after the first passed
        assert len(attempt.runs) <= 2 * 2 * 6 + 3


def test_a_failure_of_every_work_unit_stops_the_splitting() -> None:
    """A broker down fails every work unit: after three failed alone with none succeeding, the rest is not split."""
    everything = {f"u{i}" for i in range(64)}
    outcome, attempt, _, _ = isolated(64, everything, names=False, retries=0)
    assert outcome.results == () and {u for f in outcome.failures for u in f.work_unit_ids} == everything
    assert len(attempt.runs) < 20, attempt.runs
