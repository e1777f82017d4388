"""Fencing per commit shard, for real: a shard task of run A is paused (SIGSTOP) right after it planned its
sequences; its driver gives the shard up as lost and ends; run B takes the job over, its shard writer fencing A's,
and commits; A resumed (SIGCONT) moves no file and appends nothing (FencedError), and every record is published once.

The shard task of A is a process of its own running the executors' per-shard function (`commit_shard`), as a
Python worker of an executor would; it stops itself at the point and writes its pid, so the pause is exact.

    python -m tests.fault.test_shard_fencing ASSIGNMENT_PICKLE PID_FILE   # the shard task (run by the test)
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from events.log import EventLog, open_log
from filesystems.base import FileSystem
from filesystems.local import LOCAL
from projections.views import RunStatus
from spark_pipeline.commit.engine import CommitEngine, job_publisher
from spark_pipeline.commit.faults import FaultInjector, FaultPoint
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.shards import (
    ShardLostError,
    ShardSummary,
    ShardWork,
    commit_shard,
)
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import DATASETS, assert_exactly_once, write_job
from tests.log_fixtures import LogFactory

pytestmark = pytest.mark.kafka

FENCED_EXIT = 3
PAUSE_WAIT_S = 60.0
NO_PAUSE = "-"


class PausingInjector(FaultInjector):
    """Stops its own process (SIGSTOP) at the point, after writing its pid where the test looks for it."""

    def __init__(self, point: FaultPoint, pid_file: Path) -> None:
        super().__init__(point)
        self.pid_file = pid_file

    def reached(self, point: FaultPoint) -> None:
        if point is self.point:
            self.pid_file.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)


class DetachedShardEngine(CommitEngine):
    """Run A's commit engine: starts each shard task as a process, and gives it up as lost once it has paused."""

    def __init__(self, base: Path, start: bool = True) -> None:
        self.base = base
        self.start = start
        self.assignments: list[Path] = []
        self.tasks: list[tuple[subprocess.Popen[str], Path]] = []

    def run(self, config: JobConfig, work: Sequence[ShardWork], settings: CommitSettings) -> list[ShardSummary]:
        for shard in work:
            assignment, pid_file = self.base / f"shard-{shard.shard}.pickle", self.base / f"shard-{shard.shard}.pid"
            assignment.write_bytes(pickle.dumps((config, shard, settings)))
            self.assignments.append(assignment)
            if self.start:
                self.tasks.append((start_shard_task(assignment, pid_file), pid_file))
        for task, pid_file in self.tasks:
            wait_until_stopped(task, pid_file)
        raise ShardLostError("run A's driver lost its shard tasks (paused, or not started yet)")


