"""Gobblin's task flow for one work unit: extract → convert → row checks → fork → per branch: convert → row checks
→ write; then task-level checks, and the branch writers' files move from staging to the run's task output.

A record is written only once every branch has converted and checked it, so a failure leaves the output holding
exactly the records before the actual high watermark: what the `partial` commit policy may publish.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from events.task import OutputFile, WorkUnitResult
from filesystems.base import FileSystem
from filesystems.router import FileSystems
from spark_pipeline.constructs import (
    Converter,
    DataWriter,
    DataWriterBuilder,
    Extractor,
    ForkOperator,
    Record,
    RowLevelPolicy,
    Schema,
    Source,
    TaskLevelPolicy,
    TaskStats,
    WorkUnitState,
    WriterDestination,
)
from spark_pipeline.engines.policies import check_task, judge_row
from spark_pipeline.jobfile.config import (
    BranchConfig,
    JobConfig,
)
from spark_pipeline.jobfile.partitions import TimePartitioning, partitioning_of
from spark_pipeline.jobfile.plugins import make_construct
from spark_pipeline.writers import PartitionedDataWriter, attempt_output_dir, path_segment


@dataclass
class BranchConstructs:
    """One fork branch's own converters, checks and writer builder."""

    config: BranchConfig
    converters: list[Converter]
    row_policies: list[RowLevelPolicy]
    task_policies: list[TaskLevelPolicy]
    writer_builder: DataWriterBuilder


@dataclass
class Constructs:
    """A job's constructs, built once per task from the config's dotted class paths."""

    config: JobConfig
    source: Source
    converters: list[Converter]
    row_policies: list[RowLevelPolicy]
    fork: ForkOperator
    branches: list[BranchConstructs]
    fs: FileSystem
    """The file systems the writers write to (one client per task, reused by its work units)."""
    partitioning: TimePartitioning | None = None
    """The time partitioner (writer.partitioner.class) splitting each branch's output, if the job has one."""


def build_constructs(config: JobConfig) -> Constructs:
    """Instantiate every construct the job names (validation already checked that they import)."""
    branches = []
    for b in config.branches:
        branches.append(BranchConstructs(
            b,
            [make_construct(config, "converter.classes", p, Converter, b.index) for p in b.converter_classes],
            [make_construct(config, "qualitychecker.row.policies", p.class_path, RowLevelPolicy, p.type, b.index)
             for p in b.row_policies],
            [make_construct(config, "qualitychecker.task.policies", p.class_path, TaskLevelPolicy, p.type, b.index)
             for p in b.task_policies],
            make_construct(config, "writer.builder.class", b.writer_builder_class, DataWriterBuilder),
        ))
    fork = (make_construct(config, "fork.operator.class", config.fork_operator_class, ForkOperator)
            if config.fork_operator_class else ForkOperator(config))
    return Constructs(
        config,
        make_construct(config, "source.class", config.source_class, Source),
        [make_construct(config, "converter.classes", p, Converter) for p in config.converter_classes],
        [make_construct(config, "qualitychecker.row.policies", p.class_path, RowLevelPolicy, p.type)
         for p in config.row_policies],
        fork,
        branches,
        FileSystems.of(config.properties),
        partitioning_of(config.properties),
    )


def convert(converters: list[Converter], schemas: list[Schema], record: Record, state: WorkUnitState) -> list[Record]:
    """A record through a converter chain: each converter converts every output of the one before."""
    records = [record]
    for converter, schema in zip(converters, schemas):
        records = [out for r in records for out in converter.convert_record(schema, r, state)]
    return records


def chain_schema(converters: list[Converter], schema: Schema, state: WorkUnitState) -> tuple[Schema, list[Schema]]:
    """The schema after each converter, and the last one."""
    schemas = []
    for converter in converters:
        schema = converter.convert_schema(schema, state)
        schemas.append(schema)
    return schema, schemas


