"""Directory source: the files of a directory that no earlier run ingested, each published exactly once.

Why not one watermark over the directory (e.g. the greatest modification time ingested): files do not arrive in
modification-time order. The usual way to publish a file — write it elsewhere, then rename it in — keeps its old
mtime, so it could land behind such a watermark and be skipped; two files can share an mtime. So each file is a
partition of its own, keyed by its path relative to the data directory: the dataset state remembers every file
ingested (Gobblin's file-based source keeps the same list, its "fs snapshot"). "New since the watermark" means:
no committed watermark for that path. The dataset URN is `dataset.urn` (else the job name), plus `/<sub/dir>` for
files below the top directory, so one dataset's state stays one directory's list.

A file's watermark is how far it was read: `offset * 1_000_000 + k`, where `offset` is a byte offset at a line
boundary (`lines`, `json`) or an Avro block boundary (`avro`) and `k` the records already read from the Avro block
starting there (0 for lines). A file read to its end has watermark `size * 1_000_000 + 999_999` ("complete").
The invariants:
- a file without a watermark is read from its start; a partly read one (a failed task whose output the
  `partial` commit policy published) from its watermark, so no record is published twice nor skipped;
- a complete file is never read again. If it changed since (another size, or an mtime after the dataset's last
  commit) the source logs a warning: it is not re-ingested silently. A same-size rewrite that keeps its old mtime
  is the one change it cannot see;
- a file is read up to its size at planning: files must be complete when they appear under a visible name (write
  elsewhere or under a hidden name, then rename). Names starting with '.' or '_' are hidden (Hadoop's convention),
  as are empty files and Avro files without records until something is written to them.
Files are taken oldest first (mtime, then path), at most `source.filebased.max.files.per.run` per run; a work
unit's estimated_records is the bytes it has left to read. The state grows by one entry per file: keep a
directory's files few (move old ones away, or lay them out in sub-directories: one dataset each).

Formats (`source.filebased.format`): `lines`, `json` and `avro` on both engines; `parquet`, `orc` and `csv` on the
DataFrame engine only (Spark's readers, directory_frame.py), read whole, with the schema of
`source.filebased.schema` (Spark DDL) or inferred by Spark once when the run is planned, and recorded in each work
unit's `source.filebased.spark.schema`, so the run's events say what schema its files were read with.

The directory may be local, on HDFS (`hdfs://`, `webhdfs://`) or in an S3 bucket (`s3a://`, `s3://`): it is listed
and read through `filesystems` only (stores serve ranged reads, so a resumed file is opened at its byte offset).
S3 has no folders and no rename: an object is written whole (never seen in part), a folder exists only through
the objects under it, and an object's mtime is when it was written (by the store's clock, compared with the
commit time by the driver's: keep clocks in step).
"""

from __future__ import annotations

import fnmatch
import io
import json
import logging
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import IO, TYPE_CHECKING, Any, BinaryIO, ClassVar

import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.validation import ValidationError as AvroValidationError
from fastavro.validation import validate
from pydantic import (
    BaseModel,
)

