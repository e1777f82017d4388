"""The engine contract: the same job on both task engines publishes the same records and records the same events,
policy outcomes and errors — as the log contract suite holds every store to one behaviour.

Each case runs its job twice in this process: on the records engine (in-process tasks) and on the DataFrame engine
(the session's real Spark), with one task per run on both, and compares what an operator or a downstream reader
can see: the run's status and error, every published record, each work unit's counts and watermarks, each task's
attempts in order, the error file's lines, and the warnings the quality policies logged.

One difference is by design and not compared: a failed attempt of the records engine keeps what it fully wrote (for
`job.commit.policy: partial`), a failed Spark job keeps nothing — so `task.engine: auto` runs `partial` jobs on the
records engine (engines/choice.py).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from events.completeness import EventTimeAdvanced, PartitionCompleted
from events.job import ENGINE_PROPERTY, JobRunStarted, WorkUnitSpec
from events.log import open_log
from events.published import DatasetPublished
from events.task import TaskEvent, TaskFailed, TaskSucceeded
from projections.views import RunStatus
from spark_pipeline.constructs import (
    UNIT_COLUMN,
    DataFrameReader,
    Extractor,
    Record,
    RowLevelPolicy,
    Schema,
    Source,
    SourceState,
    WorkUnitState,
)
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import avro_records, write_job

pytestmark = [pytest.mark.spark]

ENGINES = ("records", "dataframe")
SYNTHETIC = "spark_pipeline.sources.synthetic.SyntheticSource"
SMALL = {"source.synthetic.datasets": 2, "source.synthetic.partitions": 2, "source.synthetic.records.per.run": 40,
         "source.synthetic.payload.bytes": 8, "task.maxretries": 1}
TASK_POLICY = "spark_pipeline.examples.policies.WroteEverything"
RUNS = "runs"
"""A case's runs of its job (1 when it does not say): not a key of the job."""
"""Fails whenever a row policy dropped or diverted a record of the work unit."""


class EvenAmount(RowLevelPolicy):
    """About half the synthetic records fail it."""

    def check(self, record: Record) -> bool:
        return bool(record["amount"] % 2 == 0)


class SmallAmount(RowLevelPolicy):
    """Most synthetic records fail it (an OPTIONAL policy's flag)."""

    def check(self, record: Record) -> bool:
        return bool(record["amount"] < 10_000)


class EvenCents(RowLevelPolicy):
    """Checks the field a converter adds (AmountInCents): a row policy running before the converters would fail."""

    def check(self, record: Record) -> bool:
        return bool(record["amount_cents"] % 200 == 0)


class Squares(Source, DataFrameReader):
    """A user's own source offering a DataFrame reader: dataset `squares`, records {n, square} for offsets n."""

    SCHEMA: ClassVar[dict[str, Any]] = {"type": "record", "name": "Square", "fields": [
        {"name": "n", "type": "long"}, {"name": "square", "type": "long"}]}

    def get_work_units(self, state: SourceState) -> list[WorkUnitSpec]:
        low = state.watermark("squares", "squares:0", 0)
        return [WorkUnitSpec(work_unit_id=f"squares:0@{low}", dataset_urn="squares", partition="squares:0",
                             low_watermark=low, expected_high_watermark=low + 25, estimated_records=25)]

    def get_extractor(self, state: WorkUnitState) -> Extractor:
        return SquaresExtractor(state)

    def read_frame(self, spark: SparkSession, units: Sequence[tuple[int, WorkUnitSpec]], attempt: int) -> DataFrame:
        frames = [spark.range(u.low_watermark, u.expected_high_watermark, numPartitions=1).select(
            F.col("id").alias("n"), (F.col("id") * F.col("id")).alias("square"), F.lit(i).alias(UNIT_COLUMN))
            for i, u in units]
        return reduce(DataFrame.unionByName, frames)

    def record_schema(self, units: Sequence[WorkUnitSpec]) -> str | None:
        return json.dumps(self.SCHEMA)


class SquaresExtractor(Extractor):
    """The records engine's way to the same records."""

    def get_schema(self) -> Schema:
        return Squares.SCHEMA

    def read_record(self) -> Record | None:
        n = self.next_watermark
        if n >= self.state.work_unit.expected_high_watermark:
            return None
        self.next_watermark = n + 1
        return {"n": n, "square": n * n}


