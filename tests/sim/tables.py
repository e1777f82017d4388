"""The simulation's Iceberg and Delta tables: a Parquet writer for the records engine, the faults of a table commit,
and what a table holds.

A scenario's table job writes Parquet (`ParquetDataWriterBuilder`, pyarrow in this process: the records engine's
Avro writer cannot feed a table) and publishes it through the real `IcebergTablePublisher` into a table of a SQLite
catalog of its own. `FaultyTables` puts the plan at the table commit's boundaries (pyiceberg's catalog is no
FileSystem): a table commit that fails (nothing committed), one that commits but whose answer is lost (the step
raises), a crash either side, a failed read of the table's history (the step's verify), and another writer's commit
between our load of the table and our commit (pyiceberg's optimistic concurrency refuses ours; the append tries again
on top of theirs).

The committer makes the table steps of a run's sequences together (one append, or one Delta transaction, for many
datasets): the same faults then hit that one commit, and a failed read after it leaves all its sequences unsettled.

A Delta scenario publishes through the real `DeltaTablePublisher` (deltalake in this process) with the same faults at
the DeltaCommit step's write (the table's creation or the append), at the read of the table's app transaction (the
step's verify), and another writer's append (or the table's creation) between our load of the table and our commit
(delta-rs's conflict check lets an append through on top of it; a creation that lost the race is tried again as an
append).
"""

from __future__ import annotations

import hashlib
import io
import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from events.task import OutputFile
from filesystems import urls
from spark_pipeline.constructs import DataWriter, DataWriterBuilder, Record, WriterDestination
from spark_pipeline.sources.synthetic import SCHEMA
from spark_pipeline.tables import delta, iceberg
from spark_pipeline.tables.files import Footer
from spark_pipeline.writers import move_to_task_output, path_segment, unit_file_name
from tests.sim.faults import Fault, FaultPlan, SimulatedCrash

T = TypeVar("T")
A = TypeVar("A")
ARROW_TYPES = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "double": pa.float64(),
               "boolean": pa.bool_(), "bytes": pa.binary()}
FOREIGN = "foreign"
"""The dataset of the records another writer commits to a table (not ours: every check leaves them out)."""
CONCURRENT_RATE = 0.25
"""Of our table commits while faults are armed: how many another writer's commit comes in between."""
COMMIT_FAULTS = {Fault.CRASH_BEFORE: 0.05, Fault.CRASH_AFTER: 0.1, Fault.IO_ERROR: 0.05,
                 Fault.APPEND_DURABLE_THEN_ERROR: 0.1}
"""The faults of a table commit while armed, and how often each (more often than those of a file call: a scenario
makes few table commits while faults are on, most runs end before their commit). APPEND_DURABLE_THEN_ERROR: the
commit is made, but its answer is lost (the step raises)."""


class TableFormat(StrEnum):
    """The table format a scenario's table job publishes into."""

    ICEBERG = "iceberg"
    DELTA = "delta"


PUBLISHER_KEYS = {
    TableFormat.ICEBERG: {"data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher"},
    TableFormat.DELTA: {"data.publisher.type": "spark_pipeline.tables.delta_publisher.DeltaTablePublisher"},
}
TABLE_KEYS = {TableFormat.ICEBERG: "iceberg.table", TableFormat.DELTA: "delta.table"}


def arrow_schema(schema: dict[str, Any]) -> pa.Schema:
    """The Arrow schema of a flat Avro record schema of primitive fields."""
    return pa.schema([pa.field(f["name"], ARROW_TYPES[f["type"]], nullable=False) for f in schema["fields"]])


class ParquetDataWriter(DataWriter):
    """Writes one work unit's branch to one Parquet file (in memory until commit), then moves it to task output."""

    def __init__(self, destination: WriterDestination) -> None:
        self.destination = destination
        self.rows: list[Record] = []

    def write(self, record: Record) -> None:
        self.rows.append(record)
        self.records_written += 1

    def commit(self, actual_high_watermark: int) -> list[OutputFile]:
        if not self.rows:
            return []
        d = self.destination
        buffer = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(self.rows, schema=arrow_schema(d.schema)), buffer)
        data = buffer.getvalue()
        unit = d.work_unit
        staging = urls.join(d.staging_dir, d.run_id, d.task_id, f"attempt-{d.attempt}",
                            f"{path_segment(unit.dataset_urn)}.{path_segment(unit.partition)}.parquet.tmp")
        file = d.fs.open_write(staging)
        file.write(data)
        file.close()
        checksum = hashlib.sha256(data).hexdigest()
        target = urls.join(d.output_dir, unit_file_name(unit, d.partition, actual_high_watermark, ".parquet"))
        move_to_task_output(d.fs, staging, target, len(data), checksum)
        self.bytes_written = len(data)
        return [OutputFile(path=target, size=len(data), checksum=checksum, records=self.records_written,
                           branch=d.branch.index, folder=d.output_dir, partition=d.partition)]

    def abort(self) -> None:
        self.rows = []


