"""What a task attempt wrote, per work unit: its files (moved to the attempt's own task-output folder, with size and
checksum taken where they are moved: move_place), its record count and last offset (observed by Spark while writing,
no second pass over the data).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import BinaryIO
from urllib.parse import unquote

import fastavro
import pyarrow.orc as orc
import pyarrow.parquet as pq
from pyspark.sql import Column, Observation, SparkSession
from pyspark.sql import functions as F

from events.job import WorkUnitSpec
from events.task import OutputFile, WorkUnitResult
from filesystems import urls
from filesystems.base import FileSystem, FileSystemError
from filesystems.router import FileSystems
from spark_pipeline.constructs import UNIT_COLUMN, SourceError, UnitKey
from spark_pipeline.engines.dataframe.partitions import PARTITION_COLUMN
from spark_pipeline.jobfile.config import WriterOutputFormat
from spark_pipeline.writers import move_to_task_output, unit_file_name

MOVE_TASKS_PER_CORE = 2
"""Move tasks per core of the cluster: enough to spread large files, few enough that a thousand small ones do not pay
a thousand task starts (200 files, one task each: 6.8 s on 2 cores)."""
_STAGED = re.compile(rf"/{UNIT_COLUMN}=(\d+)/(?:{PARTITION_COLUMN}=([^/]*)/)?(part-[^/.]+)(?:\.c\d+)?(\.[^/]*)?$")
"""A file Spark wrote (`part-00000-<uuid>.c000.snappy.parquet`): its work unit's folder, its time partition's (Spark
escapes the value's `/` and `=` as %2F, %3D), its name, and its extension after the file counter (`.snappy.parquet`,
`.json.gz`)."""


@dataclass(frozen=True)
class StagedFile:
    """A file of a committed attempt, and where in the attempt's task output it goes."""

    src: str
    unit: int
    dst: str
    partition: str = ""
    """The file's time partition ("" without a partitioner)."""
    counted: WriterOutputFormat | None = None
    """The format whose records the move counts (a work unit's records are counted by Spark per work unit, not per
    time partition); None: not counted."""


@dataclass(frozen=True)
class MovedFile:
    """A file in the attempt's task output, with the size and sha256 measured where it was moved."""

    unit: int
    path: str
    size: int
    checksum: str
    partition: str = ""
    records: int | None = None
    """The records the file holds, when the move counted them (StagedFile.counted)."""


def unit_metrics(units: Sequence[WorkUnitSpec], offset: str | None) -> list[Column]:
    """Per work unit: rows read (`n<i>`) and, when the records have an `offset` column, the last one (`m<i>`),
    aggregated while Spark writes."""
    metrics: list[Column] = []
    for index in range(len(units)):
        mine = F.col(UNIT_COLUMN) == F.lit(index)
        metrics.append(F.count_if(mine).alias(f"n{index}"))
        if offset is not None:
            metrics.append(F.max(F.when(mine, F.col(offset))).alias(f"m{index}"))
    return metrics


def unit_counts(units: Sequence[WorkUnitSpec]) -> list[Column]:
    """Per work unit: rows written (`w<i>`), aggregated while Spark writes."""
    return [F.count_if(F.col(UNIT_COLUMN) == F.lit(index)).alias(f"w{index}") for index in range(len(units))]


def counted(observation: Observation, units: Sequence[WorkUnitSpec]) -> list[int]:
    """The rows each work unit wrote, as the write's observation saw them."""
    values = observation.get
    return [int(values.get(f"w{i}") or 0) for i in range(len(units))]


def observed(observation: Observation, units: Sequence[WorkUnitSpec]) -> tuple[list[int], list[int | None]]:
    """The records and last offset of each work unit, as the write's observation saw them."""
    values = observation.get
    return ([int(values.get(f"n{i}") or 0) for i in range(len(units))],
            [None if values.get(f"m{i}") is None else int(values[f"m{i}"]) for i in range(len(units))])


def file_counts(units: Sequence[WorkUnitSpec], branches: Sequence[Sequence[MovedFile]], offsets: bool) -> list[int]:
    """Each work unit's records read, as its files hold them: for a job that writes every record it reads (nothing
    observed). Every branch's files must hold the same records (a fork writes each once per branch) and, where each
    record takes an offset of the range (`offsets`: Kafka's), no more than the range has."""
    per_branch = []
    for moved in branches:
        counts = [0] * len(units)
        for m in moved:
            counts[m.unit] += m.records or 0
        per_branch.append(counts)
    records = per_branch[0]
    for branch, counts in enumerate(per_branch[1:], start=1):
        for unit, n, first in zip(units, counts, records):
            if n != first:
                raise SourceError(f"work unit {unit.work_unit_id}: branch {branch}'s files hold {n} records, "
                                  f"branch 0's {first}")
    for unit, n in zip(units, records):
        span = unit.expected_high_watermark - unit.low_watermark
        if offsets and n > span:
            raise SourceError(f"work unit {unit.work_unit_id}: its files hold {n} records, more than the {span} "
                              f"offsets of its range [{unit.low_watermark}, {unit.expected_high_watermark})")
    return records


