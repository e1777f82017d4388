"""The commit engine's shards and fences: a shard folds and commits only its datasets; a superseded writer can
neither append nor move a file; a shard task run again (its executor lost) finishes what it planned; fault points
are an enum that refuses a misspelled name."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from events.commit import CommitSequenceCompleted, CommitSequencePlanned, FsRenameStep
from events.errors import FencedError
from events.keys import partition_for
from events.log import EventLog
from filesystems.base import FileSystem, FolderMove
from filesystems.local import LOCAL, LocalFileSystem
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.commit.engine import (
    CommitEngine,
    InProcessCommitEngine,
    job_publisher,
)
from spark_pipeline.commit.faults import CRASH_ENV, FaultInjector, FaultPoint
from spark_pipeline.commit.sequence import Outcome
from spark_pipeline.commit.session import open_session, shard_writer_name
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.shards import (
    ShardSummary,
    ShardWork,
    commit_shard,
    fold_shard,
    shard_of,
    shard_partitions,
)
from spark_pipeline.commit.sink import FENCE_FRESH_S
from spark_pipeline.commit.steps import PublishRoots
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import assert_exactly_once, write_job
from tests.log_fixtures import LogFactory


def test_a_misspelled_fault_point_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown crash point 'after-renam'; known: after-task-output, "):
        FaultInjector.from_env({CRASH_ENV: "after-renam:2"})
    assert FaultInjector.from_env({CRASH_ENV: "after-rename:2"}).point is FaultPoint.AFTER_RENAME


def test_a_fenced_writer_fails_its_check_and_appends_nothing(event_log: EventLog) -> None:
    old = event_log.writer("job.commit-shard-0")
    try:
        old.check_fenced()  # the current holder of the name passes
        with event_log.writer("job.commit-shard-0") as new:
            new.check_fenced()
            with pytest.raises(FencedError):
                old.check_fenced()
        assert list(event_log.read()) == []  # probes leave nothing a reader sees
    finally:
        old.close()


def test_a_run_fences_every_shard_writer_of_the_job_before_it_folds(event_log: EventLog, tmp_path: Path) -> None:
    zombie = event_log.writer(shard_writer_name("job", 2))  # an earlier run's shard task, not yet planned
    try:
        settings = CommitSettings(PublishRoots.of([tmp_path / "out"], [tmp_path / "pub"]))
        with open_session(event_log, "job", settings, LOCAL):
            with pytest.raises(FencedError):
                zombie.check_fenced()
    finally:
        zombie.close()


def test_a_superseded_writer_moves_no_file(event_log: EventLog, tmp_path: Path) -> None:
    src = tmp_path / "task-output" / "a.avro"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"records")
    step = FsRenameStep(src=str(src), dst=str(tmp_path / "published" / "a.avro"), size=7,
                        checksum=LOCAL.checksum(str(src)))
    settings = CommitSettings(PublishRoots.of([tmp_path / "task-output"], [tmp_path / "published"]))
    with open_session(event_log, "job", settings, LOCAL) as session:
        session.sink.emit([CommitSequencePlanned(job="job", run_id="r1", dataset_urn="ds", sequence_id="r1",
                                                 steps=(step,))])
        event_log.writer("job").close()  # a newer run took the job's writer over
        time.sleep(FENCE_FRESH_S)  # as the newer run's session does before it acts
        with pytest.raises(FencedError):
            session.committer.recover("job")
    assert src.exists() and not (tmp_path / "published").exists()  # checked before the rename, not after


def test_a_shard_folds_only_its_partitions(log_factory: LogFactory, tmp_path: Path) -> None:
    log: EventLog = log_factory(4)
    urns = [f"ds.{i}" for i in range(12)]
    log.append([CommitSequencePlanned(job="job", run_id="r1", dataset_urn=urn, sequence_id="r1", steps=())
                for urn in urns])
    for shard in range(2):
        state = fold_shard(log, shard_partitions(shard, 4, 2))
        assert {urn for (_, urn, _) in state.sequences} == {u for u in urns if shard_of(u, 4, 2) == shard}
        assert {partition_for(u, 4) % 2 for (_, u, _) in state.sequences} == {shard}


@pytest.mark.parametrize(("setting", "min_datasets", "in_shards"), [
    (True, None, True), (False, None, False), ("auto", None, False), ("auto", 5, True), ("auto", 6, False)])
def test_a_job_commits_in_shards_or_on_the_driver_exactly_once(
        setting: bool | str, min_datasets: int | None, in_shards: bool, log_factory: LogFactory, tmp_path: Path
) -> None:
    """true: shards; false: the driver; auto (the default): shards from job.commit.executors.min.datasets on."""
    log: EventLog = log_factory(3)
    extra: dict[str, object] = {"source.synthetic.datasets": 5}
    if setting != "auto":
        extra["job.commit.on.executors"] = setting
    if min_datasets is not None:
        extra["job.commit.executors.min.datasets"] = min_datasets
    config = load_job_config(write_job(tmp_path, log.url, "full", None, **extra))
    engine = InProcessTaskEngine(log.writer)
    for _ in range(2):
        result = JobLauncher(config, engine=engine, log=log).run()
        assert result.status is RunStatus.COMMITTED, result.error
        assert len(result.commits) == 5
    if log.url.startswith("sqlite"):  # each run fences every shard writer (epoch +1); shard tasks open them again
        shard_epochs = [epoch for name, epoch in _writer_epochs(log).items() if ".commit-shard-" in name]
        assert (max(shard_epochs) > 4) is in_shards  # twice per run: at its start, once its start is logged
    assert_exactly_once(log.url, tmp_path)
    assert verify(log).ok


class ExecutorLost(Exception):
    """The executor running a shard task died (raised at a fault point, in this process)."""


class LosingInjector(FaultInjector):
    """Loses the executor at its point and pass (raises ExecutorLost) instead of killing the process."""

    @staticmethod
    def crash(message: str) -> None:
        raise ExecutorLost(message)


class RetryingCommitEngine(InProcessCommitEngine):
    """As Spark does when an executor is lost (which does not count as a task failure): the shard task runs again,
    from the start, this time on an executor that stays."""

    def __init__(self, log: EventLog, point: FaultPoint | None, nth: int, first_fs: FileSystem = LOCAL) -> None:
        super().__init__(log, LOCAL)
        self.point = point
        self.nth = nth
        self.first_fs = first_fs
        self.lost = 0

    def run(self, config: JobConfig, work: Sequence[ShardWork], settings: CommitSettings) -> list[ShardSummary]:
        publisher = job_publisher(config)
        summaries = []
        for shard in work:
            try:
                losing = replace(settings, faults=LosingInjector(self.point, self.nth))
                summary = commit_shard(shard, self.log, self.first_fs, losing, publisher)
                if self.point is None:
                    raise ExecutorLost("the task ended, but its result was lost with its executor")
                summaries.append(summary)
            except ExecutorLost:
                self.lost += 1
                summaries.append(commit_shard(shard, self.log, LOCAL, settings, publisher))
        return summaries


class RetryingTaskEngine(InProcessTaskEngine):
    def __init__(self, log: EventLog, point: FaultPoint | None, nth: int) -> None:
        super().__init__(log.writer)
        self.shards = RetryingCommitEngine(log, point, nth)

    def commit_engine(self, log: EventLog, fs: FileSystem) -> CommitEngine:
        return self.shards


class RenamesFail(LocalFileSystem):
    """The local file system, whose renames fail (a disk error, say)."""

    def rename(self, src: str, dst: str) -> None:
        raise OSError(5, "rename failed", src)

    def move_folder(self, move: FolderMove, before_move: Callable[[], None]) -> bool:
        raise OSError(5, "rename failed", move.src)


def test_a_shard_task_run_again_leaves_what_an_earlier_attempt_abandoned(log_factory: LogFactory,
                                                                        tmp_path: Path) -> None:
    """The first attempt's renames fail, its sequences are abandoned (max attempts 1), then its result is lost: the
    second attempt reports them abandoned and applies nothing (the log never says completed and abandoned)."""
    log: EventLog = log_factory(2)
    extra = {"source.synthetic.datasets": 2, "job.commit.shards": 1, "job.commit.on.executors": True,
             "commit.sequence.max.attempts": 1}
    config = load_job_config(write_job(tmp_path, log.url, "full", None, **extra))
    engine = RetryingTaskEngine(log, None, 1)
    engine.shards.first_fs = RenamesFail()
    result = JobLauncher(config, engine=engine, log=log).run()
    assert engine.shards.lost == 1
    assert result.status is RunStatus.FAILED
    assert sorted((c.dataset_urn, c.outcome) for c in result.commits) == [("ds.0", Outcome.ABANDONED),
                                                                          ("ds.1", Outcome.ABANDONED)]
    assert not [e for e in log.read() if isinstance(e.event, CommitSequenceCompleted)]
    assert not (tmp_path / "published").exists() or not any((tmp_path / "published").rglob("*.avro"))
    assert verify(log).ok


@pytest.mark.parametrize(("point", "nth"), [(FaultPoint.AFTER_PLANNING, 1), (FaultPoint.AFTER_RENAME, 2),
                                           (None, 1)])
def test_a_shard_task_run_again_after_its_executor_was_lost_finishes_what_it_planned(
        point: FaultPoint | None, nth: int, log_factory: LogFactory, tmp_path: Path) -> None:
    """Lost mid-commit (its sequences pending), or after it completed them (point None: its result lost): the
    second attempt finishes what is pending and leaves what is completed alone, planning nothing twice."""
    log: EventLog = log_factory(2)
    extra = {"source.synthetic.datasets": 3, "job.commit.shards": 1, "job.commit.on.executors": True,
             "commit.parallelism": 1}
    config = load_job_config(write_job(tmp_path, log.url, "full", None, **extra))
    engine = RetryingTaskEngine(log, point, nth)
    result = JobLauncher(config, engine=engine, log=log).run()
    assert engine.shards.lost == 1
    assert result.status is RunStatus.COMMITTED, result.error
    assert sorted(c.dataset_urn for c in result.commits) == ["ds.0", "ds.1", "ds.2"]
    assert_exactly_once(log.url, tmp_path)
    assert verify(log).ok


def _writer_epochs(log: EventLog) -> dict[str, int]:
    """The writers a SQLite log has registered, with how often each was opened (its epoch)."""
    with sqlite3.connect(log.url.split("sqlite:///")[1].split("?")[0]) as conn:
        return {name: epoch for name, epoch in conn.execute("SELECT name, epoch FROM oncelog_writers")}
