"""The records engine's default writer writing Parquet (pyarrow): every supported Avro type read back equal, a type it
cannot write refused naming the field and the key, its codecs checked by `oncelog validate`; and `task.engine: auto`
choosing the records engine for a Parquet table job into a remote warehouse, as validate and run both say."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from events.errors import ConfigError
from events.job import WorkUnitSpec
from filesystems.local import LOCAL
from spark_pipeline.constructs import WriterDestination
from spark_pipeline.engines.choice import choose, engine_problems
from spark_pipeline.jobfile.config import JobConfig, JobConfigError, TaskEngineKind
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.writers import AvroDataWriterBuilder, ParquetDataWriter, attempt_output_dir

EVERY_TYPE: dict[str, Any] = {"type": "record", "name": "Event", "namespace": "test", "fields": [
    {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
    {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "s", "type": "string"},
    {"name": "raw", "type": "bytes"},
    {"name": "maybe", "type": ["null", "string"]}, {"name": "later", "type": ["long", "null"]},
    {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
        {"name": "x", "type": "int"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]}},
    {"name": "again", "type": ["null", "Inner"]},
    {"name": "counts", "type": {"type": "map", "values": ["null", "long"]}},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
    {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
    {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
]}


def row(n: int) -> dict[str, Any]:
    """A record of EVERY_TYPE, its values varying with n (every other one with nulls)."""
    return {"b": n % 2 == 0, "i": n, "l": 2**40 + n, "f": 0.5 + n, "d": 1.25 * n, "s": f"s{n}",
            "raw": bytes([n % 256]), "maybe": None if n % 2 else f"m{n}", "later": None if n % 2 else n,
            "inner": {"x": n, "tags": ["a", f"t{n}"]},
            "again": None if n % 2 else {"x": -n, "tags": []}, "counts": {"k": n, "none": None},
            "color": "GREEN" if n % 2 else "RED", "hash": b"\x00\x01\x02" + bytes([n % 256]),
            "ms": dt.datetime(2026, 11, 26, 3, 0, n % 60, 123_000, tzinfo=dt.UTC),
            "us": dt.datetime(2026, 11, 26, 3, 0, n % 60, 123_456, tzinfo=dt.UTC),
            "day": dt.date(2026, 11, 1 + n % 28), "price": Decimal(f"{n}.25")}


def job(base: Path, **keys: str) -> JobConfig:
    """A synthetic job writing Parquet on the records engine under `base`; `keys` add, override or ('') remove keys."""
    properties = {"job.name": "pq", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
                  "writer.staging.dir": str(base / "staging"), "writer.output.dir": str(base / "task-output"),
                  "data.publisher.final.dir": str(base / "final"), "writer.output.format": "PARQUET",
                  "task.engine": "records", **keys}
    return config_from_properties({k: v for k, v in properties.items() if v})


def destination(config: JobConfig, schema: dict[str, Any], partition: str = "") -> WriterDestination:
    """Branch 0 of one work unit of `config`, attempt 1."""
    unit = WorkUnitSpec(work_unit_id="wu-0", dataset_urn="pq.0", partition="p0", low_watermark=0,
                        expected_high_watermark=100)
    output = str(config.branch(0).writer_output_dir)
    return WriterDestination(config=config, branch=config.branch(0), schema=schema, work_unit=unit, run_id="run-1",
                             task_id="task-0", attempt=1, staging_dir=str(config.branch(0).writer_staging_dir),
                             output_dir=attempt_output_dir(output, "run-1", "task-0", 1), fs=LOCAL,
                             partition=partition)


def test_every_supported_type_round_trips_through_one_parquet_file_per_work_unit(tmp_path: Path) -> None:
    config = job(tmp_path)
    writer = AvroDataWriterBuilder(config).build(destination(config, EVERY_TYPE))
    assert isinstance(writer, ParquetDataWriter)
    rows = [row(n) for n in range(20_001)]  # more than two batches, and a short last one
    for record in rows:
        writer.write(record)
    [file] = writer.commit(20_001)

    path = Path(file.path)
    assert path.name == "p0_0-20001.parquet" and path.parent.name == "pq.0"
    assert file.records == 20_001 and file.size == path.stat().st_size == writer.bytes_written
    assert file.folder == str(path.parent.parent) and file.partition == ""
    assert not list((tmp_path / "staging").rglob("*.tmp"))  # moved, not copied
    parquet = pq.ParquetFile(path)
    assert parquet.metadata.row_group(0).column(0).compression == "SNAPPY"
    assert parquet.metadata.num_row_groups == 3
    table = parquet.read()
    assert str(table.schema.field("ms").type) == "timestamp[ms, tz=UTC]"
    assert str(table.schema.field("price").type) == "decimal128(9, 2)"
    assert not table.schema.field("s").nullable and table.schema.field("maybe").nullable
    read = table.to_pylist()
    for got in read:
        got["counts"] = dict(got["counts"])  # Arrow's maps read back as (key, value) pairs
    assert read == rows


def test_an_empty_work_unit_writes_no_file_and_an_aborted_one_leaves_nothing(tmp_path: Path) -> None:
    config = job(tmp_path, **{"writer.codec.type": "zstd"})
    builder = AvroDataWriterBuilder(config)
    assert builder.build(destination(config, EVERY_TYPE)).commit(0) == []
    aborted = builder.build(destination(config, EVERY_TYPE))
    aborted.write(row(1))
    aborted.abort()
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    written = builder.build(destination(config, EVERY_TYPE, partition="hourly/2026/11/26/03"))
    written.write(row(2))
    [file] = written.commit(7)
    assert file.path.endswith("/pq.0/hourly/2026/11/26/03/p0_0-7.parquet") and file.partition.startswith("hourly")
    assert pq.ParquetFile(file.path).metadata.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize(("field", "named"), [
    ({"name": "when", "type": {"type": "int", "logicalType": "time-millis"}}, "field 'when': logical type "
                                                                              "'time-millis'"),
    ({"name": "either", "type": ["null", "int", "string"]}, "field 'either': the union"),
    ({"name": "deep", "type": {"type": "record", "name": "Deep", "fields": [
        {"name": "odd", "type": {"type": "array", "items": ["int", "string"]}}]}}, "field 'deep.odd[]': the union"),
])
def test_an_avro_type_parquet_output_cannot_hold_is_refused_naming_the_field_and_the_key(
        field: dict[str, Any], named: str, tmp_path: Path) -> None:
    config = job(tmp_path)
    schema = {"type": "record", "name": "Bad", "fields": [{"name": "ok", "type": "long"}, field]}
    with pytest.raises(ConfigError) as refused:
        AvroDataWriterBuilder(config).build(destination(config, schema))
    assert str(refused.value).startswith("writer.output.format=PARQUET: dataset 'pq.0': ")
    assert named in str(refused.value)


def test_a_codec_of_another_format_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(JobConfigError) as refused:
        job(tmp_path, **{"writer.codec.type": "deflate"})
    assert "'writer.codec.type'" in str(refused.value) and "not a codec of PARQUET output" in str(refused.value)
    with pytest.raises(JobConfigError) as avro:
        job(tmp_path, **{"writer.output.format": "AVRO", "writer.codec.type": "zstd"})
    assert "not a codec of AVRO output" in str(avro.value)
    assert job(tmp_path, **{"writer.codec.type": "gzip"}).properties["writer.codec.type"] == "gzip"


REMOTE = {"writer.staging.dir": "hdfs://127.0.0.1:1/staging", "writer.output.dir": "hdfs://127.0.0.1:1/output",
          "data.publisher.final.dir": "hdfs://127.0.0.1:1/warehouse", "dfs.namenode.http-address": "127.0.0.1:1",
          "data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher",
          "iceberg.table": "lake.events", "iceberg.catalog.uri": "sqlite:////tmp/never-opened/catalog.db",
          "task.engine": "auto"}


def test_auto_runs_a_parquet_table_job_on_a_remote_warehouse_where_its_writer_runs(tmp_path: Path) -> None:
    """What `oncelog validate` loads is what `oncelog run` runs, the reason recorded: the DataFrame engine for the
    default writer (Spark writes into HDFS and S3 too: before, `auto` chose records for remote folders), the records
    engine for a Parquet writer of the job's own."""
    default = job(tmp_path, **REMOTE)
    assert engine_problems(default) == []
    choice = choose(default)
    assert choice.kind is TaskEngineKind.DATAFRAME, choice
    assert choice.properties()["oncelog.task.engine"] == "dataframe"
    own = job(tmp_path, **REMOTE, **{"writer.builder.class": "tests.sim.tables.ParquetDataWriterBuilder"})
    assert engine_problems(own) == []
    choice = choose(own)
    assert choice.kind is TaskEngineKind.RECORDS
    assert "is a record writer" in choice.properties()["oncelog.task.engine.reason"]


def test_auto_keeps_a_local_parquet_job_on_the_dataframe_engine(tmp_path: Path) -> None:
    for policy in ("full", "partial"):
        config = job(tmp_path, **{"task.engine": "auto", "job.commit.policy": policy})
        assert choose(config).kind is TaskEngineKind.DATAFRAME
