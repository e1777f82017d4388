"""Gobblin's exactly-once example, crashed after each of its five steps: recovery finishes it exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
)
from events.dataset import WatermarkAdvanced
from events.log import EventLog
from projections.projector import Projector
from spark_pipeline.commit.faults import CRASH_ENV, CRASH_EXIT_CODE
from tests.fault.gobblin_example import FILES, JOB, URN, WATERMARKS, write_task_output

pytestmark = pytest.mark.kafka

CRASHES = ["after-rename:1", "after-rename:2", "after-rename:3", "after-watermark:1", "after-watermark:2"]
DONE_BEFORE = {"after-rename:1": 2, "after-rename:2": 2, "after-rename:3": 3, "after-watermark:1": 3,
               "after-watermark:2": 3}
"""The steps found done after each crash: the first two files share a folder that does not exist in job-output yet, so
one move of their task-output folder publishes both (a crash after the first rename finds the second done too)."""


def run(mode: str, url: str, base: Path, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.run([sys.executable, "-m", "tests.fault.gobblin_example", url, str(base), mode],
                          env=env, capture_output=True, text=True, timeout=180, check=False)


def published_exactly_once(base: Path) -> None:
    for name in FILES:
        assert not (base / "task-output" / name).exists(), f"{name} still in task output"
        dst = base / "job-output" / name
        assert dst.read_bytes() == f"records of {name}\n".encode() * (100 + FILES.index(name))
    assert sorted(p.relative_to(base / "job-output").as_posix() for p in (base / "job-output").rglob("*.avro")) \
        == sorted(FILES)


@pytest.mark.parametrize("crash_at", CRASHES)
def test_a_crash_after_any_step_is_recovered_exactly_once(crash_at: str, event_log: EventLog, tmp_path: Path) -> None:
    write_task_output(tmp_path)
    crashed = run("commit", event_log.url, tmp_path, crash_at)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr[-2000:]
    assert f"injected crash at {crash_at.split(':')[0]}" in crashed.stderr

    recovered = run("recover", event_log.url, tmp_path)
    assert recovered.returncode == 0, recovered.stderr[-2000:]
    assert recovered.stdout.split() == ["completed"]

    published_exactly_once(tmp_path)
    events = [logged.event for logged in event_log.read()]
    planned = {e.key for e in events if isinstance(e, CommitSequencePlanned)}
    assert planned == {f"commit/{JOB}/{URN}/run-1/PLANNED/{n}" for n in range(1, 6)}  # each put: a plan of its own
    # Every step applied exactly once across the crash: the renames done before it found done on recovery (each
    # recorded `verified`), the others executed by the recovery (counted by the sequence's completion). A watermark
    # step's effect is an event of the sequence's last batch: the crash lost it, so the recovery executes it.
    done_before = DONE_BEFORE[crash_at]
    verified = Counter(e.step_index for e in events if isinstance(e, CommitStepApplied) and e.outcome == "verified")
    assert verified == Counter(range(done_before))
    assert not [e for e in events if isinstance(e, CommitStepApplied) and e.outcome == "executed"]
    [completed] = [e for e in events if isinstance(e, CommitSequenceCompleted)]
    assert (completed.steps_applied, completed.verified, completed.executed) == (5, done_before, 5 - done_before)
    advanced = Counter((e.partition, e.value) for e in events if isinstance(e, WatermarkAdvanced))
    assert advanced == Counter(WATERMARKS.items())

    state, _ = Projector(event_log).rebuild(use_snapshot=False)
    assert state.pending_sequences() == []
    assert state.datasets[(JOB, URN)].watermarks == WATERMARKS
    assert state.problems == []

    again = run("recover", event_log.url, tmp_path)
    assert again.returncode == 0 and again.stdout.split() == []
    published_exactly_once(tmp_path)
