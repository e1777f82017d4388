"""Commit-sequence transitions: the write-ahead log of Gobblin's exactly-once design, one sequence per dataset per run."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from events.model import Count, DatasetEvent, Frozen, Name


class FsRenameStep(Frozen):
    """Move src to dst; done when dst holds size bytes with this checksum and src is gone."""

    kind: Literal["FsRename"] = "FsRename"
    src: str
    dst: str
    size: Count
    checksum: str


class HighWatermarkStep(Frozen):
    """Advance one partition's high watermark from low_watermark to value (the source range published)."""

    kind: Literal["HighWatermark"] = "HighWatermark"
    partition: Name
    low_watermark: int
    value: int


class DatasetStateStep(Frozen):
    """Commit the dataset's state: its watermarks and what this sequence published."""

    kind: Literal["DatasetState"] = "DatasetState"
    watermarks: dict[str, int]
    records_published: Count = 0
    files_published: Count = 0
    properties: dict[str, str] = Field(default_factory=dict)


CommitStepSpec = Annotated[Union[FsRenameStep, HighWatermarkStep, DatasetStateStep], Field(discriminator="kind")]


class CommitSequencePlanned(DatasetEvent):
    """The steps that publish one dataset's output of a run, recorded before any of them runs."""

    steps: tuple[CommitStepSpec, ...]

    @property
    def key(self) -> str:
        # The step count is part of the identity: CommitStepStore.put extends a plan, and each plan is its own payload.
        return self.commit_key("PLANNED", len(self.steps))


class CommitStepApplied(DatasetEvent):
    """Step step_index is done: outcome says whether it ran now or was found already done by verify()."""

    step_index: Count
    outcome: Literal["executed", "verified"]
    duration_ms: float = 0.0

    @property
    def key(self) -> str:
        return self.commit_key("step", self.step_index, "APPLIED")


class CommitStepFailed(DatasetEvent):
    """Attempt number `attempt` at step step_index failed with error."""

    step_index: Count
    attempt: Annotated[int, Field(ge=1)]
    error: str

    @property
    def key(self) -> str:
        return self.commit_key("step", self.step_index, "FAILED", self.attempt)


class CommitSequenceCompleted(DatasetEvent):
    """Every step of the sequence is done: the dataset's output of the run is published exactly once."""

    duration_ms: float = 0.0

    @property
    def key(self) -> str:
        return self.commit_key("COMPLETED")


class CommitStepRolledBack(DatasetEvent):
    """An applied FsRename step of an abandoned sequence was undone before its dataset was released: the file moved
    back from the destination to the source (`moved_back`), or was found there already (`already_back`)."""

    step_index: Count
    outcome: Literal["moved_back", "already_back"]

    @property
    def key(self) -> str:
        return self.commit_key("step", self.step_index, "ROLLED_BACK")


class CommitSequenceAbandoned(DatasetEvent):
    """The sequence kept failing and was given up for this dataset alone; error is the last failure."""

    attempts: Count
    error: str

    @property
    def key(self) -> str:
        return self.commit_key("ABANDONED")
