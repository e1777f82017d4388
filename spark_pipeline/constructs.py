"""Gobblin's constructs, each pluggable by dotted class path: Source, Extractor, Converter, QualityChecker policies,
ForkOperator, DataWriter (+ builder) and DataPublisher, with the states they see (SourceState, WorkUnitState).

A construct is built with the job's config; one that reads keys of its own declares them in `CONFIG_MODEL`
(a pydantic model whose field aliases are the keys), which job validation checks before anything runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from events.commit import CommitSequencePlanned
from events.errors import OncelogError
from events.job import WorkUnitSpec
from events.task import OutputFile, WorkUnitResult
from filesystems.base import FileSystem
from projections.views import DatasetView, WorkUnitView
from spark_pipeline.connectors import Connector
from spark_pipeline.jobfile.config import BranchConfig, JobConfig, PolicyType

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Schema = Any
"""An Avro schema (a dict, as fastavro takes it), or whatever a converter chain passes along."""
Record = Any
"""A record: a dict for Avro, or whatever a converter chain passes along."""

WorkUnit = WorkUnitSpec
"""Gobblin's WorkUnit: one dataset partition to pull from its low to its expected high watermark."""


class SourceError(OncelogError):
    """A source cannot read what it planned (missing topic, partition or file, lost offsets, unreachable brokers)."""


@dataclass(frozen=True)
class MultiWorkUnit:
    """Work units that one task runs (Gobblin's MultiWorkUnit): how a Source balances the load."""

    multi_work_unit_id: str
    work_units: tuple[WorkUnitSpec, ...]

    @property
    def estimated_records(self) -> int:
        return sum(w.estimated_records for w in self.work_units)


@dataclass(frozen=True)
class SourceState:
    """What a Source plans from (Gobblin's SourceState): the job and what previous runs committed."""

    config: JobConfig
    run_id: str
    dataset_states: Mapping[str, DatasetView]
    """The latest committed state of each dataset, by URN (getPreviousWorkUnitStatesByDatasetUrns)."""
    previous_work_units: tuple[WorkUnitView, ...] = ()
    """The work units of the job's previous run, with their states (getPreviousWorkUnitStates)."""
    blocked_datasets: frozenset[str] = frozenset()
    """Datasets whose commit was abandoned: not to be pulled until an operator retries them."""

    def watermark(self, dataset_urn: str, partition: str, default: int) -> int:
        """Where a partition's next pull starts: its committed high watermark, else `default`."""
        dataset = self.dataset_states.get(dataset_urn)
        if dataset is None:
            return default
        return dataset.watermarks.get(partition, default)


class WorkUnitState:
    """A work unit at run time (Gobblin's WorkUnitState): the config, and the actual high watermark reached."""

    def __init__(self, work_unit: WorkUnitSpec, config: JobConfig, run_id: str, task_id: str, attempt: int) -> None:
        self.work_unit = work_unit
        self.config = config
        self.run_id = run_id
        self.task_id = task_id
        self.attempt = attempt
        self.actual_high_watermark = work_unit.low_watermark
        self.properties: dict[str, str] = {**config.properties, **work_unit.properties}

    def set_actual_high_watermark(self, value: int) -> None:
        """Record how far the work unit got: the next run starts there."""
        self.actual_high_watermark = value


class Configurable:
    """A construct built from the job's config; CONFIG_MODEL names the keys it reads, if any."""

    CONFIG_MODEL: ClassVar[type[BaseModel] | None] = None

    def __init__(self, config: JobConfig) -> None:
        self.config = config

    def settings(self, branch: int | None = None) -> Any:
        """This construct's validated CONFIG_MODEL (branch-suffixed keys first when a branch is given)."""
        return self.config.construct_settings(type(self), branch)


class Extractor(ABC):
    """Reads one work unit's records one at a time, keeping `next_watermark` current (Gobblin's Extractor)."""

    def __init__(self, state: WorkUnitState) -> None:
        self.state = state
        self.next_watermark = state.work_unit.low_watermark

    @abstractmethod
    def get_schema(self) -> Schema:
        """The schema of the records it extracts."""

    @abstractmethod
    def read_record(self) -> Record | None:
        """The next record, or None when the work unit's range is done; advances next_watermark past it."""

    def close(self) -> None:
        """Release the connection; the task records the actual high watermark."""