from events.job import WorkUnitSpec
from filesystems import urls
from filesystems.base import FileInfo, FileSystem, FileSystemError
from filesystems.router import FileSystems
from projections.views import DatasetView
from spark_pipeline.connectors import Connector
from spark_pipeline.constructs import (
    DataFrameReader,
    Extractor,
    Record,
    Schema,
    Source,
    SourceError,
    SourceState,
    WorkUnitState,
)
from spark_pipeline.sources.directory_settings import (
    COMPLETE,
    DIRECTORY,
    FILE,
    FORMAT_KEY,
    JSON_SCHEMA,
    LINES_SCHEMA,
    SCALE,
    SCHEMA_PROPERTY,
    SPARK_ONLY_FORMATS,
    SPARK_SCHEMA_PROPERTY,
    DirectorySettings,
    complete,
    position,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

HIDDEN = (".", "_")
READ_BUFFER = 1 << 20  # remote reads are round trips: read ahead in large chunks


@dataclass(frozen=True)
class Candidate:
    """A file the run may read: where (a location string), and from which watermark."""

    path: str
    relative: str
    size: int
    mtime_ns: int
    low: int


class DirectorySource(Source, DataFrameReader):
    """`source.class: spark_pipeline.sources.directory.DirectorySource`: one work unit per new (or partly read) file."""

    CONFIG_MODEL: ClassVar[type[BaseModel] | None] = DirectorySettings  # subclasses may add keys

    def read_frame(self, spark: SparkSession, units: Sequence[tuple[int, WorkUnitSpec]], attempt: int) -> DataFrame:
        from spark_pipeline.sources.directory_frame import directory_frame  # PySpark: on the DataFrame engine only
        return directory_frame(spark, self.settings(), units)

    def record_schema(self, units: Sequence[WorkUnitSpec]) -> str | None:
        """The records engine's schema of the format; an Avro file's from the run's units; None for Spark's own."""
        settings: DirectorySettings = self.settings()
        if settings.format == "lines":
            return json.dumps(LINES_SCHEMA)
        if settings.format == "json":
            return settings.json_schema or json.dumps(JSON_SCHEMA)
        if settings.format == "avro":
            return next((u.properties[SCHEMA_PROPERTY] for u in units if SCHEMA_PROPERTY in u.properties), None)
        return None

    def connectors(self) -> frozenset[Connector]:
        """spark-avro for Avro files, and for JSON read by an Avro schema."""
        settings: DirectorySettings = self.settings()
        avro = settings.format == "avro" or (settings.format == "json" and settings.json_schema is not None)
        return frozenset({Connector.AVRO}) if avro else frozenset()

    def frame_blocker(self) -> str | None:
        folder = self.config.properties.get(DIRECTORY, "")
        if folder and urls.parse(folder).scheme is not urls.Scheme.FILE:
            return (f"{DIRECTORY}={folder} is on a remote file system: the DataFrame engine reads local directories "
                    f"only so far")
        return None

    @cached_property
    def file_systems(self) -> FileSystem:
        """The job's file systems, made once per source (its extractors share them: one client per task)."""
        return FileSystems.of(self.config.properties)

    def get_work_units(self, state: SourceState) -> list[WorkUnitSpec]:
        settings: DirectorySettings = self.settings()
        root = _root(settings.directory)
        candidates = sorted((c for c in self._candidates(root, settings, state)
                             if _has_records(self.file_systems, c, settings)),
                            key=lambda c: (c.mtime_ns, c.relative))[:settings.max_files]
        schema = (_avro_schema(self.file_systems, candidates[0].path)
                  if candidates and settings.format == "avro" else None)
        spark_schema = _spark_schema(settings, [c.path for c in candidates]) if candidates else None
        units = []
        for c in candidates:
            properties = ({FILE: c.path} | ({SCHEMA_PROPERTY: schema} if schema else {})
                          | ({SPARK_SCHEMA_PROPERTY: spark_schema} if spark_schema else {}))
            units.append(WorkUnitSpec(
                work_unit_id=f"{c.relative}@{c.low}", dataset_urn=self._urn(c.relative), partition=c.relative,
                low_watermark=c.low, expected_high_watermark=complete(c.size),
                estimated_records=c.size - c.low // SCALE, properties=properties))
        return units

    def _urn(self, relative: str) -> str:
        """The dataset of a file: the base URN, plus its sub-directory."""
        parent = posixpath.dirname(relative)
        base = self.config.default_dataset_urn
        return base if not parent else f"{base}/{parent}"

    def _candidates(self, root: str, settings: DirectorySettings, state: SourceState) -> Iterator[Candidate]:
        """Every visible matching file with something left to read."""
        for file, relative in _files(self.file_systems, root, settings):
            dataset = state.dataset_states.get(self._urn(relative))
            watermark = None if dataset is None else dataset.watermarks.get(relative)
            low = _start(relative, file.size, file.modified_ns, watermark, dataset)
            if low is not None:
                yield Candidate(file.path, relative, file.size, file.modified_ns, low)

    def get_extractor(self, state: WorkUnitState) -> Extractor:
        settings: DirectorySettings = self.settings()
        if settings.format in SPARK_ONLY_FORMATS:
            raise SourceError(f"{FORMAT_KEY}={settings.format} is read by the DataFrame engine only (task.engine)")
        if settings.format == "avro":
            return AvroFileExtractor(state, self.file_systems)
        if settings.format == "lines":
            return LinesExtractor(state, self.file_systems)
        return JsonLinesExtractor(state, self.file_systems, settings.json_schema)


def _spark_schema(settings: DirectorySettings, paths: list[str]) -> str | None:
    """The Spark schema (DDL) of a format only Spark reads: the job's, or inferred by Spark over the run's files."""
    if settings.format not in SPARK_ONLY_FORMATS:
        return None
    from spark_pipeline.sources.directory_frame import (  # PySpark: for Spark's formats only
        checked_schema,
        infer_schema,
    )
    if settings.spark_schema is not None:
        return checked_schema(settings.spark_schema)
    return infer_schema(settings.format, paths, settings.csv_header)


def _root(directory: str) -> str:
    """The configured directory as a location: local ones absolute with symlinks resolved, remote ones normalized."""
    try:
        return urls.resolve_folder(directory)
    except ValueError as e:
        raise SourceError(f"{DIRECTORY}: {e}") from e


def _files(fs: FileSystem, root: str, settings: DirectorySettings) -> list[tuple[FileInfo, str]]:
    """Visible files under `root` matching the pattern (one level unless recursive), with their relative paths.

    A root that is not a directory is an error naming the key. On S3, where a folder exists only through the
    objects under it, that means nothing is stored under it (nor a `folder/` marker): an empty folder cannot be
    told from a mistyped one there, so neither is taken for an empty input.
    """
    try:
        listed = fs.list_files(root)
        if not listed and not _is_folder(fs, root):
            raise SourceError(_not_a_directory(root))
    except FileSystemError as e:
        raise SourceError(f"{DIRECTORY}: cannot list {root}: {e}") from e
    found = []
    for file in listed:
        try:
            relative = urls.relative_to(file.path, root)
        except ValueError as e:  # the root itself, listed as a file (HDFS lists a file path as itself)
            raise SourceError(_not_a_directory(root)) from e
        parts = relative.split("/")
        target = relative if "/" in settings.pattern else parts[-1]
        if (len(parts) == 1 or settings.recursive) and not any(p.startswith(HIDDEN) for p in parts) \
                and fnmatch.fnmatchcase(target, settings.pattern):
            found.append((file, relative))
    return found


def _is_folder(fs: FileSystem, root: str) -> bool:
    """Whether a location with no file under it is a folder all the same (an empty one)."""
    path = urls.parse(root).path
    return path == "/" or posixpath.basename(path) in fs.list_folders(urls.parent(root))


def _not_a_directory(root: str) -> str:
    """The error for a data directory that is not one (on S3: a prefix with nothing under it)."""
    if urls.parse(root).scheme in (urls.Scheme.S3, urls.Scheme.S3A):
        return (f"{DIRECTORY}: {root} is not a directory: nothing is stored under it (on S3 a folder exists only "
                f"through its objects, or a '{posixpath.basename(urls.parse(root).path)}/' marker)")
    return f"{DIRECTORY}: {root} is not a directory"


def _start(relative: str, size: int, mtime_ns: int, watermark: int | None, dataset: DatasetView | None) -> int | None:
    """Where to read a file from, or None when there is nothing to read (warning when it changed after ingestion)."""
    if watermark is None:
        return 0 if size > 0 else None
    offset = watermark // SCALE
    changed_after_commit = dataset is not None and dataset.committed_at is not None and \
        mtime_ns > _nanoseconds(dataset.committed_at)
    if watermark % SCALE == COMPLETE:
        if size != offset or changed_after_commit:
            log.warning("%s was modified after it was ingested (%d bytes then, %d now): it is not ingested again",
                        relative, offset, size)
        return None
    if size < offset or changed_after_commit:
        log.warning("%s was modified after it was partly ingested (up to byte %d): it is not read further",
                    relative, offset)
        return None
    return watermark


def _nanoseconds(moment: datetime) -> int:
    """A datetime (naive means UTC) as nanoseconds since the epoch, exactly."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return (aware - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1_000


def _has_records(fs: FileSystem, candidate: Candidate, settings: DirectorySettings) -> bool:
    """False for an Avro file that is only a header (no record yet); other formats are not looked into."""
    if settings.format != "avro" or candidate.low > 0:
        return True
    with _listed(fs, candidate.path) as stream:
        try:
            fastavro.block_reader(stream)
        except (ValueError, EOFError) as e:
            raise SourceError(f"{candidate.path} is not an Avro container file: {e}") from e
        return stream.tell() < candidate.size


def _avro_schema(fs: FileSystem, path: str) -> str:
    """The writer schema of an Avro file, as JSON: the schema of every Avro record the run reads."""
    with _listed(fs, path) as stream:
        try:
            return json.dumps(fastavro.block_reader(stream).writer_schema, separators=(",", ":"))
        except (ValueError, EOFError) as e:
            raise SourceError(f"{path} is not an Avro container file: {e}") from e


def _listed(fs: FileSystem, path: str) -> io.BufferedReader:
    """A file just listed, opened from its start (gone since: an error naming it)."""
    try:
        return open_file(fs, path)
    except (OSError, FileSystemError) as e:
        raise SourceError(f"cannot read {path} (listed under {DIRECTORY}): {e}") from e


class _RangedReader(io.RawIOBase):
    """A file of any store as a seekable raw stream: reads go to one `open_read` stream; a seek elsewhere drops it
    and the next read opens the file again at the new byte (stores serve ranged reads, not seeks)."""

    def __init__(self, fs: FileSystem, path: str) -> None:
        super().__init__()
        self.fs, self.path = fs, path
        self._position = 0
        self._stream: BinaryIO | None = None  # set before opening: close() runs even when the open fails
        self._stream = fs.open_read(path, 0)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence not in (io.SEEK_SET, io.SEEK_CUR):
            raise io.UnsupportedOperation(f"{self.path}: seeks from the end are not supported")
        target = offset + (self._position if whence == io.SEEK_CUR else 0)
        if target < 0:
            raise ValueError(f"{self.path}: negative position {target}")
        if target != self._position:
            self._drop()
            self._position = target
        return target

    def readinto(self, buffer: Any) -> int:
        if self._stream is None:
            try:
                self._stream = self.fs.open_read(self.path, self._position)
            except (OSError, FileSystemError) as e:
                raise SourceError(f"cannot read {self.path} from byte {self._position}: {e}") from e
        data = self._stream.read(len(buffer))
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)

    def _drop(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.close()

    def close(self) -> None:
        self._drop()
        super().close()


def open_file(fs: FileSystem, path: str) -> io.BufferedReader:
    """A file from its start, buffered, seekable on every store (a seek past the buffer reopens it there)."""
    return io.BufferedReader(_RangedReader(fs, path), READ_BUFFER)


class FileExtractor(Extractor):
    """Reads one file from the low watermark up to its size at planning."""

    def __init__(self, state: WorkUnitState, fs: FileSystem) -> None:
        super().__init__(state)
        unit = state.work_unit
        self.fs = fs
        self.relative = unit.partition
        self.path = unit.properties[FILE]
        self.size = unit.expected_high_watermark // SCALE
        self._stream: IO[bytes] | None = None

    def open(self) -> IO[bytes]:
        """The file, opened once; a file gone since planning is an error naming it."""
        if self._stream is None:
            try:
                self._stream = open_file(self.fs, self.path)
            except (OSError, FileSystemError) as e:
                raise SourceError(f"cannot read {self.path} (planned in this run): {e}") from e
        return self._stream

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


class LinesExtractor(FileExtractor):
    """`lines`: every line a record {file, line_number, text}; the watermark is the byte offset after it."""

    def __init__(self, state: WorkUnitState, fs: FileSystem) -> None:
        super().__init__(state, fs)
        self.offset = state.work_unit.low_watermark // SCALE
        self.line_number: int | None = None

    def get_schema(self) -> Schema:
        return LINES_SCHEMA

    def next_line(self) -> tuple[int, str] | None:
        """The next line (number, text without its end of line) before the planned size, or None."""
        stream = self.open()
        if self.line_number is None:
            self.line_number = _count_lines(stream, self.offset)  # reads the prefix: numbering needs it anyway
            stream.seek(self.offset)
        if self.offset >= self.size:
            return None
        raw = stream.readline(self.size - self.offset)
        if not raw:
            raise SourceError(f"{self.path} ended at byte {self.offset}, before its size at planning ({self.size})")
        self.offset += len(raw)
        self.line_number += 1
        text = raw[:-1] if raw.endswith(b"\n") else raw
        try:
            return self.line_number, (text[:-1] if text.endswith(b"\r") else text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SourceError(f"{self.path} line {self.line_number} is not UTF-8: {e}") from e

    def watermark(self) -> int:
        """The watermark after what was read: complete at the planned size."""
        return complete(self.size) if self.offset >= self.size else position(self.offset)

    def read_record(self) -> Record | None:
        line = self.next_line()
        self.next_watermark = self.watermark()
        if line is None:
            return None
        return {"file": self.relative, "line_number": line[0], "text": line[1]}


def _count_lines(stream: IO[bytes], offset: int) -> int:
    """How many lines the first `offset` bytes hold (to number lines when resuming mid-file)."""
    stream.seek(0)
    count, left = 0, offset
    while left > 0 and (chunk := stream.read(min(left, 1 << 20))):
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count


class JsonLinesExtractor(LinesExtractor):
    """`json`: every non-blank line a JSON value; blank lines after a record are read with it (no empty tail)."""

    def __init__(self, state: WorkUnitState, fs: FileSystem, schema_json: str | None) -> None:
        super().__init__(state, fs)
        self.schema: dict[str, Any] = json.loads(schema_json) if schema_json else JSON_SCHEMA
        self.parsed = fastavro.parse_schema(self.schema) if schema_json else None
        self._pending: tuple[int, str] | None = None
        self._looked = False

    def get_schema(self) -> Schema:
        return self.schema

    def _next_value_line(self) -> tuple[int, str] | None:
        while (line := self.next_line()) is not None and not line[1].strip():
            pass
        return line

    def read_record(self) -> Record | None:
        line = self._pending if self._looked else self._next_value_line()
        if line is None:
            self.next_watermark = self.watermark()
            return None
        after = position(self.offset)  # the end of this line and the blank lines after it
        self._pending, self._looked = self._next_value_line(), True
        self.next_watermark = self.watermark() if self._pending is None else after
        return self._record(*line)

    def _record(self, number: int, text: str) -> Record:
        try:
            value = json.loads(text)
        except ValueError as e:
            raise SourceError(f"{self.path} line {number} is not JSON: {e}") from e
        if self.parsed is None:
            return {"file": self.relative, "line_number": number, "json": text}
        try:
            validate(value, self.parsed, raise_errors=True)
        except AvroValidationError as e:
            raise SourceError(f"{self.path} line {number} does not match source.filebased.json.schema: {e}") from e
        return value


_END = object()
"""Marks the end of a block's records (a record itself may be None, for a `null` schema)."""


class AvroFileExtractor(FileExtractor):
    """`avro`: the records of an Avro container file, read with the schema of the run's first file."""

    def __init__(self, state: WorkUnitState, fs: FileSystem) -> None:
        super().__init__(state, fs)
        self.schema: dict[str, Any] = json.loads(state.work_unit.properties[SCHEMA_PROPERTY])
        self.offset, self.skip = divmod(state.work_unit.low_watermark, SCALE)
        self._blocks: Iterator[Any] | None = None
        self._records: Iterator[Any] = iter(())
        self._block_offset = self._block_end = self.offset
        self._block_records = self._index = 0

    def get_schema(self) -> Schema:
        return self.schema

    def read_record(self) -> Record | None:
        try:
            while (record := next(self._records, _END)) is _END:
                if not self._next_block():
                    self.next_watermark = complete(self.size)
                    return None
        except (SchemaResolutionError, ValueError, EOFError) as e:
            raise SourceError(f"cannot read {self.path} at byte {self._block_offset}: {type(e).__name__}: {e}") from e
        self._index += 1
        if self._index < self._block_records:
            self.next_watermark = position(self._block_offset, self._index)
        else:
            self.next_watermark = complete(self.size) if self._block_end >= self.size else position(self._block_end)
        return record

    def _next_block(self) -> bool:
        """Move to the next block before the planned size; False at the end (an early end is an error)."""
        if self._blocks is None:
            stream = self.open()
            reader = fastavro.block_reader(stream, reader_schema=self.schema)
            if self.offset > 0:
                stream.seek(self.offset)  # resume at the block boundary the watermark names (a ranged read)
            else:
                self._block_offset = self._block_end = stream.tell()  # the first block follows the header
            self._blocks = iter(reader)
        block = next(self._blocks, None)
        if block is None or block.offset >= self.size:
            if self._block_end < self.size:
                raise SourceError(f"{self.path} ended at byte {self._block_end}, before its size at planning "
                                  f"({self.size})")
            return False
        if block.offset != self._block_end:
            raise SourceError(f"{self.path}: expected an Avro block at byte {self._block_end}, found {block.offset}")
        if block.num_records >= COMPLETE:
            raise SourceError(f"{self.path}: the block at byte {block.offset} holds {block.num_records} records, "
                              f"more than a watermark can count ({COMPLETE - 1})")
        self._block_offset, self._block_end = block.offset, block.offset + block.size
        self._block_records, self._index = block.num_records, 0
        self._records = iter(block)
        for _ in range(self.skip):
            next(self._records)
            self._index += 1
        self.skip = 0
        return True