def output_extension(spark_extension: str) -> str:
    """A file's extension in the task output: Spark's, except for Avro, whose codec compresses blocks inside the
    container (the file is no `.snappy` stream): `.avro`, as the records engine (and Gobblin) name it."""
    return ".avro" if spark_extension.endswith(".avro") else spark_extension


def staged_files(fs: FileSystem, folder: str, units: Sequence[WorkUnitSpec], output_root: str,
                 counted: WriterOutputFormat | None = None) -> list[StagedFile]:
    """The files of a committed attempt folder, each with its name in the attempt's task output `output_root` (one
    per work unit, or per work unit and time partition); `counted`: the format of files whose records the move
    counts (a partitioned job's)."""
    found: dict[tuple[int, str], list[tuple[str, str]]] = {}
    for info in fs.list_files(folder):
        match = _STAGED.search(info.path)
        if match is None:
            continue  # Spark's _SUCCESS and checksum files
        key = (int(match.group(1)), unquote(match.group(2) or ""))
        found.setdefault(key, []).append((info.path, match.group(4) or ""))

    def too_many(index: int, partition: str, count: int) -> str:
        where = f"/{PARTITION_COLUMN}={partition}" if partition else ""
        return (f"{folder}: work unit folder {UNIT_COLUMN}={index}{where} holds {count} files; the task planned "
                f"{len(units)} work units, one file each (a DataFrameReader puts each work unit's rows in one Spark "
                f"partition)")

    return one_file_each(found, units, output_root, counted, too_many)


def one_file_each(found: Mapping[tuple[int, str], list[tuple[str, str]]], units: Sequence[WorkUnitSpec],
                  output_root: str, counted: WriterOutputFormat | None, too_many: Callable[[int, str, int], str]
                  ) -> list[StagedFile]:
    """The staged file of each (work unit index, time partition) found, named in the task output `output_root`; a
    FileSystemError saying `too_many(index, partition, files)` where an index is no unit's or holds other than one."""
    staged = []
    for (index, partition), files in sorted(found.items()):
        if index >= len(units) or len(files) != 1:
            raise FileSystemError(too_many(index, partition, len(files)))
        unit = units[index]
        (src, extension), = files
        name = unit_file_name(unit, partition, unit.expected_high_watermark, output_extension(extension))
        staged.append(StagedFile(src, index, urls.join(output_root, name), partition, counted))
    return staged


_PART = re.compile(r"/(part-[^/.]+)(?:\.c\d+)?(\.[^/]*)?$")
"""A file Spark wrote straight into the attempt folder (no work unit folders): its name and extension."""
KEYED_FORMATS = frozenset({WriterOutputFormat.AVRO, WriterOutputFormat.PARQUET, WriterOutputFormat.ORC})
"""The formats whose first record a file's work unit is read from (JSON's codecs compress the whole file)."""


def keyed_files(fs: FileSystem, folder: str, units: Sequence[WorkUnitSpec], output_root: str, key: UnitKey,
                output_format: WriterOutputFormat, counted: WriterOutputFormat | None = None) -> list[StagedFile]:
    """The files of a committed attempt folder written without work unit folders, each named after the work unit its
    first record's `key` values name (an empty file, Spark's schema-only first file, is left where it is);
    `counted` as staged_files takes it."""
    index_of = {key.of(unit): index for index, unit in enumerate(units)}
    found: dict[tuple[int, str], list[tuple[str, str]]] = {}
    for info in fs.list_files(folder):
        match = _PART.search(info.path)
        if match is None:
            continue  # Spark's _SUCCESS and checksum files
        values = first_values(fs, info.path, output_format, key.columns)
        if values is None:
            continue
        if values not in index_of:
            raise FileSystemError(f"{info.path}: its first record's {', '.join(key.columns)} "
                                  f"({', '.join(map(str, values))}) name none of the task's {len(units)} work units")
        found.setdefault((index_of[values], ""), []).append((info.path, match.group(2) or ""))

    def too_many(index: int, _partition: str, count: int) -> str:
        return (f"{folder}: {count} files hold work unit {units[index].work_unit_id}; a DataFrameReader puts each "
                f"work unit's rows in one Spark partition")

    return one_file_each(found, units, output_root, counted, too_many)


