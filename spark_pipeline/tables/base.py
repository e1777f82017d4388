"""What the table publishers share: the keys every table job sets, and the plan that moves a dataset's Parquet files
under the table's `data/` folder before the one step that commits them to the table.

A table's data files need no folder per dataset (readers find them through the table's metadata): a dataset's folder
becomes part of each file's name (`data_file_path`), so a run of 10,000 new datasets creates no 10,000 folders (on
this project's ext4 VMs a new folder costs about a millisecond of kernel time; a rename, 20 µs).

Loads no table library: each publisher's commit step loads its own (pyiceberg, deltalake) on first use.
"""

from __future__ import annotations

import functools
import hashlib
import json
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from events.commit import TABLE_WATERMARKS, CommitSequencePlanned, CommitStepSpec, DatasetStateStep, FsRenameStep
from filesystems import urls
from projections.views import DatasetView
from spark_pipeline.constructs import DatasetOutput
from spark_pipeline.jobfile.config import WriterOutputFormat
from spark_pipeline.jobfile.partitions import partitioning_of
from spark_pipeline.publisher import BaseDataPublisher
from spark_pipeline.tables.partitioning import PARTITION_SPEC, table_partitioning

FORMAT_KEY = "writer.output.format"


class TableSettings(BaseModel):
    """The keys every table publisher reads: the warehouse (data.publisher.final.dir) and the Parquet format."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    FORMAT: ClassVar[str] = "table"
    """The table format's name, for messages."""

    warehouse: str = Field(alias="data.publisher.final.dir")
    output_format: str = Field(alias="writer.output.format")
    """Required here (the job's default is AVRO): Parquet only."""

    REMOTE_WAREHOUSES: ClassVar[tuple[str, ...]] = ()
    """The URL schemes of the warehouses beside local disk that the format's publisher works on."""
    UNSUPPORTED: ClassVar[str] = ""
    """Why other warehouses are refused (beyond not being listed)."""

    @field_validator("warehouse")
    @classmethod
    def _supported_warehouse(cls, value: str) -> str:
        if urls.has_scheme(value) and not value.startswith(("file:", *cls.REMOTE_WAREHOUSES)):
            raise ValueError(f"{value!r}: the {cls.FORMAT} publisher's warehouse must be on local disk"
                             f"{' or ' + ', '.join(cls.REMOTE_WAREHOUSES) if cls.REMOTE_WAREHOUSES else ''}"
                             f"{': ' + cls.UNSUPPORTED if cls.UNSUPPORTED else ''}")
        return value

    @field_validator("output_format")
    @classmethod
    def _parquet(cls, value: str) -> str:
        if value.strip().upper() != WriterOutputFormat.PARQUET.value:
            raise ValueError(f"the {cls.FORMAT} publisher publishes Parquet data files: set {FORMAT_KEY}: PARQUET "
                             f"(both engines write them)")
        return value


DATASET_MARK = "+"
"""Joins a file's dataset folder to its name under the table's data folder: never in a path segment the writers make
(spark_pipeline.writers.path_segment escapes it), and escaped here in any other."""


def data_file_path(location: str, relative: str) -> str:
    """Where a file published at `relative` (below the warehouse: `<dataset>/[<time partition>/]<file>`) lies in the
    table at `location`: `data/[<time partition>/]<dataset>+<file>`. One-to-one: the dataset folder's own `%` and `+`
    are escaped, and a file without a folder gets an escaped name with no mark."""
    *folders, name = relative.split("/")
    if not folders:
        return urls.join(location, "data", _escaped(name))
    dataset, *time_partition = folders
    return urls.join(location, "data", *time_partition, f"{_escaped(dataset)}{DATASET_MARK}{name}")


def _escaped(segment: str) -> str:
    return segment.replace("%", "%25").replace(DATASET_MARK, "%2B")


