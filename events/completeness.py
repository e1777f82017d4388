"""Partition completeness: a time partition of a dataset is complete once every source partition feeding it was
published past the partition's end in event time (plus the allowed lateness), or was caught up with its source at
the run's planning. Both events are effects of a commit sequence's Completeness step: recorded in the batch that
completes the sequence, so exactly once with it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from events.model import Count, DatasetEvent, Name


class CompletenessEventKind(StrEnum):
    """The completeness events, by the name the log records (what `follow` and the subscribers filter on)."""

    PARTITION_COMPLETED = "PartitionCompleted"
    EVENT_TIME_ADVANCED = "EventTimeAdvanced"


class PartitionCompleted(DatasetEvent):
    """A time partition of the dataset is complete: every record of it the sources held has been published (under
    the allowed lateness); never recorded twice for a partition of a dataset, never retracted."""

    partition: Name
    """The time partition (its folder below the dataset's: `2026/11/26/03`)."""
    start_ms: int
    end_ms: int
    """The partition's event times, [start_ms, end_ms) in epoch milliseconds."""
    horizon_ms: int
    """The dataset's complete horizon that completed it: every partition ending at or before it is complete."""
    markers: tuple[str, ...] = ()
    """The `_SUCCESS` files written into the partition's folders (none unless writer.partition.success.file)."""

    @property
    def key(self) -> str:
        return self.commit_key("partition", self.partition, "COMPLETED")


class EventTimeAdvanced(DatasetEvent):
    """Where a commit sequence left the dataset's event time: per source partition the latest event time published
    (or the planning time, for one caught up with its source), the horizon, the partitions still open, and the
    records it published into partitions already complete (late data: published all the same)."""

    frontiers: dict[str, int] = Field(default_factory=dict)
    """Per source partition (`topic:3`), epoch milliseconds up to which it has been published."""
    horizon_ms: int | None = None
    """The dataset's complete horizon after the sequence (None: a source partition has published no event time)."""
    open_partitions: dict[str, int] = Field(default_factory=dict)
    """The time partitions published and not complete after the sequence, with their end (epoch ms)."""
    late_records: dict[str, Count] = Field(default_factory=dict)
    """Per time partition, the records this sequence published into it after it was complete."""
    late_files: dict[str, Count] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.commit_key("EVENT_TIME")