CASES: dict[str, dict[str, object]] = {
    "plain": {},
    "a user's own source with a DataFrame reader": {"source.class": f"{__name__}.Squares"},
    "row policies of every type": {
        "qualitychecker.row.policies": f"{__name__}.EvenAmount, {__name__}.SmallAmount",
        "qualitychecker.row.policy.types": "ERR_FILE, OPTIONAL"},
    "a failing OPTIONAL task-level policy": {
        "qualitychecker.row.policies": f"{__name__}.EvenAmount", "qualitychecker.row.policy.types": "MANDATORY",
        "qualitychecker.task.policies": TASK_POLICY, "qualitychecker.task.policy.types": "OPTIONAL"},
    "a failing MANDATORY task-level policy": {
        "qualitychecker.row.policies": f"{__name__}.EvenAmount", "qualitychecker.row.policy.types": "MANDATORY",
        "qualitychecker.task.policies": TASK_POLICY, "qualitychecker.task.policy.types": "MANDATORY"},
    "a row policy on the field a converter adds (converters before quality checkers)": {
        "converter.classes": "spark_pipeline.examples.converters.AmountInCents",
        "qualitychecker.row.policies": f"{__name__}.EvenCents", "qualitychecker.row.policy.types": "ERR_FILE"},
    "time-partitioned output, and a late record for an hour already published": {
        "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
        "writer.partition.columns": "offset", "writer.partition.timeUnit": "MINUTES",
        "writer.partition.timezone": "UTC", "writer.partition.prefix": "hourly", RUNS: 2},
    "a source failing every attempt": {
        "source.synthetic.fail.attempts": 9, "source.synthetic.fail.after.records": 5,
        "source.synthetic.fail.datasets": "ds.1"},
}


@dataclass(frozen=True)
class Observed:
    """What one engine's run showed."""

    status: RunStatus
    error: str | None
    published: list[tuple[Any, ...]]
    units: list[tuple[str, str, int, int, int]]
    """Each work unit's counts and actual high watermark, from the succeeded attempts."""
    attempts: list[tuple[str, int]]
    errors: list[str]
    err_file: list[tuple[Any, ...]]
    warnings: list[str]
    """What the task-level policies logged (any level)."""
    layout: list[tuple[str, str, int | None]]
    """Each published file as DatasetPublished lists it: its path below the publish folder, its time partition and
    its records."""
    completeness: list[tuple[Any, ...]]
    """Each PartitionCompleted (dataset, partition, bounds, horizon) and EventTimeAdvanced (dataset, frontiers, open
    partitions, late records) of the runs, in log order per dataset."""


def run_on(engine: str, case: dict[str, object], base: Path, spark: SparkSession,
           caplog: pytest.LogCaptureFixture) -> Observed:
    """The case's job on one engine, in a folder of its own."""
    base.mkdir()
    url = f"sqlite:///{base / 'events.db'}"
    keys = {k: v for k, v in case.items() if k != RUNS}
    job = write_job(base, url, "full", None, **{**SMALL, **keys, "task.engine": engine,
                                                "qualitychecker.row.err.file": str(base / "err")})
    if case.get("source.class", SYNTHETIC) != SYNTHETIC:  # the synthetic source's keys are unknown to another
        keys = yaml.safe_load(job.read_text())
        job.write_text(yaml.safe_dump({k: v for k, v in keys.items() if not k.startswith("source.synthetic.")}))
    config = load_job_config(job)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="spark_pipeline"), open_log(url) as log:
        for _ in range(int(str(case.get(RUNS, 1)))):
            if engine == "records":
                in_process = InProcessTaskEngine(log.writer, slots=1, sleep=lambda _: None)
                launcher = JobLauncher(config, log=log, engine=in_process)
            else:
                launcher = JobLauncher(config, spark=spark, log=log)
            result = launcher.run()
        task_events = [e.event for e in log.read() if isinstance(e.event, TaskEvent)]
        published = [f for e in log.read() if isinstance(e.event, DatasetPublished) for f in e.event.files]
        completeness = [completeness_of(e.event) for e in log.read()
                        if isinstance(e.event, PartitionCompleted | EventTimeAdvanced)]
    warnings = sorted({r.getMessage() for r in caplog.records if "task-level policy" in r.getMessage()})
    succeeded = [e for e in task_events if isinstance(e, TaskSucceeded)]
    return Observed(
        status=result.status,
        error=None if result.error is None else result.error.splitlines()[0],
        published=sorted(tuple(sorted(r.items())) for r in avro_records(base / "published")),
        units=sorted((r.dataset_urn, r.partition, r.records_extracted, r.records_written, r.actual_high_watermark)
                     for e in succeeded for r in e.results),
        attempts=[(type(e).__name__, e.attempt) for e in task_events],
        errors=[e.error.splitlines()[0] for e in task_events if isinstance(e, TaskFailed)],
        err_file=sorted(tuple(sorted(json.loads(line).items())) for path in sorted((base / "err").rglob("*.jsonl"))
                        for line in path.read_text().splitlines()),
        warnings=warnings,
        layout=sorted((Path(f.path).relative_to(base / "published").as_posix(), f.partition, f.records)
                      for f in published),
        completeness=sorted(completeness, key=lambda c: c[1]))