class TablePublisher(BaseDataPublisher):
    """Publishes each dataset's Parquet files into one table: files moved under the table's `data/` folder, then the
    table step that commits them (`table_step`), then the watermarks and the dataset state."""

    ONE_COMMIT_PER_RUN = True

    def plan(self, run_id: str, outputs: list[DatasetOutput], dataset_states: Mapping[str, DatasetView]
             ) -> list[CommitSequencePlanned]:
        settings: TableSettings = self.settings(0)
        warehouse = str(self.config.branch(0).publisher_final_dir)
        location = self.table_location(settings, warehouse)
        planned = []
        members = 0
        sequences = super().plan(run_id, outputs, dataset_states)
        group = group_of(sequences)
        output_of = {output.dataset_urn: output for output in outputs}
        for sequence in sequences:
            renames = [s for s in sequence.steps if isinstance(s, FsRenameStep)]
            previous = dataset_states.get(sequence.dataset_urn)
            properties = self.state_properties(previous, commits=bool(renames))
            others = [_with_properties(s, properties) for s in sequence.steps if not isinstance(s, FsRenameStep)]
            if not renames:
                planned.append(sequence.model_copy(update={"steps": tuple(others)}))
                continue  # only watermarks moved: no table commit
            moved = [s.model_copy(update={"dst": data_file_path(location, urls.relative_to(s.dst, warehouse))})
                     for s in renames]
            step = self.table_step(settings, warehouse, location, sequence, output_of[sequence.dataset_urn], previous,
                                   group, members)
            members += 1
            planned.append(sequence.model_copy(update={"steps": (*moved, step, *others)}))
        return planned

    @abstractmethod
    def table_location(self, settings: Any, warehouse: str) -> str:
        """The table's root folder (the published files go under its `data/` folder)."""

    @abstractmethod
    def table_step(self, settings: Any, warehouse: str, location: str, sequence: CommitSequencePlanned,
                   output: DatasetOutput, previous: DatasetView | None, group: str, member: int) -> CommitStepSpec:
        """The step that commits the sequence's files (moved under `location`) to the table; `member`: the sequence's
        number in `group`, the sequences planned with it (their table commits are made together)."""

    def partition_summary(self) -> dict[str, str]:
        """The partitioning a table this job creates gets, from the job's time partitioner (none: unpartitioned)."""
        return dict(self._partition_summary)

    @functools.cached_property
    def _partition_summary(self) -> dict[str, str]:
        """`partition_summary`, read from the job's keys once (every dataset's table step carries it)."""
        partitioning = table_partitioning(partitioning_of(self.config.properties))
        return {PARTITION_SPEC: partitioning.encode()} if partitioning is not None else {}

    def state_properties(self, previous: DatasetView | None, commits: bool) -> dict[str, str]:
        """Properties the sequence's DatasetState step records beside its watermarks (`commits`: whether the sequence
        commits files to the table); none by default."""
        return {}


def _with_properties(step: CommitStepSpec, properties: dict[str, str]) -> CommitStepSpec:
    """A DatasetState step with `properties` added (any other step as it is)."""
    if not properties or not isinstance(step, DatasetStateStep):
        return step
    return step.model_copy(update={"properties": {**step.properties, **properties}})


def group_of(sequences: Sequence[CommitSequencePlanned]) -> str:
    """The group of sequences planned together: `<job>/<run>/<digest of their datasets>` (a run plans once on the
    driver, or once per commit shard: each shard's sequences are a group of their own, numbered from 0)."""
    if not sequences:
        return ""
    datasets = "\n".join(sorted(sequence.dataset_urn for sequence in sequences))
    return f"{sequences[0].job}/{sequences[0].run_id}/{hashlib.sha256(datasets.encode()).hexdigest()[:8]}"


def commit_id(job: str, dataset_urn: str, sequence_id: str) -> str:
    """What names a sequence's commit in the table's history: unique per job, dataset and sequence."""
    return f"{job}/{dataset_urn}/{sequence_id}"


def snapshot_summary(sequence: CommitSequencePlanned, output: DatasetOutput) -> dict[str, str]:
    """The properties a table commit carries beside the commit id: the sequence's identity, records, and each source
    partition's watermark range (`{"partition": [low, high], …}`)."""
    ranges = {r.partition: [r.low_watermark, r.actual_high_watermark] for r in output.results}
    return {"oncelog.job": sequence.job, "oncelog.run-id": sequence.run_id, "oncelog.dataset": sequence.dataset_urn,
            "oncelog.sequence-id": sequence.sequence_id,
            "oncelog.records": str(sum(r.records_written for r in output.results)),
            TABLE_WATERMARKS: json.dumps(ranges, sort_keys=True, separators=(",", ":"))}


DATASET_WATERMARKS = "oncelog.dataset-watermarks"
"""The property of a commit made for many sequences holding each dataset's ranges (`{"dataset": {"partition": [low,
high]}}`), left out beyond DATASET_WATERMARKS_MAX characters: an Iceberg table keeps every snapshot's summary in each
new metadata file, and the log holds the ranges anyway (each sequence's plan)."""
DATASET_WATERMARKS_MAX = 16_384


def shared_summary(summaries: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The properties of one table commit made for many sequences: those they share (job, run, partitioning; all of
    a lone sequence's), how many they are, their records, and each dataset's ranges while they stay small."""
    shared = dict(summaries[0])
    for summary in summaries[1:]:
        shared = {key: value for key, value in shared.items() if summary.get(key) == value}
    properties = {**shared, "oncelog.sequences": str(len(summaries)),
                  "oncelog.records": str(sum(int(summary.get("oncelog.records", "0")) for summary in summaries))}
    # each sequence's ranges are part of the text: past the limit together, they need not be parsed to know it
    if len(summaries) > 1 and sum(len(s.get(TABLE_WATERMARKS, "")) for s in summaries) <= DATASET_WATERMARKS_MAX:
        ranges = {s.get("oncelog.dataset", str(i)): json.loads(s.get(TABLE_WATERMARKS, "{}"))
                  for i, s in enumerate(summaries)}
        text = json.dumps(ranges, sort_keys=True, separators=(",", ":"))
        if len(text) <= DATASET_WATERMARKS_MAX:
            properties[DATASET_WATERMARKS] = text
    return properties