def start_shard_task(assignment: Path, pid_file: Path | None) -> subprocess.Popen[str]:
    """A shard task of run A in a process of its own (pausing after planning when given a pid file)."""
    return subprocess.Popen([sys.executable, "-m", "tests.fault.test_shard_fencing", str(assignment),
                             str(pid_file or NO_PAUSE)], cwd=Path(__file__).parents[2], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


class RunAEngine(InProcessTaskEngine):
    """Tasks in this process; commit shards in processes of their own (DetachedShardEngine)."""

    def __init__(self, log: EventLog, base: Path, start_shards: bool = True) -> None:
        super().__init__(log.writer)
        self.shards = DetachedShardEngine(base, start_shards)

    def commit_engine(self, log: EventLog, fs: FileSystem) -> CommitEngine:
        return self.shards


def wait_until_stopped(task: subprocess.Popen[str], pid_file: Path) -> None:
    """Wait until the shard task has stopped itself (its pid written, its state 'T' in /proc)."""
    deadline = time.monotonic() + PAUSE_WAIT_S
    while time.monotonic() < deadline:
        if task.poll() is not None:
            raise AssertionError(f"the shard task ended instead of pausing: {task.communicate()}")
        if pid_file.exists() and Path(f"/proc/{task.pid}/stat").read_text().split(")")[1].split()[0] == "T":
            return
        time.sleep(0.05)
    raise AssertionError("the shard task did not pause")


def files_under(base: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under the job's folders, with its inode, size and modification time: what a move would change."""
    return {str(p): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
            for folder in ("task-output", "published") for p in (base / folder).rglob("*") if p.is_file()}


def test_a_paused_shard_of_a_superseded_run_publishes_nothing_and_cannot_append(log_factory: LogFactory,
                                                                                tmp_path: Path) -> None:
    log = log_factory(2)
    config = load_job_config(write_job(tmp_path, log.url, "full", None, **{"job.commit.shards": 1,
                                                                 "job.commit.on.executors": True}))
    run_a = RunAEngine(log, tmp_path)
    with pytest.raises(ShardLostError):
        JobLauncher(config, engine=run_a, log=log).run()
    (task, _), = run_a.shards.tasks
    try:
        run_b = JobLauncher(config, engine=InProcessTaskEngine(log.writer), log=log).run()
        assert run_b.status is RunStatus.COMMITTED, run_b.error
        assert len(run_b.recovered) == DATASETS  # A's planned sequences, finished by B's shard writer
        files, records = files_under(tmp_path), len(list(log.read()))
    finally:
        task.send_signal(signal.SIGCONT)
    out, err = task.communicate(timeout=120)
    assert task.returncode == FENCED_EXIT, f"exit {task.returncode}\n{out}\n{err[-3000:]}"
    assert "was fenced" in out
    assert files_under(tmp_path) == files, "the superseded shard moved files after it resumed"
    assert len(list(log.read())) == records, "the superseded shard appended after it resumed"
    assert_exactly_once(log.url, tmp_path)


def test_a_shard_of_a_superseded_run_that_starts_late_publishes_nothing(log_factory: LogFactory,
                                                                        tmp_path: Path) -> None:
    """Its driver died before the shard task opened its writer (an executor slow to start it): the newer run's
    fences came first, so only the newer run's start in the log can stop it."""
    log = log_factory(2)
    config = load_job_config(write_job(tmp_path, log.url, "full", None, **{"job.commit.shards": 1,
                                                                 "job.commit.on.executors": True}))
    run_a = RunAEngine(log, tmp_path, start_shards=False)
    with pytest.raises(ShardLostError):
        JobLauncher(config, engine=run_a, log=log).run()
    run_b = JobLauncher(config, engine=InProcessTaskEngine(log.writer), log=log).run()
    assert run_b.status is RunStatus.COMMITTED, run_b.error
    files, records = files_under(tmp_path), len(list(log.read()))

    (assignment,) = run_a.shards.assignments
    late = start_shard_task(assignment, None)
    out, err = late.communicate(timeout=120)
    assert late.returncode == FENCED_EXIT, f"exit {late.returncode}\n{out}\n{err[-3000:]}"
    assert f"run {run_b.run_id} of job {config.job_name} started after run" in out
    assert files_under(tmp_path) == files, "the superseded shard moved files"
    assert len(list(log.read())) == records, "the superseded shard appended"
    assert_exactly_once(log.url, tmp_path)


def shard_task(assignment: Path, pid_file: str) -> int:
    """Run A's shard task: the executors' per-shard function, pausing itself right after it planned (unless
    `pid_file` is NO_PAUSE)."""
    config, work, settings = pickle.loads(assignment.read_bytes())
    if pid_file != NO_PAUSE:
        settings = replace(settings, faults=PausingInjector(FaultPoint.AFTER_PLANNING, Path(pid_file)))
    with open_log(config.log_url, config.log_settings) as log:
        summary = commit_shard(work, log, LOCAL, settings, job_publisher(config))
    print(summary.error or f"committed {len(summary.results)} sequence(s)")
    return FENCED_EXIT if summary.fenced else (1 if summary.error else 0)


if __name__ == "__main__":
    sys.exit(shard_task(Path(sys.argv[1]), sys.argv[2]))
