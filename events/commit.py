"""Commit-sequence transitions: the write-ahead log of Gobblin's exactly-once design, a sequence per dataset per run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from events.model import Count, DatasetEvent, Frozen, Name, Parted, approx_size


class FsRenameStep(Frozen):
    """Move src to dst; done when dst holds size bytes with this checksum and src is gone. `records`: how many the
    file holds (for downstream consumers; None in plans recorded before version 2); `partition`: the time partition
    the file is in ("" when the job has none, and in plans recorded before version 3)."""

    kind: Literal["FsRename"] = "FsRename"
    src: str
    dst: str
    size: Count
    checksum: str
    records: Count | None = None
    partition: str = ""


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


TABLE_COMMIT_ID = "oncelog.commit-id"
"""The snapshot summary property naming the sequence that made the snapshot (`job/dataset/sequence`)."""
TABLE_WATERMARKS = "oncelog.watermarks"
"""The snapshot summary property holding each source partition's published range (`{"partition": [low, high]}`)."""
TABLE_GROUP = "oncelog.group"
"""The snapshot summary property naming the group whose sequences the snapshot commits (`job/run/<digest>`)."""
TABLE_MEMBERS = "oncelog.members"
"""The snapshot summary property listing the group's sequences it commits, by number (`0-41,43-99`)."""


def encode_members(numbers: Iterable[int]) -> str:
    """Members' numbers as runs (`0-41,43,45-99`): a run's thousands of sequences in a few characters."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ",".join(f"{low}" if low == high else f"{low}-{high}" for low, high in runs)


def decode_members(text: str) -> frozenset[int]:
    """The numbers `encode_members` wrote; a ValueError naming the text if it is no such list."""
    numbers: set[int] = set()
    for run in filter(None, text.split(",")):
        low, _, high = run.partition("-")
        try:
            numbers.update(range(int(low), int(high or low) + 1))
        except ValueError as e:
            raise ValueError(f"{TABLE_MEMBERS} {text!r} is no list of member numbers") from e
    return frozenset(numbers)


class TableCommitStep(Frozen):
    """Append the files the sequence's FsRename steps published to an Iceberg table, in one snapshot whose summary
    carries `commit_id` (and `summary`): done when the table's history holds a snapshot with that id."""

    kind: Literal["TableCommit"] = "TableCommit"
    catalog_uri: str
    """The catalog's URL (pyiceberg's SQL catalog on SQLite by default; http(s):// a REST catalog)."""
    catalog_name: Name
    warehouse: str
    """Where the catalog creates tables (the job's data.publisher.final.dir)."""
    table: str
    """The table's identifier, `namespace.name`."""
    location: str
    """The table's location, if oncelog creates it: the published files lie under its `data/` folder."""
    commit_id: str
    """`job/dataset/sequence`: the snapshot summary property `oncelog.commit-id` that verify() looks for."""
    summary: dict[str, str] = Field(default_factory=dict)
    """The other snapshot summary properties: run, dataset, sequence and each partition's watermark range."""
    group: str | None = None
    """`job/run/<digest>`: the sequences planned together (a run's, or a commit shard's), whose table commits are made
    together (one snapshot, whose summary's `oncelog.group` and `oncelog.members` name them); None in plans recorded
    before version 5 (a snapshot per sequence, named by `commit_id`)."""
    member: Count | None = None
    """The sequence's number in its group (what the snapshot's `oncelog.members` lists)."""


class PartitionBounds(Frozen):
    """A time partition the Completeness step completes: its folder, its event times and its `_SUCCESS` markers."""

    partition: Name
    start_ms: int
    end_ms: int
    markers: tuple[str, ...] = ()


class CompletenessStep(Frozen):
    """Record where the sequence leaves the dataset's event time, and complete the time partitions it completes
    (their `_SUCCESS` markers written first): done when the dataset's state holds this sequence's EventTimeAdvanced."""

    kind: Literal["Completeness"] = "Completeness"
    frontiers: dict[str, int] = Field(default_factory=dict)
    horizon_ms: int | None = None
    open_partitions: dict[str, int] = Field(default_factory=dict)
    completes: tuple[PartitionBounds, ...] = ()
    late_records: dict[str, Count] = Field(default_factory=dict)
    late_files: dict[str, Count] = Field(default_factory=dict)


