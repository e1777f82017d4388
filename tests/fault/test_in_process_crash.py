"""The crash matrix's in-process driver death (tests/fault/in_process_crash.py) does what a kill does: the driver
dies at the point and makes no I/O call after it (its job lock is dropped, as the kernel drops a dead process's
flock), while a copy of the injector in another process (a commit shard task) still exits that process."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from events.job import JobLockReleased
from events.log import open_log
from filesystems.local import LOCAL
from spark_pipeline.commit.faults import CRASH_EXIT_CODE, FaultPoint
from tests.fault.in_process_crash import DeadDriverFileSystem, DeadDriverLog, InProcessCrash
from tests.sim.faults import SimulatedCrash


def test_the_driver_dies_at_the_point_and_makes_no_io_call_after_it(tmp_path: Path) -> None:
    faults = InProcessCrash(FaultPoint.AFTER_RENAME)
    inner = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    log = DeadDriverLog(inner, faults.death)
    fs = DeadDriverFileSystem(LOCAL, faults.death)
    try:
        log.ensure_topic()
        lock = log.job_lock("job")
        lock.acquire("run-1")
        writer = log.writer("job")
        writer.append([JobLockReleased(job="job", run_id="run-1")])
        (tmp_path / "a").write_text("a")
        fs.rename(str(tmp_path / "a"), str(tmp_path / "b"))
        faults.reached(FaultPoint.BEFORE_WATERMARK)  # not the point: nothing happens

        with pytest.raises(SimulatedCrash, match="injected crash at after-rename"):
            faults.reached(FaultPoint.AFTER_RENAME)
        assert faults.death.cause is not None

        for call in (lambda: writer.append([JobLockReleased(job="job", run_id="run-1")]), writer.check_fenced,
                     lambda: log.writer("other"), log.end_offsets, lambda: list(log.read()),
                     lambda: fs.rename(str(tmp_path / "b"), str(tmp_path / "c")),
                     lambda: fs.remove_tree(str(tmp_path)), lambda: fs.holds(str(tmp_path / "b"), 1, "x"),
                     lambda: log.job_lock("job").acquire("run-2")):
            with pytest.raises(SimulatedCrash):
                call()
        writer.close()  # a dead driver closes nothing: its connection stays open until it is buried
        assert faults.death.refused == 9
        assert (tmp_path / "b").read_text() == "a" and not (tmp_path / "c").exists()
        assert len(list(inner.read())) == 1, "the dead driver appended"

        lock.release()  # what the kernel does for a dead process: the next run takes the lock
        with inner.job_lock("job") as again:
            again.acquire("run-2")
    finally:
        log.bury()
        inner.close()


def test_the_driver_dies_when_a_shard_killed_at_the_point_is_lost() -> None:
    faults = InProcessCrash(FaultPoint.BEFORE_COMPLETION)
    with pytest.raises(SimulatedCrash, match="in a commit shard task: lost"):
        faults.shard_lost("lost")
    InProcessCrash(FaultPoint.DURING_CLEANUP).shard_lost("lost")  # a driver-side point: the run just fails


def test_a_copy_in_another_process_exits_that_process_at_the_point() -> None:
    injector = pickle.dumps(InProcessCrash(FaultPoint.AFTER_PLANNING))
    task = ("import pickle, sys; from spark_pipeline.commit.faults import FaultPoint; "
            "pickle.loads(sys.stdin.buffer.read()).reached(FaultPoint.AFTER_PLANNING); print('survived')")
    shard = subprocess.run([sys.executable, "-c", task], input=injector, capture_output=True, timeout=120,
                           check=False, cwd=Path(__file__).parents[2])
    assert shard.returncode == CRASH_EXIT_CODE, shard.stderr.decode()[-2000:]
    assert b"injected crash at after-planning" in shard.stderr and b"survived" not in shard.stdout