def completeness_of(event: PartitionCompleted | EventTimeAdvanced) -> tuple[Any, ...]:
    """What a completeness event says, without the run it is of."""
    if isinstance(event, PartitionCompleted):
        return ("PartitionCompleted", event.dataset_urn, event.partition, event.start_ms, event.end_ms,
                event.horizon_ms)
    return ("EventTimeAdvanced", event.dataset_urn, sorted(event.frontiers.items()), event.horizon_ms,
            sorted(event.open_partitions.items()), sorted(event.late_records.items()))


def any_partition(message: str) -> str:
    """A records-engine error as a pattern that the same error of any work unit matches: Spark wraps the Python
    error, and runs the work units in parallel, so another one may fail first."""
    return re.sub(r"ds\\\.\d+:\d+", lambda _: r"ds\.\d+:\d+", re.escape(message))


@pytest.mark.parametrize("name", list(CASES))
def test_both_engines_publish_and_record_the_same(name: str, tmp_path: Path, spark: SparkSession,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    records, frames = (run_on(engine, CASES[name], tmp_path / engine, spark, caplog) for engine in ENGINES)

    assert frames.status is records.status
    assert frames.published == records.published
    assert frames.units == records.units
    assert frames.attempts == records.attempts
    assert frames.err_file == records.err_file
    assert frames.warnings == records.warnings
    assert frames.layout == records.layout
    assert frames.completeness == records.completeness
    assert sorted(p.relative_to(tmp_path / "dataframe" / "published").as_posix()
                  for p in (tmp_path / "dataframe" / "published").rglob("*.avro")) == [f for f, _, _ in frames.layout]
    assert len(frames.errors) == len(records.errors)
    for by_frames, by_records in zip(frames.errors, records.errors):
        assert re.search(any_partition(by_records.split(": ", 1)[1]), by_frames), (by_frames, by_records)
    assert (frames.error is None) == (records.error is None)


def test_the_cases_show_what_they_are_about(tmp_path: Path, spark: SparkSession,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """The contract compares something: each case's distinguishing outcome, on the records engine."""
    optional = run_on("records", CASES["a failing OPTIONAL task-level policy"], tmp_path / "optional", spark, caplog)
    assert optional.status is RunStatus.COMMITTED
    assert optional.warnings and all("OPTIONAL task-level policy WroteEverything failed" in w
                                     for w in optional.warnings)
    mandatory = run_on("records", CASES["a failing MANDATORY task-level policy"], tmp_path / "mandatory", spark,
                       caplog)
    assert mandatory.status is RunStatus.FAILED and not mandatory.published
    assert mandatory.attempts == [("TaskStarted", 1), ("TaskFailed", 1), ("TaskRetried", 1), ("TaskStarted", 2),
                                  ("TaskFailed", 2)]
    own = run_on("dataframe", CASES["a user's own source with a DataFrame reader"], tmp_path / "own", spark, caplog)
    assert own.status is RunStatus.COMMITTED and len(own.published) == 25
    with open_log(f"sqlite:///{tmp_path / 'own' / 'events.db'}") as log:
        started = [e.event for e in log.read() if isinstance(e.event, JobRunStarted)]
    assert started[0].properties[ENGINE_PROPERTY] == "dataframe"
    hours = run_on("records", CASES["time-partitioned output, and a late record for an hour already published"],
                   tmp_path / "hours", spark, caplog)
    assert [(path, hour, n) for path, hour, n in hours.layout if path.startswith("ds.0/") and "ds.0%3A0_" in path] == [
        ("ds.0/hourly/1970/01/01/00/ds.0%3A0_0-40.avro", "hourly/1970/01/01/00", 40),
        ("ds.0/hourly/1970/01/01/00/ds.0%3A0_40-80.avro", "hourly/1970/01/01/00", 20),  # late: a file of its own
        ("ds.0/hourly/1970/01/01/01/ds.0%3A0_40-80.avro", "hourly/1970/01/01/01", 20)]
    # The second run published hour 01 (each offset a minute): every source partition is past hour 00's end.
    assert [c for c in hours.completeness if c[0] == "PartitionCompleted"] == [
        ("PartitionCompleted", f"ds.{d}", "hourly/1970/01/01/00", 0, 3_600_000, 3_600_000) for d in (0, 1)]
    rows = run_on("records", CASES["row policies of every type"], tmp_path / "rows", spark, caplog)
    assert rows.err_file and rows.published and len(rows.err_file) + len(rows.published) == 2 * 2 * 40
