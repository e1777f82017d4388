"""The default DataWriter: Avro files (fastavro), or Parquet files (pyarrow) when `writer.output.format` is PARQUET,
written to staging, then moved to the attempt's task output.

File names come from the work unit's watermark range, so a task that runs the same range again writes the same
name: nothing is published twice under two names. Each task attempt moves its files into a task-output folder of
its own (`attempt_output_dir`), so an attempt that outlives its task's end (a zombie) cannot touch the files of the
attempt the log recorded as succeeded. The size and sha256 are taken while writing.
"""

from __future__ import annotations

import copy
import errno
import hashlib
from dataclasses import replace
from typing import IO, Any, cast
from urllib.parse import quote

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from fastavro.write import Writer
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from events.errors import ConfigError
from events.job import WorkUnitSpec
from events.task import OutputFile
from filesystems import urls
from filesystems.base import FileSystem, FileSystemError, WritableFile
from spark_pipeline.constructs import (
    DataWriter,
    DataWriterBuilder,
    Record,
    Schema,
    WriterDestination,
)
from spark_pipeline.jobfile.config import JobConfig, WriterOutputFormat
from spark_pipeline.jobfile.partitions import (
    COLUMNS_KEY,
    TimePartitioning,
    avro_columns,
    avro_kind,
    event_columns,
    record_millis,
)
from spark_pipeline.parquet_writer import PARQUET_CODECS, arrow_schema

AVRO_CODECS = ("null", "deflate", "snappy")
PARQUET_BATCH_ROWS = 10_000
"""Rows a Parquet writer holds as Python objects before it makes them an Arrow batch (a row group of the file)."""


class AvroWriterSettings(BaseModel):
    """Keys the default writer reads (Gobblin's names): the codec is one of the output format's."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    output_format: str = Field(default=WriterOutputFormat.AVRO.value, alias="writer.output.format")
    codec: str = Field(default="snappy", alias="writer.codec.type")
    sync_interval: int = Field(default=64_000, ge=1_000, alias="writer.avro.sync.interval")

    @field_validator("codec")
    @classmethod
    def _codec_of_format(cls, value: str, info: ValidationInfo) -> str:
        """Parquet's codecs for PARQUET output, Avro's for any other (the DataFrame engine checks its own)."""
        parquet = str(info.data.get("output_format", "")).strip().upper() == WriterOutputFormat.PARQUET.value
        codecs = tuple(PARQUET_CODECS) if parquet else AVRO_CODECS
        codec = value.strip().lower()
        if codec not in codecs:
            raise ValueError(f"not a codec of {'PARQUET' if parquet else 'AVRO'} output (one of "
                             f"{', '.join(codecs)})")
        return codec


def staging_path(destination: WriterDestination, extension: str) -> str:
    """Where a writer stages its work unit's file (time partition included) before it moves to task output."""
    unit = destination.work_unit
    attempt_dir = urls.join(destination.staging_dir, destination.run_id, destination.task_id,
                            f"attempt-{destination.attempt}")
    time_partition = f".{path_segment(destination.partition)}" if destination.partition else ""
    name = f"{path_segment(unit.dataset_urn)}.{path_segment(unit.partition)}{time_partition}.{extension}.tmp"
    return urls.join(attempt_dir, name)


def path_segment(value: str) -> str:
    """A dataset URN or partition as one safe, reversible path segment."""
    return quote(value, safe="-_.=@") or "_"


def attempt_output_dir(output_dir: str, run_id: str, task_id: str, attempt: int) -> str:
    """A task attempt's own task-output folder, writer.output.dir/<run>/<task>/attempt-<n>: what a branch of the
    attempt writes (and what its output files record as their `folder`); the attempt numbers of a run of a task are
    unique (engines.attempts), so no two attempts ever share it."""
    return urls.join(output_dir, run_id, path_segment(task_id), f"attempt-{attempt}")


def output_file_name(destination: WriterDestination, high: int) -> str:
    """<dataset>/[<time partition>/]<partition>_<low>-<high>.avro: deterministic for a watermark range."""
    return unit_file_name(destination.work_unit, destination.partition, high, ".avro")


def unit_file_name(unit: WorkUnitSpec, time_partition: str, high: int, extension: str) -> str:
    """A work unit's file in the task output, below the attempt's folder: its dataset's folder, its time partition's
    folders (none without a partitioner), and its source partition and watermark range: two runs, or a late record of
    an hour already published, never make one name twice."""
    folder = "/".join([path_segment(unit.dataset_urn), *(path_segment(p) for p in time_partition.split("/") if p)])
    return f"{folder}/{path_segment(unit.partition)}_{unit.low_watermark}-{high}{extension}"