class Source(Configurable, ABC):
    """Partitions the ingestion into work units and creates their extractors (Gobblin's Source)."""

    @abstractmethod
    def get_work_units(self, state: SourceState) -> list[WorkUnitSpec]:
        """The run's work units, from each dataset's committed watermarks."""

    @abstractmethod
    def get_extractor(self, state: WorkUnitState) -> Extractor:
        """The extractor of one work unit."""

    def pack(self, work_units: list[WorkUnitSpec], slots: int) -> list[MultiWorkUnit]:
        """Pack work units into at most `slots` tasks, balancing estimated records (largest first)."""
        bins: list[list[WorkUnitSpec]] = [[] for _ in range(max(1, min(slots, len(work_units))))]
        loads = [0] * len(bins)
        for unit in sorted(work_units, key=lambda w: (-w.estimated_records, w.work_unit_id)):
            lightest = loads.index(min(loads))
            bins[lightest].append(unit)
            loads[lightest] += max(1, unit.estimated_records)
        return [MultiWorkUnit(f"task-{i:05d}", tuple(b)) for i, b in enumerate(bins) if b]


UNIT_COLUMN = "_wu"
"""The column of a DataFrameReader's frame holding each row's work unit: its index in the task."""


@dataclass(frozen=True)
class UnitKey:
    """Columns a reader's records carry unchanged whose values are the same in every record of a work unit and
    differ between the work units of a task (the Kafka source's topic and partition)."""

    columns: tuple[str, ...]
    of: Callable[[WorkUnitSpec], tuple[object, ...]]
    """A work unit's values of `columns`."""


class ReadCount(StrEnum):
    """How the DataFrame engine learns each work unit's records read and last offset from a reader's frame."""

    PLANNED = "planned"
    """One record per offset, exactly as planned: the plan's counts (nothing observed)."""
    OFFSETS = "offsets"
    """Rows counted, and the last offset is the greatest of an `offset` column (gaps such as Kafka's markers)."""
    ROWS = "rows"
    """Rows counted; the last offset is the plan's."""


class DataFrameReader(ABC):
    """A Source's capability to run on the DataFrame engine (`task.engine`): it reads a task's work units as one Spark
    DataFrame, a row per record, and says the Avro schema of those records. Any Source may offer it, a user's own
    included; the built-in synthetic, Kafka topic and directory sources do."""

    READ_COUNT: ClassVar[ReadCount] = ReadCount.ROWS

    @abstractmethod
    def read_frame(self, spark: SparkSession, units: Sequence[tuple[int, WorkUnitSpec]], attempt: int) -> DataFrame:
        """The records of `units` (each with its index in the task; none is empty), with UNIT_COLUMN holding the
        index, each work unit's rows in one Spark partition (the engine writes one file per work unit); `attempt` is
        the task attempt reading them."""

    @abstractmethod
    def record_schema(self, units: Sequence[WorkUnitSpec]) -> str | None:
        """The Avro schema (JSON) the records engine writes these records with; None: Spark derives it."""

    def connectors(self) -> frozenset[Connector]:
        """Spark connectors the read needs on the classpath (none by default)."""
        return frozenset()

    def unit_key(self) -> UnitKey | None:
        """The columns naming each record's work unit, when the records carry them (None: they do not). The engine
        may then write a task's records without a folder per work unit and name each file from its first record."""
        return None

    def frame_blocker(self) -> str | None:
        """Why this job's records cannot be read as a DataFrame (None: they can), naming the key."""
        return None


class Converter(Configurable, ABC):
    """Converts the schema, then each record into zero, one or many records (Gobblin's Converter)."""

    def __init__(self, config: JobConfig, branch: int | None = None) -> None:
        super().__init__(config)
        self.branch = branch

    @abstractmethod
    def convert_schema(self, input_schema: Schema, state: WorkUnitState) -> Schema:
        """The schema of the records this converter outputs."""

    @abstractmethod
    def convert_record(self, output_schema: Schema, record: Record, state: WorkUnitState) -> Iterable[Record]:
        """The records one input record becomes (1:0, 1:1 or 1:N)."""


@dataclass(frozen=True)
class TaskStats:
    """What a task-level policy judges: the counts of a branch's output for one work unit."""

    work_unit: WorkUnitSpec
    branch: int
    records_extracted: int
    records_written: int
    rows_rejected: int
    files: tuple[OutputFile, ...]


