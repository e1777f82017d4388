"""A SQLite log notices a record that is gone: a row deleted at its start, in its middle or at its end, or its tail cut
off, stops every fold (`state`, `run`, `verify`, `rebuild`, subscriptions) with an error naming the log, the partition
and the offsets; what `oncelog gc` deletes is recorded as retention, never taken for damage; logs written before the
check open as they are."""

from __future__ import annotations

import logging
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import oncelog
from events.dataset import WatermarkAdvanced
from events.errors import MissingRecordsError
from events.log import EventLog, open_log
from projections.synthetic import HistoryShape, synthetic_history
from replay.live.server import open_view
from replay.live.settings import LiveSettings
from replay.live.view import Phase
from replay.retention import gc
from tests.fault.pipeline_checks import write_job

ROOT = Path(__file__).parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
SHAPE = HistoryShape(jobs=2, runs=4, datasets=2, crash=0.0, run_failure=0.0)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    """A log of two jobs' runs on three partitions, one atomic batch per run's worth of events."""
    opened = open_log(f"sqlite:///{tmp_path / 'events.db'}?partitions=3")
    opened.ensure_topic()
    events = synthetic_history(random.Random(3), SHAPE)
    for start in range(0, len(events), 25):
        opened.append(events[start:start + 25])
    yield opened
    opened.close()


def rows(log: EventLog) -> list[tuple[int, int]]:
    """(offset, partition) of every record, by offset."""
    with sqlite3.connect(db(log)) as conn:
        return [(int(s), int(p)) for s, p in conn.execute("SELECT seq, partition FROM oncelog_records ORDER BY seq")]


def db(log: EventLog) -> Path:
    return Path(log.url.split("sqlite:///", 1)[1].split("?", 1)[0])


def delete(log: EventLog, offsets: list[int]) -> None:
    """Delete rows as a manual edit, a bad copy or a damaged disk would: nothing else changes."""
    with sqlite3.connect(db(log)) as conn:
        conn.executemany("DELETE FROM oncelog_records WHERE seq = ?", [(o,) for o in offsets])