class ParquetDataWriterBuilder(DataWriterBuilder):
    """The table jobs' `writer.builder.class`: Parquet files on the records engine."""

    SUPPORTED_OUTPUT_FORMATS = ("PARQUET",)

    def build(self, destination: WriterDestination) -> DataWriter:
        return ParquetDataWriter(destination)


class FaultyTables:
    """While installed, the table commit's calls ask the plan first: the append (`table-commit`), the read of the
    table's history by a step's verify (`table-read`), and whether another writer commits in between."""

    def __init__(self, plan: FaultPlan, foreign_dir: Path) -> None:
        self.plan = plan
        self.foreign_dir = foreign_dir
        self.foreign = itertools.count()

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Route spark_pipeline.tables.iceberg's commit and read through the plan (restored on exit)."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(iceberg, "_append_once", self._wrap_append(iceberg._append_once))
            patch.setattr(iceberg, "committed", self._wrap_read(iceberg.committed))
            patch.setattr(iceberg, "committed_members", self._wrap_read(iceberg.committed_members))
            patch.setattr(delta, "_create", self._wrap_delta_write(delta._create, creates=True))
            patch.setattr(delta, "_append", self._wrap_delta_write(delta._append, creates=False))
            patch.setattr(delta, "latest_version", self._wrap_delta_read(delta.latest_version))
            patch.setattr(delta, "versions_of", self._wrap_delta_read(delta.versions_of))
            yield

    def _wrap_append(self, append_once: Callable[..., None]) -> Callable[..., None]:
        def faulty(ref: iceberg.TableRef, table: Any, files: Sequence[Footer], properties: dict[str, str]) -> None:
            if self.plan.armed and self.plan.rng.random() < CONCURRENT_RATE:
                self._foreign_commit(ref)
            fault = self._decide()
            if fault is Fault.CRASH_BEFORE:
                raise SimulatedCrash(f"table commit to {ref.table}")
            if fault is Fault.IO_ERROR:
                raise iceberg.TableError(f"simulated: the commit to {ref.describe()} failed; nothing committed")
            append_once(ref, table, files, properties)
            if fault is Fault.CRASH_AFTER:
                raise SimulatedCrash(f"after the table commit to {ref.table}")
            if fault is Fault.APPEND_DURABLE_THEN_ERROR:
                raise iceberg.TableError(f"simulated: the commit to {ref.describe()} is made, but its answer was lost")

        return faulty

    def _decide(self) -> Fault | None:
        """The fault of one table commit (none while disarmed), counted as `table-commit:<fault>`."""
        self.plan.calls += 1
        if not self.plan.armed:
            return None
        roll = self.plan.rng.random()
        for fault, rate in COMMIT_FAULTS.items():
            if roll < rate:
                self.plan.injected[f"table-commit:{fault}"] += 1
                return fault
            roll -= rate
        return None

    def _wrap_read(self, committed: Callable[[iceberg.TableRef, str], T]) -> Callable[[iceberg.TableRef, str], T]:
        """A read of the table's history (by commit id, or a group's members) with the plan's faults."""
        def faulty(ref: iceberg.TableRef, commit_id: str) -> T:
            fault = self.plan.decide("table-read")
            if fault in (Fault.CRASH_BEFORE, Fault.CRASH_AFTER):
                raise SimulatedCrash(f"read of {ref.table}")
            if fault is Fault.IO_ERROR:
                raise iceberg.TableError(f"simulated: {ref.describe()} could not be read")
            return committed(ref, commit_id)

        return faulty

    def _wrap_delta_write(self, write: Callable[..., None], creates: bool) -> Callable[..., None]:
        """The DeltaCommit's write (the table's creation, or an append to it) with the plan's faults."""
        def faulty(ref: delta.DeltaRef, *args: Any) -> None:
            if self.plan.armed and self.plan.rng.random() < CONCURRENT_RATE:
                self._foreign_delta_commit(ref, creates)
            fault = self._decide()
            if fault is Fault.CRASH_BEFORE:
                raise SimulatedCrash(f"Delta commit to {ref.table}")
            if fault is Fault.IO_ERROR:
                raise delta.TableError(f"simulated: the commit to {ref.describe()} failed; nothing committed")
            write(ref, *args)
            if fault is Fault.CRASH_AFTER:
                raise SimulatedCrash(f"after the Delta commit to {ref.table}")
            if fault is Fault.APPEND_DURABLE_THEN_ERROR:
                raise delta.TableError(f"simulated: the commit to {ref.describe()} is made, but its answer was lost")

        return faulty

    def _wrap_delta_read(self, latest: Callable[[delta.DeltaRef, A], T]) -> Callable[[delta.DeltaRef, A], T]:
        """A read of the table's app transactions (the DeltaCommit step's verify, or many's) with the plan's faults."""
        def faulty(ref: delta.DeltaRef, app_id: A) -> T:
            fault = self.plan.decide("table-read")
            if fault in (Fault.CRASH_BEFORE, Fault.CRASH_AFTER):
                raise SimulatedCrash(f"read of {ref.table}")
            if fault is Fault.IO_ERROR:
                raise delta.TableError(f"simulated: {ref.describe()} could not be read")
            return latest(ref, app_id)

        return faulty

    def _foreign_delta_commit(self, ref: delta.DeltaRef, creates: bool) -> None:
        """Another writer appends its own records to the Delta table after we loaded it (or creates the table, when
        we were about to): a file of its own in the table's folder, beside `data/`."""
        self.plan.injected["table-commit:concurrent-writer"] += 1
        rows = [{"dataset": FOREIGN, "partition": 0, "offset": i, "amount": 0, "payload": ""} for i in range(2)]
        write_deltalake(ref.uri, pa.Table.from_pylist(rows, schema=arrow_schema(SCHEMA)),
                        mode="error" if creates else "append")

    def _foreign_commit(self, ref: iceberg.TableRef) -> None:
        """Another writer appends a file of its own records to the table, after we loaded it (ours is now stale)."""
        self.plan.injected["table-commit:concurrent-writer"] += 1
        self.foreign_dir.mkdir(parents=True, exist_ok=True)
        path = self.foreign_dir / f"foreign-{next(self.foreign)}.parquet"
        rows = [{"dataset": FOREIGN, "partition": 0, "offset": i, "amount": 0, "payload": ""} for i in range(2)]
        pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(SCHEMA)), path)
        theirs = iceberg.catalog_of(ref).load_table(ref.table)
        theirs.add_files([str(path)], snapshot_properties={"writer": "someone else"})


