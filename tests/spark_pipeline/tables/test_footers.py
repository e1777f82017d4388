"""Each data file's footer read once per table commit, and what the tables record of it the same as before: on real
tables (pyiceberg's SQL catalog on SQLite, delta-rs) and real Parquet files of many kinds. The Iceberg data file
entries oncelog makes from the footers it read are compared, field by field, with those pyiceberg's own `add_files`
path makes of the files (`parquet_file_to_data_file`, what a commit used before); a Delta commit's add actions with
what each file says of itself (size, time, rows, the period its column's values lie in)."""

from __future__ import annotations

import datetime as dt
import decimal
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile

from events.commit import DeltaCommitStep, TableCommitStep
from filesystems.local import LOCAL
from spark_pipeline.commit.tables import TableMember, commit_together
from spark_pipeline.tables import iceberg
from spark_pipeline.tables.partitioning import PARTITION_SPEC, Period, TablePartitioning
from spark_pipeline.tables.storage import LOCAL_STORAGE

HOUR = 3_600_000
START = 1_795_651_200_000  # 2026-11-26T00:00Z
FILES = 6
LONG_TEXT = "a text longer than sixteen characters, truncated in the bounds " * 2


def mixed_file(folder: Path, index: int, hour: int = 0, row_groups: int = 1, statistics: bool = True) -> str:
    """A file of one UTC hour (from START) with a column of each kind a table bound is made of: epoch millis, a
    timestamp, a date, an int32, doubles with NaN, long texts (truncated bounds), binaries, decimals, a record,
    nulls."""
    rows = 6
    millis = [START + hour * HOUR + index * 60_000 + r * 1000 for r in range(rows)]
    table = pa.table({
        "offset": pa.array(range(index * rows, (index + 1) * rows), pa.int64()),
        "timestamp": pa.array(millis, pa.int64()),
        "at": pa.array([m * 1000 for m in millis], pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2026, 11, 26)] * rows, pa.date32()),
        "small": pa.array([index - r for r in range(rows)], pa.int32()),
        "ratio": pa.array([float("nan") if r == 2 else r / 3 for r in range(rows)], pa.float64()),
        "text": pa.array([None if r == 1 else f"{LONG_TEXT}{index}{r}" for r in range(rows)]),
        "blob": pa.array([bytes([255, index, r]) * 12 for r in range(rows)], pa.binary()),
        "price": pa.array([decimal.Decimal(f"{index}.{r}5") for r in range(rows)], pa.decimal128(9, 2)),
        "nested": pa.array([{"a": r, "b": f"n{r}"} for r in range(rows)]),
        "empty": pa.array([None] * rows, pa.string()),
    })
    path = folder / "data" / f"h{hour}" / f"f{index}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=max(1, rows // row_groups), write_statistics=statistics)
    return str(path)


def iceberg_step(warehouse: Path, number: int, partitioning: TablePartitioning | None) -> TableCommitStep:
    spec = {PARTITION_SPEC: partitioning.encode()} if partitioning is not None else {}
    return TableCommitStep(catalog_uri=f"sqlite:///{warehouse / 'iceberg-catalog.db'}", catalog_name="oncelog",
                           warehouse=str(warehouse), table="lake.events", location=str(warehouse / "lake" / "events"),
                           commit_id=f"job/ds.{number}/seq", summary={"oncelog.dataset": f"ds.{number}", **spec},
                           group="job/run-1/00000000", member=number)


def entry(data_file: DataFile) -> dict[str, Any]:
    """What a manifest records of a data file."""
    return {name: getattr(data_file, name) for name in ENTRY_FIELDS} | {"partition": repr(data_file.partition)}


ENTRY_FIELDS = ("content", "file_path", "file_format", "record_count", "file_size_in_bytes", "column_sizes",
                "value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds", "key_metadata",
                "split_offsets", "equality_ids", "sort_order_id")
"""Every field of a data file entry (its spec id is set from the manifest it is written to)."""


