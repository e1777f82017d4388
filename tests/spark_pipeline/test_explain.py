"""`run --explain` is the run: the same planning, packing and engine, on any log, a fresh one included; and
`validate --deep`, which plans the job as `--explain` does, with Spark analysing its SQL."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from events.job import WorkUnitsPlanned
from events.log import open_log
from oncelog.cli import app
from spark_pipeline.explain import explain
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.progress import PYSPARK_LOGGERS
from tests.fault.pipeline_checks import write_job
from tests.spark_pipeline.test_preflight import oncelog

SQL_KEY = "converter.sql.select"


def test_explain_plans_the_tasks_and_the_engine_the_run_then_uses(tmp_path: Path, spark: SparkSession) -> None:
    """On the DataFrame engine, job.commit.policy=full packs a run into one task whatever the cores: `--explain`
    packed for the session's two cores instead."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    config = load_job_config(write_job(tmp_path, url, "full"))
    explained = explain(config, spark)
    result = JobLauncher(config, spark=spark).run()
    with open_log(url) as log:
        [planned] = [e.event for e in log.read() if isinstance(e.event, WorkUnitsPlanned)]
    run_tasks = {u.multi_work_unit_id for u in planned.work_units}
    assert len(explained.tasks) == len(run_tasks) == len(result.tasks) == 1
    assert {t.multi_work_unit_id for t in explained.tasks} == run_tasks
    assert sorted(u.work_unit_id for u in explained.work_units) == sorted(u.work_unit_id for u in planned.work_units)
    assert result.engine == (explained.engine.value, explained.reason)


def test_validate_deep_analyses_the_sql_over_the_sources_columns(tmp_path: Path, spark: SparkSession,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the log file: .oncelog/logs/ where the command runs
    select = "dataset, (SELECT no_such_column) AS inner"
    job = write_job(tmp_path, f"sqlite:///{tmp_path / 'events.db'}", "full", **{SQL_KEY: select})
    shallow = CliRunner().invoke(app, ["validate", str(job)])
    assert shallow.exit_code == 0, shallow.output  # a subquery's columns are known to Spark's analysis only
    for name in PYSPARK_LOGGERS:  # as in a new process: PySpark makes its loggers when an error is first logged
        logging.Logger.manager.loggerDict.pop(name, None)
    deep = CliRunner().invoke(app, ["validate", str(job), "--deep"], catch_exceptions=False)
    assert deep.exit_code == 1, deep.output
    assert f"{job}: {SQL_KEY}={select!r} is not a select list over the records' columns" in deep.output
    assert "no_such_column" in deep.output
    assert "SQLQueryContextLogger" not in deep.output, deep.output  # Spark's JSON log line: in the log file only
    assert "SQLQueryContextLogger" in (tmp_path / ".oncelog" / "logs" / "crashy-validate.log").read_text()


def test_validate_deep_looks_up_the_partition_column_in_the_columns_the_sql_writes(
        tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """The records' columns after the SQL are Spark's to tell: `validate --deep` asks, as the run does before its
    tasks, and names the key."""
    monkeypatch.chdir(tmp_path)
    job = write_job(tmp_path, f"sqlite:///{tmp_path / 'events.db'}", "full", **{
        "task.engine": "dataframe", SQL_KEY: "dataset, partition, offset AS position, payload",
        "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedWriterPartitioner",
        "writer.partition.pattern": "yyyy/MM/dd/HH", "writer.partition.columns": "offset"})
    shallow = CliRunner().invoke(app, ["validate", str(job)])
    assert shallow.exit_code == 0, shallow.output
    deep = CliRunner().invoke(app, ["validate", str(job), "--deep"], catch_exceptions=False)
    assert deep.exit_code == 1, deep.output
    assert (f"{job}: dataset 'ds.0': writer.partition.columns: 'offset' is not a column of the records written; "
            f"their columns: 'dataset', 'partition', 'position', 'payload'") in deep.output.replace("\n  ", " ")


def test_explain_on_a_kafka_log_nothing_was_written_to_yet(tmp_path: Path, kafka_bootstrap: str) -> None:
    """A fresh log has no history: nothing to recover, the source's plan as on any first run (no Spark: no work)."""
    (tmp_path / "incoming").mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "job.name": "fresh", "source.class": "spark_pipeline.sources.directory.DirectorySource",
        "source.filebased.data.directory": "incoming", "writer.staging.dir": "staging",
        "writer.output.dir": "output", "data.publisher.final.dir": "published"}))
    log = f"kafka://{kafka_bootstrap}?topic=fresh-{uuid.uuid4().hex[:8]}"
    shown = oncelog(tmp_path, "run", str(job), "--log", log, "--explain", "--json")
    assert shown.returncode == 0, shown.stderr
    explained = json.loads(shown.stdout)
    assert (explained["tasks"], explained["skipped"], explained["engine"]["kind"]) == ([], [], "dataframe")