def move_to_task_output(fs: FileSystem, src: str, dst: str, size: int, checksum: str) -> None:
    """Move a written file into its attempt's task output, durable before the task records it (a move lost to a power
    cut would leave a recorded file missing); an OSError becomes a FileSystemError naming the rename and its files."""
    try:
        fs.move(src, dst, size, checksum)
        fs.sync_folders({urls.parent(dst)})
    except OSError as e:
        raise FileSystemError(f"the rename of {src} to the task output {dst} failed: {os_error(e)}") from e


def os_error(error: OSError) -> str:
    """An OSError as its errno's name and its message ('EIO: Input/output error'), without the paths it repeats."""
    code = errno.errorcode.get(error.errno or 0)
    message = error.strerror or str(error)
    return f"{code}: {message}" if code else f"{type(error).__name__}: {message}"


class _HashingFile:
    """A new file that counts and hashes what passes through it."""

    def __init__(self, file: WritableFile) -> None:
        self.file = file
        self.digest = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def seekable(self) -> bool:
        """Not seekable: fastavro must not try to append to what is there (the file is new)."""
        return False

    def close(self) -> None:
        self.closed = True
        self.file.close()

    def discard(self) -> None:
        if not self.closed:
            self.closed = True
            self.file.discard()


class AvroDataWriter(DataWriter):
    """Writes one work unit's branch to one Avro container file."""

    def __init__(self, destination: WriterDestination, settings: AvroWriterSettings,
                 parsed_schema: Schema | None = None) -> None:
        self.destination = destination
        self.fs = destination.fs
        self.staging_path = staging_path(destination, "avro")
        self._file = _HashingFile(self.fs.open_write(self.staging_path))
        schema = parsed_schema if parsed_schema is not None else fastavro.parse_schema(destination.schema)
        self._writer: Any = Writer(cast(IO[bytes], self._file), schema, codec=settings.codec,
                                   sync_interval=settings.sync_interval)
        self.records_written = 0
        self.bytes_written = 0

    def write(self, record: Record) -> None:
        self._writer.write(record)
        self.records_written += 1

    def commit(self, actual_high_watermark: int) -> list[OutputFile]:
        if self.records_written == 0:  # an empty range publishes no file (its watermark still moves)
            self.abort()
            return []
        self._writer.flush()
        self._file.close()
        self.bytes_written = self._file.size
        checksum = self._file.digest.hexdigest()
        target = urls.join(self.destination.output_dir, output_file_name(self.destination, actual_high_watermark))
        move_to_task_output(self.fs, self.staging_path, target, self._file.size, checksum)
        return [OutputFile.trusted(path=target, size=self._file.size, checksum=checksum,
                                   records=self.records_written, branch=self.destination.branch.index,
                                   folder=self.destination.output_dir, partition=self.destination.partition)]

    def abort(self) -> None:
        if self._file.closed:
            self.fs.delete(self.staging_path)
        else:
            self._file.discard()


class ParquetDataWriter(DataWriter):
    """Writes one work unit's branch to one Parquet file: rows batched into Arrow record batches (one row group each)
    in memory, the file staged at commit, then moved to task output as the Avro writer's are."""

    def __init__(self, destination: WriterDestination, codec: str, schema: pa.Schema) -> None:
        self.destination = destination
        self.fs = destination.fs
        self.schema = schema
        self.codec = codec
        self.staging_path = staging_path(destination, "parquet")
        self._rows: list[Record] = []
        self._batches: list[pa.RecordBatch] = []
        self._staged = False

    def write(self, record: Record) -> None:
        self._rows.append(record)
        self.records_written += 1
        if len(self._rows) >= PARQUET_BATCH_ROWS:
            self._batch()

    def _batch(self) -> None:
        """The rows held so far as one Arrow batch of the schema; a ValueError naming the work unit if one does not
        fit it."""
        if not self._rows:
            return
        try:
            self._batches.append(pa.RecordBatch.from_pylist(self._rows, schema=self.schema))
        except (pa.ArrowException, TypeError, ValueError) as e:
            unit = self.destination.work_unit
            raise ValueError(f"a record of work unit {unit.work_unit_id} (dataset {unit.dataset_urn!r}) does not fit "
                             f"its Parquet schema: {e}") from e
        self._rows = []

    def commit(self, actual_high_watermark: int) -> list[OutputFile]:
        if self.records_written == 0:  # an empty range publishes no file (its watermark still moves)
            return []
        self._batch()
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, self.schema, compression=self.codec) as parquet:
            for batch in self._batches:
                parquet.write_batch(batch)
        self._batches = []
        data = sink.getvalue().to_pybytes()
        file = _HashingFile(self.fs.open_write(self.staging_path))
        try:
            file.write(data)
            file.close()
        except BaseException:
            file.discard()
            raise
        self._staged = True
        self.bytes_written = file.size
        checksum = file.digest.hexdigest()
        target = urls.join(self.destination.output_dir,
                           unit_file_name(self.destination.work_unit, self.destination.partition,
                                          actual_high_watermark, ".parquet"))
        move_to_task_output(self.fs, self.staging_path, target, file.size, checksum)
        return [OutputFile.trusted(path=target, size=file.size, checksum=checksum, records=self.records_written,
                                   branch=self.destination.branch.index, folder=self.destination.output_dir,
                                   partition=self.destination.partition)]

    def abort(self) -> None:
        self._rows, self._batches = [], []
        if self._staged:
            self.fs.delete(self.staging_path)


