"""Two runs of one job at once, and a Kafka broker stopped mid-run: nothing is published twice, nothing lost."""

from __future__ import annotations

import json
import re
import socket
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
from localservers.kafka import LocalKafkaBroker
from projections.views import RunStatus
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import assert_exactly_once, write_job
from tests.fault.soak import kill_session

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


def start_run_cli(job: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    """`oncelog run job --json` in a session of its own (SIGKILL reaches its JVM too), its stderr in a file."""
    with (job.parent / f"{name}.err").open("wb") as err:
        return subprocess.Popen([sys.executable, "-m", "oncelog", "run", str(job), "--json", *args],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=Path(__file__).parents[2],
                                start_new_session=True)


def stderr_of(job: Path, name: str) -> str:
    return (job.parent / f"{name}.err").read_text()


def planned_runs(url: str) -> list[str]:
    """The runs that have planned their work units, in log order."""
    with open_log(url) as log:
        return [i.event.run_id for i in log.read() if isinstance(i.event, WorkUnitsPlanned)]


def wait_for_new_planned_run(url: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> str:
    """Until a run not planned before has planned its work units (its tasks are under way); returns its id."""
    before = set(planned_runs(url))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before planning"
        new = [r for r in planned_runs(url) if r not in before]
        if new:
            return new[0]
        time.sleep(0.5)
    raise AssertionError(f"no run planned its work units within {timeout}s")


def runs_by_id(url: str) -> dict[str, dict[str, object]]:
    """What `oncelog runs --json` says of each run."""
    shown = subprocess.run([sys.executable, "-m", "oncelog", "runs", "--json", "--log", url], capture_output=True,
                           text=True, check=True, cwd=Path(__file__).parents[2])
    return {r["run_id"]: r for r in json.loads(shown.stdout)["runs"]}


def librdkafka_lines(stderr: str) -> list[str]:
    """librdkafka's own lines: printed by it (`%3|…|TXNERR|rdkafka#producer-1| …`), or through our logger
    (`TXNERR [rdkafka#producer-7] …`)."""
    return [line for line in stderr.splitlines() if re.match(r"%\d+\|", line) or "[rdkafka#" in line]


STORE_ENGINES = [("sqlite", "records", 25), ("kafka", "dataframe", 50)]
"""Both stores, each with one task engine, and the records per second per work unit that give a holder about 8 s of
tasks (the DataFrame engine paces its work units two at a time): time for a second `oncelog run` to meet the lock,
which it takes before starting Spark (2 s here), and be refused or take it over while the holder runs. A holder that
ended first fails the test (the second run would commit). The lock lives in the log, below the engines; the broker
test below runs both engines on Kafka."""


@pytest.mark.parametrize(("store", "engine", "pace"), STORE_ENGINES)
def test_a_second_run_is_refused_a_dead_one_taken_over_and_take_over_fences_a_live_one(
        store: str, engine: str, pace: int, tmp_path: Path, spark: SparkSession, request: pytest.FixtureRequest
) -> None:
    if store == "kafka":
        url = (f"kafka://{request.getfixturevalue('kafka_bootstrap')}?topic=oncelog.lock.{uuid.uuid4().hex[:12]}"
               f"&partitions=3")
        with open_log(url) as log:
            log.ensure_topic()
    else:
        url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{"task.engine": engine, "source.synthetic.records.per.second": pace})
    unpaced = ("--conf", "source.synthetic.records.per.second=0")

    first = start_run_cli(job, "first")  # the holder: a second run is refused naming it, and it commits normally
    first_run = wait_for_new_planned_run(url, first)
    second = start_run_cli(job, "second", *unpaced)
    assert second.wait(timeout=300) == 3, stderr_of(job, "second")[-3000:]
    refusal = stderr_of(job, "second")
    for named in (first_run, f"pid {first.pid}", f"host {socket.gethostname()}", "since", "--take-over"):
        assert named in refusal, refusal[-3000:]
    assert first.wait(timeout=300) == 0, stderr_of(job, "first")[-3000:]
    assert stderr_of(job, "first").count("replication factor") == (store == "kafka"), "said once per run"

    fenced = start_run_cli(job, "fenced")  # a live holder taken over with --take-over: fenced, exit 3, one clear line
    fenced_run = wait_for_new_planned_run(url, fenced)
    taker = start_run_cli(job, "taker", "--take-over", *unpaced)
    assert taker.wait(timeout=300) == 0, stderr_of(job, "taker")[-3000:]
    assert fenced.wait(timeout=300) == 3, stderr_of(job, "fenced")[-3000:]
    fenced_err = stderr_of(job, "fenced")
    assert "fenced" in fenced_err and not librdkafka_lines(fenced_err), fenced_err[-3000:]

    killed = start_run_cli(job, "killed")  # a dead holder: SIGKILLed in its tasks, taken over by the next run
    killed_run = wait_for_new_planned_run(url, killed)
    kill_session(killed)
    write_job(tmp_path, url, "full", None, **{"task.engine": engine})  # unpaced from now on
    after_death = JobLauncher(load_job_config(job), spark=spark).run()  # also cleans up after the fenced run
    assert after_death.status is RunStatus.COMMITTED, after_death.error
    assert any(killed_run in w and "(dead)" in w for w in after_death.warnings), after_death.warnings

    runs = runs_by_id(url)
    assert len(runs) == 5, "the refused run left nothing in the log"
    assert [r["status"] for r in runs.values()].count("COMMITTED") == 3 and "RUNNING" not in str(runs), runs
    assert runs[killed_run]["status"] == "FAILED" and str(runs[killed_run]["error"]).startswith("dead:"), runs
    assert runs[fenced_run]["status"] == "FAILED" and str(runs[fenced_run]["error"]).startswith("fenced:"), runs
    marks = assert_exactly_once(url, tmp_path)
    assert set(marks.values()) == {600} and engines_run(url) == {engine}


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
    write_job(tmp_path, url, "full", None, **{"task.engine": engine})  # the next run unpaced
    after = JobLauncher(load_job_config(job), spark=spark).run()
    assert after.status is RunStatus.COMMITTED, after.error
    assert_exactly_once(url, tmp_path)
    assert engines_run(url) == {engine}


