"""A zombie task attempt cannot touch the output of the attempt the log recorded as succeeded.

A task's first attempt is given up for lost and retried; it lives on in a process of its own (tests/fault/
zombie_attempt.py) and writes its file late: once after the second attempt was recorded as succeeded and before the
commit, once after the run ended. Each attempt writes under its own task-output folder, so the run publishes the
chosen attempt's file without anyone's help, the zombie's files are removed by the run's clean-up (or, written after
it, by the next run's), and the next run publishes nothing twice. On both engines: the DataFrame engine moves an
attempt's files into the attempt's own task-output folder too, under the records engine's names (its run shows the
publishing; the clean-up after the run's end is the launcher's, the same for both, shown once).
"""

from __future__ import annotations

import hashlib
import os
import signal
from contextlib import suppress
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.commit import CommitStepFailed
from events.log import open_log
from events.task import TaskFailed, TaskSucceeded
from projections.views import RunStatus
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.writers import attempt_output_dir
from tests.fault.pipeline_checks import assert_exactly_once, write_job
from tests.fault.zombie_attempt import PLAIN_SOURCE, ReleaseZombie, release, zombie_folder


@pytest.mark.parametrize("engine", ["records", "dataframe"])
def test_a_zombie_attempt_writes_where_nothing_is_published(tmp_path: Path, spark: SparkSession, engine: str) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    folder = tmp_path / "zombie"
    keys = {"source.synthetic.datasets": 1, "source.synthetic.partitions": 1, "task.engine": engine,
            "job.commit.on.executors": False}
    haunted = load_job_config(write_job(tmp_path, url, "full", None, **keys,
                                        **{"source.class": "tests.fault.zombie_attempt.ZombieSource"}))
    assert zombie_folder(haunted) == folder
    try:
        zombie = ReleaseZombie(folder)
        first = JobLauncher(haunted, spark=spark, faults=zombie).run()
        assert first.status is RunStatus.COMMITTED, first.error  # no operator action needed
        with open_log(url) as log:
            events = [stored.event for stored in log.read()]
        assert not [e for e in events if isinstance(e, CommitStepFailed)]
        assert [e.attempt for e in events if isinstance(e, TaskFailed)] == [1]
        (chosen,) = [f for e in events if isinstance(e, TaskSucceeded) for r in e.results for f in r.output_files]
        (late,) = zombie.wrote
        assert late["path"] != chosen.path and late["checksum"] != chosen.checksum  # a file of its own, never theirs
        (failed,) = [e for e in events if isinstance(e, TaskFailed)]
        output = str(tmp_path / "task-output")
        assert chosen.folder == attempt_output_dir(output, failed.run_id, failed.task_id, 2)
        # The zombie's file is where attempt 1 of either engine puts its file, under the same name.
        mine = Path(attempt_output_dir(output, failed.run_id, failed.task_id, 1))
        assert Path(str(late["path"])).relative_to(mine) == Path(chosen.path).relative_to(chosen.folder)
        (published,) = [p for p in (tmp_path / "published").rglob("*.avro")]
        assert hashlib.sha256(published.read_bytes()).hexdigest() == chosen.checksum  # the chosen attempt's content
        assert not Path(str(late["path"])).exists()  # removed by the run's clean-up
        if engine == "records":  # the clean-up of what is left after a run's end is the launcher's, on both engines
            (after_end,) = release(folder, 2)  # the zombie writes again, after the run ended
            assert Path(str(after_end["path"])).exists()
            plain = load_job_config(write_job(tmp_path, url, "full", None, **keys, **{"source.class": PLAIN_SOURCE}))
            second = JobLauncher(plain, spark=spark).run()
            assert second.status is RunStatus.COMMITTED, second.error
            assert not Path(str(after_end["path"])).exists()  # removed by the next run's clean-up
        assert_exactly_once(url, tmp_path)  # and nothing published twice
    finally:
        stop(folder)


def stop(folder: Path) -> None:
    """End the zombie process if it still lives (it ends by itself after its rounds, or their timeout)."""
    pid = folder / "pid"
    if pid.exists():
        with suppress(ProcessLookupError):
            os.kill(int(pid.read_text()), signal.SIGKILL)
