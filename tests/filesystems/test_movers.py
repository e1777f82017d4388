"""Folder moves made by a child process: made or declined as the caller's own call would, never after the lease,
and nothing claimed when the child is lost."""

from __future__ import annotations

import errno
import hashlib
import time
from pathlib import Path

from filesystems.base import FolderMove
from filesystems.local import LocalFileSystem
from filesystems.movers import InlineMover, Moved, ProcessMover


def task_folder(base: Path, name: str, extra: bool = False) -> FolderMove:
    """A task-output folder with two files, and its move to base/published/<name> (`extra`: a file not planned)."""
    folder = base / "out" / name
    folder.mkdir(parents=True)
    files = {}
    for file in ("a.avro", "b.avro"):
        data = f"{name}/{file}".encode()
        (folder / file).write_bytes(data)
        files[str(folder / file)] = (len(data), hashlib.sha256(data).hexdigest())
    if extra:
        (folder / "not-planned.tmp").write_bytes(b"?")
    return FolderMove(str(folder), str(base / "published" / name), files)


def started_mover(timeout_s: float = 30.0) -> ProcessMover:
    """A ProcessMover whose child has started (`ready` never waits for it)."""
    mover = ProcessMover()
    deadline = time.monotonic() + timeout_s
    while not mover.ready():
        assert time.monotonic() < deadline, f"the mover's child did not start within {timeout_s}s"
        time.sleep(0.01)
    return mover


def test_a_mover_is_not_ready_until_its_child_has_started_and_its_batches_meanwhile_are_left_to_the_caller(
        tmp_path: Path) -> None:
    mover = ProcessMover()
    try:
        assert not mover.ready()  # a child takes tens of milliseconds to start at the least: no wait here
        [early] = mover.start([task_folder(tmp_path, "ds.0")], time.monotonic() + 60).outcomes()
        assert early.moved is Moved.UNKNOWN and not (tmp_path / "published").exists()
    finally:
        mover.close()


def test_a_child_makes_moves_and_declines_those_whose_folder_is_not_as_planned(tmp_path: Path) -> None:
    moves = [task_folder(tmp_path, "ds.0"), task_folder(tmp_path, "crowded", extra=True), task_folder(tmp_path, "ds.1")]
    mover = started_mover()
    try:
        outcomes = mover.start(moves, time.monotonic() + 60).outcomes()
    finally:
        mover.close()
    assert [o.moved for o in outcomes] == [Moved.YES, Moved.NO, Moved.YES]
    assert sorted(p.name for p in (tmp_path / "published").iterdir()) == ["ds.0", "ds.1"]
    assert (tmp_path / "published" / "ds.1" / "b.avro").read_bytes() == b"ds.1/b.avro"
    assert (tmp_path / "out" / "crowded" / "a.avro").exists()


def test_no_move_is_made_once_its_lease_has_run_out(tmp_path: Path) -> None:
    moves = [task_folder(tmp_path, "ds.0"), task_folder(tmp_path, "ds.1")]
    mover = started_mover()
    try:
        outcomes = mover.start(moves, time.monotonic() - 0.001).outcomes()
    finally:
        mover.close()
    assert [o.moved for o in outcomes] == [Moved.UNKNOWN, Moved.UNKNOWN]
    assert not (tmp_path / "published").exists()
    assert InlineMover(LocalFileSystem()).start(moves, time.monotonic() - 0.001).outcomes() == outcomes


def test_a_move_that_raises_brings_its_error_back(tmp_path: Path) -> None:
    move = task_folder(tmp_path, "ds")
    too_long = FolderMove(move.src, str(tmp_path / "published" / ("x" * 300)), move.files)
    mover = started_mover()
    try:
        [outcome] = mover.start([too_long], time.monotonic() + 60).outcomes()
    finally:
        mover.close()
    assert outcome.moved is Moved.FAILED
    assert isinstance(outcome.error, OSError) and outcome.error.errno == errno.ENAMETOOLONG
    assert Path(move.src, "a.avro").exists()


def test_a_location_the_child_does_not_serve_is_left_to_the_caller(tmp_path: Path) -> None:
    move = task_folder(tmp_path, "ds")
    remote = FolderMove("hdfs://namenode:9870/out/ds", "hdfs://namenode:9870/published/ds", {})
    mover = started_mover()
    try:
        outcomes = mover.start([remote, move], time.monotonic() + 60).outcomes()
    finally:
        mover.close()
    assert [o.moved for o in outcomes] == [Moved.UNKNOWN, Moved.YES]


def test_a_lost_child_claims_nothing_and_takes_no_more_batches(tmp_path: Path) -> None:
    moves = [task_folder(tmp_path, f"ds.{i}") for i in range(3)]
    mover = started_mover()
    try:
        assert mover._child is not None
        mover._child.kill()
        mover._child.wait()
        first = mover.start(moves[:2], time.monotonic() + 60).outcomes()
        assert not mover.ready()
        second = mover.start(moves[2:], time.monotonic() + 60).outcomes()
    finally:
        mover.close()
    assert [o.moved for o in first + second] == [Moved.UNKNOWN] * 3
    assert not (tmp_path / "published").exists()


def test_the_child_ends_when_its_mover_closes_and_when_its_parent_is_gone(tmp_path: Path) -> None:
    mover = started_mover()
    child = mover._child
    assert child is not None
    mover.close()
    assert child.poll() == 0
    orphan = started_mover()
    assert orphan._child is not None
    orphan._requests.close()  # what the parent's death does to the pipe
    assert orphan._child.wait(timeout=10) == 0
