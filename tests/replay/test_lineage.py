"""OpenLineage: real runs (SQLite log, tasks in this process, real folders) send their run events to a real HTTP
receiver on loopback, configured the standard way (OPENLINEAGE_URL, openlineage.yml); `oncelog lineage` backfills."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from openlineage.client.serde import Serde
from typer.testing import CliRunner

from events.job import JobRunCancelled, JobRunStarted, WorkUnitSpec, WorkUnitsPlanned
from events.log import EventLog, open_log
from events.model import RunFields
from oncelog.cli import app
from projections.views import RunStatus
from replay.lineage import LineageSettings, lineage_run_id, run_lineage
from tests.spark_pipeline.commit.test_settled_history import job_config, run

Posted = list[dict[str, Any]]


class Collector(BaseHTTPRequestHandler):
    """Keeps every POSTed JSON body (with the path it was posted to) in the server's `posted` list; answers 200."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert isinstance(self.server, Receiver)
        self.server.posted.append({"path": self.path, **json.loads(body)})
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        """No access log on stderr."""


class Receiver(ThreadingHTTPServer):
    """An HTTP server on a free loopback port that collects what is POSTed to it."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Collector)
        self.posted: Posted = []


@pytest.fixture
def receiver() -> Iterator[tuple[str, Posted]]:
    """An HTTP receiver on loopback collecting POSTed OpenLineage events: its URL and what it received."""
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server.posted
    server.shutdown()
    server.server_close()


@pytest.fixture
def sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EventLog]:
    """A fresh SQLite log; the working directory and home hold no openlineage.yml, no OpenLineage variable is set."""
    for name in ("OPENLINEAGE_URL", "OPENLINEAGE_CONFIG", "OPENLINEAGE_DISABLED", "OPENLINEAGE_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    log.ensure_topic()
    yield log
    log.close()


def by_name(datasets: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in datasets}


def test_a_committed_run_sends_start_then_complete_with_its_inputs_and_outputs(
        tmp_path: Path, sqlite: EventLog, receiver: tuple[str, Posted], monkeypatch: pytest.MonkeyPatch) -> None:
    url, posted = receiver
    monkeypatch.setenv("OPENLINEAGE_URL", url)
    monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "ingest")
    result = run(job_config(tmp_path, sqlite.url), sqlite)
    assert result.status is RunStatus.COMMITTED and not result.warnings

    assert [e["eventType"] for e in posted] == ["START", "COMPLETE"]
    assert {e["path"] for e in posted} == {"/api/v1/lineage"}
    start, complete = posted
    assert start["run"]["runId"] == complete["run"]["runId"] == lineage_run_id("orders", result.run_id)
    assert complete["run"]["facets"]["oncelog_run"]["runId"] == result.run_id
    assert complete["job"] == {**complete["job"], "namespace": "ingest", "name": "orders"}
    assert start["eventTime"] < complete["eventTime"]
    inputs = by_name(complete["inputs"])
    assert set(inputs) == {"ds.0", "ds.1"}
    assert inputs["ds.0"]["inputFacets"]["oncelog_offsets"]["partitions"] == [
        {"partition": "ds.0:0", "lowWatermark": 0, "expectedHighWatermark": 5, "actualHighWatermark": 5}]
    assert by_name(start["inputs"])["ds.1"]["inputFacets"]["oncelog_offsets"]["partitions"][0][
        "expectedHighWatermark"] == 5 and start["outputs"] == []
    outputs = by_name(complete["outputs"])
    published = tmp_path / "orders" / "published"
    assert set(outputs) == {str(published / "ds.0"), str(published / "ds.1")}
    for name, output in outputs.items():
        on_disk = list(Path(name).iterdir())
        assert output["namespace"] == "file"
        assert output["outputFacets"]["outputStatistics"] == {
            **output["outputFacets"]["outputStatistics"], "rowCount": 5, "fileCount": len(on_disk),
            "size": sum(f.stat().st_size for f in on_disk)}
        assert [f["path"] for f in output["outputFacets"]["oncelog_files"]["files"]] == [str(f) for f in on_disk]


def test_a_failed_run_sends_fail_with_its_error(tmp_path: Path, sqlite: EventLog, receiver: tuple[str, Posted],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, posted = receiver
    monkeypatch.setenv("OPENLINEAGE_URL", url)
    config = job_config(tmp_path, sqlite.url, extra={"source.synthetic.fail.attempts": 1})
    result = run(config, sqlite)
    assert result.status is RunStatus.FAILED
    assert [e["eventType"] for e in posted] == ["START", "FAIL"]
    error = posted[1]["run"]["facets"]["errorMessage"]
    assert error["message"] == result.error and "SyntheticFailure" in error["message"]
    assert error["programmingLanguage"] == "PYTHON" and posted[0]["run"]["runId"] == posted[1]["run"]["runId"]
    assert posted[1]["outputs"] == []


def test_an_unreachable_endpoint_never_fails_the_run_and_is_said_once(
        tmp_path: Path, sqlite: EventLog, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config_file = tmp_path / "lineage.yml"
    config_file.write_text(f"transport:\n  type: http\n  url: http://127.0.0.1:{port}\n  retry:\n    total: 0\n")
    monkeypatch.setenv("OPENLINEAGE_CONFIG", str(config_file))
    result = run(job_config(tmp_path, sqlite.url), sqlite)
    assert result.status is RunStatus.COMMITTED
    lineage = [w for w in result.warnings if "OpenLineage" in w]
    assert len(lineage) == 1 and f"127.0.0.1:{port}/api/v1/lineage" in lineage[0], result.warnings


def test_lineage_backfills_past_runs_from_the_log(tmp_path: Path, sqlite: EventLog, receiver: tuple[str, Posted],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    since = datetime.now(UTC).isoformat()
    config = job_config(tmp_path, sqlite.url)
    first, second = run(config, sqlite), run(config, sqlite)  # lineage off: nothing configured
    url, posted = receiver
    assert posted == []
    done = CliRunner().invoke(app, ["lineage", "--since", since, "--job", "orders", "--log", sqlite.url],
                              env={"OPENLINEAGE_URL": url})
    assert done.exit_code == 0, done.output
    assert "sent 4 OpenLineage event(s) of 2 run(s)" in done.stdout
    assert [(e["eventType"], e["run"]["facets"]["oncelog_run"]["runId"]) for e in posted] == [
        ("START", first.run_id), ("COMPLETE", first.run_id), ("START", second.run_id), ("COMPLETE", second.run_id)]
    second_inputs = by_name(posted[3]["inputs"])["ds.0"]["inputFacets"]["oncelog_offsets"]["partitions"][0]
    assert (second_inputs["lowWatermark"], second_inputs["actualHighWatermark"]) == (5, 10)

    unconfigured = CliRunner().invoke(app, ["lineage", "--since", "1h", "--log", sqlite.url])
    assert unconfigured.exit_code == 2 and "OPENLINEAGE_URL" in unconfigured.stderr


def test_the_conversion_names_kafka_topics_and_aborts_cancelled_runs() -> None:
    common: RunFields = {"job": "clicks", "run_id": "r1"}
    unit = WorkUnitSpec(work_unit_id="w", dataset_urn="clicks", partition="clicks:3", low_watermark=10,
                        expected_high_watermark=20, properties={"kafka.topic": "clicks", "kafka.partition": "3"})
    events = [JobRunStarted(**common, properties={"kafka.brokers": "b1:9092,b2:9092"}),
              WorkUnitsPlanned(**common, work_units=(unit,)), JobRunCancelled(**common, reason="SIGTERM")]
    start, end = (Serde.to_dict(e) for e in run_lineage(events, LineageSettings()))
    assert (start["eventType"], end["eventType"]) == ("START", "ABORT")
    assert end["run"]["facets"]["errorMessage"]["message"] == "SIGTERM"
    (source,) = end["inputs"]
    assert (source["namespace"], source["name"]) == ("kafka://b1:9092", "clicks")
    assert source["inputFacets"]["oncelog_offsets"]["partitions"] == [
        {"partition": "clicks:3", "lowWatermark": 10, "expectedHighWatermark": 20}]  # no actual high: never ran
    assert [Serde.to_dict(e)["eventType"] for e in run_lineage(events[:2], LineageSettings())] == ["START"]
