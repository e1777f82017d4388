"""The example of Gobblin's exactly-once design, as a program the crash tests run (and kill) in a subprocess.

Topic MyTopic; a task wrote three files; partitions 0 and 1 reached offsets 100 and 200. Five CommitSteps
publish them: three FsRename steps, two HighWatermark steps.

    python -m tests.fault.gobblin_example LOG_URL BASE_DIR commit|recover
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from events.commit import FsRenameStep, HighWatermarkStep
from events.log import open_log
from filesystems.local import LOCAL
from spark_pipeline.commit.faults import NO_FAULTS, FaultInjector
from spark_pipeline.commit.session import open_session
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.steps import PublishRoots
from spark_pipeline.commit.store import CommitStepStore

JOB = "MyTopicIngestion"
URN = "MyTopic"
FILES = ("MyTopic/2015-12-09/1.avro", "MyTopic/2015-12-09/2.avro", "MyTopic/2015-12-10/1.avro")
WATERMARKS = {"MyTopic:0": 100, "MyTopic:1": 200}


def write_task_output(base: Path) -> None:
    """The task's three output files, each with content of its own."""
    for i, name in enumerate(FILES):
        path = base / "task-output" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"records of {name}\n".encode() * (100 + i))


def settings(base: Path, faults: FaultInjector = NO_FAULTS) -> CommitSettings:
    return CommitSettings(PublishRoots.of([base / "task-output"], [base / "job-output"]), faults=faults)


def commit(url: str, base: Path) -> None:
    """Put the five steps in the CommitStepStore and commit the sequence (where the crash tests kill us)."""
    with open_log(url) as log, open_session(log, JOB, settings(base, FaultInjector.from_env(os.environ)), LOCAL) as s:
        store = CommitStepStore(s.committer, run_id="run-1")
        for name in FILES:
            src, dst = base / "task-output" / name, base / "job-output" / name
            store.put(JOB, URN, FsRenameStep(src=str(src), dst=str(dst), size=src.stat().st_size,
                                             checksum=LOCAL.checksum(str(src))))
        for partition, value in WATERMARKS.items():
            store.put(JOB, URN, HighWatermarkStep(partition=partition, low_watermark=0, value=value))
        sequence = store.get_commit_sequence(JOB, URN)
        assert sequence is not None
        print(sequence.commit().outcome)


def recover(url: str, base: Path) -> None:
    """What the next run does first: finish every pending sequence of the job."""
    with open_log(url) as log, open_session(log, JOB, settings(base), LOCAL) as s:
        for result in s.committer.recover(JOB):
            print(result.outcome)


if __name__ == "__main__":
    log_url, base_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    {"commit": commit, "recover": recover}[mode](log_url, base_dir)
