"""`oncelog tail --type …` on a real SQLite log holding a record no reader can decode: by default it reports the
record (one stderr line naming its offset) and goes on; `--on-error stop` stops there, exit 1; a restart meets it
again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.codec import Record
from events.job import JobRunCommitted, JobRunStarted
from events.log import EventLog, open_log
from oncelog.cli import app

runner = CliRunner()
NEWER = b"\x0b\x0fJobRunCommitted\x00\x63" + b"\x00" * 8
"""A JobRunCommitted record of schema version 99, which this oncelog cannot read (unchecked frame)."""


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    """One partition: run a committed, then a record of a newer schema, then run b committed."""
    opened = open_log(f"sqlite:///{tmp_path / 'events.db'}?partitions=1")
    opened.ensure_topic()
    opened.append([JobRunStarted(job="orders", run_id="a"), JobRunCommitted(job="orders", run_id="a")])
    with opened.writer("a-newer-oncelog") as writer:
        writer.append_records([Record(0, b"run/orders/c/COMMITTED", NEWER, 0)])
    opened.append([JobRunStarted(job="orders", run_id="b"), JobRunCommitted(job="orders", run_id="b")])
    yield opened
    opened.close()


def damaged_offset(log: EventLog) -> int:
    """Where the unreadable record lies."""
    return next(r.offset for r in log.read_records() if r.key == b"run/orders/c/COMMITTED")


def tail(log: EventLog, *args: str) -> tuple[int, list[str], list[str]]:
    """Exit code, stdout lines and stderr lines of `oncelog tail --type JobRunCommitted ARGS`."""
    result = runner.invoke(app, ["tail", "--type", "JobRunCommitted", "--idle-timeout", "0.5", *args,
                                 "--log", log.url])
    return result.exit_code, result.stdout.splitlines(), result.stderr.splitlines()


def test_tail_reports_a_record_it_cannot_read_and_goes_on(log: EventLog) -> None:
    code, out, err = tail(log, "--group", "skipping")
    assert code == 0, err
    assert [line.split()[3] for line in out] == ["run/orders/a/COMMITTED", "run/orders/b/COMMITTED"]
    (report,) = err
    assert report.startswith("warning: skipped") and f"[0]@{damaged_offset(log)}" in report
    assert "version 99 is newer" in report


def test_tail_on_error_stop_stops_at_it_and_a_restart_meets_it_again(log: EventLog) -> None:
    for _ in range(2):
        code, out, err = tail(log, "--group", "stopping", "--on-error", "stop")
        assert code == 1
        assert [line.split()[3] for line in out] == ["run/orders/a/COMMITTED"]
        assert len(err) == 1 and f"[0]@{damaged_offset(log)}" in err[0] and "--on-error skip" in err[0]
    refused = runner.invoke(app, ["tail", "--on-error", "ignore", "--log", log.url])
    assert refused.exit_code == 2 and "--on-error" in refused.stderr
