"""Table warehouses beyond local disk, on a real HDFS and a real S3-compatible server: Delta in a bucket and on HDFS
(hdfs-native, no libhdfs), Iceberg in a bucket (pyiceberg's Arrow FileIO) and on HDFS (a FileIO over oncelog's file
systems). The table is reached with the job's Hadoop keys (never recorded in the step), committed once, found again
by a fresh step (a crash after the commit), and read back through deltalake's and pyiceberg's readers; a job run
publishes into each new kind; the warehouses and catalogs that cannot work are refused naming the key."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from events.commit import DeltaCommitStep, TableCommitStep
from events.job import ENGINE_PROPERTY, JobRunStarted
from events.log import open_log
from filesystems.router import FileSystems
from filesystems.urls import join
from localservers.hdfs import LocalHdfs
from localservers.s3 import LocalS3
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.commit.steps import DeltaCommitCommitStep, TableCommitCommitStep
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.engines.choice import choose
from spark_pipeline.jobfile.config import TaskEngineKind
from spark_pipeline.jobfile.paths import absolute_config
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.preflight import preflight
from spark_pipeline.tables import iceberg
from spark_pipeline.tables.delta_publisher import location_problem
from spark_pipeline.tables.partitioning import PARTITION_SPEC, Period, TablePartitioning
from spark_pipeline.tables.storage import TableStorage
from tests.remote_fs_plugin import Remote, hdfs_settings, s3_settings
from tests.spark_pipeline.tables.test_delta_job import delta_job

HOUR = 3_600_000
START = 1_795_651_200_000  # 2026-11-26T00:00Z
APP = "oncelog/job/ds"
DELTA_PUBLISHER = "spark_pipeline.tables.delta_publisher.DeltaTablePublisher"


def upload(fs: FileSystems, path: str, hour: int, first: int) -> str:
    """A Parquet file of three records of one UTC hour (`timestamp` epoch millis), written through our file systems."""
    millis = pa.array([START + hour * HOUR + m * 60_000 for m in (0, 30, 59)], pa.int64())
    offsets = pa.array(range(first, first + 3), pa.int64())
    buffer = io.BytesIO()
    pq.write_table(pa.table({"offset": offsets, "timestamp": millis}), buffer)
    file = fs.open_write(path)
    file.write(buffer.getvalue())
    file.close()
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
    files = [upload(fs, join(table, "data", "ds", f"p0_{h}.parquet"), h, 3 * h) for h in (3, 4)]
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


def test_a_delta_table_on_hdfs_commits_once_partitioned_and_reads_back(hdfs: LocalHdfs, hdfs_folder: str) -> None:
    """Delta on HDFS: delta-rs commits over HDFS's RPC, oncelog reads each file's size and footer over WebHDFS."""
    fs = FileSystems.of(hdfs_settings(hdfs))
    storage = TableStorage.of(fs)
    table = join(hdfs_folder, "lake", "events")
    assert location_problem(table, storage) is None  # a new table on an HDFS that answers
    spec = DeltaCommitStep(table="lake.events", location=table, app_id=APP, version=1, commit_id="job/ds/run-1",
                           metadata={PARTITION_SPEC: TablePartitioning("timestamp", Period.HOUR).encode()})
    files = [upload(fs, join(table, "data", "ds", f"p0_{h}.parquet"), h, 3 * h) for h in (3, 4)]
    DeltaCommitCommitStep(spec, files, fs).execute()
    again = DeltaCommitCommitStep(spec, files, FileSystems.of(hdfs_settings(hdfs)))
    assert again.verify()  # a fresh step (the run died after the commit) finds it by its app transaction
    again.execute()  # and a rerun commits nothing again

    read = DeltaTable(table, storage_options=storage.delta_options(table) or None)
    assert [h.get("oncelog.commit-id") for h in read.history()] == ["job/ds/run-1"]
    assert read.metadata().partition_columns == ["timestamp_hour"]
    assert sorted(read.to_pyarrow_table(filters=[("timestamp_hour", "=", START + 4 * HOUR)])["offset"].to_pylist()
                  ) == [12, 13, 14]
    assert sorted(read.to_pyarrow_table()["offset"].to_pylist()) == [9, 10, 11, 12, 13, 14]
    added = pa.table(read.get_add_actions(flatten=True)).to_pylist()
    sizes = {a["path"].rsplit("/", 1)[1]: a["size_bytes"] for a in added}
    assert sizes == {f"p0_{h}.parquet": fs.size(f) for h, f in zip((3, 4), files, strict=True)}
    assert location_problem(table, storage) is None  # an existing table opens


def test_an_iceberg_table_on_a_remote_warehouse_commits_once_and_reads_back(
        remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Iceberg on HDFS (a FileIO over our file systems) and in a bucket (Arrow's FileIO with the s3a keys): one
    snapshot, found again by a fresh step, read back by a scan; the catalog a local SQLite file named by the job."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)  # the job's s3a keys alone reach the server, given to the catalog at commit time
    fs = FileSystems.of(remote.settings)
    warehouse = remote.root
    location = join(warehouse, "lake", "events")
    spec = TableCommitStep(catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}", catalog_name=f"t-{remote.kind}",
                           warehouse=warehouse, table="lake.events", location=location, commit_id="job/ds/run-1",
                           summary={PARTITION_SPEC: TablePartitioning("timestamp", Period.HOUR).encode()})
    files = [upload(fs, join(location, "data", "ds", f"p0_{h}.parquet"), h, 3 * h) for h in (3, 4)]
    step = TableCommitCommitStep(spec, files, fs)
    assert not step.verify()
    step.execute()
    again = TableCommitCommitStep(spec, files, FileSystems.of(remote.settings))
    assert again.verify()  # a fresh step (the run died after the commit) finds the snapshot by its commit id
    again.execute()  # and a rerun appends nothing again

    table = iceberg.load_table(iceberg.TableRef.of(spec, TableStorage.of(fs)))
    assert table is not None
    assert [s.summary.additional_properties.get("oncelog.commit-id") for s in table.snapshots()
            if s.summary is not None] == ["job/ds/run-1"]
    assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == [9, 10, 11, 12, 13, 14]
    assert [f.file.file_path for f in table.scan(row_filter=f"timestamp >= {START + 4 * HOUR}").plan_files()
            ] == [files[1]]  # hour(…) partitions: one file read
    assert fs.list_files(join(location, "metadata"))  # the table's metadata lies in the warehouse


def run_job(remote: Remote, base: Path, name: str, runs: int, *, spark: SparkSession | None = None, **keys: str
            ) -> FileSystems:
    """`runs` runs (in this process) of a synthetic job of two datasets, three records each per run, its staging,
    task output and warehouse on the remote store, the store's keys in the job file only; the job's pre-flight checks
    (`oncelog validate`) find nothing first. With `spark`, `task.engine: auto` chooses the DataFrame engine (what
    `oncelog run` would run it on: engine_for asks `choose`), whose Spark writes the Parquet files into the store;
    without, the records engine runs it (Parquet by the default writer)."""
    root = join(remote.root, name)
    job = {"job.name": name, "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
           "source.synthetic.datasets": 2, "source.synthetic.partitions": 1, "source.synthetic.records.per.run": 3,
           "source.synthetic.payload.bytes": 0, "writer.staging.dir": join(root, "staging"),
           "writer.output.dir": join(root, "task-output"), "data.publisher.final.dir": join(root, "warehouse"),
           "writer.output.format": "PARQUET", "task.engine": "records" if spark is None else "auto",
           "oncelog.log.url": f"sqlite:///{base / name}.db", **remote.settings, **keys}
    path = base / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    config = load_job_config(path)
    assert preflight(absolute_config(config)) == []
    choice = choose(config)
    assert choice.kind is (TaskEngineKind.RECORDS if spark is None else TaskEngineKind.DATAFRAME), choice
    fs = FileSystems.of(config.properties)
    with open_log(config.log_url) as log:
        for _ in range(runs):
            engine = InProcessTaskEngine(log.writer, slots=1, sleep=lambda _: None) if spark is None else None
            result = JobLauncher(config, spark=spark, engine=engine, fs=fs, log=log).run()
            assert result.status is RunStatus.COMMITTED, result.error
        if spark is not None:  # what each run recorded: the engine validate chose
            assert [e.event.properties[ENGINE_PROPERTY] for e in log.read() if isinstance(e.event, JobRunStarted)
                    ] == [TaskEngineKind.DATAFRAME.value] * runs
    return fs


def test_jobs_publish_into_iceberg_and_delta_tables_on_a_remote_warehouse(
        remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs of an Iceberg job and of a Delta job on HDFS, then in a bucket, on the records engine: each record in
    the table once, one commit per run (its two datasets' sequences together), read back by pyiceberg's scan and
    deltalake's reader."""
    publish_into_tables_and_read_back(remote, tmp_path, monkeypatch, None)