class _RowChecks:
    """Row-level policies of one stage, judged by engines.policies; counts what they rejected and flagged, and keeps
    the diverted records for the error file."""

    def __init__(self, policies: list[RowLevelPolicy], err_dir: Path | None) -> None:
        self.policies = policies
        self.err_dir = err_dir
        self.rejected = 0
        self.flagged = 0
        self._err: list[str] = []

    def passes(self, record: Record) -> bool:
        verdict = judge_row(self.policies, record)
        self.flagged += verdict.flagged
        if verdict.diverted:
            self._err += [json.dumps(record, default=str)] * verdict.diverted
        self.rejected += verdict.rejected
        return verdict.keep

    def flush(self, name: str) -> None:
        """Write the diverted rows (JSON lines) to the error folder."""
        if self._err and self.err_dir is not None:
            self.err_dir.mkdir(parents=True, exist_ok=True)
            with (self.err_dir / f"{name}.jsonl").open("a", encoding="utf-8") as out:
                out.writelines(line + "\n" for line in self._err)
            self._err.clear()


class WorkUnitFlow:
    """Runs one work unit through the constructs; `run` returns its result, `commit_partial` what it got done."""

    def __init__(self, constructs: Constructs, state: WorkUnitState, extractor: Extractor) -> None:
        self.c = constructs
        self.state = state
        self.extractor = extractor
        self.processed_watermark = state.work_unit.low_watermark
        self.records_extracted = 0
        self.writers: list[DataWriter | None] = []
        self._clean = True  # no writer left holding half a record
        self._committing = False  # the writers' commits began: a failure there leaves nothing to commit partially
        err = constructs.config.row_err_file
        self.checks = _RowChecks(constructs.row_policies, Path(err) / state.run_id if err else None)
        self.branch_checks = [
            _RowChecks(b.row_policies, Path(b.config.row_err_file) / state.run_id if b.config.row_err_file else None)
            for b in constructs.branches
        ]

    def run(self) -> WorkUnitResult:
        schema, master_schemas = chain_schema(self.c.converters, self.extractor.get_schema(), self.state)
        takes_schema = self.c.fork.forks_for_schema(self.state, schema)
        branch_schemas = []
        for index, branch in enumerate(self.c.branches):
            final, schemas = chain_schema(branch.converters, schema, self.state)
            branch_schemas.append(schemas)
            self.writers.append(self._writer(branch, final) if takes_schema[index] else None)
        direct = self._direct_writer()
        if direct is not None:
            self._copy_records(direct)
        else:
            self._process_records(self._processor(master_schemas, branch_schemas))
        # The range may end past the last record (Kafka's transaction markers): the extractor says where.
        self.processed_watermark = self.extractor.next_watermark
        self._task_checks()
        return self._commit()

    def _direct_writer(self) -> DataWriter | None:
        """The one writer that takes every record unchanged (no converter, row check or fork choice), else None."""
        c = self.c
        live = [i for i, w in enumerate(self.writers) if w is not None]
        if c.converters or c.row_policies or len(live) != 1 or type(c.fork) is not ForkOperator:
            return None
        branch = c.branches[live[0]]
        return None if branch.converters or branch.row_policies else self.writers[live[0]]

    def _copy_records(self, writer: DataWriter) -> None:
        """Extractor to writer, record by record: the common job's loop, without the per-record stages."""
        extractor, read, write = self.extractor, self.extractor.read_record, writer.write
        while (record := read()) is not None:
            self.records_extracted += 1
            self._clean = False
            write(record)
            self._clean = True
            self.processed_watermark = extractor.next_watermark

    def _process_records(self, process: Callable[[Record], list[list[Record]]]) -> None:
        """Every record through the stages, then into the writers of the branches that took it."""
        while (record := self.extractor.read_record()) is not None:
            self.records_extracted += 1
            outputs = process(record)
            self._clean = False
            for writer, records in zip(self.writers, outputs):
                if writer is not None:
                    for out in records:
                        writer.write(out)
            self._clean = True
            self.processed_watermark = self.extractor.next_watermark

    def _processor(self, master_schemas: list[Schema], branch_schemas: list[list[Schema]]
                   ) -> Callable[[Record], list[list[Record]]]:
        """The per-record work up to the writers: every branch's output, or an exception before anything is written."""
        c, state = self.c, self.state
        live = [i for i, w in enumerate(self.writers) if w is not None]
        copies = len(live) > 1

        def process(record: Record) -> list[list[Record]]:
            outputs: list[list[Record]] = [[] for _ in self.writers]
            for out in convert(c.converters, master_schemas, record, state) if c.converters else (record,):
                if self.checks.policies and not self.checks.passes(out):
                    continue
                forks = c.fork.forks_for_record(state, out)
                for index in live:
                    if not forks[index]:
                        continue
                    branch = c.branches[index]
                    taken = copy.deepcopy(out) if copies else out
                    converted = (convert(branch.converters, branch_schemas[index], taken, state)
                                 if branch.converters else (taken,))
                    checks = self.branch_checks[index]
                    outputs[index].extend(r for r in converted if not checks.policies or checks.passes(r))
            return outputs

        return process

    def _task_checks(self) -> None:
        for index, (branch, writer) in enumerate(zip(self.c.branches, self.writers)):
            if writer is None:
                continue
            stats = TaskStats(self.state.work_unit, index, self.records_extracted, writer.records_written,
                              self.checks.rejected + self.branch_checks[index].rejected, ())
            check_task(branch.task_policies, stats)

    def _commit(self) -> WorkUnitResult:
        """Move every branch's file to task output and describe the result up to the processed watermark."""
        name = f"{self.state.task_id}-{path_segment(self.state.work_unit.work_unit_id)}"
        self.checks.flush(name)
        for checks in self.branch_checks:
            checks.flush(name)
        files: list[OutputFile] = []
        self._committing = True
        for branch, writer in zip(self.c.branches, self.writers):
            if writer is not None:
                folder = self._output_dir(branch.config)  # a writer of a plugin may not say it: the attempt's folder
                files += [f if f.folder else f.model_copy(update={"folder": folder})
                          for f in writer.commit(self.processed_watermark)]
        self.state.set_actual_high_watermark(self.processed_watermark)
        unit = self.state.work_unit
        return WorkUnitResult.trusted(
            work_unit_id=unit.work_unit_id, dataset_urn=unit.dataset_urn, partition=unit.partition,
            low_watermark=unit.low_watermark, expected_high_watermark=unit.expected_high_watermark,
            actual_high_watermark=self.processed_watermark, records_extracted=self.records_extracted,
            records_written=sum(f.records for f in files), bytes_written=sum(f.size for f in files),
            output_files=tuple(files),
        )

    def commit_partial(self) -> WorkUnitResult | None:
        """After a failure: what was fully written before it, or None if a writer holds half a record or the failure
        was the writers' own commit (a writer is not committed twice: its file is closed, and may be half moved)."""
        if not self._clean or self._committing or not self.writers:
            self.abort()
            return None
        return self._commit()

    def abort(self) -> None:
        """Drop whatever the writers staged."""
        for writer in self.writers:
            if writer is not None:
                writer.abort()

    def _writer(self, branch: BranchConstructs, schema: Schema) -> DataWriter:
        """A branch's writer for the work unit: one per time partition when the job has a partitioner."""
        destination = self._destination(branch.config, schema)
        if self.c.partitioning is None:
            return branch.writer_builder.build(destination)
        return PartitionedDataWriter(branch.writer_builder, destination, self.c.partitioning)

    def _destination(self, branch: BranchConfig, schema: Schema) -> WriterDestination:
        state = self.state
        return WriterDestination(
            config=self.c.config, branch=branch, schema=schema, work_unit=state.work_unit, run_id=state.run_id,
            task_id=state.task_id, attempt=state.attempt, staging_dir=str(branch.writer_staging_dir),
            output_dir=self._output_dir(branch), fs=self.c.fs,
        )

    def _output_dir(self, branch: BranchConfig) -> str:
        """The branch's task-output folder of this attempt: its own, never another attempt's (writers.py)."""
        state = self.state
        return attempt_output_dir(str(branch.writer_output_dir), state.run_id, state.task_id, state.attempt)