class QualityPolicyBase(Configurable):
    """A quality check of a given type (MANDATORY, OPTIONAL, ERR_FILE), on the master branch or branch N."""

    def __init__(self, config: JobConfig, policy_type: PolicyType, branch: int | None = None) -> None:
        super().__init__(config)
        self.policy_type = policy_type
        self.branch = branch


class RowLevelPolicy(QualityPolicyBase, ABC):
    """A row-level quality check; only MANDATORY ones decide whether the record goes on."""

    @abstractmethod
    def check(self, record: Record) -> bool:
        """Whether the record passes."""


class TaskLevelPolicy(QualityPolicyBase, ABC):
    """A task-level quality check over a branch's whole output; a failing MANDATORY one fails the task."""

    @abstractmethod
    def check(self, stats: TaskStats) -> bool:
        """Whether the branch's output may be committed."""


class ForkOperator(Configurable):
    """Sends the schema and each record to some of the branches; this one, the identity, sends them to all."""

    def branches(self, state: WorkUnitState) -> int:
        return self.config.fork_branches

    def forks_for_schema(self, state: WorkUnitState, schema: Schema) -> list[bool]:
        """Which branches take the schema (a branch that does not is idle for the work unit)."""
        return [True] * self.branches(state)

    def forks_for_record(self, state: WorkUnitState, record: Record) -> list[bool]:
        """Which branches take the record."""
        return [True] * self.branches(state)


@dataclass(frozen=True)
class WriterDestination:
    """Where and what a writer writes: one branch of one work unit, of one task attempt."""

    config: JobConfig
    branch: BranchConfig
    schema: Schema
    work_unit: WorkUnitSpec
    run_id: str
    task_id: str
    attempt: int
    staging_dir: str
    output_dir: str
    """The attempt's own task-output folder (writer.output.dir/<run_id>/<task_id>/attempt-<n>: writers.py)."""
    fs: FileSystem
    """The file systems to write through (folders may be local, hdfs:// or s3a:// locations)."""
    partition: str = ""
    """The time partition the writer writes (its folder below the dataset's, `hourly/2026/11/26/03`); "" when the job
    has no partitioner (writer.partitioner.class)."""


class DataWriter(ABC):
    """Writes records to staging; `commit` moves the files to task output and says what they hold."""

    records_written: int = 0
    bytes_written: int = 0

    @abstractmethod
    def write(self, record: Record) -> None:
        """Write one record."""

    @abstractmethod
    def commit(self, actual_high_watermark: int) -> list[OutputFile]:
        """Close, and move the staged files to task output (names from the watermark range: deterministic)."""

    @abstractmethod
    def abort(self) -> None:
        """Close and delete the staged files (a failed attempt leaves nothing behind)."""


class DataWriterBuilder(Configurable, ABC):
    """Builds the writer of each branch of each work unit (Gobblin's DataWriterBuilder)."""

    SUPPORTED_OUTPUT_FORMATS: ClassVar[tuple[str, ...]] = ("AVRO",)

    @abstractmethod
    def build(self, destination: WriterDestination) -> DataWriter:
        """A writer for one destination."""


CAUGHT_UP_PROPERTY = "oncelog.source.caught.up"
"""A work unit's property a Source sets ("true") when the unit's range ends at its source's end at the run's
planning: once published, its source partition has nothing older left unpublished (partition completeness)."""


@dataclass(frozen=True)
class DatasetOutput:
    """What the run's tasks produced for one dataset: the work-unit results the commit policy lets through (none: a
    dataset with no work unit this run, whose time partitions may become complete all the same)."""

    dataset_urn: str
    results: tuple[WorkUnitResult, ...]
    caught_up: frozenset[str] = frozenset()
    """Its source partitions caught up with their source's end at the run's planning, and published up to it."""
    planned_at_ms: int = 0
    """When the run's Source planned (epoch ms): how far in event time a caught-up source partition is published."""


class DataPublisher(Configurable, ABC):
    """Plans the commit sequence that publishes each dataset's output; it moves no file itself."""

    ONE_COMMIT_PER_RUN: ClassVar[bool] = False
    """Whether its sequences share one step made once a commit (a table's snapshot): commit shards would make one
    each, so `job.commit.on.executors: auto` keeps such a run's commit on the driver."""

    @abstractmethod
    def plan(self, run_id: str, outputs: list[DatasetOutput], dataset_states: Mapping[str, DatasetView]
             ) -> list[CommitSequencePlanned]:
        """One planned sequence per dataset with something to publish or a watermark to move."""
