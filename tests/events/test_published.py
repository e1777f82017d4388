"""DatasetPublished: what a downstream consumer registers new data from — files, sizes, records, watermark ranges —
in parts that stay small; delivered by `follow` from a real SQLite log."""

from __future__ import annotations

from pathlib import Path

from events.codec import EventCodec
from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepSpec,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.log import open_log
from events.model import LoggedEvent, SequenceFields
from events.published import (
    DatasetPublished,
    PublishedFile,
    WatermarkRange,
    published_events,
)
from replay.subscriptions import event_summary, follow

SEQUENCE: SequenceFields = {"job": "orders", "run_id": "r1", "dataset_urn": "orders.eu", "sequence_id": "r1"}
MAX_EVENT_BYTES = 256 * 1024


def plan(files: int, path_chars: int = 20, partitions: int = 2, records: int | None = 10) -> list[CommitStepSpec]:
    """The steps of a sequence publishing `files` files of `records` records each (None: a plan of version 1)."""
    pad = "x" * max(0, path_chars - 20)
    renames = [FsRenameStep(src=f"/out/r1/{pad}{i:08d}.avro", dst=f"/final/{pad}{i:08d}.avro", size=100 + i,
                            checksum=f"{i:064x}", records=records) for i in range(files)]
    moved = [HighWatermarkStep(partition=f"orders.eu:{p}", low_watermark=10 * p, value=10 * p + 7)
             for p in range(partitions)]
    state = DatasetStateStep(watermarks={m.partition: m.value for m in moved}, records_published=10 * files,
                             files_published=files)
    return [*renames, *moved, state]


def test_a_published_dataset_lists_final_paths_sizes_records_and_watermark_ranges() -> None:
    steps = plan(files=3)
    (event,) = published_events(SEQUENCE, steps)
    assert (event.part, event.parts, event.key) == (0, 1, "commit/orders/orders.eu/r1/PUBLISHED")
    assert event.files == tuple(PublishedFile(path=f"/final/{i:08d}.avro", size=100 + i, checksum=f"{i:064x}",
                                              records=10) for i in range(3))
    assert event.watermarks == (WatermarkRange(partition="orders.eu:0", low_watermark=0, high_watermark=7),
                                WatermarkRange(partition="orders.eu:1", low_watermark=10, high_watermark=17))
    assert (event.files_published, event.records_published, event.bytes_published) == (3, 30, 303)
    unknown = published_events(SEQUENCE, plan(files=3, records=None))[0]  # a plan of version 1: records not known
    assert {f.records for f in unknown.files} == {None} and unknown.records_published == 30


def test_many_files_are_split_into_parts_each_below_256_kib() -> None:
    codec = EventCodec()
    for files, path_chars in ((2_500, 20), (600, 1_000)):  # many files; long paths
        steps = plan(files, path_chars, partitions=1_200)
        parts = published_events(SEQUENCE, steps)
        assert len(parts) > 1 and [p.part for p in parts] == list(range(len(parts)))
        assert {p.parts for p in parts} == {len(parts)} and len({p.key for p in parts}) == len(parts)
        assert parts[1].key == "commit/orders/orders.eu/r1/PUBLISHED/part/1"
        assert [f.path for p in parts for f in p.files] == [s.dst for s in steps if isinstance(s, FsRenameStep)]
        assert len([w for p in parts for w in p.watermarks]) == 1_200
        assert {(p.files_published, p.records_published) for p in parts} == {(files, 10 * files)}
        for part in parts:
            value = codec.encode_value(part)
            assert len(value) < MAX_EVENT_BYTES
            assert codec.decode(value, "t", 0, 0, part.key.encode()) == part


def test_follow_delivers_dataset_published_to_a_subscriber_of_that_type(tmp_path: Path) -> None:
    steps = plan(files=2)
    published = published_events(SEQUENCE, steps)
    with open_log(f"sqlite:///{tmp_path / 'events.db'}") as log:
        log.ensure_topic()
        log.append([CommitSequencePlanned(**SEQUENCE, steps=tuple(steps)), CommitSequenceCompleted(**SEQUENCE),
                    *published])
        seen: list[LoggedEvent] = []
        assert follow(log, "downstream", seen.append, types=["DatasetPublished"], idle_timeout_s=0.5) == 1
    (delivered,) = seen
    assert isinstance(delivered.event, DatasetPublished) and delivered.event == published[0]
    assert [f.path for f in delivered.event.files] == ["/final/00000000.avro", "/final/00000001.avro"]


def test_a_partitioned_plan_lists_its_files_per_time_partition_through_the_codec() -> None:
    hours = ["hourly/2026/11/26/03", "hourly/2026/11/26/04", "hourly/2026/11/26/03"]
    steps = [FsRenameStep(src=f"/out/{i}.avro", dst=f"/final/orders.eu/{hour}/orders.eu%3A{i}_0-7.avro", size=10,
                          checksum=f"{i:064x}", records=3, partition=hour) for i, hour in enumerate(hours)]
    codec = EventCodec()
    planned = CommitSequencePlanned(**SEQUENCE, steps=tuple(steps))
    assert codec.decode(codec.encode_value(planned), "t", 0, 0, planned.key.encode()) == planned
    (event,) = published_events(SEQUENCE, steps)
    assert codec.decode(codec.encode_value(event), "t", 0, 0, event.key.encode()) == event
    assert {hour: [f.path.rsplit("/", 1)[1] for f in files] for hour, files in event.by_partition.items()} == {
        "hourly/2026/11/26/03": ["orders.eu%3A0_0-7.avro", "orders.eu%3A2_0-7.avro"],
        "hourly/2026/11/26/04": ["orders.eu%3A1_0-7.avro"]}
    assert "3 file(s), 9 records, 30 bytes in 2 time partition(s) → " in event_summary(event)  # oncelog follow
    unpartitioned = published_events(SEQUENCE, plan(files=2))[0]
    assert unpartitioned.by_partition.keys() == {""} and "partition" not in event_summary(unpartitioned)
