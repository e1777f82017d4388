"""The job flow on real Spark, end to end: constructs, forks, retries, commit policies, cancellation, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import fastavro
import pytest
import yaml
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from events.job import JobRunCancelled, JobRunStarted
from events.log import open_log
from events.task import TaskEvent, TaskFailed, TaskRetried, TaskStarted, TaskSucceeded
from oncelog.cli import app
from projections.projector import Projector
from projections.views import RunStatus
from spark_pipeline.constructs import (
    Converter,
    Record,
    RowLevelPolicy,
    Schema,
    WorkUnitState,
)
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import (
    assert_exactly_once,
    published_records,
    write_job,
)

pytestmark = pytest.mark.spark
ROOT = Path(__file__).parents[2]


class EvenOffsetsOnly(RowLevelPolicy):
    """Passes records with an even offset."""

    def check(self, record: Record) -> bool:
        return record["offset"] % 2 == 0


class Doubled(Converter):
    """1:N — each record becomes two, the copy marked."""

    def convert_schema(self, input_schema: Schema, state: WorkUnitState) -> Schema:
        return {**input_schema, "fields": [*input_schema["fields"], {"name": "copy", "type": "boolean"}]}

    def convert_record(self, output_schema: Schema, record: Record, state: WorkUnitState) -> Iterable[Record]:
        yield {**record, "copy": False}
        yield {**record, "copy": True}


def run(job: Path, spark: SparkSession) -> RunStatus:
    return JobLauncher(load_job_config(job), spark=spark).run().status


def avro_records(folder: Path) -> list[dict]:
    found = []
    for path in sorted(folder.rglob("*.avro")):
        with path.open("rb") as f:
            found += [r for r in fastavro.reader(f) if isinstance(r, dict)]
    return found


def test_a_properties_job_with_converters_and_row_checks(tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    write_job(tmp_path, url)
    job = yaml.safe_load((tmp_path / "job.yaml").read_text())
    job.update({"converter.classes": "spark_pipeline.examples.converters.AmountInCents",
                "qualitychecker.row.policies": f"{__name__}.EvenOffsetsOnly",
                "qualitychecker.row.policy.types": "MANDATORY"})
    properties = tmp_path / "job.pull"
    properties.write_text("# a Gobblin-style job file\n" + "\n".join(f"{k}={v}" for k, v in job.items()) + "\n")
    assert run(properties, spark) is RunStatus.COMMITTED
    records = avro_records(tmp_path / "published")
    assert records and all(r["offset"] % 2 == 0 and r["amount_cents"] == r["amount"] * 100 for r in records)
    assert len(records) == 2 * 2 * 100  # 2 datasets × 2 partitions × half of 200 records
    with open_log(url) as log:
        started = [e.event for e in log.read() if isinstance(e.event, JobRunStarted)]
    assert started[0].properties["spark.app.id"] == spark.sparkContext.applicationId  # the audit names the app


def test_fork_branches_each_with_their_converters_and_folders(tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    branch = {f"{key}.{n}": str(tmp_path / f"{name}{n}") for n in (0, 1)
              for key, name in (("writer.staging.dir", "staging"), ("writer.output.dir", "task-output"),
                                ("data.publisher.final.dir", "published"))}
    job = write_job(tmp_path, url, "full", None,
                    **{"fork.branches": 2, "converter.classes.1": f"{__name__}.Doubled", **branch})
    assert run(job, spark) is RunStatus.COMMITTED
    plain, doubled = avro_records(tmp_path / "published0"), avro_records(tmp_path / "published1")
    assert len(plain) == 800 and len(doubled) == 1600
    assert sorted(r["offset"] for r in doubled if r["copy"]) == sorted(r["offset"] for r in plain)


def test_a_failed_attempt_is_retried_and_only_the_retry_is_published(tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None,
                    **{"source.synthetic.fail.attempts": 1, "source.synthetic.fail.after.records": 10})
    assert run(job, spark) is RunStatus.COMMITTED
    with open_log(url) as log:
        assert any(isinstance(i.event, TaskRetried) for i in log.read())
    assert set(assert_exactly_once(url, tmp_path).values()) == {200}


@pytest.mark.parametrize(("policy", "published"),
                         [("full", set()), ("successful", {"ds.0"}), ("partial", {"ds.0", "ds.1"})])
def test_commit_policies_when_a_dataset_keeps_failing(policy: str, published: set[str], tmp_path: Path,
                                                      spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    failing = {"source.synthetic.fail.attempts": 9, "source.synthetic.fail.after.records": 50,
               "source.synthetic.fail.datasets": "ds.1", "source.synthetic.datasets": 2,
               "source.synthetic.partitions": 1}
    job = write_job(tmp_path, url, policy, None, **failing)
    assert run(job, spark) is RunStatus.FAILED
    marks = assert_exactly_once(url, tmp_path)
    assert {urn for (urn, _), value in marks.items() if value > 0} == published
    if policy == "partial":
        assert marks[("ds.1", "ds.1:0")] == 50  # what the failed task fully wrote
    healed = write_job(tmp_path, url, policy, None, **{**failing, "source.synthetic.fail.attempts": 0})
    assert run(healed, spark) is RunStatus.COMMITTED
    assert_exactly_once(url, tmp_path)  # the failed ranges are pulled again, from the committed watermarks


def wait_for_task_started(url: str, timeout: float = 120) -> None:
    """Return once a task of the run recorded its start in the log (the tasks are then running on Spark)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Path(url.removeprefix("sqlite:///")).exists():
            with open_log(url) as log:
                if any(isinstance(i.event, TaskStarted) for i in log.read()):
                    return
        time.sleep(0.5)
    raise AssertionError("no task started")


