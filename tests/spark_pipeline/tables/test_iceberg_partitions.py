"""An Iceberg table's partition spec from the job's time partitioner, on a real pyiceberg SQL catalog (SQLite) and real
Parquet files laid out as the time partitioner lays them out: the table created with the spec matching the column's
type (a time transform of a timestamp, `truncate` of epoch millis), each file registered in its partition (a scan
filtered on the column reads only that partition's file), and a table created before without a spec kept as it is."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pyiceberg.transforms import DayTransform, HourTransform, TruncateTransform

from events.commit import TableCommitStep
from spark_pipeline.commit.steps import CommitStepError, TableCommitCommitStep
from spark_pipeline.jobfile.partitions import TimeUnit, partitioning_of
from spark_pipeline.jobs import load_job_config
from spark_pipeline.tables import iceberg
from spark_pipeline.tables.partitioning import PARTITION_SPEC, Period, TablePartitioning, table_partitioning
from spark_pipeline.tables.publisher import IcebergTablePublisher

HOUR = 3_600_000
START = 1_795_651_200_000  # 2026-11-26T00:00Z
PARTITIONER = {"writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedWriterPartitioner"}


def table_step(warehouse: Path, commit_id: str, partitioning: TablePartitioning | None) -> TableCommitStep:
    spec = {PARTITION_SPEC: partitioning.encode()} if partitioning is not None else {}
    return TableCommitStep(catalog_uri=f"sqlite:///{warehouse / 'iceberg-catalog.db'}", catalog_name="oncelog",
                           warehouse=str(warehouse), table="lake.events", location=str(warehouse / "lake" / "events"),
                           commit_id=commit_id, summary={"oncelog.watermarks": '{"p0":[0,3]}', **spec})


def hour_file(warehouse: Path, hour: int, first: int, as_timestamp: bool = False) -> str:
    """A Parquet file of three records of one UTC hour (their `timestamp` epoch millis, or a timestamp), in the hour's
    partition folder as the partitioner names it."""
    millis = [START + hour * HOUR + minute * 60_000 for minute in (0, 30, 59)]
    when = dt.datetime.fromtimestamp(millis[0] / 1000, tz=dt.UTC)
    path = warehouse / "lake" / "events" / "data" / "ds" / when.strftime("%Y/%m/%d/%H") / f"p0_{first}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    stamps = pa.array(millis, pa.int64())
    if as_timestamp:
        stamps = pa.array([m * 1000 for m in millis], pa.timestamp("us", tz="UTC"))
    pq.write_table(pa.table({"offset": pa.array(range(first, first + 3), pa.int64()), "timestamp": stamps}), path)
    return str(path)


def within(table: iceberg.Table, low: str, high: str) -> list[str]:
    """The hour folders of the data files a scan filtered on `low <= timestamp < high` reads."""
    row_filter = f"timestamp >= {low} and timestamp < {high}"
    return [Path(task.file.file_path).parent.name for task in table.scan(row_filter=row_filter).plan_files()]


def test_epoch_millis_hours_make_a_truncate_spec_and_each_file_lands_in_its_hour(tmp_path: Path) -> None:
    hourly = TablePartitioning("timestamp", Period.HOUR)
    step = table_step(tmp_path, "job/ds/run-1", hourly)
    TableCommitCommitStep(step, [hour_file(tmp_path, 3, 0), hour_file(tmp_path, 4, 3)]).execute()
    table = iceberg.load_table(iceberg.TableRef.of(step))
    assert table is not None
    [field] = table.spec().fields
    assert (field.name, field.transform) == ("timestamp_hour", TruncateTransform(HOUR))
    assert sorted(task.file.partition[0] for task in table.scan().plan_files()) == [START + 3 * HOUR,
                                                                                    START + 4 * HOUR]
    assert within(table, str(START + 4 * HOUR), str(START + 5 * HOUR)) == ["04"]  # pruned by the partition
    rows = table.scan(row_filter=f"timestamp >= {START + 4 * HOUR}").to_arrow()
    assert sorted(rows["offset"].to_pylist()) == [3, 4, 5]
    # a later sequence into the existing table: registered in its partition too
    TableCommitCommitStep(table_step(tmp_path, "job/ds/run-2", hourly), [hour_file(tmp_path, 4, 6)]).execute()
    table = iceberg.load_table(iceberg.TableRef.of(step))
    assert table is not None
    assert within(table, str(START + 4 * HOUR), str(START + 5 * HOUR)) == ["04", "04"]
    assert table.scan().to_arrow().num_rows == 9


def test_a_timestamp_column_gets_the_time_transform(tmp_path: Path) -> None:
    daily = TablePartitioning("timestamp", Period.DAY)
    step = table_step(tmp_path, "job/ds/run-1", daily)
    files = [hour_file(tmp_path, 3, 0, as_timestamp=True), hour_file(tmp_path, 27, 3, as_timestamp=True)]
    TableCommitCommitStep(step, files).execute()
    table = iceberg.load_table(iceberg.TableRef.of(step))
    assert table is not None
    [field] = table.spec().fields
    assert (field.name, field.transform) == ("timestamp_day", DayTransform())
    second_day = repr(dt.datetime.fromtimestamp((START + 24 * HOUR) / 1000, tz=dt.UTC).isoformat())
    third_day = repr(dt.datetime.fromtimestamp((START + 48 * HOUR) / 1000, tz=dt.UTC).isoformat())
    assert within(table, second_day, third_day) == ["03"]  # 2026-11-27T03: the second day's file alone
    assert table.scan().to_arrow().num_rows == 6


def test_a_table_created_without_a_spec_keeps_working_unpartitioned(tmp_path: Path) -> None:
    TableCommitCommitStep(table_step(tmp_path, "job/ds/run-1", None), [hour_file(tmp_path, 3, 0)]).execute()
    hourly = table_step(tmp_path, "job/ds/run-2", TablePartitioning("timestamp", Period.HOUR))
    step = TableCommitCommitStep(hourly, [hour_file(tmp_path, 4, 3)])
    step.execute()
    assert step.verify()
    table = iceberg.load_table(iceberg.TableRef.of(hourly))
    assert table is not None
    assert table.spec().fields == ()
    assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == list(range(6))


def test_a_partition_column_the_data_lacks_fails_the_step_naming_the_key(tmp_path: Path) -> None:
    step = table_step(tmp_path, "job/ds/run-1", TablePartitioning("event_time", Period.HOUR))
    with pytest.raises(CommitStepError, match=r"'event_time' \(writer\.partition\.columns\) is not a column"):
        TableCommitCommitStep(step, [hour_file(tmp_path, 3, 0)]).execute()
    assert iceberg.load_table(iceberg.TableRef.of(step)) is None


@pytest.mark.parametrize(("keys", "expected"), [
    ({"writer.partition.granularity": "HOUR"}, TablePartitioning("timestamp", Period.HOUR)),  # Los Angeles: whole hours
    ({"writer.partition.granularity": "DAY", "writer.partition.timezone": "UTC",
      "writer.partition.columns": "event.at", "writer.partition.timeUnit": "SECONDS"},
     TablePartitioning("event.at", Period.DAY, TimeUnit.SECONDS)),
    ({"writer.partition.pattern": "yyyy/MM/dd/HH/mm", "writer.partition.timezone": "UTC"},
     TablePartitioning("timestamp", Period.HOUR)),
    ({"writer.partition.granularity": "DAY"}, None),  # a Los Angeles day spans two UTC days
    ({"writer.partition.granularity": "HOUR", "writer.partition.timezone": "Asia/Kolkata"}, None),  # +05:30
    ({"writer.partition.pattern": "HH", "writer.partition.timezone": "UTC"}, None),  # an hour of every day
    ({"writer.partition.columns": "a,b", "writer.partition.timezone": "UTC"}, None),  # a record may fall back to b
], ids=["hour-la", "day-utc-seconds", "minute-utc", "day-la", "hour-kolkata", "hour-of-day", "two-columns"])
def test_the_spec_follows_the_partitioner_only_where_each_folder_lies_in_one_utc_period(
        keys: dict[str, str], expected: TablePartitioning | None) -> None:
    assert table_partitioning(partitioning_of({**PARTITIONER, **keys})) == expected


def test_the_publisher_asks_for_the_spec_of_its_job_file(tmp_path: Path) -> None:
    job = {"job.name": "ice", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
           "writer.staging.dir": str(tmp_path / "staging"), "writer.output.dir": str(tmp_path / "task-output"),
           "data.publisher.final.dir": str(tmp_path / "warehouse"), "writer.output.format": "PARQUET",
           "task.engine": "dataframe", "data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher",
           "iceberg.table": "lake.events", **PARTITIONER, "writer.partition.timezone": "UTC",
           "writer.partition.granularity": "MONTH"}
    path = tmp_path / "ice.yaml"
    path.write_text(yaml.safe_dump(job))
    summary = IcebergTablePublisher(load_job_config(path)).partition_summary()
    assert TablePartitioning.decode(summary[PARTITION_SPEC]) == TablePartitioning("timestamp", Period.MONTH)
    path.write_text(yaml.safe_dump({k: v for k, v in job.items() if not k.startswith("writer.partition")}))
    assert IcebergTablePublisher(load_job_config(path)).partition_summary() == {}


def test_hours_of_a_timestamp_column_and_months_of_epoch_millis(tmp_path: Path) -> None:
    """Months have no fixed width: a table partitioned by months of epoch millis is created unpartitioned."""
    hourly = table_step(tmp_path / "a", "job/ds/run-1", TablePartitioning("timestamp", Period.HOUR))
    TableCommitCommitStep(hourly, [hour_file(tmp_path / "a", 3, 0, as_timestamp=True)]).execute()
    made = iceberg.load_table(iceberg.TableRef.of(hourly))
    assert made is not None and [f.transform for f in made.spec().fields] == [HourTransform()]
    monthly = table_step(tmp_path / "b", "job/ds/run-1", TablePartitioning("timestamp", Period.MONTH))
    TableCommitCommitStep(monthly, [hour_file(tmp_path / "b", 3, 0)]).execute()
    made = iceberg.load_table(iceberg.TableRef.of(monthly))
    assert made is not None and made.spec().fields == ()