def first_values(fs: FileSystem, path: str, output_format: WriterOutputFormat, columns: Sequence[str]
                 ) -> tuple[object, ...] | None:
    """The values of `columns` in a file's first record (None: the file holds none), read from its first block
    (Avro), row group (Parquet) or stripe (ORC) alone."""
    with fs.open_read(path) as stream:
        if output_format is WriterOutputFormat.AVRO:
            record = next(iter(fastavro.reader(stream)), None)
            return None if not isinstance(record, dict) else tuple(record[c] for c in columns)
        source = stream if stream.seekable() else io.BytesIO(stream.read())
        if output_format is WriterOutputFormat.PARQUET:
            parquet = pq.ParquetFile(source)
            if parquet.metadata.num_rows == 0:
                return None
            table = parquet.read_row_group(0, columns=list(columns))
        elif output_format is WriterOutputFormat.ORC:
            orc_file = orc.ORCFile(source)
            if orc_file.nrows == 0:
                return None
            table = orc_file.read_stripe(0, columns=list(columns))
        else:
            raise FileSystemError(f"{path}: a {output_format.value} file's first record is not read")
    row = table.slice(0, 1).to_pylist()
    return tuple(row[0][c] for c in columns) if row else None


class MovePlace(StrEnum):
    """Where a committed attempt's files are measured and moved."""

    DRIVER = "driver"
    EXECUTORS = "executors"


def move_place(spark: SparkSession) -> MovePlace:
    """The driver under a local master: its executors run on this machine, so their Python workers would add nothing
    but their start (about 1 CPU s each, for this job alone, and again after Spark kills them idle for a minute: half
    of a 1M-record run's CPU beyond Spark's own job, docs/benchmarks.md). The executors on a cluster, where the
    files' store is theirs to reach and the checksums spread over their cores."""
    return MovePlace.DRIVER if (spark.sparkContext.master or "").startswith("local") else MovePlace.EXECUTORS


