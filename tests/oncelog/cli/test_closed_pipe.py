"""A command whose reader stops reading (`oncelog audit latest | head -1`) ends quietly with exit 0, as Unix tools
do, so that a `set -o pipefail` script goes on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from events.job import JobRunStarted, WorkUnitSpec, WorkUnitsPlanned
from events.log import open_log
from events.model import RunFields

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("command", ["audit latest", "audit latest --json"])
def test_a_reader_that_stops_reading_ends_the_command_with_exit_0(tmp_path: Path, command: str) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    run: RunFields = {"job": "wide", "run_id": "run-1"}
    units = tuple(WorkUnitSpec(work_unit_id=f"ds.{i}:0@0", dataset_urn=f"ds.{i}", partition=f"ds.{i}:0",
                               low_watermark=0, expected_high_watermark=10) for i in range(3000))
    with open_log(url) as log:
        log.ensure_topic()
        # an audit far longer than a pipe's buffer: the command is still writing when head has gone
        log.append([JobRunStarted(**run, properties={}), *WorkUnitsPlanned(**run, work_units=units).in_parts()])
    script = f"set -o pipefail; {sys.executable} -m oncelog {command} --log {url} | head -1"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert len(done.stdout.splitlines()) == 1 and done.stderr == ""