def parquet_records(path: Path) -> Counter[tuple[str, int, int]]:
    """(dataset, partition, offset) of every record in one Parquet file; a ValueError if it is no whole one."""
    try:
        rows = pq.read_table(path, columns=["dataset", "partition", "offset"])
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"{path} is no whole Parquet file: {e}") from e
    return Counter(zip(rows["dataset"].to_pylist(), rows["partition"].to_pylist(), rows["offset"].to_pylist(),
                       strict=True))


def table_records(warehouse: Path, table: str, kind: TableFormat) -> Counter[tuple[str, int, int]]:
    """(dataset, partition, offset) of every record a scan of the table reads, other writers' left out."""
    if kind is TableFormat.DELTA:
        return delta_records(warehouse / Path(*table.split(".")))
    ref = iceberg.TableRef("oncelog", f"sqlite:///{warehouse / 'iceberg-catalog.db'}", str(warehouse), table,
                           urls.join(str(warehouse), *table.split(".")))
    loaded = iceberg.load_table(ref)
    if loaded is None:
        return Counter()
    rows = loaded.scan(selected_fields=("dataset", "partition", "offset")).to_arrow()
    return Counter(k for k in zip(rows["dataset"].to_pylist(), rows["partition"].to_pylist(),
                                  rows["offset"].to_pylist(), strict=True) if k[0] != FOREIGN)


def delta_records(root: Path) -> Counter[tuple[str, int, int]]:
    """(dataset, partition, offset) of every record deltalake's reader reads from the Delta table, others' left out."""
    if not (root / delta.LOG_FOLDER).exists():
        return Counter()
    rows = DeltaTable(str(root)).to_pyarrow_table(columns=["dataset", "partition", "offset"])
    return Counter(k for k in zip(rows["dataset"].to_pylist(), rows["partition"].to_pylist(),
                                  rows["offset"].to_pylist(), strict=True) if k[0] != FOREIGN)
