"""A deterministic synthetic source, seeded and sized by config: for demos, benchmarks and the crash matrix.

Each dataset has partitions; each partition is an endless sequence of records numbered by offset, and the
offset is the watermark. A run pulls `source.synthetic.records.per.run` records of every partition from its
committed watermark. The same (seed, dataset, partition, offset) always gives the same record, so a test can
check that every record was published exactly once.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from events.errors import OncelogError
from events.job import WorkUnitSpec
from spark_pipeline.constructs import (
    DataFrameReader,
    Extractor,
    ReadCount,
    Record,
    Schema,
    Source,
    SourceState,
    WorkUnitState,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "SyntheticRecord",
    "namespace": "oncelog.synthetic",
    "fields": [
        {"name": "dataset", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "amount", "type": "long"},
        {"name": "payload", "type": "string"},
    ],
}


class SyntheticSettings(BaseModel):
    """The keys of the synthetic source."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    datasets: int = Field(default=3, ge=1, le=100_000, alias="source.synthetic.datasets")
    partitions: int = Field(default=2, ge=1, le=1_000, alias="source.synthetic.partitions")
    records_per_run: int = Field(default=1_000, ge=0, alias="source.synthetic.records.per.run")
    seed: int = Field(default=0, alias="source.synthetic.seed")
    payload_bytes: int = Field(default=32, ge=0, le=100_000, alias="source.synthetic.payload.bytes")
    fail_attempts: int = Field(default=0, ge=0, alias="source.synthetic.fail.attempts")
    """Test hook: the first N attempts of every task fail after `fail_after` records of a work unit."""
    fail_after: int = Field(default=0, ge=0, alias="source.synthetic.fail.after.records")
    fail_datasets: tuple[str, ...] = Field(default=(), alias="source.synthetic.fail.datasets")
    """Test hook: only work units of these dataset URNs fail (all, when empty)."""
    records_per_second: int = Field(default=0, ge=0, alias="source.synthetic.records.per.second")
    """Throttle per extractor (0: none): makes a run last, for demos and concurrency tests."""


class SyntheticFailure(OncelogError):
    """The failure the synthetic source's test hook injects."""


def synthetic_record(seed: int, dataset: str, partition: int, offset: int, payload_bytes: int) -> dict[str, Any]:
    """The record at an offset: a pure function of its coordinates."""
    checksum = zlib.crc32(f"{seed}/{dataset}/{partition}/{offset}".encode())
    return {"dataset": dataset, "partition": partition, "offset": offset, "amount": checksum % 100_000,
            "payload": (f"{checksum:08x}" * (payload_bytes // 8 + 1))[:payload_bytes]}


class SyntheticSource(Source, DataFrameReader):
    """`source.class: spark_pipeline.sources.synthetic.SyntheticSource`; datasets are `<dataset.urn>.<n>`."""

    CONFIG_MODEL = SyntheticSettings
    READ_COUNT = ReadCount.PLANNED

    def read_frame(self, spark: SparkSession, units: Sequence[tuple[int, WorkUnitSpec]], attempt: int) -> DataFrame:
        from spark_pipeline.sources.synthetic_frame import synthetic_frame  # PySpark: on the DataFrame engine only
        return synthetic_frame(spark, self.settings(), units, attempt)

    def record_schema(self, units: Sequence[WorkUnitSpec]) -> str | None:
        return json.dumps(SCHEMA)

    def get_work_units(self, state: SourceState) -> list[WorkUnitSpec]:
        settings: SyntheticSettings = self.settings()
        prefix = self.config.default_dataset_urn
        units = []
        for d in range(settings.datasets):
            urn = f"{prefix}.{d}"
            for p in range(settings.partitions):
                partition = f"{urn}:{p}"
                low = state.watermark(urn, partition, 0)
                units.append(WorkUnitSpec(
                    work_unit_id=f"{urn}:{p}@{low}", dataset_urn=urn, partition=partition, low_watermark=low,
                    expected_high_watermark=low + settings.records_per_run,
                    estimated_records=settings.records_per_run, properties={"synthetic.partition": str(p)},
                ))
        return units

    def get_extractor(self, state: WorkUnitState) -> Extractor:
        return SyntheticExtractor(state, self.synthetic_settings)

    @cached_property
    def synthetic_settings(self) -> SyntheticSettings:
        """The source's settings, validated once per source (a task builds one and runs many work units)."""
        settings: SyntheticSettings = self.settings()
        return settings


class SyntheticExtractor(Extractor):
    """Generates the records of one partition from the low to the expected high watermark."""

    def __init__(self, state: WorkUnitState, settings: SyntheticSettings) -> None:
        super().__init__(state)
        self.settings = settings
        self.partition = int(state.work_unit.properties["synthetic.partition"])
        unit = state.work_unit
        fails = settings.fail_attempts >= state.attempt and (
            not settings.fail_datasets or unit.dataset_urn in settings.fail_datasets)
        self.fail_at = unit.low_watermark + settings.fail_after if fails else None
        self.started = time.monotonic()

    def get_schema(self) -> Schema:
        return SCHEMA

    def read_record(self) -> Record | None:
        offset = self.next_watermark
        if offset >= self.state.work_unit.expected_high_watermark:
            return None
        if offset == self.fail_at:
            raise SyntheticFailure(f"injected failure at offset {offset} of {self.state.work_unit.partition} "
                                   f"(attempt {self.state.attempt})")
        self.next_watermark = offset + 1
        if self.settings.records_per_second and offset % 100 == 0:
            due = self.started + (offset - self.state.work_unit.low_watermark) / self.settings.records_per_second
            time.sleep(max(0.0, due - time.monotonic()))
        return synthetic_record(self.settings.seed, self.state.work_unit.dataset_urn, self.partition, offset,
                                self.settings.payload_bytes)
