"""How a job commits: the settings that travel together from the job file to every committer and shard task."""

from __future__ import annotations

from dataclasses import dataclass

from spark_pipeline.commit.faults import NO_FAULTS, FaultInjector
from spark_pipeline.commit.sink import FENCE_FRESH_S
from spark_pipeline.commit.steps import PublishRoots
from spark_pipeline.jobfile.config import (
    DEFAULT_EXECUTORS_MIN_DATASETS,
    DEFAULT_MOVES_AHEAD_MIN_DATASETS,
    CommitOnExecutors,
)

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_PARALLELISM = 32


@dataclass(frozen=True)
class CommitSettings:
    """Where steps may move files, how often a sequence may fail before it is abandoned, how many commit at once,
    how datasets are sharded and where shards commit, and the fault injector of the crash matrix."""

    roots: PublishRoots
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    parallelism: int = DEFAULT_PARALLELISM
    shards: int | None = None
    """`job.commit.shards`: how many shards datasets are split into; None: one per partition of the events topic."""
    on_executors: CommitOnExecutors = CommitOnExecutors.AUTO
    """`job.commit.on.executors`: shards plan, apply and recover on executors (TRUE), the driver commits them all
    (FALSE), or shards from `executors_min_datasets` datasets on (AUTO)."""
    executors_min_datasets: int = DEFAULT_EXECUTORS_MIN_DATASETS
    batch_records: bool = True
    """`job.commit.batch.records`: plans and completions of many datasets appended as one record per batch."""
    fence_fresh_s: float = FENCE_FRESH_S
    """`job.commit.fence.fresh.ms`: how long a probe that found the writer not fenced answers later checks (sink)."""
    moves_ahead_min: int = DEFAULT_MOVES_AHEAD_MIN_DATASETS
    """`job.commit.moves.ahead.min.datasets`: from how many datasets committed one after another (local disk) their
    folder moves are made ahead by another process (`commit.ahead`)."""
    faults: FaultInjector = NO_FAULTS

    def in_shards(self, datasets: int) -> bool:
        """Whether a commit (or recovery) of `datasets` datasets runs in shard tasks rather than on the driver."""
        if self.on_executors is CommitOnExecutors.AUTO:
            return datasets >= self.executors_min_datasets
        return self.on_executors is CommitOnExecutors.TRUE

    def shard_count(self, partitions: int) -> int:
        """How many shards a topic of `partitions` partitions allows: each shard is a set of whole partitions."""
        return max(1, min(self.shards or partitions, partitions))
