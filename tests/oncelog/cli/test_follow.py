"""`oncelog follow`: commits as they happen (like `tail -f`), one line each with paths and counts; `tail`'s lines
carry the same summary."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.job import JobRunCommitted, JobRunStarted, WorkUnitsPlanned
from events.log import EventLog, open_log
from events.model import Event, RunFields, SequenceFields
from events.published import DatasetPublished, PublishedFile, WatermarkRange
from oncelog.cli import app

runner = CliRunner()


def run_events(run_id: str) -> list[Event]:
    """A run that publishes one dataset of two files."""
    run: RunFields = {"job": "orders", "run_id": run_id}
    sequence: SequenceFields = {**run, "dataset_urn": "orders.eu", "sequence_id": f"{run_id}-s"}
    files = tuple(PublishedFile(path=f"/data/published/orders.eu/{run_id}-{n}.avro", size=1000, checksum="ab" * 32,
                                records=250) for n in range(2))
    return [JobRunStarted(**run), WorkUnitsPlanned(**run, work_units=()),
            DatasetPublished(**sequence, files=files,
                             watermarks=(WatermarkRange(partition="orders.eu:0", low_watermark=0, high_watermark=500),),
                             files_published=2, records_published=500, bytes_published=2000),
            JobRunCommitted(**run, datasets_committed=("orders.eu",))]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    opened = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    opened.ensure_topic()
    opened.append(run_events("before"))
    yield opened
    opened.close()


def test_follow_shows_commits_as_they_happen_with_paths_and_counts(log: EventLog) -> None:
    later = threading.Timer(1.5, lambda: log.append(run_events("later")))
    later.start()
    started = time.monotonic()
    result = runner.invoke(app, ["follow", "--max", "3", "--idle-timeout", "30", "--log", log.url])
    later.join()
    assert result.exit_code == 0, result.stderr
    assert time.monotonic() - started >= 1.5  # it waited for the run appended after it started
    lines = result.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ["JobRunStarted", "DatasetPublished", "JobRunCommitted"]
    assert all("before" not in line for line in lines), "only what happens after it starts"
    assert lines[0].endswith("orders run later")
    assert lines[1].endswith("orders.eu: 2 file(s), 500 records, 2,000 bytes → "
                             "/data/published/orders.eu/later-0.avro (+1 more)")
    assert lines[2].endswith("1 dataset(s) published")


def test_follow_since_replays_then_tail_lines_carry_the_same_summary(log: EventLog) -> None:
    result = runner.invoke(app, ["follow", "--since", "1d", "--job", "orders", "--type", "datasetpublished",
                                 "--idle-timeout", "1", "--log", log.url])
    assert result.exit_code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert "DatasetPublished" in line and "500 records" in line and "before-0.avro" in line
    tailed = runner.invoke(app, ["tail", "--type", "DatasetPublished", "--idle-timeout", "0.5", "--log", log.url])
    assert tailed.stdout.splitlines() == [line]