def watermark_row(log: EventLog) -> int:
    """The offset of a WatermarkAdvanced in the middle of the log."""
    moves = [e.offset for e in log.read() if isinstance(e.event, WatermarkAdvanced)]
    return moves[len(moves) // 2]


def damage(log: EventLog, where: str) -> tuple[int, int, int]:
    """Delete rows at `where`; returns the partition hit and the first and last offset reported missing."""
    every = rows(log)
    if where == "start":
        offset, partition = every[0]
        delete(log, [offset])
        return partition, 1, offset
    if where == "middle":
        offset = watermark_row(log)
        partition = dict(every)[offset]
        before = max(s for s, p in every if p == partition and s < offset)
        delete(log, [offset])
        return partition, before + 1, offset
    if where == "last":
        offset, partition = every[-1]
        before = max(s for s, p in every if p == partition and s < offset)
        delete(log, [offset])
        return partition, before + 1, offset
    cut = every[-6:]  # a truncated tail: the last rows of the file, of several partitions
    delete(log, [s for s, _ in cut])
    last_kept = every[-7][0]
    partition = min(p for _, p in cut)
    ours = [s for s, p in cut if p == partition]
    kept = max((s for s, p in every[:-6] if p == partition), default=0)
    assert kept <= last_kept
    return partition, kept + 1, ours[-1]


def oncelog_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`oncelog ARGS` in a process of its own, in a pipe."""
    return subprocess.run([sys.executable, "-m", "oncelog", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=180, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("where", ["start", "middle", "last", "truncated-tail"])
def test_a_deleted_row_or_a_cut_off_tail_stops_state_verify_and_rebuild_naming_the_offsets(log: EventLog,
                                                                                          where: str) -> None:
    assert oncelog_cli("state", "--log", log.url).returncode == 0
    partition, first, last = damage(log, where)
    gone = f"offset {last}" if first == last else f"offsets {first}-{last}"

    state = oncelog_cli("state", "--log", log.url)

    assert state.returncode == 2 and state.stdout == "", state.stdout
    said = " ".join(state.stderr.split())
    assert f"records are missing from the log {db(log)}: {log.topic}[{partition}] {gone}" in said, said
    assert "Restore it from a backup" in said
    for fold in (oncelog.rebuild, oncelog.verify):
        with pytest.raises(MissingRecordsError) as raised:
            fold(log)
        assert (raised.value.partition, raised.value.first, raised.value.last) == (partition, first, last)


@pytest.mark.parametrize("row", [0, -1])
def test_a_fold_from_a_snapshot_still_sees_a_deleted_first_row_or_a_cut_off_tail(log: EventLog, row: int) -> None:
    assert oncelog_cli("rebuild", "--log", log.url).returncode == 0  # a snapshot covering the whole log
    offset = rows(log)[row][0]
    delete(log, [offset])
    with pytest.raises(MissingRecordsError, match=f"offset {offset} "):
        oncelog.rebuild(log)


def test_a_subscriber_stops_at_a_deleted_row(log: EventLog) -> None:
    offset = watermark_row(log)
    delete(log, [offset])
    with log.subscribe("downstream") as subscription, pytest.raises(MissingRecordsError, match=f"{offset} "):
        while subscription.poll(timeout=0.2, max_records=50):
            pass


def test_run_refuses_a_damaged_log_before_starting_spark(log: EventLog, tmp_path: Path) -> None:
    """One real `oncelog run` (no JVM starts: the fold refuses first); nothing is appended to the damaged log."""
    partition, first, last = damage(log, "middle")
    end = log.end_offsets()
    job = write_job(tmp_path, log.url)

    done = oncelog_cli("run", str(job), cwd=tmp_path)

    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, said
    assert f"{log.topic}[{partition}] offset{'s' if first != last else ''} " in said and f"{last} " in said, said
    assert "Starting Spark" not in said and "spark-" not in said, said
    assert log.end_offsets() == end


def test_gc_deletes_as_retention_and_damage_after_it_is_still_found(log: EventLog) -> None:
    report = gc(log, keep_runs=1)
    assert report.runs_deleted and report.tombstones
    before = oncelog.rebuild(log)

    assert oncelog_cli("state", "--log", log.url).returncode == 0
    assert oncelog.verify(log).ok
    assert gc(log, keep_runs=1).tombstones == 0  # and a second gc finds nothing more to delete
    log.append(synthetic_history(random.Random(4), HistoryShape(jobs=1, runs=1, datasets=1)))
    assert oncelog.rebuild(log).datasets.keys() >= before.datasets.keys()

    offset = watermark_row(log)
    delete(log, [offset])
    with pytest.raises(MissingRecordsError, match=f"{offset} "):
        oncelog.verify(log)  # reads the whole log (gc left a snapshot: `state` folds only what follows it)


@pytest.mark.parametrize("name", ["simulated-main-99a2c0f", "every-type-main-99a2c0f"])
def test_a_log_written_before_the_check_opens_silently_and_is_checked_from_then_on(name: str, tmp_path: Path) -> None:
    copy = tmp_path / f"{name}.db"
    shutil.copy(FIXTURES / f"{name}.db", copy)
    url = f"sqlite:///{copy}"
    shown = oncelog_cli("state", "--log", url, "--allow-problems")  # every-type holds events out of any order
    assert shown.returncode == 0 and "missing" not in shown.stderr, shown.stderr

    with open_log(url) as opened:
        assert oncelog.verify(opened).events == len(list(opened.read())) > 0
        offset = [e.offset for e in opened.read()][len(rows(opened)) // 2]
        delete(opened, [offset])
        with pytest.raises(MissingRecordsError, match=f"{offset} "):
            oncelog.rebuild(opened)


def test_the_live_view_stops_folding_naming_the_missing_record_without_a_trace(
        log: EventLog, caplog: pytest.LogCaptureFixture) -> None:
    """`oncelog serve` on a log with a deleted row: the view fails (503s from then on) with the error naming the
    offsets, logged as one line, not a traceback (it is ours, and says what to do)."""
    offset = watermark_row(log)
    delete(log, [offset])
    view, server = open_view(LiveSettings(log.url, port=0, snapshot_every=0))
    try:
        with caplog.at_level(logging.ERROR, logger="replay.live.view"):
            view.run(threading.Event())
    finally:
        server.server_close()
    assert view.phase is Phase.FAILED and "missing" in (view.error or "")
    stopped = [r for r in caplog.records if r.getMessage().startswith("the live view stopped folding")]
    assert len(stopped) == 1 and stopped[0].exc_info is None, "a traceback for an error that names its place"
