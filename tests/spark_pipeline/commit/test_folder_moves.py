"""A first run publishes a dataset's task-output folder by one move where nothing else is in it and nothing is at its
destination yet; anywhere else each file moves by its own rename, with the same checks."""

from __future__ import annotations

import errno
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from events.commit import CommitSequenceCompleted, CommitSequencePlanned, FsRenameStep, HighWatermarkStep
from events.log import EventLog
from filesystems.base import FolderMove
from filesystems.local import LocalFileSystem
from filesystems.movers import NOT_TRIED, FolderMover, Moved, MoveOutcome
from replay.verify import verify
from spark_pipeline.commit.sequence import PARALLEL_MIN_FILE_BYTES, Outcome
from spark_pipeline.commit.session import open_session
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.steps import PublishRoots
from tests.filesystems.test_movers import started_mover


class CountingFileSystem(LocalFileSystem):
    """The local disk, counting its file and folder moves."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.synced: set[str] = set()

    def rename(self, src: str, dst: str) -> None:
        self.calls["rename"] += 1
        super().rename(src, dst)

    def move_folder(self, move: FolderMove, before_move: Callable[[], None]) -> bool:
        moved = super().move_folder(move, before_move)
        self.calls["move_folder" if moved else "move_folder refused"] += 1
        return moved

    def sync_folders(self, folders: Iterable[str]) -> None:
        self.synced |= set(folders)
        super().sync_folders(folders)

    def folder_mover(self, path: str) -> FolderMover:
        """Local disk's child, started before the commit's first batch (a commit does not wait for it)."""
        return started_mover()


def task_output(base: Path, dataset: str, names: tuple[str, ...] = ("a.avro", "b.avro")) -> list[Path]:
    """A dataset's files in its task attempt's folder, each with content of its own."""
    folder = base / "task-output" / "r1" / "task-0" / "attempt-1" / dataset
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(f"records of {dataset}/{name}".encode())
    return [folder / name for name in names]


def planned(base: Path, dataset: str, files: list[Path], fs: LocalFileSystem) -> CommitSequencePlanned:
    renames = tuple(FsRenameStep(src=str(f), dst=str(base / "published" / dataset / f.name), size=f.stat().st_size,
                                 checksum=fs.checksum(str(f)), records=1) for f in files)
    return CommitSequencePlanned(job="job", run_id="r1", dataset_urn=dataset, sequence_id="r1",
                                 steps=(*renames, HighWatermarkStep(partition=f"{dataset}:0", low_watermark=0,
                                                                    value=2)))


def settings(base: Path) -> CommitSettings:
    return CommitSettings(PublishRoots.of([base / "task-output"], [base / "published"]))


def commit(event_log: EventLog, base: Path, fs: LocalFileSystem, *plans: CommitSequencePlanned,
           moves_ahead_min: int | None = None) -> list[Outcome]:
    # moves made ahead: a fence check that answers for a minute (no move's lease runs out on a slow machine)
    chosen = (replace(settings(base), moves_ahead_min=moves_ahead_min, fence_fresh_s=60.0)
              if moves_ahead_min is not None else settings(base))
    with open_session(event_log, "job", chosen, fs) as session:
        session.sink.emit(list(plans))
        return [result.outcome for result in session.committer.recover("job")]


def test_a_first_run_moves_each_datasets_folder_whole_and_records_its_renames_executed(event_log: EventLog,
                                                                                      tmp_path: Path) -> None:
    fs = CountingFileSystem()
    plans = [planned(tmp_path, ds, task_output(tmp_path, ds), fs) for ds in ("ds.0", "ds.1")]
    assert commit(event_log, tmp_path, fs, *plans) == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert fs.calls == {"move_folder": 2}  # one move a dataset, no rename
    for ds in ("ds.0", "ds.1"):
        assert sorted(p.name for p in (tmp_path / "published" / ds).iterdir()) == ["a.avro", "b.avro"]
        assert (tmp_path / "published" / ds / "b.avro").read_bytes() == f"records of {ds}/b.avro".encode()
        assert not (tmp_path / "task-output" / "r1" / "task-0" / "attempt-1" / ds).exists()
    completed = [e.event for e in event_log.read() if isinstance(e.event, CommitSequenceCompleted)]
    assert [(c.executed, c.verified) for c in completed] == [(3, 0), (3, 0)]
    assert verify(event_log).ok


def test_anything_else_in_the_folder_or_at_its_destination_and_each_file_moves_alone(event_log: EventLog,
                                                                                    tmp_path: Path) -> None:
    fs = CountingFileSystem()
    crowded = task_output(tmp_path, "crowded", ("a.avro", "b.avro", "not-planned.tmp"))[:2]
    taken = task_output(tmp_path, "taken")
    (tmp_path / "published" / "taken").mkdir(parents=True)
    (tmp_path / "published" / "taken" / "earlier.avro").write_bytes(b"an earlier run's")
    plans = [planned(tmp_path, "crowded", crowded, fs), planned(tmp_path, "taken", taken, fs)]
    assert commit(event_log, tmp_path, fs, *plans) == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert fs.calls == {"move_folder refused": 2, "rename": 4}
    assert sorted(p.name for p in (tmp_path / "published" / "crowded").iterdir()) == ["a.avro", "b.avro"]
    assert [p.name for p in crowded[0].parent.iterdir()] == ["not-planned.tmp"]  # never published, still there
    assert sorted(p.name for p in (tmp_path / "published" / "taken").iterdir()) == ["a.avro", "b.avro",
                                                                                   "earlier.avro"]
    assert verify(event_log).ok


class ThreadNoting(LocalFileSystem):
    """The local disk, noting the thread of each folder move."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def move_folder(self, move: FolderMove, before_move: Callable[[], None]) -> bool:
        self.threads.append(threading.current_thread().name)
        return super().move_folder(move, before_move)