class AvroDataWriterBuilder(DataWriterBuilder):
    """Builds the records engine's writers (the default `writer.builder.class`): Avro, or Parquet when the branch's
    `writer.output.format` is PARQUET."""

    CONFIG_MODEL = AvroWriterSettings
    SUPPORTED_OUTPUT_FORMATS = ("AVRO", "PARQUET")

    def __init__(self, config: JobConfig) -> None:
        super().__init__(config)
        self._settings: dict[int, AvroWriterSettings] = {}
        self._schema: tuple[Schema, Schema] | None = None
        """The last destination schema and its parsed form: a task's work units mostly share one."""
        self._arrow: tuple[Schema, pa.Schema] | None = None
        """The last destination schema and its Arrow form, for Parquet output."""

    def build(self, destination: WriterDestination) -> DataWriter:
        """A writer for one work unit's branch; settings and parsed schema are reused across a task's work units
        (validating and parsing them again cost as much as writing a few records)."""
        branch = destination.branch.index
        if branch not in self._settings:
            self._settings[branch] = self.settings(branch)
        settings = self._settings[branch]
        if destination.branch.writer_output_format is WriterOutputFormat.PARQUET:
            return ParquetDataWriter(destination, PARQUET_CODECS[settings.codec], self._arrow_schema(destination))
        return AvroDataWriter(destination, settings, self._parsed(destination.schema))

    def _arrow_schema(self, destination: WriterDestination) -> pa.Schema:
        """The Arrow schema of the destination's Avro schema, converted once while it stays the same; a ConfigError
        naming the field and the key when it holds a type Parquet output does not support."""
        schema = destination.schema
        if self._arrow is None or schema != self._arrow[0]:
            try:
                converted = arrow_schema(schema)
            except ConfigError as e:
                branch = destination.branch.index
                key = f"writer.output.format.{branch}" if self.config.fork_branches > 1 else "writer.output.format"
                raise ConfigError(f"{key}=PARQUET: dataset {destination.work_unit.dataset_urn!r}: {e}") from e
            self._arrow = (copy.deepcopy(schema), converted)
        return self._arrow[1]

    def _parsed(self, schema: Schema) -> Schema:
        """fastavro's parsed form of a schema, parsed once while the schema stays the same."""
        if self._schema is None or schema != self._schema[0]:
            self._schema = (copy.deepcopy(schema), fastavro.parse_schema(schema))  # a copy: a converter may mutate
        return self._schema[1]



class PartitionedDataWriter(DataWriter):
    """Gobblin's PartitionedDataWriter for the time partitioner: one writer per time partition of a work unit's
    branch, built when its first record comes; each writes its own file in its partition's folder."""

    def __init__(self, builder: DataWriterBuilder, destination: WriterDestination, partitioning: TimePartitioning
                 ) -> None:
        self.builder = builder
        self.destination = destination
        self.partitioning = partitioning
        try:
            self.columns = event_columns(partitioning, lambda c: avro_kind(destination.schema, c),
                                         avro_columns(destination.schema))
        except ConfigError as e:
            raise ConfigError(f"dataset {destination.work_unit.dataset_urn!r}: {e}") from e
        self.writers: dict[str, DataWriter] = {}

    def write(self, record: Record) -> None:
        millis = record_millis(self.columns, self.partitioning, record)
        if millis is None:
            unit = self.destination.work_unit
            raise ValueError(f"a record of work unit {unit.work_unit_id} has no time: none of "
                             f"{', '.join('.'.join(c.path) for c in self.columns)} holds a value "
                             f"({COLUMNS_KEY})")
        partition = self.partitioning.path(millis)
        writer = self.writers.get(partition)
        if writer is None:
            writer = self.writers[partition] = self.builder.build(replace(self.destination, partition=partition))
        writer.write(record)
        self.records_written += 1

    def commit(self, actual_high_watermark: int) -> list[OutputFile]:
        files: list[OutputFile] = []
        for _, writer in sorted(self.writers.items()):
            files += writer.commit(actual_high_watermark)
            self.bytes_written += writer.bytes_written
        return files

    def abort(self) -> None:
        for writer in self.writers.values():
            writer.abort()