def test_dataframe_engine_jobs_publish_into_iceberg_and_delta_tables_on_a_remote_warehouse(
        remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: SparkSession) -> None:
    """The same jobs on the DataFrame engine (`auto` chooses it, validate and run agree): Spark writes the Parquet
    files into attempt folders on HDFS or in the bucket (its HDFS client, S3A), oncelog moves and commits them as for
    the records engine; each record in the table once, one commit per run."""
    publish_into_tables_and_read_back(remote, tmp_path, monkeypatch, spark)


def publish_into_tables_and_read_back(remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      spark: SparkSession | None) -> None:
    """Two runs of an Iceberg job and of a Delta job (on the DataFrame engine with `spark`), the tables read back."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)  # the job file's keys alone reach the store
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    fs = run_job(remote, tmp_path, "ice", runs=2, spark=spark, **{
        "data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher",
        "iceberg.table": "lake.events", "iceberg.catalog.uri": catalog})
    warehouse = join(remote.root, "ice", "warehouse")
    ref = iceberg.TableRef("oncelog", catalog, warehouse, "lake.events", join(warehouse, "lake", "events"),
                           TableStorage.of(fs))
    table = iceberg.load_table(ref)
    assert table is not None
    rows = table.scan().to_arrow()
    assert sorted(zip(rows["dataset"].to_pylist(), rows["offset"].to_pylist(), strict=True)) == sorted(
        (f"ice.{d}", o) for d in (0, 1) for o in range(6))
    assert [s.summary.additional_properties["oncelog.members"] for s in table.snapshots()
            if s.summary is not None] == ["0-1", "0-1"]
    with open_log(f"sqlite:///{tmp_path / 'ice'}.db") as log:  # verify reads the table with the store's keys
        assert [v.kind for v in verify(log, fs=fs, tables=TableStorage.of(fs).iceberg_properties).violations] == []
        assert [v.kind for v in verify(log, fs=fs).violations] == ["table-unreadable"]  # without them: named

    run_job(remote, tmp_path, "dl", runs=2, spark=spark, **{"delta.table": "lake.events",
                                                "data.publisher.type": DELTA_PUBLISHER})
    location = join(remote.root, "dl", "warehouse", "lake", "events")
    read = DeltaTable(location, storage_options=TableStorage.of(fs).delta_options(location) or None)
    rows = read.to_pyarrow_table()
    assert sorted(zip(rows["dataset"].to_pylist(), rows["offset"].to_pylist(), strict=True)) == sorted(
        (f"dl.{d}", o) for d in (0, 1) for o in range(6))
    assert [h["oncelog.sequences"] for h in read.history() if "oncelog.sequences" in h] == ["2", "2"]


def test_a_remote_warehouse_whose_catalog_or_store_does_not_answer_is_found_naming_the_key(tmp_path: Path) -> None:
    """`oncelog validate`'s checks: an Iceberg catalog that does not answer names iceberg.catalog.uri; a Delta table
    on an HDFS whose NameNode does not answer names delta.table (nothing listens on port 1)."""
    hdfs = {"data.publisher.final.dir": "hdfs://127.0.0.1:1/warehouse", "dfs.namenode.http-address": "127.0.0.1:1",
            "writer.builder.class": "tests.sim.tables.ParquetDataWriterBuilder", "task.engine": "records",
            "writer.staging.dir": "hdfs://127.0.0.1:1/staging", "writer.output.dir": "hdfs://127.0.0.1:1/output"}
    ice = absolute_config(config_from_properties(delta_job(tmp_path, **hdfs, **{
        "data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher", "delta.table": "",
        "iceberg.table": "lake.events", "iceberg.catalog.uri": "http://127.0.0.1:1/catalog"})))
    [catalog] = [f.message for f in preflight(ice) if f.key == "iceberg.catalog.uri"]
    assert "'iceberg.catalog.uri': the catalog of Iceberg table 'lake.events': the catalog http://127.0.0.1:1/" \
           "catalog does not answer" in catalog
    dl = absolute_config(config_from_properties(delta_job(tmp_path, **hdfs)))
    [table] = [f.message for f in preflight(dl) if f.key == "delta.table"]
    assert "the table's folder hdfs://127.0.0.1:1/warehouse/lake/events cannot be read" in table
    assert "no NameNode answers WebHDFS at http://127.0.0.1:1" in table
