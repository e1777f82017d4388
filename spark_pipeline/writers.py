"""The default DataWriter: Avro files (fastavro), written to staging, then moved to the run's task output.

File names come from the work unit's watermark range, so a task that runs the same range again writes the same
file: nothing is published twice under two names. The size and sha256 are taken while writing.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import IO, Any, Literal, cast
from urllib.parse import quote

import fastavro
from fastavro.write import Writer
from pydantic import BaseModel, ConfigDict, Field

from events.task import OutputFile
from spark_pipeline.constructs import DataWriter, DataWriterBuilder, Record, WriterDestination
from spark_pipeline.filesystem import LOCAL


class AvroWriterSettings(BaseModel):
    """Keys the Avro writer reads (Gobblin's names)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    codec: Literal["null", "deflate", "snappy"] = Field(default="snappy", alias="writer.codec.type")
    sync_interval: int = Field(default=64_000, ge=1_000, alias="writer.avro.sync.interval")


def path_segment(value: str) -> str:
    """A dataset URN or partition as one safe, reversible path segment."""
    return quote(value, safe="-_.=@") or "_"


def output_file_name(destination: WriterDestination, high: int) -> str:
    """<dataset>/<partition>_<low>-<high>.avro: deterministic for a watermark range."""
    unit = destination.work_unit
    return f"{path_segment(unit.dataset_urn)}/{path_segment(unit.partition)}_{unit.low_watermark}-{high}.avro"


class _HashingFile:
    """A binary file that counts and hashes what passes through it."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("wb")
        self.digest = hashlib.sha256()
        self.size = 0

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
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


class AvroDataWriter(DataWriter):
    """Writes one work unit's branch to one Avro container file."""

    def __init__(self, destination: WriterDestination, settings: AvroWriterSettings) -> None:
        self.destination = destination
        unit = destination.work_unit
        attempt_dir = Path(destination.staging_dir) / destination.run_id / destination.task_id / f"attempt-{destination.attempt}"
        self.staging_path = attempt_dir / f"{path_segment(unit.dataset_urn)}.{path_segment(unit.partition)}.avro.tmp"
        self.staging_path.parent.mkdir(parents=True, exist_ok=True)
        self._file = _HashingFile(self.staging_path)
        schema = fastavro.parse_schema(destination.schema)
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
        target = Path(self.destination.output_dir) / output_file_name(self.destination, actual_high_watermark)
        # Durable before the task records the file: a rename lost to a power cut would leave a recorded file missing.
        LOCAL.rename(str(self.staging_path), str(target))
        LOCAL.sync_folders({str(target.parent)})
        return [OutputFile(path=str(target), size=self._file.size, checksum=self._file.digest.hexdigest(),
                           records=self.records_written, branch=self.destination.branch.index)]

    def abort(self) -> None:
        if not self._file.file.closed:
            self._file.file.close()
        self.staging_path.unlink(missing_ok=True)


class AvroDataWriterBuilder(DataWriterBuilder):
    """Builds Avro writers (the default `writer.builder.class`)."""

    CONFIG_MODEL = AvroWriterSettings
    SUPPORTED_OUTPUT_FORMATS = ("AVRO",)

    def build(self, destination: WriterDestination) -> DataWriter:
        return AvroDataWriter(destination, self.settings(destination.branch.index))

