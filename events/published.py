"""DatasetPublished: what a completed commit sequence published, so that a downstream consumer can register the new
data without another lookup — the published files (final paths, sizes, checksums, records) and the watermark range
of each partition.

Emitted in the same atomic batch as the sequence's CommitSequenceCompleted. A dataset with many files is appended in
parts (events.model.Parted: part i of n, each under its own key), so that no record grows past the codec's limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, TypedDict

from events.commit import (
    CommitStepSpec,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.model import (
    MAX_PART_BYTES,
    Count,
    DatasetEvent,
    Frozen,
    Name,
    Parted,
    SequenceFields,
)


class PublishedFile(Frozen):
    """A file the sequence published: its final path, size, checksum and records (None: the log does not say), and
    its time partition ("" when the job has no partitioner, and in events of version 1)."""

    path: str
    size: Count
    checksum: str
    records: Count | None = None
    partition: str = ""


class WatermarkRange(Frozen):
    """The source range a partition's published data covers: from low_watermark (inclusive) to high_watermark."""

    partition: Name
    low_watermark: int
    high_watermark: int


class DatasetPublished(DatasetEvent, Parted):
    """What a completed sequence published (in parts when its files are many); the totals are the whole dataset's.

    v2: each file names its time partition (`PublishedFile.partition`; `by_partition` lists the files per partition).
    """

    SCHEMA_VERSION: ClassVar[int] = 2
    PARTED_FIELDS: ClassVar[tuple[str, ...]] = ("files", "watermarks")

    files: tuple[PublishedFile, ...] = ()
    watermarks: tuple[WatermarkRange, ...] = ()
    """The partitions whose watermark the sequence moved."""
    files_published: Count = 0
    records_published: Count = 0
    bytes_published: Count = 0

    @property
    def key(self) -> str:
        return self.part_key(self.commit_key("PUBLISHED"))

    def fits_at_a_glance(self, budget: int) -> bool:
        """A file weighs at most its texts' lengths and 40 (approx_size: 37), a range its partition's and 32 (23)."""
        return lists_fit(self.files, self.watermarks, budget)

    @property
    def by_partition(self) -> dict[str, tuple[PublishedFile, ...]]:
        """This part's files per time partition ("": the files of a job without a partitioner), in order."""
        grouped: dict[str, list[PublishedFile]] = {}
        for file in self.files:
            grouped.setdefault(file.partition, []).append(file)
        return {partition: tuple(files) for partition, files in sorted(grouped.items())}


def watermark_range(step: HighWatermarkStep) -> WatermarkRange:
    """The source range a planned watermark move publishes."""
    return WatermarkRange.trusted(partition=step.partition, low_watermark=step.low_watermark, high_watermark=step.value)


def lists_fit(files: Sequence[PublishedFile], watermarks: Sequence[WatermarkRange], budget: int) -> bool:
    """Whether a DatasetPublished's lists surely weigh at most `budget`: a file at most its texts' lengths and 40
    (approx_size: 37), a range its partition's and 32 (23)."""
    size = sum([len(f.path) + len(f.checksum) + len(f.partition) + 40 for f in files])
    return size + sum([len(w.partition) + 32 for w in watermarks]) <= budget


class PublishedFields(TypedDict):
    """A DatasetPublished's payload, as keyword arguments (of it, or of a batch's entry)."""

    files: tuple[PublishedFile, ...]
    watermarks: tuple[WatermarkRange, ...]
    files_published: int
    records_published: int
    bytes_published: int


def published_fields(steps: Sequence[CommitStepSpec]) -> PublishedFields:
    """What a completed sequence published, from its planned steps (the FsRename steps carry each file's records
    since plan version 2): the fields of its DatasetPublished, built unvalidated (`trusted`): every value comes from
    a recorded plan."""
    files = tuple([PublishedFile.trusted(path=s.dst, size=s.size, checksum=s.checksum, records=s.records,
                                         partition=s.partition)
                   for s in steps if isinstance(s, FsRenameStep)])
    ranges = tuple([watermark_range(s) for s in steps if isinstance(s, HighWatermarkStep)])
    state = next((s for s in steps if isinstance(s, DatasetStateStep)), None)
    records = state.records_published if state else sum(f.records or 0 for f in files)
    return PublishedFields(files=files, watermarks=ranges, files_published=len(files), records_published=records,
                           bytes_published=sum([f.size for f in files]))


def published_event(sequence: SequenceFields, steps: Sequence[CommitStepSpec]) -> DatasetPublished:
    """What a completed sequence published, whole (an event sink appends it in parts), from its planned steps."""
    return DatasetPublished.trusted(**sequence, **published_fields(steps))


def published_events(sequence: SequenceFields, steps: Sequence[CommitStepSpec], budget: int = MAX_PART_BYTES
                     ) -> list[DatasetPublished]:
    """The DatasetPublished parts of a completed sequence (`published_event` in parts whose lists weigh at most
    `budget`), as a reader of the log sees them."""
    whole = published_event(sequence, steps)
    return [part for part in whole.in_parts(budget) if isinstance(part, DatasetPublished)]