class DeltaCommitStep(Frozen):
    """Add the files the sequence's FsRename steps published to a Delta table, in one write transaction carrying the
    app transaction (`app_id`, `version`) of Delta's idempotent writes and `commit_id` (and `metadata`) in its commit
    info: done when the table's latest transaction of `app_id` is `version`."""

    kind: Literal["DeltaCommit"] = "DeltaCommit"
    table: str
    """The table's name in the job file (`delta.table`), for messages."""
    location: str
    """The table's root (its `_delta_log/` folder inside): the published files lie under its `data/` folder."""
    app_id: str
    """`oncelog/<job>/<dataset>`: the app transaction's id, one per dataset."""
    version: Annotated[int, Field(ge=1)]
    """The app transaction's version: one more than the dataset's previous table commit's."""
    commit_id: str
    """`job/dataset/sequence`: the commit info's `oncelog.commit-id`."""
    metadata: dict[str, str] = Field(default_factory=dict)
    """The commit info's other custom metadata: run, dataset, sequence and each partition's watermark range."""


TABLE_STEPS = (TableCommitStep, DeltaCommitStep)
"""The step kinds that commit files to a table (a table's history, not the log, says whether they are done)."""

CommitStepSpec = Annotated[FsRenameStep | HighWatermarkStep | DatasetStateStep | TableCommitStep | DeltaCommitStep
                           | CompletenessStep,
                           Field(discriminator="kind")]


def quick_size(step: CommitStepSpec) -> int:
    """`approx_size` of a step, bounded from above field by field for the steps every plan holds (FsRename,
    HighWatermark, DatasetState): weighing a plan is then a few lengths a step, not a walk of each step's fields."""
    if isinstance(step, FsRenameStep):
        return len(step.src) + len(step.dst) + len(step.checksum) + len(step.partition) + 48
    if isinstance(step, HighWatermarkStep):
        return len(step.partition) + 40
    if isinstance(step, DatasetStateStep):  # exactly approx_size's walk: its kind, two counts, two maps
        return (39 + sum([len(partition) + 12 for partition in step.watermarks])
                + sum([len(name) + len(value) + 4 for name, value in step.properties.items()]))
    return approx_size(step)


class CommitSequencePlanned(DatasetEvent, Parted):
    """The steps that publish one dataset's output of a run, recorded before any of them runs.

    v2: in parts when the steps are many (one FsRename per file); each part holds the next steps in order, and a
    sequence is applied only once every part of its plan is folded. v3: each FsRename names its file's time partition,
    and a step may be a TableCommit. v4: a step may be a DeltaCommit, or a Completeness step (partition
    completeness).
    v5: a TableCommit step may belong to its run's group (`group`, `member`): one snapshot for many sequences.
    """

    SCHEMA_VERSION: ClassVar[int] = 5
    PARTED_FIELDS: ClassVar[tuple[str, ...]] = ("steps",)

    steps: tuple[CommitStepSpec, ...]
    total_steps: Count = 0
    """The steps of the whole plan when it is in parts (0 when it is in one: then all are in `steps`)."""

    @property
    def step_count(self) -> int:
        """The steps of the whole plan."""
        return self.total_steps if self.parts > 1 else len(self.steps)

    def part_fields(self) -> dict[str, Any]:
        return {"total_steps": len(self.steps)}

    def fits_at_a_glance(self, budget: int) -> bool:
        """Each step weighs at most its `quick_size`."""
        return sum([quick_size(step) for step in self.steps]) <= budget

    @property
    def key(self) -> str:
        # The step count is part of the identity: CommitStepStore.put extends a plan, and each plan is its own payload.
        return self.part_key(self.commit_key("PLANNED", self.step_count))


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


STEP_TIMINGS_MAX = 4000
"""The most steps whose timings a CommitSequenceCompleted carries (8 bytes each: well under the event size limit)."""


class CommitSequenceCompleted(DatasetEvent):
    """Every step of the sequence is done: the dataset's output of the run is published exactly once.

    v2: a step executed by the completing attempt has no CommitStepApplied of its own (one found done has one,
    `verified`; one applied before a failed attempt has one too): this event says all `steps_applied` are done, and
    how many the completing attempt executed and verified. v3: and how long each of them took (`step_ms`).
    """

    SCHEMA_VERSION: ClassVar[int] = 3

    duration_ms: float = 0.0
    steps_applied: Count | None = None
    """The plan's step count; None in events of version 1, whose steps each had a CommitStepApplied."""
    executed: Count = 0
    verified: Count = 0
    step_ms: tuple[float, ...] = ()
    """v3: how long each step took the completing attempt, by plan index (0.0 for a step applied before it; empty
    in events of earlier versions, and for plans of more than STEP_TIMINGS_MAX steps)."""

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
