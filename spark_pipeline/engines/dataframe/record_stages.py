"""The records engine's converters and row policies on the DataFrame engine, through an Arrow-batch adapter
(`DataFrame.mapInArrow`): each batch's rows become the record engine's records (dicts), go through the job's
`converter.classes` chain and `qualitychecker.row.policies`, and come back as a batch of the converters' output
schema.

Same semantics as the records engine's master branch (records/flow.py; verdicts: engines/policies.py): each
converter converts every output of the one before (1:0, 1:1 or 1:N); then every row policy judges each record: a
failing MANDATORY one drops it, a failing ERR_FILE one diverts it to the error file (once per failing ERR_FILE
policy, as the record engine appends it), a failing OPTIONAL one lets it through. The verdict column says which,
for the split in stages.py and the rejected counts of task-level policies.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, StructField, StructType

from events.job import WorkUnitSpec
from spark_pipeline.constructs import (
    UNIT_COLUMN,
    Converter,
    RowLevelPolicy,
    Schema,
    WorkUnitState,
)
from spark_pipeline.engines.avro_types import (
    CONVERTERS_KEY,
    converted_schema,
    source_schema,
    struct_type,
)
from spark_pipeline.engines.policies import judge_row
from spark_pipeline.engines.records.flow import chain_schema, convert
from spark_pipeline.jobfile.config import JobConfig, PolicyType
from spark_pipeline.jobfile.plugins import make_construct

POLICIES_KEY = "qualitychecker.row.policies"
VERDICT = "_oncelog_verdict"
"""What the row policies made of a record (never written): one of the Verdict values."""


class Verdict(IntEnum):
    """A record's fate: written, or not, and whether it goes to the error file and counts as rejected."""

    KEPT = 0
    DIVERTED = 1  # to the error file, and rejected (counted once per record)
    DIVERTED_AGAIN = 2  # a further ERR_FILE policy's copy (the record engine appends it once per failing policy)
    DROPPED = 3  # rejected by a MANDATORY policy only


@dataclass(frozen=True)
class Attempt:
    """The task attempt a frame belongs to: what the constructs' WorkUnitState says (placeholders when planning)."""

    run_id: str
    task_id: str
    attempt: int
    units: tuple[WorkUnitSpec, ...]


def has_record_stages(config: JobConfig) -> bool:
    """Whether the job names record converters or row policies of its master branch."""
    return bool(config.converter_classes or config.row_policy_classes)


def diverts(config: JobConfig) -> bool:
    """Whether a row policy of the job diverts records to the error file."""
    return any(p.type is PolicyType.ERR_FILE for p in config.row_policies)


def output_struct(config: JobConfig) -> StructType:
    """The adapter's output columns: the converters' Avro schema as Spark's, the work unit, and the verdict."""
    return StructType([*struct_type(converted_schema(config)).fields, StructField(UNIT_COLUMN, IntegerType(), False),
                       StructField(VERDICT, IntegerType(), False)])


def judged_struct(frame: DataFrame) -> StructType:
    """A policies-only stage's output columns: the frame's own, the work unit, and the verdict."""
    return StructType([*(f for f in frame.schema.fields if f.name != UNIT_COLUMN),
                       StructField(UNIT_COLUMN, IntegerType(), False), StructField(VERDICT, IntegerType(), False)])


def record_stage(config: JobConfig, frame: DataFrame, attempt: Attempt, converting: bool = True,
                 judging: bool = True) -> DataFrame:
    """`frame` through the job's record converters (`converting`) and row policies (`judging`), batch by batch on
    the executors."""
    struct = output_struct(config) if converting else judged_struct(frame)
    adapter = BatchAdapter(config, attempt, to_arrow_schema(struct), Steps(converting, judging))
    return frame.mapInArrow(adapter, struct)


@dataclass(frozen=True)
class Steps:
    """Which record constructs a stage runs: the converters, the row policies, or both."""

    converting: bool = True
    judging: bool = True


class BatchAdapter:
    """The mapInArrow function: built on the driver, shipped to the executors, constructs built once per partition."""

    def __init__(self, config: JobConfig, attempt: Attempt, schema: pa.Schema, steps: Steps) -> None:
        self.config = config
        self.attempt = attempt
        self.schema = schema
        self.steps = steps

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        flow = RecordFlow(self.config, self.attempt, self.steps)
        for batch in batches:
            rows = [out for record in batch.to_pylist() for out in flow.process(record)]
            yield pa.RecordBatch.from_pylist(rows, schema=self.schema)


class RecordFlow:
    """One partition's converters and row policies, with a WorkUnitState per work unit."""

    def __init__(self, config: JobConfig, attempt: Attempt, steps: Steps) -> None:
        self.config = config
        self.attempt = attempt
        self.converters = [make_construct(config, CONVERTERS_KEY, p, Converter)
                           for p in config.converter_classes] if steps.converting else []
        self.policies = [make_construct(config, POLICIES_KEY, p.class_path, RowLevelPolicy, p.type)
                         for p in config.row_policies] if steps.judging else []
        self.units: dict[int, tuple[WorkUnitState, list[Schema]]] = {}

    def unit(self, index: int) -> tuple[WorkUnitState, list[Schema]]:
        """A work unit's state and its converters' schemas, made on its first record."""
        if index not in self.units:
            a = self.attempt
            state = WorkUnitState(a.units[index], self.config, a.run_id, a.task_id, a.attempt)
            schemas = chain_schema(self.converters, source_schema(self.config), state)[1] if self.converters else []
            self.units[index] = (state, schemas)
        return self.units[index]

    def process(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The rows one source record becomes: each converted record with its verdict."""
        index = row.pop(UNIT_COLUMN)
        state, schemas = self.unit(index)
        outputs = convert(self.converters, schemas, row, state) if self.converters else [row]
        rows: list[dict[str, Any]] = []
        for record in outputs:
            verdict = judge_row(self.policies, record)
            verdicts = ([Verdict.KEPT] if verdict.keep else [Verdict.DIVERTED] if verdict.diverted
                        else [Verdict.DROPPED])
            verdicts += [Verdict.DIVERTED_AGAIN] * max(0, verdict.diverted - 1)
            rows += [{**record, UNIT_COLUMN: index, VERDICT: int(v)} for v in verdicts]
        return rows
