"""Table warehouses beyond local disk, on a real S3-compatible server: a Delta table in a bucket, reached with the
job's s3a keys (never recorded in the step), committed once, found again by its app transaction, each file in its
time partition, read back through deltalake's reader; and the warehouses that cannot work refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from events.commit import DeltaCommitStep
from filesystems.router import FileSystems
from filesystems.urls import join
from localservers.s3 import LocalS3
from spark_pipeline.commit.steps import DeltaCommitCommitStep
from spark_pipeline.jobfile.config import JobConfigError
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.tables.delta_publisher import location_problem
from spark_pipeline.tables.partitioning import PARTITION_SPEC, Period, TablePartitioning
from spark_pipeline.tables.storage import TableStorage
from tests.remote_fs_plugin import s3_settings
from tests.spark_pipeline.tables.test_delta_job import delta_job

HOUR = 3_600_000
START = 1_795_651_200_000  # 2026-11-26T00:00Z
APP = "oncelog/job/ds"


def upload(storage: TableStorage, path: str, hour: int, first: int) -> str:
    """A Parquet file of three records of one UTC hour (`timestamp` epoch millis) written to the bucket."""
    fs, where = storage.arrow(path)
    millis = pa.array([START + hour * HOUR + m * 60_000 for m in (0, 30, 59)], pa.int64())
    offsets = pa.array(range(first, first + 3), pa.int64())
    pq.write_table(pa.table({"offset": offsets, "timestamp": millis}), where, filesystem=fs)
    return path


def test_a_delta_table_in_a_bucket_commits_once_partitioned_and_reads_back(s3: LocalS3, s3_folder: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for key in s3.env():
        monkeypatch.delenv(key)  # the job's s3a keys alone reach the server: the step is given them by the run
    fs = FileSystems.of(s3_settings(s3))
    storage = TableStorage.of(fs)
    table = join(s3_folder, "lake", "events")
    assert location_problem(table, storage) is None  # a new table in a bucket that answers
    spec = DeltaCommitStep(table="lake.events", location=table, app_id=APP, version=1, commit_id="job/ds/run-1",
                           metadata={PARTITION_SPEC: TablePartitioning("timestamp", Period.HOUR).encode()})
    files = [upload(storage, join(table, "data", "ds", f"p0_{h}.parquet"), h, 3 * h) for h in (3, 4)]
    step = DeltaCommitCommitStep(spec, files, fs)
    assert not step.verify()
    step.execute()
    assert step.verify()
    step.execute()  # a rerun that missed the record: found by its app transaction, not committed again

    read = DeltaTable(table, storage_options=storage.delta_options(table))
    assert read.transaction_version(APP) == 1
    assert [h.get("oncelog.commit-id") for h in read.history()] == ["job/ds/run-1"]
    assert read.metadata().partition_columns == ["timestamp_hour"]
    hour_4 = read.to_pyarrow_table(filters=[("timestamp_hour", "=", START + 4 * HOUR)])
    assert sorted(hour_4["offset"].to_pylist()) == [12, 13, 14]
    assert [uri.rsplit("/", 1)[1] for uri in read.file_uris(
        file_pruning_predicate=[("timestamp_hour", "=", str(START + 4 * HOUR))])] == ["p0_4.parquet"]
    assert read.to_pyarrow_table().num_rows == 6
    assert location_problem(table, storage) is None  # an existing table opens


@pytest.mark.parametrize(("publisher", "warehouse", "says"), [
    ("delta", "hdfs://nn:8020/warehouse", "libhdfs.so"),
    ("delta", "webhdfs://nn:9870/warehouse", "libhdfs.so"),
    ("iceberg", "hdfs://nn:8020/warehouse", "libhdfs.so"),
    ("iceberg", "s3a://bucket/warehouse", "endpoint and credentials"),
])
def test_a_warehouse_that_cannot_work_is_refused_naming_the_key_and_why(publisher: str, warehouse: str, says: str,
                                                                       tmp_path: Path) -> None:
    keys = {"data.publisher.final.dir": warehouse}
    if publisher == "iceberg":
        keys |= {"data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher",
                 "iceberg.table": "lake.events", "delta.table": ""}
    with pytest.raises(JobConfigError) as refused:
        config_from_properties(delta_job(tmp_path, **keys))
    [problem] = [p.message for p in refused.value.problems if "data.publisher.final.dir" in p.message]
    assert says in problem and warehouse in problem
