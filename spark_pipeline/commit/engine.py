"""Where commit shards run: in Spark tasks on the executors, or in this process (the fault simulation, tests).

Both run the same per-shard function (`shards.commit_shard`); the launcher sees only this interface and hands it
the shards to commit, getting back small summaries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from events.log import EventLog
from filesystems.base import FileSystem
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.shards import ShardSummary, ShardWork, commit_shard
from spark_pipeline.constructs import DataPublisher
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobfile.plugins import make_construct


class CommitEngine(ABC):
    """Runs commit shards, one task each, and brings back their summaries."""

    @abstractmethod
    def run(self, config: JobConfig, work: Sequence[ShardWork], settings: CommitSettings) -> list[ShardSummary]:
        """Commit every shard of `work`; ShardLostError when a shard's task died before it could answer."""


class InProcessCommitEngine(CommitEngine):
    """Commits the shards one after another in this process, through `log` and `fs` (faulty ones, in the
    simulation: a simulated crash inside a shard is a crash of the whole process, as on one machine)."""

    def __init__(self, log: EventLog, fs: FileSystem) -> None:
        self.log = log
        self.fs = fs

    def run(self, config: JobConfig, work: Sequence[ShardWork], settings: CommitSettings) -> list[ShardSummary]:
        publisher = job_publisher(config)
        return [commit_shard(shard, self.log, self.fs, settings, publisher) for shard in work]


def job_publisher(config: JobConfig) -> DataPublisher:
    """The job's DataPublisher (`data.publisher.type`): what plans each dataset's sequence."""
    return make_construct(config, "data.publisher.type", config.publisher_type, DataPublisher)