PARTITIONINGS = {"none": None, "hour-of-millis": TablePartitioning("timestamp", Period.HOUR),
                 "hour-of-timestamp": TablePartitioning("at", Period.HOUR),
                 "day-of-date": TablePartitioning("day", Period.DAY)}


@pytest.mark.parametrize("partitioning", PARTITIONINGS.values(), ids=PARTITIONINGS.keys())
def test_icebergs_data_files_from_the_footers_read_once_are_pyicebergs_own(
        partitioning: TablePartitioning | None, tmp_path: Path) -> None:
    location = tmp_path / "lake" / "events"
    files = [mixed_file(location, i, hour=i % 2, row_groups=1 + i % 3, statistics=i != 4) for i in range(FILES)]
    step = iceberg_step(tmp_path, 0, partitioning)
    assert commit_together([TableMember(step, (files[0],))], LOCAL)[0].done == "executed"
    table = iceberg.load_table(iceberg.TableRef.of(step))
    assert table is not None
    ours = iceberg.data_files(table.metadata, LOCAL_STORAGE.footers(files, "test"))
    theirs = [parquet_file_to_data_file(table.io, table.metadata, path) for path in files]
    assert [entry(f) for f in ours] == [entry(f) for f in theirs]
    assert any(f.lower_bounds for f in ours) and any(f.partition for f in ours) == (partitioning is not None)


METRICS = {"default": {}, "counts": {"write.metadata.metrics.default": "counts"},
           "none": {"write.metadata.metrics.default": "none"},
           "full": {"write.metadata.metrics.default": "full"},
           "truncate-4": {"write.metadata.metrics.default": "truncate(4)"},
           "per-column": {"write.metadata.metrics.default": "none", "write.metadata.metrics.column.text": "truncate(3)",
                          "write.metadata.metrics.column.offset": "counts",
                          "write.metadata.metrics.column.timestamp": "full"}}


@pytest.mark.parametrize("properties", METRICS.values(), ids=METRICS.keys())
def test_icebergs_data_files_under_every_metrics_mode_are_pyicebergs_own(properties: dict[str, str],
                                                                        tmp_path: Path) -> None:
    """The table's metrics modes, and Parquet's other ways to hold a column (decimals as integers, floats, texts in
    dictionaries of several row groups), give the entries pyiceberg's own path gives."""
    location = tmp_path / "lake" / "events"
    files = [mixed_file(location, i, hour=i % 2, row_groups=1 + i % 3, statistics=i != 4) for i in range(3)]
    step = iceberg_step(tmp_path, 0, TablePartitioning("timestamp", Period.HOUR))
    assert commit_together([TableMember(step, (files[0],))], LOCAL)[0].done == "executed"
    table = iceberg.load_table(iceberg.TableRef.of(step))
    assert table is not None
    for i, store_decimal_as_integer in enumerate((True, False)):
        path = location / "data" / f"kinds-{i}.parquet"
        data = pq.read_table(files[i])
        data = data.set_column(data.schema.get_field_index("ratio"), "ratio",
                               data["ratio"].cast(pa.float32()).cast(pa.float64()))
        pq.write_table(data, path, store_decimal_as_integer=store_decimal_as_integer, row_group_size=2)
        files.append(str(path))
    assert pq.read_metadata(files[-2]).row_group(0).column(8).physical_type == "INT32"
    metadata = table.metadata.model_copy(update={"properties": {**table.metadata.properties, **properties}})
    ours = iceberg.data_files(metadata, LOCAL_STORAGE.footers(files, "test"))
    table.metadata = metadata
    theirs = [parquet_file_to_data_file(table.io, metadata, path) for path in files]
    assert [entry(f) for f in ours] == [entry(f) for f in theirs]


