"""Each task attempt writes its task output under a folder of its own, and a failure moving a file there says what
failed: the rename, its files and the error's errno (never an error of handling the output afterwards)."""

from __future__ import annotations

import random
from pathlib import Path

from events.commit import FsRenameStep
from events.task import TaskFailed
from filesystems.local import LOCAL
from spark_pipeline.constructs import DatasetOutput
from spark_pipeline.engines.attempts import AttemptPlan, run_attempts
from spark_pipeline.engines.records.flow import build_constructs
from spark_pipeline.engines.records.task import run_attempt, run_task
from spark_pipeline.publisher import BaseDataPublisher
from spark_pipeline.writers import path_segment
from tests.sim.faults import Fault, FaultPlan, FaultyFileSystem
from tests.spark_pipeline.engines.test_task_failures import PARTITION, RUN_ID, URN, Recorder, config_of, one_task


class RenameFails(FaultPlan):
    """Every rename fails with EIO; nothing else fails."""

    def decide(self, call: str) -> Fault | None:
        return Fault.IO_ERROR if call == "rename" else None


def test_a_task_output_rename_failing_with_eio_names_the_rename_the_file_and_the_eio(tmp_path: Path) -> None:
    """The last attempt (partial commit) of a work unit whose file cannot be renamed into task output: its error is
    the rename's, and nothing is left of it to publish (its writer is not committed a second time)."""
    config = config_of(tmp_path, **{"source.synthetic.fail.attempts": "0", "task.maxretries": "0"})
    constructs = build_constructs(config)
    constructs.fs = FaultyFileSystem(LOCAL, RenameFails(random.Random(0)))
    emit = Recorder()
    outcome = run_attempts(config, RUN_ID, one_task(),
                           lambda part, attempt, last: run_attempt(constructs, RUN_ID, part, attempt, last),
                           AttemptPlan.of(config), emit, sleep=lambda _: None)
    failed = emit.events[-1]
    assert isinstance(failed, TaskFailed) and not outcome.succeeded and outcome.partial == ()
    target = (tmp_path / "task-output" / RUN_ID / "task-00000" / "attempt-1" / path_segment(URN)
              / f"{path_segment(PARTITION)}_0-10.avro")
    assert failed.cause.startswith("FileSystemError: the rename of "), failed.cause
    assert f" to the task output {target} failed: EIO: " in failed.cause, failed.cause
    assert "then handling" not in failed.error and "closed file" not in failed.error, failed.error
    assert f"{target} failed: EIO" in str(outcome.error)


def test_each_attempt_writes_under_its_own_folder_and_publishes_under_the_file_name_alone(tmp_path: Path) -> None:
    """Attempt 1 fails, attempt 2 succeeds: its file lies in attempt 2's own folder, which its result records, and
    the publisher plans it to the same name under the publish folder as before attempts had folders."""
    config = config_of(tmp_path, **{"source.synthetic.fail.attempts": "1"})
    outcome = run_task(config, RUN_ID, one_task(), Recorder(), sleep=lambda _: None)
    assert outcome.succeeded and outcome.attempts == 2
    (result,) = outcome.results
    (file,) = result.output_files
    folder = tmp_path / "task-output" / RUN_ID / "task-00000" / "attempt-2"
    name = f"{path_segment(URN)}/{path_segment(PARTITION)}_0-10.avro"
    assert (file.folder, file.path) == (str(folder), str(folder / name))
    assert not (tmp_path / "task-output" / RUN_ID / "task-00000" / "attempt-1").exists()  # aborted: nothing kept
    (planned,) = BaseDataPublisher(config).plan(RUN_ID, [DatasetOutput(URN, (result,))], {})
    rename = planned.steps[0]
    assert isinstance(rename, FsRenameStep) and rename.dst == str(tmp_path / "published" / name), rename