@pytest.mark.parametrize(("signum", "engine"), [(signal.SIGINT, "records"), (signal.SIGTERM, "dataframe")],
                         ids=["SIGINT-records", "SIGTERM-dataframe"])
def test_a_signal_cancels_a_run_records_it_last_and_publishes_nothing(signum: int, engine: str, tmp_path: Path,
                                                                      spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    # Paced to about 8 s of tasks: the signal (1 s after the first TaskStarted) comes while they run; a run whose
    # tasks ended first would commit and fail the test.
    job = write_job(tmp_path, url, "full", None, **{"source.synthetic.records.per.second": 50, "task.engine": engine})
    process = subprocess.Popen([sys.executable, "-m", "oncelog", "run", str(job), "--json"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_task_started(url)
    time.sleep(1)
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert json.loads(out)["status"] == "CANCELLED"
    with open_log(url) as log:
        events = [i.event for i in log.read()]
        state, _ = Projector(log).rebuild(use_snapshot=False)
    cancelled = next(n for n, e in enumerate(events) if isinstance(e, JobRunCancelled))
    assert not [e for e in events[cancelled:] if isinstance(e, TaskEvent)], "a task event after the cancellation"
    assert not [e for e in events if isinstance(e, TaskSucceeded)], "the tasks ran to their end: Spark's job was not " \
        "cancelled (a signal while it was being planned, before Spark ran it, was lost)"
    assert [r.status for r in state.runs.values()] == [RunStatus.CANCELLED]
    assert not [e for e in events if isinstance(e, TaskRetried)], "a retry recorded for an attempt the signal stopped"
    assert all("cancelled" in e.error for e in events if isinstance(e, TaskFailed)), \
        [e.error[:200] for e in events if isinstance(e, TaskFailed)]
    assert published_records(tmp_path / "published") == {}
    if signum == signal.SIGTERM:  # the next run, unpaced, publishes everything once
        write_job(tmp_path, url, "full", None)
        assert run(job, spark) is RunStatus.COMMITTED
        assert set(assert_exactly_once(url, tmp_path).values()) == {200}


def test_an_invalid_job_file_runs_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"job.name": "x", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
                                   "job.comit.policy": "full", "task.maxretries": "many",
                                   "oncelog.log.url": f"sqlite:///{tmp_path / 'events.db'}"}))
    result = CliRunner().invoke(app, ["run", str(bad)])
    assert result.exit_code == 2
    assert "job.comit.policy" in result.stderr and "did you mean 'job.commit.policy'" in result.stderr
    assert "task.maxretries" in result.stderr and str(bad) in result.stderr
    assert not (tmp_path / "events.db").exists()


def test_schedule_runs_a_folder_of_jobs(tmp_path: Path) -> None:
    for name in ("one", "two"):
        base = tmp_path / name
        base.mkdir()
        write_job(base, f"sqlite:///{tmp_path / 'events.db'}", **{"job.name": name, "job.schedule": "0 0 * * *"})
        (base / "job.yaml").rename(tmp_path / f"{name}.yaml")
    result = subprocess.run([sys.executable, "-m", "oncelog", "schedule", str(tmp_path), "--once"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("COMMITTED") == 2
    assert published_records(tmp_path / "one" / "published") and published_records(tmp_path / "two" / "published")


def test_spark_submit_runs_a_job(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url)
    submit = Path(sys.executable).parent / "spark-submit"
    result = subprocess.run([str(submit), "--master", "local[1]", str(ROOT / "oncelog" / "__main__.py"), "run",
                             str(job), "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["status"] == "COMMITTED"
    assert set(assert_exactly_once(url, tmp_path).values()) == {200}


def test_the_demo_runs_twice_and_shows_state_and_audits(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}  # a pipe, as `make demo > f`
    result = subprocess.run([sys.executable, "-m", "oncelog.demo"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600, check=False, env={**environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert not [line for line in lines if " WARN " in line or "log4j" in line], "Spark's own output leaked"
    assert "oncelog verify --log sqlite:///.oncelog/demo/events.db --publish-dir .oncelog/demo/published" in lines
    assert max(len(line) for line in lines) > 80, "tables laid out at their natural width, not wrapped at 80"
    assert any(line.startswith("HTML report with a Gantt chart: ") and line.endswith(".html") for line in lines)
    assert result.stdout.count("COMMITTED") >= 2 and "Watermarks moved" in result.stdout
    assert result.stdout.count("task engine dataframe") >= 2 and "task engine records" not in result.stdout, \
        "the demo runs on the DataFrame engine and says so"
    reports = list((tmp_path / ".oncelog" / "demo").glob("audit-*.html"))
    assert len(reports) == 2
    # the time-partitioned job into an Iceberg table: its snapshots with our commit ids (the run's group, its one
    # dataset's sequence number 0), one PartitionCompleted
    assert "partition spec: truncate[3600000](timestamp); 2000 records" in lines
    snapshots = [line for line in lines if " demo-clicks/" in line and "#0 " in line]
    assert len(snapshots) == 1 and '{"clicks.0:0":[0,1000],"clicks.0:1":[0,1000]}' in snapshots[0]
    assert any(line.startswith("PartitionCompleted (this run recorded ") for line in lines)
    assert any("clicks.0" in line and "2026/11/26/00" in line and "2026-11-26T00:00Z – 2026-11-26T01:00Z" in line
               for line in lines)
