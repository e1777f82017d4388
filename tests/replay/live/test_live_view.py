"""The live view in this process against a real Kafka broker: 503 with the lag until caught up, then the full state.

The view's steps (begin: snapshot + end offsets; catch_up; a follow round) are called one by one, so what the HTTP
server answers between them is checked without racing the fold thread; `test_live_projector.py` runs `oncelog serve`
as a process.
"""

from __future__ import annotations

import json
import random
import re
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from events.job import JobRunStarted
from events.log import EventLog, open_log
from projections.projector import Projector
from projections.synthetic import HistoryShape, synthetic_history
from replay.live.documents import dataset_doc, run_doc
from replay.live.metrics import label_value, sample
from replay.live.server import open_view
from replay.live.settings import LiveSettings
from replay.live.view import LiveView, Phase
from tests.factories import at

CLI_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

Get = Callable[[str], tuple[int, Any]]


@pytest.fixture
def kafka_log(kafka_bootstrap: str) -> Iterator[EventLog]:
    """A fresh 3-partition events topic of its own."""
    log = open_log(f"kafka://{kafka_bootstrap}?topic=oncelog.liveview.{uuid.uuid4().hex[:12]}&partitions=3")
    log.ensure_topic()
    yield log
    log.close()


@pytest.fixture
def served(kafka_log: EventLog) -> Iterator[tuple[LiveView, Get]]:
    """A live view of the log (not folding: the test drives it) and a GET of its HTTP server."""
    view, server = open_view(LiveSettings(kafka_log.url, port=0, snapshot_every=0, dataset_metrics=True))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]

    def get(path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
                body = response.read().decode()
                return response.status, body if path.startswith("/metrics") else json.loads(body)
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    try:
        yield view, get
    finally:
        server.shutdown()
        server.server_close()
        view.log.close()


def walk(get: Get, path: str, name: str, limit: int) -> list[Any]:
    """Every item of a paged view, page by page (each page at most `limit` long)."""
    items: list[Any] = []
    after = ""
    while True:
        status, body = get(f"{path}{'&' if '?' in path else '?'}limit={limit}{after}")
        assert status == 200 and len(body[name]) <= limit, (status, body)
        items += body[name]
        if body["next"] is None:
            return items
        after = f"&after={body['next']}"


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition; fails on a line that is not one, or a family without its TYPE."""
    samples, typed = [], set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line and not line.startswith("#"):
            found = SAMPLE.match(line)
            assert found is not None, line
            labels = {k: v.encode().decode("unicode_escape") for k, v in LABEL.findall(found.group(2) or "")}
            assert found.group(1) in typed, line
            samples.append((found.group(1), labels, float(found.group(3))))
    return samples


@pytest.mark.kafka
def test_answers_503_until_caught_up_then_the_full_state(kafka_log: EventLog, served: tuple[LiveView, Get]) -> None:
    """From a snapshot: 503 with the lag on every view until the tail is folded; then what a full rebuild gives."""
    view, get = served
    history = synthetic_history(random.Random(12), HistoryShape(jobs=2, runs=24, datasets=5))
    head = len(history) // 2
    kafka_log.append(history[:head])
    projector = Projector(kafka_log)
    projector.save_snapshot(projector.rebuild(use_snapshot=False)[0])
    kafka_log.append(history[head:])
    expected, _ = projector.rebuild(use_snapshot=False)

    view.begin()
    for path in ("/", "/health", "/datasets", "/datasets/x", "/runs", "/runs/x", "/commits/pending"):
        status, body = get(path)
        assert status == 503 and body["status"] == "catching-up", (path, status, body)
        assert len(history) - head <= body["lag"] <= len(history) - head + 2 * kafka_log.partitions, body
    status, text = get("/metrics")
    assert status == 200 and ("oncelog_live_caught_up", {}, 0.0) in parse_metrics(text)

    report = view.catch_up(threading.Event())
    assert report.from_snapshot and report.events == len(history) - head
    assert view.state == expected  # snapshot + tail = the whole history, offsets included
    status, health = get("/health")
    assert status == 200 and health["status"] == "ok" and health["lag"] == 0 and CLI_TIME.match(health["last_event_at"])
    assert health["catch_up"]["events"] == len(history) - head and get("/")[0] == 200

    datasets = walk(get, "/datasets", "datasets", 2)
    by_urn = sorted(expected.datasets.values(), key=lambda v: (v.dataset_urn, v.job))
    assert datasets == [dataset_doc(v) for v in by_urn] and len(datasets) == 10
    assert all(CLI_TIME.match(d["committed_at"]) for d in datasets)
    runs = walk(get, "/runs", "runs", 7)
    assert runs == [run_doc(expected, v) for _, v in sorted(expected.runs.items())] and len(runs) == 48
    assert walk(get, "/runs?job=job-1", "runs", 5) == [r for r in runs if r["job"] == "job-1"] != []
    assert {r["status"] for r in runs} >= {"COMMITTED", "FAILED"}
    for path, name in (("/datasets?limit=0", "limit"), ("/runs?limit=x", "limit"), ("/runs?after=@@", "after")):
        status, body = get(path)
        assert status == 400 and name in body["error"], (path, body)
    pending = dict.fromkeys(expected.jobs, 0.0)
    for s in expected.pending_sequences():
        pending[s.job] += 1

    status, text = get("/metrics")
    samples = parse_metrics(text)
    assert status == 200 and ("oncelog_live_caught_up", {}, 1.0) in samples
    assert ("oncelog_live_lag_events", {}, 0.0) in samples
    assert {labels["job"]: n for name, labels, n in samples if name == "oncelog_commit_sequences_pending"} == pending
    assert {(labels["job"], labels["dataset_urn"], labels["partition"]): n for name, labels, n in samples
            if name == "oncelog_dataset_watermark"} == {
        (v.job, v.dataset_urn, p): w for v in expected.datasets.values() for p, w in v.watermarks.items()}
    assert sum(name == "oncelog_dataset_last_commit_timestamp_seconds" for name, _, _ in samples) == 10

    kafka_log.append([JobRunStarted(job="job-0", run_id="after-catch-up", emitted_at=at(5))])  # one follow round
    assert view.fold_to(kafka_log.end_offsets(), threading.Event()) == 1 and view.phase is Phase.OK
    status, run = get("/runs/after-catch-up")
    assert status == 200 and run["status"] == "RUNNING" and run["started_at"] == "2026-11-21T12:00:05.123Z"
    assert get("/health")[1]["lag"] == 0


def test_metric_label_values_are_escaped() -> None:
    """A URN with a quote, a backslash and a newline stays one parsable sample."""
    line = sample("oncelog_dataset_watermark", 7, dataset_urn='a"b\\c\nd')
    assert line == 'oncelog_dataset_watermark{dataset_urn="a\\"b\\\\c\\nd"} 7' and "\n" not in line
    assert label_value("plain") == "plain"

