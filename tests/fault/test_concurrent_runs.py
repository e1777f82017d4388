"""Two runs of one job at once, and a Kafka broker stopped mid-run: nothing is published twice, nothing lost."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.job import ENGINE_PROPERTY, JobRunStarted, WorkUnitsPlanned
from events.log import open_log
from events.log.kafka.config import LOG_EVERY_S
from events.log.lock import JobLockedError
from localservers.kafka import LocalKafkaBroker
from projections.views import RunStatus
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import assert_exactly_once, write_job

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SLOW = {"source.synthetic.records.per.second": 40}  # 200 records per partition: about 5 s of tasks
ENGINES = ["records", "dataframe"]
"""Each test runs on both task engines: the DataFrame engine paces the synthetic source in the JVM."""


def start_cli(job: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "oncelog", "run", str(job), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])


def engines_run(url: str) -> set[str]:
    """The task engines the job's runs recorded in their JobRunStarted."""
    with open_log(url) as log:
        return {i.event.properties[ENGINE_PROPERTY] for i in log.read() if isinstance(i.event, JobRunStarted)}


def wait_for_planned_run(url: str, timeout: float = 120) -> None:
    """Until a run has planned its work units (its tasks are under way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open_log(url) as log:
            if any(isinstance(i.event, WorkUnitsPlanned) for i in log.read()):
                return
        time.sleep(0.5)
    raise AssertionError(f"no run planned its work units within {timeout}s")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_second_run_of_a_running_job_is_refused_on_sqlite(engine: str, tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **SLOW, **{"task.engine": engine})
    first = start_cli(job)
    wait_for_planned_run(url)
    with pytest.raises(JobLockedError, match="already running"):
        JobLauncher(load_job_config(job), spark=spark).run()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    assert json.loads(out)["status"] == "COMMITTED"
    assert JobLauncher(load_job_config(job), spark=spark).run().status is RunStatus.COMMITTED
    marks = assert_exactly_once(url, tmp_path)
    assert set(marks.values()) == {400} and engines_run(url) == {engine}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_second_run_fences_the_first_on_kafka(engine: str, kafka_bootstrap: str, tmp_path: Path,
                                                 spark: SparkSession) -> None:
    url = f"kafka://{kafka_bootstrap}?topic=oncelog.fence.{uuid.uuid4().hex[:12]}&partitions=3"
    with open_log(url) as log:
        log.ensure_topic()
    job = write_job(tmp_path, url, "full", None, **SLOW, **{"task.engine": engine})
    first = start_cli(job)
    wait_for_planned_run(url)
    second = JobLauncher(load_job_config(job), spark=spark).run()
    assert second.status is RunStatus.COMMITTED
    _, err = first.communicate(timeout=300)
    assert first.returncode == 3 and "fenced" in err, f"exit {first.returncode}: {err[-3000:]}"
    assert JobLauncher(load_job_config(job), spark=spark).run().status is RunStatus.COMMITTED  # cleans up after both
    marks = assert_exactly_once(url, tmp_path)
    with open_log(url) as log:
        runs = [i.event.run_id for i in log.read() if isinstance(i.event, JobRunStarted)]
    assert len(runs) == 3 and set(marks.values()) == {400} and engines_run(url) == {engine}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_broker_stopped_mid_run_then_the_next_run_publishes_exactly_once(
        engine: str, restartable_kafka: LocalKafkaBroker, tmp_path: Path, spark: SparkSession) -> None:
    url = (f"kafka://{restartable_kafka.bootstrap}?topic=oncelog.outage.{uuid.uuid4().hex[:12]}&partitions=3"
           f"&write_timeout_s=20&read_timeout_s=20")
    with open_log(url) as log:
        log.ensure_topic()
    job = write_job(tmp_path, url, "full", None, **SLOW, **{"task.engine": engine})
    run = start_cli(job)
    wait_for_planned_run(url)
    stopped = time.monotonic()
    restartable_kafka.stop()
    time.sleep(8)
    restartable_kafka.start()
    out, err = run.communicate(timeout=300)
    windows = 1 + int((time.monotonic() - stopped) // LOG_EVERY_S)  # a line may come back once per window
    assert run.returncode in (0, 1, 3), (f"the run neither completed nor failed cleanly: exit {run.returncode}\n"
                                         f"{err[-3000:]}")
    lines = err.splitlines()
    assert not [line for line in lines if re.match(r"%\d+\|", line)], "librdkafka printed raw log lines"
    assert any("is unreachable" in line and "retrying" in line for line in lines), err[-3000:]
    # A client's own lines name the client ([rdkafka#producer-2]); our outage notice is said once per log opened.
    refused = Counter(re.sub(r"\d+ms", "Nms", line) for line in lines
                      if "Connection refused" in line and "[rdkafka#" in line)
    assert max(refused.values(), default=0) <= windows, f"the clients' log lines were not rate-limited: {refused}"
    after = JobLauncher(load_job_config(job), spark=spark).run()
    assert after.status is RunStatus.COMMITTED, after.error
    assert_exactly_once(url, tmp_path)
    assert engines_run(url) == {engine}


