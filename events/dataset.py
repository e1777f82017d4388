"""Dataset-state transitions, written by the HighWatermark and DatasetState commit steps."""

from __future__ import annotations

from pydantic import Field

from events.model import Count, DatasetEvent, Name


class WatermarkAdvanced(DatasetEvent):
    """One partition's committed high watermark moved from low_watermark to value."""

    partition: Name
    low_watermark: int
    value: int

    @property
    def key(self) -> str:
        return self.commit_key("watermark", self.partition)


class DatasetStateCommitted(DatasetEvent):
    """A dataset's state after a commit sequence: watermarks per partition and what was published."""

    watermarks: dict[str, int]
    records_published: Count = 0
    files_published: Count = 0
    properties: dict[str, str] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.commit_key("DATASET_STATE")


class DatasetReleased(DatasetEvent):
    """An operator released a dataset blocked by its abandoned sequence (`sequence_id`): runs pull it again."""

    reason: str = ""

    @property
    def key(self) -> str:
        return self.commit_key("RELEASED")