def move_files(spark: SparkSession, properties: Mapping[str, str], files: Sequence[StagedFile],
               place: MovePlace | None = None) -> list[MovedFile]:
    """Measure (size, sha256) and move every file, at `place` (default: move_place): in batches of several files, at
    most MOVE_TASKS_PER_CORE per core of the cluster (a Python task's start costs more than a small file's move), each
    batch a Spark task on the executors or a thread of the driver."""
    if not files:
        return []
    settings = dict(properties)

    def move(batch: Iterable[StagedFile]) -> list[MovedFile]:
        fs = FileSystems.of(settings)
        return [measure_and_move(fs, file) for file in batch]

    tasks = min(len(files), MOVE_TASKS_PER_CORE * spark.sparkContext.defaultParallelism)
    if (place or move_place(spark)) is MovePlace.EXECUTORS:
        return spark.sparkContext.parallelize(list(files), tasks).mapPartitions(move).collect()
    size = -(-len(files) // tasks)  # contiguous batches, in order, as Spark slices a parallelized list
    with ThreadPoolExecutor(max_workers=tasks, thread_name_prefix="oncelog-df-move") as pool:
        return [m for batch in pool.map(move, [files[i:i + size] for i in range(0, len(files), size)]) for m in batch]


def measure_and_move(fs: FileSystem, file: StagedFile) -> MovedFile:
    """One file to the task output, durable before the task records it."""
    size = fs.size(file.src)
    if size is None:
        raise FileSystemError(f"{file.src}: the file Spark committed is gone")
    checksum = fs.checksum(file.src)
    records = None if file.counted is None else file_records(fs, file.src, file.counted)
    move_to_task_output(fs, file.src, file.dst, size, checksum)
    return MovedFile(file.unit, file.dst, size, checksum, file.partition, records)


def file_records(fs: FileSystem, path: str, output_format: WriterOutputFormat) -> int:
    """The records a file Spark wrote holds, from its blocks' headers (Avro) or its footer (Parquet, ORC: read by
    seeking to it where the store's stream can seek, else from the whole file in memory)."""
    with fs.open_read(path) as stream:
        if output_format is WriterOutputFormat.AVRO:
            return avro_records(stream, path)
        source = stream if stream.seekable() else io.BytesIO(stream.read())
        if output_format is WriterOutputFormat.PARQUET:
            return int(pq.ParquetFile(source).metadata.num_rows)
        if output_format is WriterOutputFormat.ORC:
            return int(orc.ORCFile(source).nrows)
    raise FileSystemError(f"{path}: the records of a {output_format.value} file are not counted")


AVRO_MAGIC = b"Obj\x01"
AVRO_SYNC_SIZE = 16


def avro_records(stream: BinaryIO, path: str) -> int:
    """The records of an Avro container file, read from its blocks' headers alone: each block's count and size, its
    data skipped, never decompressed (fastavro's block reader decompresses every block)."""
    if stream.read(len(AVRO_MAGIC)) != AVRO_MAGIC:
        raise FileSystemError(f"{path}: not an Avro container file (no 'Obj' magic)")
    while (entries := _avro_long(stream, path)) != 0:  # the header's metadata map, in blocks
        if entries < 0:
            _avro_long(stream, path)  # the map block's size in bytes
            entries = -entries
        for _ in range(2 * entries):  # each key and each value: a length, then that many bytes
            _skip(stream, _avro_long(stream, path), path)
    sync = stream.read(AVRO_SYNC_SIZE)
    records = 0
    while first := stream.read(1):
        records += _avro_long(stream, path, first)
        _skip(stream, _avro_long(stream, path), path)
        if stream.read(AVRO_SYNC_SIZE) != sync:
            raise FileSystemError(f"{path}: an Avro block does not end with the file's sync marker (after "
                                  f"{records} records)")
    return records


def _avro_long(stream: BinaryIO, path: str, first: bytes = b"") -> int:
    """One Avro long (zig-zag varint) from `stream`, its first byte already read if given."""
    byte = first or stream.read(1)
    value = shift = 0
    while True:
        if not byte:
            raise FileSystemError(f"{path}: the Avro file ends inside a header")
        value |= (byte[0] & 0x7F) << shift
        if not byte[0] & 0x80:
            return (value >> 1) ^ -(value & 1)
        shift += 7
        byte = stream.read(1)


def _skip(stream: BinaryIO, size: int, path: str) -> None:
    """Past `size` bytes of `stream` (by seeking where it can)."""
    if size < 0:
        raise FileSystemError(f"{path}: a negative Avro length ({size})")
    if stream.seekable():
        stream.seek(size, io.SEEK_CUR)
        return
    while size > 0:
        chunk = stream.read(min(size, 1 << 20))
        if not chunk:
            raise FileSystemError(f"{path}: the Avro file ends inside a block")
        size -= len(chunk)


def unit_results(units: Sequence[WorkUnitSpec], records: Sequence[int], last_offsets: Sequence[int | None],
                 moved: Sequence[MovedFile], branch: int = 0, written: Sequence[int] | None = None,
                 folder: str = "") -> tuple[WorkUnitResult, ...]:
    """Each work unit's result: `records` read, `written` (default: all that were read), its files in the attempt's
    task-output `folder` (writers.attempt_output_dir). Its whole range was read
    (exact ending offsets, failOnDataLoss), so the actual high watermark is the expected high, whatever a row policy
    dropped: past any trailing transaction marker, as the record engine sets it."""
    by_unit: dict[int, list[MovedFile]] = {}
    for m in sorted(moved, key=lambda m: (m.unit, m.partition)):
        by_unit.setdefault(m.unit, []).append(m)
    written = records if written is None else written
    results = []
    for index, unit in enumerate(units):
        last = last_offsets[index]
        if last is not None and not unit.low_watermark <= last < unit.expected_high_watermark:
            raise SourceError(f"work unit {unit.work_unit_id}: offset {last} written, outside its range "
                                     f"[{unit.low_watermark}, {unit.expected_high_watermark})")
        mine = by_unit.get(index, [])
        if (not mine) != (written[index] == 0):
            raise SourceError(f"work unit {unit.work_unit_id}: {written[index]} records written but "
                              f"{'no file' if not mine else 'a file'} committed")
        counts = [written[index]] if len(mine) == 1 and mine[0].records is None else [m.records or 0 for m in mine]
        if mine and sum(counts) != written[index]:
            raise SourceError(f"work unit {unit.work_unit_id}: {written[index]} records written but its files "
                              f"hold {sum(counts)}")
        files = tuple(OutputFile(path=m.path, size=m.size, checksum=m.checksum, records=n, branch=branch,
                                 folder=folder, partition=m.partition) for m, n in zip(mine, counts))
        results.append(WorkUnitResult(
            work_unit_id=unit.work_unit_id, dataset_urn=unit.dataset_urn, partition=unit.partition,
            low_watermark=unit.low_watermark, expected_high_watermark=unit.expected_high_watermark,
            actual_high_watermark=unit.expected_high_watermark, records_extracted=records[index],
            records_written=written[index], bytes_written=sum(f.size for f in files), output_files=files))
    return tuple(results)
