"""A Delta table's partition column from the job's time partitioner, on real Delta tables (delta-rs) and real Parquet
files laid out as the time partitioner lays them out: the table created with a `<column>_<period>` partition column
of the column's kind, each file's add action carrying its period, deltalake's reader filtered on that column reading
only that partition's files; a file spanning two periods refused; a table made before keeps its partitioning."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from events.commit import DeltaCommitStep
from spark_pipeline.commit.steps import CommitStepError, DeltaCommitCommitStep
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.tables.delta_publisher import DeltaTablePublisher
from spark_pipeline.tables.partitioning import PARTITION_SPEC, Period, TablePartitioning
from tests.spark_pipeline.tables.test_delta_job import delta_job

HOUR = 3_600_000
START = 1_795_651_200_000  # 2026-11-26T00:00Z
PARTITIONER = {"writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedWriterPartitioner"}


def delta_step(table: Path, version: int, partitioning: TablePartitioning | None) -> DeltaCommitStep:
    spec = {PARTITION_SPEC: partitioning.encode()} if partitioning is not None else {}
    return DeltaCommitStep(table="lake.events", location=str(table), app_id="oncelog/job/ds", version=version,
                           commit_id=f"job/ds/run-{version}", metadata={"oncelog.watermarks": '{"p0":[0,3]}', **spec})


def hour_file(table: Path, hours: tuple[int, ...], first: int, as_timestamp: bool = False) -> str:
    """A Parquet file of one record per minute 0, 30, 59 of each of `hours` (UTC, from START), `timestamp` epoch millis
    or a timestamp, in the first hour's partition folder as the partitioner names it."""
    millis = [START + hour * HOUR + minute * 60_000 for hour in hours for minute in (0, 30, 59)]
    when = dt.datetime.fromtimestamp(millis[0] / 1000, tz=dt.UTC)
    path = table / "data" / "ds" / when.strftime("%Y/%m/%d/%H") / f"p0_{first}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    stamps = pa.array(millis, pa.int64())
    if as_timestamp:
        stamps = pa.array([m * 1000 for m in millis], pa.timestamp("us", tz="UTC"))
    offsets = pa.array(range(first, first + len(millis)), pa.int64())
    pq.write_table(pa.table({"offset": offsets, "timestamp": stamps}), path)
    return str(path)


def read_files(table: Path, column: str, value: object) -> list[str]:
    """The hour folders of the data files deltalake reads for `column == value` (pruned by partition values)."""
    uris = DeltaTable(str(table)).file_uris(file_pruning_predicate=[(column, "=", value)])
    return sorted(Path(uri).parent.name for uri in uris)


def offsets(table: Path, column: str, value: object) -> list[int]:
    """The offsets deltalake's reader returns for `column == value`."""
    read = DeltaTable(str(table)).to_pyarrow_table(filters=[(column, "=", value)])
    return sorted(read["offset"].to_pylist())


def test_epoch_millis_hours_make_a_long_partition_column_and_each_file_lands_in_its_hour(tmp_path: Path) -> None:
    table = tmp_path / "lake" / "events"
    hourly = TablePartitioning("timestamp", Period.HOUR)
    DeltaCommitCommitStep(delta_step(table, 1, hourly), [hour_file(table, (3,), 0), hour_file(table, (4,), 3)]
                          ).execute()
    read = DeltaTable(str(table))
    assert read.metadata().partition_columns == ["timestamp_hour"]
    assert read.schema().to_arrow().field("timestamp_hour").type == pa.int64()
    hour_4 = START + 4 * HOUR
    assert read_files(table, "timestamp_hour", str(hour_4)) == ["04"]
    assert offsets(table, "timestamp_hour", hour_4) == [3, 4, 5]
    rows = read.to_pyarrow_table().sort_by("offset")
    assert rows["timestamp_hour"].to_pylist() == [START + 3 * HOUR] * 3 + [hour_4] * 3
    assert rows["timestamp"].to_pylist()[3] == hour_4  # the data's column, unchanged
    # a later sequence into the existing table: its file in its partition too
    DeltaCommitCommitStep(delta_step(table, 2, hourly), [hour_file(table, (4,), 6)]).execute()
    assert read_files(table, "timestamp_hour", str(hour_4)) == ["04", "04"]
    assert offsets(table, "timestamp_hour", hour_4) == [3, 4, 5, 6, 7, 8]
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 9


def test_a_timestamp_column_gets_a_timestamp_partition_column_of_its_period(tmp_path: Path) -> None:
    table = tmp_path / "events"
    daily = TablePartitioning("timestamp", Period.DAY)
    files = [hour_file(table, (3,), 0, as_timestamp=True), hour_file(table, (27,), 3, as_timestamp=True)]
    DeltaCommitCommitStep(delta_step(table, 1, daily), files).execute()
    read = DeltaTable(str(table))
    assert read.metadata().partition_columns == ["timestamp_day"]
    assert read.schema().to_arrow().field("timestamp_day").type == pa.timestamp("us", tz="UTC")
    second_day = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    assert read_files(table, "timestamp_day", "2026-11-27 00:00:00") == ["03"]  # 2026-11-27T03: that day's file
    assert offsets(table, "timestamp_day", second_day) == [3, 4, 5]


def test_a_file_spanning_two_periods_is_refused_naming_it_and_nothing_is_committed(tmp_path: Path) -> None:
    table = tmp_path / "events"
    step = DeltaCommitCommitStep(delta_step(table, 1, TablePartitioning("timestamp", Period.HOUR)),
                                 [hour_file(table, (3, 4), 0)])
    with pytest.raises(CommitStepError, match=r"p0_0\.parquet holds values of 'timestamp' in two hours"):
        step.execute()
    assert not (table / "_delta_log").exists()


def test_a_table_made_before_keeps_its_partitioning(tmp_path: Path) -> None:
    """An unpartitioned table stays so under a partitioned job; a partitioned table refuses a job that no longer
    makes its column, naming the partitioner's keys."""
    table = tmp_path / "events"
    DeltaCommitCommitStep(delta_step(table, 1, None), [hour_file(table, (3,), 0)]).execute()
    DeltaCommitCommitStep(delta_step(table, 2, TablePartitioning("timestamp", Period.HOUR)),
                          [hour_file(table, (4,), 3)]).execute()
    assert DeltaTable(str(table)).metadata().partition_columns == []
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 6

    partitioned = tmp_path / "hourly"
    DeltaCommitCommitStep(delta_step(partitioned, 1, TablePartitioning("timestamp", Period.HOUR)),
                          [hour_file(partitioned, (3,), 0)]).execute()
    with pytest.raises(CommitStepError, match=r"partitioned by timestamp_hour; the job's time partitioner makes none "
                                              r"\(writer\.partitioner\.class"):
        DeltaCommitCommitStep(delta_step(partitioned, 2, None), [hour_file(partitioned, (4,), 3)]).execute()
    assert DeltaTable(str(partitioned)).transaction_version("oncelog/job/ds") == 1


def test_the_publisher_puts_the_partitioning_of_its_job_file_in_the_commit(tmp_path: Path) -> None:
    keys = {**PARTITIONER, "writer.partition.timezone": "UTC", "writer.partition.granularity": "DAY"}
    summary = DeltaTablePublisher(config_from_properties(delta_job(tmp_path, **keys))).partition_summary()
    assert TablePartitioning.decode(summary[PARTITION_SPEC]) == TablePartitioning("timestamp", Period.DAY)
    assert DeltaTablePublisher(config_from_properties(delta_job(tmp_path))).partition_summary() == {}
