"""The DataFrame engine's files written without work unit folders (pure: files as Spark's writers leave them): each
named after the work unit its first record names, an empty one left behind, a stray or doubled one an error."""

from __future__ import annotations

from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from events.job import WorkUnitSpec
from filesystems.base import FileSystemError
from filesystems.router import FileSystems
from spark_pipeline.constructs import UnitKey
from spark_pipeline.engines.dataframe.engine import branch_writers, file_key, writer_schema
from spark_pipeline.engines.dataframe.results import keyed_files
from spark_pipeline.jobfile.config import JobConfig, WriterOutputFormat
from spark_pipeline.jobs import config_from_properties

UNITS = [WorkUnitSpec(work_unit_id=f"t.{p}:{p}@0", dataset_urn=f"t.{p}", partition=f"t.{p}:{p}", low_watermark=0,
                      expected_high_watermark=10 * (p + 1), estimated_records=10,
                      properties={"kafka.topic": "t", "kafka.partition": str(p)}) for p in (3, 1)]
KEY = UnitKey(("topic", "partition"), lambda u: (u.properties["kafka.topic"], int(u.properties["kafka.partition"])))
SCHEMA = {"type": "record", "name": "R", "fields": [{"name": "topic", "type": "string"},
                                                    {"name": "partition", "type": "int"},
                                                    {"name": "offset", "type": "long"}]}


def write(path: Path, output_format: WriterOutputFormat, partition: int | None, records: int = 5) -> None:
    """A file Spark would write: `records` records of `partition` of topic t (none when `partition` is None)."""
    rows = [{"topic": "t", "partition": partition, "offset": i} for i in range(records if partition is not None else 0)]
    if output_format is WriterOutputFormat.AVRO:
        with path.open("wb") as out:
            fastavro.writer(out, SCHEMA, rows, codec="deflate")
        return
    table = pa.Table.from_pylist(rows, schema=pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                                                        ("offset", pa.int64())]))
    if output_format is WriterOutputFormat.PARQUET:
        pq.write_table(table, path)
    else:
        orc.write_table(table, str(path))


@pytest.mark.parametrize("output_format", [WriterOutputFormat.AVRO, WriterOutputFormat.PARQUET,
                                           WriterOutputFormat.ORC])
def test_each_file_is_named_after_the_work_unit_its_first_record_names(output_format: WriterOutputFormat,
                                                                       tmp_path: Path) -> None:
    extension = {WriterOutputFormat.AVRO: ".avro", WriterOutputFormat.PARQUET: ".snappy.parquet",
                 WriterOutputFormat.ORC: ".snappy.orc"}[output_format]
    write(tmp_path / f"part-00000-u.c000{extension}", output_format, None)  # Spark's schema-only first file
    write(tmp_path / f"part-00001-u.c000{extension}", output_format, 1)
    write(tmp_path / f"part-00002-u.c000{extension}", output_format, 3)
    (tmp_path / "_SUCCESS").write_bytes(b"")
    staged = keyed_files(FileSystems.of({}), str(tmp_path), UNITS, "/out", KEY, output_format)
    out = ".avro" if output_format is WriterOutputFormat.AVRO else extension
    assert [(Path(s.src).name, s.unit, s.dst) for s in staged] == [
        (f"part-00002-u.c000{extension}", 0, f"/out/t.3/t.3%3A3_0-40{out}"),
        (f"part-00001-u.c000{extension}", 1, f"/out/t.1/t.1%3A1_0-20{out}")]


def test_a_file_of_no_work_unit_of_the_task_is_an_error_naming_it(tmp_path: Path) -> None:
    write(tmp_path / "part-00000-u.c000.avro", WriterOutputFormat.AVRO, 7)
    with pytest.raises(FileSystemError, match=r"part-00000-u.c000.avro: its first record's topic, partition \(t, 7\) "
                                              r"name none of the task's 2 work units"):
        keyed_files(FileSystems.of({}), str(tmp_path), UNITS, "/out", KEY, WriterOutputFormat.AVRO)


def test_two_files_of_one_work_unit_are_an_error(tmp_path: Path) -> None:
    write(tmp_path / "part-00000-u.c000.avro", WriterOutputFormat.AVRO, 1)
    write(tmp_path / "part-00001-u.c000.avro", WriterOutputFormat.AVRO, 1)
    with pytest.raises(FileSystemError, match=r"2 files hold work unit t.1:1@0"):
        keyed_files(FileSystems.of({}), str(tmp_path), UNITS, "/out", KEY, WriterOutputFormat.AVRO)


def kafka_config(tmp_path: Path, **keys: str) -> JobConfig:
    return config_from_properties({
        "job.name": "j", "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "kafka.brokers": "127.0.0.1:9", "topic.whitelist": "t", "writer.staging.dir": str(tmp_path / "s"),
        "writer.output.dir": str(tmp_path / "o"), "data.publisher.final.dir": str(tmp_path / "f"),
        "task.engine": "DataFrame", **keys})


@pytest.mark.parametrize(("keys", "keyed"), [
    ({}, True), ({"writer.output.format": "parquet"}, True), ({"qualitychecker.row.sql": "offset >= 0"}, True),
    ({"converter.sql.select": "topic, partition, offset, value"}, False), ({"writer.output.format": "json"}, False),
    ({"writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
      "writer.partition.columns": "timestamp", "writer.partition.pattern": "yyyy/MM/dd"}, False)])
def test_files_are_named_by_their_first_record_only_when_records_are_written_as_read(
        keys: dict[str, str], keyed: bool, tmp_path: Path) -> None:
    config = kafka_config(tmp_path, **keys)
    writers = branch_writers(config, writer_schema(config))
    assert (file_key(config, writers) is not None) is keyed
