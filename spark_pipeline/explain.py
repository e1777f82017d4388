"""`oncelog run --explain`: what a run of the job would do, planned from the log, without running anything.

The work units come from the job's source and its committed state, packed into tasks, by the code `run` plans with,
on the engine `run` would use (`task.engine`, with its reason); a log not created yet has no history. On the DataFrame
engine, Spark's plan of the first task's DataFrame (source, SQL
stages), from Spark's analysis alone: no record is read and nothing is written.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from events.job import ENGINE_PROPERTY, REASON_PROPERTY, WorkUnitSpec
from events.log import open_log
from projections.projector import Projector
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.engines.dataframe import stages
from spark_pipeline.engines.dataframe.engine import DataFrameTaskEngine, check_stages
from spark_pipeline.engines.dataframe.sources import read_units
from spark_pipeline.engines.select import engine_for
from spark_pipeline.jobfile.config import JobConfig, TaskEngineKind
from spark_pipeline.jobfile.paths import absolute_config
from spark_pipeline.launcher import skip_reason, source_state
from spark_pipeline.planning import plan_work_units

EXPLAIN_RUN_ID = "explain"
"""The run id planning sees (sources may name files or work units after it); never logged."""


@dataclass(frozen=True)
class Explanation:
    """What a run would do now: its engine and why, its tasks and work units, and the Spark plan."""

    job: str
    engine: TaskEngineKind
    reason: str
    tasks: tuple[MultiWorkUnit, ...]
    skipped: dict[str, str]
    spark_plan: str | None
    """Spark's formatted plan of the first task's DataFrame (None on the records engine or with no work)."""

    @property
    def work_units(self) -> list[WorkUnitSpec]:
        return [u for task in self.tasks for u in task.work_units]

    def as_json(self) -> dict[str, Any]:
        """The explanation as data."""
        return {"job": self.job, "engine": {"kind": self.engine.value, "reason": self.reason},
                "tasks": [{"task_id": t.multi_work_unit_id, "work_unit_ids": [u.work_unit_id for u in t.work_units]}
                          for t in self.tasks],
                "work_units": [{"work_unit_id": u.work_unit_id, "dataset_urn": u.dataset_urn, "partition": u.partition,
                                "low_watermark": u.low_watermark, "expected_high_watermark": u.expected_high_watermark}
                               for u in self.work_units],
                "skipped": [{"dataset_urn": urn, "reason": reason} for urn, reason in self.skipped.items()],
                "spark_plan": self.spark_plan}


def explain(config: JobConfig, spark: SparkSession | None = None) -> Explanation:
    """Plan the job's next run from its log (read only) and say how it would run: the run's own engine, planning and
    packing. Spark starts only when there is work to pack (the engine's slots) or to show Spark's plan of."""
    config = absolute_config(config)
    engine = engine_for(config, spark)
    identity = engine.identity()
    with open_log(config.log_url, config.log_settings) as log:
        state, _ = Projector(log).rebuild()
    unsettled = state.unsettled_datasets(config.job_name)
    skipped = {urn: (f"commit sequence {s.sequence_id} is pending: the run recovers it first, and pulls the dataset "
                     f"only if it then ends" if s.pending else skip_reason(s)) for urn, s in sorted(unsettled.items())}
    _, tasks = plan_work_units(config, source_state(config, state, EXPLAIN_RUN_ID), engine.slots)
    plan = None
    if isinstance(engine, DataFrameTaskEngine) and tasks:
        check_stages(engine.spark, config, tasks)  # as the run does before its tasks: a ConfigError naming the key
        plan = spark_plan(engine.spark, config, tasks)
    return Explanation(config.job_name, TaskEngineKind(identity[ENGINE_PROPERTY]), identity.get(REASON_PROPERTY, ""),
                       tuple(tasks), skipped, plan)


def spark_plan(spark: SparkSession, config: JobConfig, tasks: list[MultiWorkUnit]) -> str | None:
    """Spark's formatted plan of the first task with work: its source read and the job's SQL stages."""
    task = next((t for t in tasks if any(u.expected_high_watermark > u.low_watermark for u in t.work_units)), None)
    frame = read_units(spark, config, task.work_units, 1) if task else None
    if frame is None:
        return None
    printed = io.StringIO()
    staged = stages.transform(config, frame)
    try:
        with contextlib.redirect_stdout(printed):
            staged.written.explain(mode="formatted")
    finally:
        staged.release()
    return printed.getvalue().strip()
