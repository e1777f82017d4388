"""A first run publishes a dataset's task-output folder by one move where nothing else is in it and nothing is at its
destination yet; anywhere else each file moves by its own rename, with the same checks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from events.commit import CommitSequenceCompleted, CommitSequencePlanned, FsRenameStep, HighWatermarkStep
from events.log import EventLog
from filesystems.base import FolderMove
from filesystems.local import LocalFileSystem
from replay.verify import verify
from spark_pipeline.commit.sequence import Outcome
from spark_pipeline.commit.session import open_session
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.steps import PublishRoots


class CountingFileSystem(LocalFileSystem):
    """The local disk, counting its file and folder moves."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def rename(self, src: str, dst: str) -> None:
        self.calls["rename"] += 1
        super().rename(src, dst)

    def move_folder(self, move: FolderMove, before_move: Callable[[], None]) -> bool:
        moved = super().move_folder(move, before_move)
        self.calls["move_folder" if moved else "move_folder refused"] += 1
        return moved


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


def commit(event_log: EventLog, base: Path, fs: LocalFileSystem, *plans: CommitSequencePlanned) -> list[Outcome]:
    with open_session(event_log, "job", settings(base), fs) as session:
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


def test_a_file_changed_after_its_task_wrote_it_is_never_published_by_a_folder_move(event_log: EventLog,
                                                                                   tmp_path: Path) -> None:
    fs = CountingFileSystem()
    files = task_output(tmp_path, "ds")
    plan = planned(tmp_path, "ds", files, fs)
    files[1].write_bytes(files[1].read_bytes().upper())  # same size, other content
    assert commit(event_log, tmp_path, fs, plan) == [Outcome.FAILED]
    assert fs.calls["move_folder"] == 0
    assert not list((tmp_path / "published").rglob("b.avro"))
