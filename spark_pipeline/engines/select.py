"""The engine a run uses: `task.engine`'s choice (choice.py) made into a TaskEngine, checked against the connectors
spark-submit gave and the writers' settings before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

from events.errors import ConfigError
from filesystems import urls
from spark_pipeline.connectors import Connector, given_connectors
from spark_pipeline.engines.base import SparkTaskEngine, TaskEngine
from spark_pipeline.engines.choice import EngineChoice, choose
from spark_pipeline.engines.dataframe.engine import DataFrameTaskEngine, branch_writers, writer_schema
from spark_pipeline.engines.dataframe.sources import frame_reader
from spark_pipeline.engines.spark import submitted_settings
from spark_pipeline.jobfile.config import JobConfig, TaskEngineKind, WriterOutputFormat


def engine_for(config: JobConfig, spark: SparkSession | None = None) -> TaskEngine:
    """The engine `task.engine` chooses for the job (auto: dataframe when it can run every construct); its writer
    settings checked before anything runs (a ConfigError naming the key)."""
    choice = choose(config)
    missing = missing_connectors(config, submitted_settings()) if choice.kind is TaskEngineKind.DATAFRAME else []
    if missing:
        what = (f"spark-submit was not given Spark's {' and '.join(missing)} connector(s): pass "
                f"`spark-submit $(oncelog spark jars) …`")
        if config.task_engine is TaskEngineKind.DATAFRAME:
            raise ConfigError(f"task.engine=dataframe: {what}")
        choice = EngineChoice(TaskEngineKind.RECORDS, f"task.engine=auto chose records: {what}")
    if choice.kind is TaskEngineKind.DATAFRAME:
        branch_writers(config, writer_schema(config))
        return DataFrameTaskEngine(config, spark, choice)
    return SparkTaskEngine(config, spark, choice)


def missing_connectors(config: JobConfig, submitted: Mapping[str, str]) -> list[str]:
    """The connectors the job's DataFrame stages need that spark-submit did not give (none when oncelog started
    Spark itself: spark_session puts them on the classpath)."""
    if not submitted:
        return []
    needed = set(frame_reader(config).connectors())
    if any(b.writer_output_format is WriterOutputFormat.AVRO for b in config.branches):
        needed.add(Connector.AVRO)
    if any(urls.parse(str(b.writer_staging_dir)).scheme in (urls.Scheme.S3A, urls.Scheme.S3) for b in config.branches):
        needed.add(Connector.S3)  # Spark writes the attempt folders into the bucket
    return sorted(c.value for c in needed - given_connectors(submitted))