@pytest.fixture
def parquet_opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many Parquet files are opened for their footer or columns (by oncelog, pyiceberg, anyone in process)."""
    opened = [0]
    original = pq.ParquetFile.__init__

    def counting(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> None:
        opened[0] += 1
        original(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "__init__", counting)
    yield opened


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "hourly"])
def test_a_commit_reads_each_data_files_footer_once(kind: str, partitioned: bool, tmp_path: Path,
                                                    parquet_opens: list[int]) -> None:
    hourly = TablePartitioning("timestamp", Period.HOUR) if partitioned else None
    for run in (1, 2):  # the table's creation, then a commit into it
        members = []
        for d in range(FILES):
            if kind == "iceberg":
                location = tmp_path / "lake" / "events"
                step: TableCommitStep | DeltaCommitStep = iceberg_step(tmp_path, d, hourly).model_copy(
                    update={"group": f"job/run-{run}/00000000"})
            else:
                location = tmp_path / "events"
                spec = {PARTITION_SPEC: hourly.encode()} if hourly is not None else {}
                step = DeltaCommitStep(table="events", location=str(location), app_id=f"oncelog/job/ds.{d}",
                                       version=run, commit_id=f"job/ds.{d}/run-{run}", metadata=spec)
            members.append(TableMember(step, (mixed_file(location, d + FILES * run, hour=run),)))
        parquet_opens[0] = 0
        assert [o.done for o in commit_together(members, LOCAL)] == ["executed"] * FILES
        assert parquet_opens == [FILES]


def test_deltas_add_actions_say_what_each_file_says_of_itself(tmp_path: Path) -> None:
    root = tmp_path / "events"
    hourly = TablePartitioning("timestamp", Period.HOUR)
    files = [mixed_file(root, i, hour=i % 3, row_groups=1 + i % 2, statistics=i != 2) for i in range(FILES)]
    members = [TableMember(DeltaCommitStep(table="events", location=str(root), app_id=f"oncelog/job/ds.{i}",
                                           version=1, commit_id=f"job/ds.{i}/seq",
                                           metadata={PARTITION_SPEC: hourly.encode()}), (path,))
               for i, path in enumerate(files)]
    assert [o.done for o in commit_together(members, LOCAL)] == ["executed"] * FILES
    actions = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True)).to_pylist()
    found = {str(root / a["path"]): a for a in actions}
    assert set(found) == set(files)
    for path in files:
        action, stat = found[path], os.stat(path)
        stamps = pq.read_table(path, columns=["timestamp"])["timestamp"]
        low, high = (v.as_py() for v in pc.min_max(stamps).values())
        assert low // HOUR == high // HOUR
        assert action["size_bytes"] == stat.st_size
        assert action["modification_time"] == stat.st_mtime_ns // 1_000_000
        assert action["num_records"] == pq.read_metadata(path).num_rows
        assert action["partition.timestamp_hour"] == low - low % HOUR


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_record_list_and_map_columns_of_texts_are_taken_by_the_table_they_made(kind: str, tmp_path: Path) -> None:
    """The table reads its texts back as Arrow's large (or view) strings, inside records, lists and maps too."""
    for run in (1, 2):
        location = tmp_path / ("lake/events" if kind == "iceberg" else "events")
        path = location / "data" / f"run-{run}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"offset": pa.array([run], pa.int64()),
                                 "nested": pa.array([{"a": run, "b": f"n{run}"}]),
                                 "tags": pa.array([["x", "y"]], pa.list_(pa.string())),
                                 "labels": pa.array([[("k", "v")]], pa.map_(pa.string(), pa.string()))}), path)
        step: TableCommitStep | DeltaCommitStep = (
            iceberg_step(tmp_path, 0, None).model_copy(update={"group": f"job/run-{run}/00000000"})
            if kind == "iceberg" else
            DeltaCommitStep(table="events", location=str(location), app_id="oncelog/job/ds", version=run,
                            commit_id=f"job/ds/run-{run}", metadata={}))
        outcome = commit_together([TableMember(step, (str(path),))], LOCAL)[0]
        assert outcome.done == "executed", outcome.error