def test_large_files_commit_in_parallel_and_small_ones_one_after_another(event_log: EventLog,
                                                                          tmp_path: Path) -> None:
    """Each file's sha256 is read before it moves: on large files, threads (hashing frees the GIL) beat one."""
    fs = ThreadNoting()
    small = [planned(tmp_path, ds, task_output(tmp_path, ds), fs) for ds in ("s.0", "s.1")]
    assert commit(event_log, tmp_path, fs, *small) == [Outcome.COMPLETED] * 2
    assert fs.threads == [threading.current_thread().name] * 2
    large: list[CommitSequencePlanned] = []
    for ds in ("l.0", "l.1"):
        files = task_output(tmp_path, ds)
        for file in files:
            file.write_bytes(file.read_bytes() * (PARALLEL_MIN_FILE_BYTES // len(file.read_bytes()) + 1))
        large.append(planned(tmp_path, ds, files, fs))
    fs.threads.clear()
    assert commit(event_log, tmp_path, fs, *large) == [Outcome.COMPLETED] * 2
    assert len(fs.threads) == 2 and all(name.startswith("commit") for name in fs.threads)
    assert verify(event_log).ok

def test_a_file_changed_after_its_task_wrote_it_is_never_published_by_a_folder_move(event_log: EventLog,
                                                                                   tmp_path: Path) -> None:
    fs = CountingFileSystem()
    files = task_output(tmp_path, "ds")
    plan = planned(tmp_path, "ds", files, fs)
    files[1].write_bytes(files[1].read_bytes().upper())  # same size, other content
    assert commit(event_log, tmp_path, fs, plan) == [Outcome.FAILED]
    assert fs.calls["move_folder"] == 0
    assert not list((tmp_path / "published").rglob("b.avro"))


def test_many_datasets_have_their_folders_moved_by_a_child_process_as_they_would_be_here(event_log: EventLog,
                                                                                       tmp_path: Path) -> None:
    """From `moves_ahead_min` datasets on, a child process makes the folder moves of the batch after the one
    committing: none is made by the committer's own file system, each is recorded as its rename steps executed."""
    fs = CountingFileSystem()
    datasets = [f"ds.{i}" for i in range(150)]
    plans = [planned(tmp_path, ds, task_output(tmp_path, ds), fs) for ds in datasets]
    crowded = task_output(tmp_path, "crowded", ("a.avro", "b.avro", "not-planned.tmp"))[:2]
    plans.insert(70, planned(tmp_path, "crowded", crowded, fs))
    outcomes = commit(event_log, tmp_path, fs, *plans, moves_ahead_min=2)
    assert outcomes == [Outcome.COMPLETED] * len(plans)
    assert fs.calls == {"rename": 2}  # only the crowded folder's files, declined by the child, one by one
    for ds in datasets:
        assert (tmp_path / "published" / ds / "b.avro").read_bytes() == f"records of {ds}/b.avro".encode()
    assert [p.name for p in crowded[0].parent.iterdir()] == ["not-planned.tmp"]
    completed = [e.event for e in event_log.read() if isinstance(e.event, CommitSequenceCompleted)]
    assert {(c.executed, c.verified) for c in completed} == {(3, 0)}
    assert verify(event_log).ok


def answered(event_log: EventLog, base: Path, fs: CountingFileSystem, outcome: Callable[[FolderMove], MoveOutcome]
             ) -> tuple[Outcome, str | None]:
    """One dataset's sequence committed after its folder move was made elsewhere with `outcome` (what the move did
    is up to `outcome`)."""
    files = task_output(base, "ds")
    with open_session(event_log, "job", settings(base), fs) as session:
        session.sink.emit([planned(base, "ds", files, fs)])
        sequence = session.committer.sequence(session.state.pending_sequences("job")[0])
        group = sequence.first_move()
        assert group is not None and group.indices == {0, 1}
        sequence.moved_ahead(group, outcome(group.move))
        result = sequence.commit()
    return result.outcome, result.error


def test_a_move_made_elsewhere_whose_answer_was_lost_is_found_made_and_made_durable(event_log: EventLog,
                                                                                     tmp_path: Path) -> None:
    def made_then_lost(move: FolderMove) -> MoveOutcome:
        assert LocalFileSystem().move_folder(move, lambda: None)
        return NOT_TRIED

    fs = CountingFileSystem()
    assert answered(event_log, tmp_path, fs, made_then_lost) == (Outcome.COMPLETED, None)
    assert fs.calls == {"move_folder refused": 1}  # tried here: found its destination taken, its files as planned
    assert str(tmp_path / "published" / "ds") in fs.synced
    [completed] = [e.event for e in event_log.read() if isinstance(e.event, CommitSequenceCompleted)]
    assert (completed.executed, completed.verified) == (1, 2)
    assert verify(event_log).ok


def test_a_move_that_failed_elsewhere_fails_its_step_as_it_would_have_here(event_log: EventLog,
                                                                          tmp_path: Path) -> None:
    fs = CountingFileSystem()
    failed = MoveOutcome(Moved.FAILED, OSError(errno.EIO, "Input/output error", "out/ds"))
    outcome, error = answered(event_log, tmp_path, fs, lambda _: failed)
    assert outcome is Outcome.FAILED and error is not None and "step 0 (FsRename)" in error and "Input/output" in error
    assert fs.calls == {}
    assert not (tmp_path / "published").exists()
    with open_session(event_log, "job", settings(tmp_path), fs) as session:
        assert [r.outcome for r in session.committer.recover("job")] == [Outcome.COMPLETED]
    assert verify(event_log).ok


def test_a_move_declined_elsewhere_is_made_file_by_file(event_log: EventLog, tmp_path: Path) -> None:
    fs = CountingFileSystem()
    assert answered(event_log, tmp_path, fs, lambda _: MoveOutcome(Moved.NO)) == (Outcome.COMPLETED, None)
    assert fs.calls == {"rename": 2}
    assert sorted(p.name for p in (tmp_path / "published" / "ds").iterdir()) == ["a.avro", "b.avro"]
    assert verify(event_log).ok
