"""The live projector (`oncelog serve`) against a real Kafka broker: events appended, the views answer.

The live projector runs in a subprocess (`python -m oncelog.cli.serve serve`), the events are appended through
`open_log(url)`, and the HTTP views are polled until they show them (bounded waits). `test_live_view.py` checks the
catch-up (503 with the lag, then the full state), paging and metrics step by step in-process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar
from urllib.parse import quote

import pytest
from confluent_kafka import TopicPartition
from typer.testing import CliRunner

from events.codec import Record
from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    DatasetStateStep,
    HighWatermarkStep,
)
from events.dataset import DatasetStateCommitted, WatermarkAdvanced
from events.job import JobLockAcquired, JobRunStarted
from events.keys import partition_for
from events.log import EventLog, open_log
from events.log.kafka.store import KafkaLog
from events.model import Event
from oncelog.cli.serve import app as live_cli
from projections.timefmt import when
from tests.factories import at, one_of_each

OTHER = "hdfs:/data/tracking/OtherTopic"
"""A dataset URN with slashes and a colon, as file-based sources have them."""
REPO = Path(__file__).resolve().parents[3]
WAIT_S = 60.0
STOP_S = 30.0
T = TypeVar("T")
Answer = tuple[int, Any]


@dataclass
class LiveWorker:
    """A running `oncelog serve` subprocess, its log and its HTTP port."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    started: float

    def get(self, path: str) -> Answer:
        """(status, JSON body) of GET path; (0, None) while nothing listens yet."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return 0, None

    def log_tail(self, lines: int = 40) -> str:
        """The end of the worker's output, for failure messages."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float = WAIT_S) -> T:
        """Poll check until it returns something, at most timeout seconds; fail with the worker's log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the worker exited ({self.process.returncode}) waiting for {what}:\n{self.log_tail()}")
            found = check()
            if found is not None:
                return found
            time.sleep(0.2)
        pytest.fail(f"no {what} after {timeout:.0f}s; worker log:\n{self.log_tail()}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(worker: LiveWorker) -> None:
    """SIGTERM, then wait for a clean exit (code 0, nothing crashed); kill the worker only if it hangs."""
    if worker.process.poll() is None:
        worker.process.send_signal(signal.SIGTERM)
        try:
            worker.process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(worker.process.pid, signal.SIGKILL)  # its own session: this worker and nothing else
            worker.process.wait(10)
            pytest.fail(f"the worker did not stop within {STOP_S:.0f}s of SIGTERM:\n{worker.log_tail()}")
    # Transient client errors (a fresh broker's coordinator still loading) are logged and retried: not failures.
    crashes = [line for line in worker.log_path.read_text(errors="replace").splitlines()
               if any(sign in line for sign in ("Traceback", "Crashed", "Error while stopping"))]
    assert worker.process.returncode == 0 and not crashes, (worker.process.returncode, crashes[:5])


@pytest.fixture
def kafka_log(kafka_bootstrap: str) -> Iterator[EventLog]:
    """A fresh 3-partition events topic of its own."""
    url = f"kafka://{kafka_bootstrap}?topic=oncelog.live.{uuid.uuid4().hex[:12]}&partitions=3&write_timeout_s=60"
    log = open_log(url)
    log.ensure_topic()
    yield log
    log.close()


WorkerFactory = Callable[[], LiveWorker]


@pytest.fixture
def start_worker(kafka_log: EventLog, tmp_path: Path) -> Iterator[WorkerFactory]:
    """Starts `oncelog serve` on the log (a snapshot after every fold round) and waits until it has caught up."""
    started: list[LiveWorker] = []

    def start() -> LiveWorker:
        port, log_path = _free_port(), tmp_path / f"worker-{len(started)}.log"
        command = [sys.executable, "-m", "oncelog.cli.serve", "serve", "--log", kafka_log.url, "--port", str(port),
                   "--snapshot-every", "1", "--loglevel", os.environ.get("LIVE_LOGLEVEL", "info")]
        with log_path.open("wb") as out:
            process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        worker = LiveWorker(process, port, log_path, time.monotonic())
        started.append(worker)
        worker.wait_for("caught-up worker", lambda: True if worker.get("/health")[0] == 200 else None)
        print(f"\nworker ready after {time.monotonic() - worker.started:.1f}s")
        return worker

    try:
        yield start
    finally:
        for worker in started:
            _stop(worker)
    leaked = subprocess.run(["pgrep", "-f", kafka_log.url], capture_output=True, text=True).stdout.split()
    assert not leaked, f"processes left behind: {leaked}"


@pytest.fixture
def live_worker(start_worker: WorkerFactory) -> LiveWorker:
    """A started, ready `oncelog serve`; stopped cleanly after the test."""
    return start_worker()


class SequenceIds(TypedDict):
    """The fields naming a commit sequence (its run id is the sequence id, as the launcher does)."""

    job: str
    run_id: str
    dataset_urn: str
    sequence_id: str


def _sequence(urn: str, seq: str, job: str = "MyJob") -> SequenceIds:
    return {"job": job, "run_id": seq, "dataset_urn": urn, "sequence_id": seq}


def _planned(urn: str, seq: str, value: int, job: str = "MyJob") -> CommitSequencePlanned:
    steps = (HighWatermarkStep(partition=f"{urn}:0", low_watermark=0, value=value),
             DatasetStateStep(watermarks={f"{urn}:0": value}, records_published=value))
    return CommitSequencePlanned(**_sequence(urn, seq, job), steps=steps, emitted_at=at(20))


def _completion(urn: str, seq: str, value: int) -> list[Event]:
    ids = _sequence(urn, seq)
    return [
        WatermarkAdvanced(**ids, partition=f"{urn}:0", low_watermark=0, value=value, emitted_at=at(30)),
        CommitStepApplied(**ids, step_index=0, outcome="executed", emitted_at=at(31)),
        DatasetStateCommitted(**ids, watermarks={f"{urn}:0": value}, records_published=value, emitted_at=at(32)),
        CommitStepApplied(**ids, step_index=1, outcome="executed", emitted_at=at(33)),
        CommitSequenceCompleted(**ids, emitted_at=at(34)),
    ]


def _pending_ids(worker: LiveWorker) -> set[tuple[str, str]] | None:
    status, body = worker.get("/commits/pending")
    return {(s["dataset_urn"], s["sequence_id"]) for s in body["pending"]} if status == 200 else None


def _ok(worker: LiveWorker, path: str, accept: Callable[[Any], bool] = lambda body: True) -> Any | None:
    status, body = worker.get(path)
    return body if status == 200 and accept(body) else None


def _append_junk(log: EventLog) -> None:
    """One record per partition that is no oncelog frame: the agent must log and skip it."""
    with log.writer(f"junk-{uuid.uuid4().hex[:6]}") as writer:
        writer.append_records(Record(p, b"junk", b"not an oncelog frame", 0) for p in range(log.partitions))


def _log_end(log: KafkaLog, isolation: str) -> dict[int, int]:
    """Per partition, the end offset a reader with this isolation level sees (read_committed: the stable one)."""
    consumer = log.consumer({"isolation.level": isolation})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(log.topic, p), timeout=10, cached=False)[1]
                for p in range(log.partitions)}
    finally:
        consumer.close()


def _wait_until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout:.0f}s")
        time.sleep(0.1)


@pytest.mark.kafka
def test_views_follow_the_log(kafka_log: EventLog, start_worker: WorkerFactory) -> None:
    """Watermarks, run status and task counts, pending sequences (gone once completed), 404s, skipped junk, restart."""
    live_worker = start_worker()
    _append_junk(kafka_log)
    appended = time.monotonic()
    kafka_log.append(one_of_each(job="MyJob", run_id="run-1", urn="MyTopic"))
    kafka_log.append([JobRunStarted(job="MyJob", run_id="run-2", emitted_at=at(19)), _planned(OTHER, "run-2", 50),
                      CommitStepApplied(**_sequence(OTHER, "run-2"), step_index=0, outcome="verified")])

    dataset = live_worker.wait_for("MyTopic's committed state", lambda: _ok(
        live_worker, "/datasets/MyTopic", lambda b: b["datasets"][0]["last_sequence_id"] == "run-1"))
    print(f"view answered {time.monotonic() - appended:.1f}s after the append")
    assert dataset["datasets"][0]["watermarks"] == {"MyTopic:0": 100}
    assert dataset["datasets"][0]["job"] == "MyJob" and dataset["datasets"][0]["records_published"] == 100
    run = live_worker.wait_for("run-1", lambda: _ok(live_worker, "/runs/run-1", lambda b: b["status"] == "COMMITTED"))
    assert run["tasks"] == {"running": 0, "succeeded": 1, "failed": 0}
    assert run["started_at"] == when(at(1)) and run["ended_at"] == when(at(15))
    assert run["work_units"] == 1 and run["datasets_committed"] == ["MyTopic"]
    assert _ok(live_worker, "/runs/run-1?job=MyJob") == run
    pending = live_worker.wait_for("run-2 pending", lambda: _ok(live_worker, "/commits/pending", lambda b: any(
        s["sequence_id"] == "run-2" and s["applied"] for s in b["pending"])))  # its step folded too, not only its plan
    assert [(s["dataset_urn"], s["status"], s["applied"]) for s in pending["pending"]] == [
        (OTHER, "planned", [0])]
    # run-2's own events lie in the job's partition, its commit's in the dataset's: the view may fold either first
    assert live_worker.wait_for("run-2 running", lambda: _ok(live_worker, "/runs/run-2",
                                                             lambda b: b["status"] == "RUNNING")) is not None

    for path in ("/datasets/NoSuchTopic", "/runs/no-such-run", "/runs/run-1?job=NoSuchJob"):
        status, body = live_worker.get(path)
        assert status == 404 and "error" in body, (path, status, body)

    kafka_log.append(_completion(OTHER, "run-2", 50))
    live_worker.wait_for("run-2 leaving the pending list", lambda: True if _pending_ids(live_worker) == set() else None)
    other = _ok(live_worker, f"/datasets/{quote(OTHER, safe='')}")
    assert other is not None and other["datasets"][0]["watermarks"] == {f"{OTHER}:0": 50}
    listed = _ok(live_worker, "/datasets")
    assert listed is not None and [d["dataset_urn"] for d in listed["datasets"]] == ["MyTopic", OTHER]

    skipped = live_worker.log_path.read_text(errors="replace").count("skipping a record: cannot decode the record at")
    assert skipped == kafka_log.partitions, live_worker.log_tail()

    # A restarted worker starts from the snapshot its predecessor saved and answers the same.
    views = {path: _ok(live_worker, path) for path in ("/datasets", "/runs/run-1", "/runs/run-2", "/commits/pending")}
    _stop(live_worker)
    restarted = start_worker()
    assert {path: _ok(restarted, path) for path in views} == views
    assert "skipping a record" not in restarted.log_path.read_text(errors="replace")  # resumed, not refolded
    assert "catching up from a snapshot" in restarted.log_path.read_text(errors="replace")


@pytest.mark.kafka
def test_aborted_batches_never_show(kafka_log: EventLog, live_worker: LiveWorker) -> None:
    """Events of a batch whose writer failed mid-way (aborted transaction) never reach the tables."""
    assert isinstance(kafka_log, KafkaLog)
    urn, job = "AbortedTopic", "AbortJob"
    partitions = {partition_for(urn, kafka_log.partitions), partition_for(job, kafka_log.partitions)}
    before = _log_end(kafka_log, "read_uncommitted")

    def crashing_batch() -> Iterator[Event]:
        aborted = [_planned(urn, "run-x", 7, job), JobRunStarted(job=job, run_id="aborted-run"),
                   WatermarkAdvanced(**_sequence(urn, "run-x", job), partition=f"{urn}:0", low_watermark=0, value=7)]
        yield from aborted
        # Trailing events of the same aggregates: a writer may hold a partition's last record back until the next.
        yield CommitStepApplied(**_sequence(urn, "run-x", job), step_index=0, outcome="executed")
        yield JobLockAcquired(job=job, run_id="aborted-run", holder="test")
        _wait_until("the open transaction's records in the log", lambda: sum(
            _log_end(kafka_log, "read_uncommitted")[p] - before[p] for p in partitions) >= len(aborted))
        raise RuntimeError("the writer crashed mid-batch")

    with kafka_log.writer("crashing-writer") as writer, pytest.raises(RuntimeError, match="mid-batch"):
        writer.append(crashing_batch())
    _wait_until("the abort markers", lambda: all(
        _log_end(kafka_log, "read_committed")[p] >= before[p] + 2 for p in partitions))

    kafka_log.append([_planned(urn, "run-y", 8, job), JobRunStarted(job=job, run_id="after-abort")])
    live_worker.wait_for("the batch after the aborted one", lambda: True if (
        _ok(live_worker, "/runs/after-abort") is not None and (urn, "run-y") in (_pending_ids(live_worker) or set())
    ) else None)
    assert live_worker.get("/runs/aborted-run")[0] == 404
    assert (urn, "run-x") not in (_pending_ids(live_worker) or set())
    assert live_worker.get(f"/datasets/{urn}")[0] == 404


def test_serve_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    """A log URL of no known store, or a port already taken, is a clear error (exit code 2) naming what is wrong."""
    runner = CliRunner()
    unknown = runner.invoke(live_cli, ["serve", "--log", "mysql://127.0.0.1/events"])
    assert unknown.exit_code == 2 and "mysql" in unknown.output, unknown.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = runner.invoke(live_cli, ["serve", "--log", f"sqlite:///{tmp_path / 'events.db'}", "--port", str(port)])
    assert busy.exit_code == 2 and f"--port {port}" in busy.output, busy.output
