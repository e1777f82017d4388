"""The DataFrame engine's Spark SQL stages: a row policy and a select-list converter, run in the JVM.

Real Spark (the session fixture), real files, a SQLite log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.errors import ConfigError
from events.job import JobRunFailed
from events.log import open_log
from events.task import TaskFailed, TaskStarted
from projections.views import RunStatus
from replay.audit import audit
from replay.render import audit_json
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.sources.synthetic import synthetic_record
from tests.fault.pipeline_checks import (
    DATASETS,
    PARTITIONS,
    RECORDS,
    assert_exactly_once,
    avro_records,
    write_job,
)

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).parents[4]

CENTS = {"task.engine": "dataframe", "source.synthetic.payload.bytes": 8,
         "converter.sql.select": "dataset, partition, offset, amount * 100 AS amount_cents, upper(payload) AS code",
         "qualitychecker.row.sql": "amount_cents >= 0"}  # after the converter (Gobblin's order)


def test_a_sql_converter_and_row_policy_publish_the_converted_records_exactly_once(
        tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    result = JobLauncher(load_job_config(write_job(tmp_path, url, "full", None, **CENTS)), spark=spark).run()
    assert result.status is RunStatus.COMMITTED, result.error
    assert result.engine is not None and result.engine[0] == "dataframe"
    with open_log(url) as log:
        audited = audit_json(audit(log, result.run_id, result.job))
    assert audited["engine"] == {"kind": "dataframe", "reason": result.engine[1]}
    assert "every construct of the job has a DataFrame stage" in result.engine[1]

    assert set(assert_exactly_once(url, tmp_path).values()) == {RECORDS}
    published = avro_records(tmp_path / "published")
    assert len(published) == RECORDS * DATASETS * PARTITIONS
    assert set(published[0]) == {"dataset", "partition", "offset", "amount_cents", "code"}
    for record in published:
        source = synthetic_record(0, record["dataset"], record["partition"], record["offset"], 8)
        assert (record["amount_cents"], record["code"]) == (source["amount"] * 100, source["payload"].upper())


def test_a_record_failing_the_row_policy_fails_its_task_naming_the_condition_and_publishes_nothing(
        tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{**CENTS, "qualitychecker.row.sql": "amount_cents < 9900000",
                                                     "task.maxretries": 0})
    result = JobLauncher(load_job_config(job), spark=spark).run()
    assert result.status is RunStatus.FAILED
    with open_log(url) as log:
        errors = [e.event.error for e in log.read() if isinstance(e.event, TaskFailed)]
    assert errors and all("qualitychecker.row.sql 'amount_cents < 9900000' failed for the record at offset" in e
                          for e in errors), errors[:1]
    assert avro_records(tmp_path / "published") == []


@pytest.mark.parametrize(("key", "value", "says"), [
    ("converter.sql.select", "amount * 100 AS cents, nope", "`nope` cannot be resolved"),
    ("converter.sql.select", "amount +", "PARSE_SYNTAX_ERROR"),
    ("qualitychecker.row.sql", "amount >=", "PARSE_SYNTAX_ERROR"),
])
def test_a_bad_sql_stage_fails_the_run_before_any_task_naming_the_key(
        key: str, value: str, says: str, tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    launcher = JobLauncher(load_job_config(write_job(tmp_path, url, "full", None, **{**CENTS, key: value})),
                           spark=spark)
    with pytest.raises(ConfigError) as raised:
        launcher.run()
    assert f"{key}={value!r}" in str(raised.value) and says in str(raised.value), raised.value
    with open_log(url) as log:
        events = [e.event for e in log.read()]
    assert not [e for e in events if isinstance(e, TaskStarted)], "a task started"
    failed = [e for e in events if isinstance(e, JobRunFailed)]
    assert len(failed) == 1 and f"{key}={value!r}" in failed[0].error


def test_sql_stages_on_the_records_engine_are_refused_naming_the_key(tmp_path: Path) -> None:
    job = write_job(tmp_path, "sqlite:///unused.db", "full", None, **{**CENTS, "task.engine": "records"})
    with pytest.raises(ConfigError, match="converter.sql.select and qualitychecker.row.sql: Spark SQL stages run on "
                                          "the DataFrame engine only.*task.engine=records"):
        JobLauncher(load_job_config(job))


def test_run_explain_prints_the_engine_work_units_and_sparks_plan_and_runs_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **CENTS)
    shown = subprocess.run([sys.executable, "-m", "oncelog", "run", str(job), "--explain", "--json"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    document = json.loads(shown.stdout)
    assert document["engine"]["kind"] == "dataframe"
    assert len(document["work_units"]) == DATASETS * PARTITIONS
    assert {(u["low_watermark"], u["expected_high_watermark"]) for u in document["work_units"]} == {(0, RECORDS)}
    assert "Range" in document["spark_plan"] and "amount_cents" in document["spark_plan"]
    assert "qualitychecker.row.sql 'amount_cents >= 0'" in document["spark_plan"]
    with open_log(url) as log:
        assert list(log.read()) == [], "explaining appended to the log"
    assert not (tmp_path / "staging").exists() and not (tmp_path / "published").exists()
