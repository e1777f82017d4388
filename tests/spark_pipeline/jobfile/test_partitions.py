"""The time partitioner's keys and folders (pure): Gobblin's layout and defaults, Hive's option, the event time a
record gives, and a clear error naming the key for what Gobblin would reject."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.errors import ConfigError
from events.job import WorkUnitSpec
from events.task import OutputFile
from filesystems.router import FileSystems
from spark_pipeline.constructs import WriterDestination
from spark_pipeline.jobfile.config import JobConfigError
from spark_pipeline.jobfile.partitions import (
    ColumnKind,
    EventColumn,
    TimePartitioning,
    avro_kind,
    event_columns,
    partitioning_of,
    partitioning_problems,
    record_millis,
)
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.writers import AvroDataWriterBuilder, PartitionedDataWriter
from tests.fault.pipeline_checks import avro_records

AVRO = "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner"
NOV_26_03_UTC = 1_795_662_000_000  # 2026-11-26T03:00:00Z


def partitioning(**keys: str) -> TimePartitioning:
    built = partitioning_of({"writer.partitioner.class": AVRO, **{k.replace("_", "."): v for k, v in keys.items()}})
    assert built is not None
    return built


def test_gobblin_defaults_are_hourly_folders_in_los_angeles_time() -> None:
    assert partitioning().path(NOV_26_03_UTC) == "2026/11/25/19"  # Gobblin's default zone: America/Los_Angeles
    hourly = partitioning(**{"writer.partition.prefix": "hourly", "writer.partition.timezone": "UTC"})
    assert hourly.path(NOV_26_03_UTC) == "hourly/2026/11/26/03"
    assert partitioning(**{"writer.partition.granularity": "day", "writer.partition.timezone": "UTC",
                           "writer.partition.suffix": "s"}).path(NOV_26_03_UTC) == "2026/11/26/s"


def test_the_hive_style_is_key_value_folders_for_the_granularity() -> None:
    hive = {"oncelog.writer.partition.style": "hive", "writer.partition.timezone": "UTC"}
    assert partitioning(**hive).path(NOV_26_03_UTC) == "dt=2026-11-26/hr=03"
    assert partitioning(**hive, **{"writer.partition.granularity": "DAY"}).path(NOV_26_03_UTC) == "dt=2026-11-26"
    quoted = partitioning(**{"writer.partition.pattern": "'year='yyyy/'month='MM", "writer.partition.timezone": "UTC"})
    assert quoted.path(NOV_26_03_UTC) == "year=2026/month=11"
    assert partitioning_problems({"writer.partitioner.class": AVRO,
                                  "writer.partition.pattern": "'year='yyyy/''dd"})  # a quote is no folder text


@given(st.integers(min_value=-2_000_000_000_000, max_value=5_000_000_000_000),
       st.sampled_from(["UTC", "Europe/Berlin", "America/Los_Angeles", "Australia/Lord_Howe", "Asia/Kolkata"]))
def test_a_folder_is_the_local_time_truncated_to_the_hour(millis: int, zone: str) -> None:
    local = dt.datetime.fromtimestamp(millis // 1000, tz=ZoneInfo(zone))
    assert partitioning(**{"writer.partition.timezone": zone}).path(millis) == local.strftime("%Y/%m/%d/%H")
    minutes = partitioning(**{"writer.partition.timezone": zone, "writer.partition.pattern": "yy-M-d/H_m_s"})
    assert minutes.path(millis) == (f"{local.year % 100:02d}-{local.month}-{local.day}/{local.hour}_{local.minute}_"
                                    f"{local.second}")


@pytest.mark.parametrize(("keys", "key", "says"), [
    ({"writer.partitioner.class": "org.apache.gobblin.writer.partitioner.WorkUnitStateWriterPartitioner"},
     "writer.partitioner.class", "time-based"),
    ({"writer.partition.pattern": "yyyy/MM/qq"}, "writer.partition.pattern", "Illegal pattern component: qq"),
    ({"writer.partition.pattern": "yyyy/MMM"}, "writer.partition.pattern", "does not format"),
    ({"writer.partition.pattern": "'unclosed"}, "writer.partition.pattern", "not closed"),
    ({"writer.partition.pattern": "yyyy MM"}, "writer.partition.pattern", "' '"),
    ({"writer.partition.pattern": "'static'"}, "writer.partition.pattern", "no date field"),
    ({"writer.partition.granularity": "WEEK"}, "writer.partition.granularity", "'WEEK' is not a granularity"),
    ({"writer.partition.timezone": "Mars/Phobos"}, "writer.partition.timezone", "not a time zone"),
    ({"writer.partition.timeUnit": "FORTNIGHTS"}, "writer.partition.timeUnit", "not a time unit"),
    ({"writer.partition.prefix": "../up"}, "writer.partition.prefix", "'..'"),
    ({"oncelog.writer.partition.style": "hive", "writer.partition.pattern": "yyyy"},
     "oncelog.writer.partition.style", "drop the style"),
])
def test_a_key_gobblin_or_oncelog_would_reject_is_named(keys: dict[str, str], key: str, says: str) -> None:
    problems = partitioning_problems({"writer.partitioner.class": AVRO, **keys})
    assert [k for k, _ in problems] == [key] and says in problems[0][1], problems


def test_validate_reports_every_partitioner_problem_on_its_line_and_a_key_without_the_partitioner() -> None:
    base = {"job.name": "p", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
            "writer.staging.dir": "/tmp/p/s", "writer.output.dir": "/tmp/p/o", "data.publisher.final.dir": "/tmp/p/f"}
    with pytest.raises(JobConfigError) as caught:
        config_from_properties({**base, "writer.partitioner.class": AVRO, "writer.partition.pattern": "yyyy/ww/qq",
                                "writer.partition.timezone": "Nowhere"})
    assert {p.key for p in caught.value.problems} == {"writer.partition.pattern", "writer.partition.timezone"}
    with pytest.raises(JobConfigError, match="'writer.partition.columns' is set but 'writer.partitioner.class'"):
        config_from_properties({**base, "writer.partition.columns": "ts"})
    config = config_from_properties({**base, "writer.partitioner.class": AVRO, "writer.partition.columns": "a.b"})
    assert config.properties["writer.partition.columns"] == "a.b"


SCHEMA = {"type": "record", "name": "R", "fields": [
    {"name": "header", "type": ["null", {"type": "record", "name": "H", "fields": [
        {"name": "time", "type": ["null", "long"]}]}]},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "name", "type": "string"},
    {"name": "timestamp", "type": ["null", "long"]},
]}


def test_the_event_time_is_the_first_column_with_a_value_then_the_record_timestamp() -> None:
    parts = partitioning(**{"writer.partition.columns": "header.time, missing, day",
                            "writer.partition.timeUnit": "SECONDS", "writer.partition.timezone": "UTC"})
    columns = event_columns(parts, lambda c: avro_kind(SCHEMA, c), ["header", "day", "name", "timestamp"])
    assert [(c.path, c.kind) for c in columns] == [(("header", "time"), ColumnKind.NUMBER),
                                                   (("day",), ColumnKind.DAYS), (("timestamp",), ColumnKind.MILLIS)]
    assert record_millis(columns, parts, {"header": {"time": 1_795_662_000}, "day": 1}) == NOV_26_03_UTC
    assert record_millis(columns, parts, {"header": None, "day": 2}) == 2 * 86_400_000
    assert record_millis(columns, parts, {"header": None, "day": None, "timestamp": 5}) == 5
    assert record_millis(columns, parts, {"header": None, "day": None, "timestamp": None}) is None
    as_read = {"header": None, "day": dt.date(2026, 11, 26), "timestamp": None}  # fastavro's logical types
    assert record_millis(columns, parts, as_read) == NOV_26_03_UTC - 3 * 3_600_000
    moment = dt.datetime(2026, 11, 26, 4, 0, 0, 999, tzinfo=ZoneInfo("Europe/Berlin"))
    assert record_millis([EventColumn(("t",), ColumnKind.MILLIS)], parts, {"t": moment}) == NOV_26_03_UTC


def test_a_partition_column_the_records_lack_or_that_holds_no_time_is_named() -> None:
    def kinds(columns: str) -> None:
        event_columns(partitioning(**{"writer.partition.columns": columns}), lambda c: avro_kind(SCHEMA, c),
                      ["header", "day", "name", "timestamp"])

    with pytest.raises(ConfigError, match=r"'header\.tme' is not a column .*'header', 'day'"):
        kinds("header.tme")
    with pytest.raises(ConfigError, match="'name' is of Avro type string"):
        kinds("name")
    no_timestamp = {**SCHEMA, "fields": SCHEMA["fields"][:3]}
    with pytest.raises(ConfigError, match="writer.partition.columns is not set and the records written have "
                                                   "no 'timestamp'"):
        event_columns(partitioning(), lambda c: avro_kind(no_timestamp, c), ["header", "day", "name"])


def test_the_partitioned_writer_writes_one_file_per_partition_named_by_the_range(tmp_path: Path) -> None:
    config = config_from_properties({
        "job.name": "p", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "writer.staging.dir": str(tmp_path / "s"), "writer.output.dir": str(tmp_path / "o"),
        "data.publisher.final.dir": str(tmp_path / "f"), "writer.partitioner.class": AVRO,
        "writer.partition.timezone": "UTC", "oncelog.writer.partition.style": "hive"})
    parts = partitioning_of(config.properties)
    assert parts is not None
    unit = WorkUnitSpec(work_unit_id="t:0@10", dataset_urn="t", partition="t:0", low_watermark=10,
                        expected_high_watermark=13, estimated_records=3)
    destination = WriterDestination(config=config, branch=config.branch(0), schema=SCHEMA, work_unit=unit, run_id="r",
                                    task_id="task-0", attempt=1, staging_dir=str(tmp_path / "s"),
                                    output_dir=str(tmp_path / "o"), fs=FileSystems.of({}))
    writer = PartitionedDataWriter(AvroDataWriterBuilder(config), destination, parts)
    hour = 3_600_000
    for time in (NOV_26_03_UTC, NOV_26_03_UTC + 2 * hour, NOV_26_03_UTC + 1):
        writer.write({"header": None, "day": 0, "name": "x", "timestamp": time})
    files = writer.commit(13)
    assert [(f.partition, f.records, Path(f.path).relative_to(tmp_path / "o").as_posix()) for f in files] == [
        ("dt=2026-11-26/hr=03", 2, "t/dt=2026-11-26/hr=03/t%3A0_10-13.avro"),
        ("dt=2026-11-26/hr=05", 1, "t/dt=2026-11-26/hr=05/t%3A0_10-13.avro")]
    assert all(isinstance(f, OutputFile) for f in files) and writer.records_written == 3
    assert len(avro_records(tmp_path / "o")) == 3 and not list((tmp_path / "s").rglob("*.tmp"))
    with pytest.raises(ValueError, match="has no time: none of timestamp holds a value"):
        writer.write({"header": None, "day": 0, "name": "x", "timestamp": None})
