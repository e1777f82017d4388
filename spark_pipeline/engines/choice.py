"""`task.engine`: which engine runs a job's tasks, and why (recorded in the run's JobRunStarted properties); and what
in a job only the DataFrame engine runs when that engine cannot run the job (`engine_problems`, which loading a job
reports with the job file's own problems: spark_pipeline/jobs.py).

Reads the job's configuration, and asks its source whether it reads DataFrames and its record converters their output
schema (avro_types.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from events.errors import ConfigError
from events.job import ENGINE_PROPERTY, REASON_PROPERTY
from filesystems import urls
from spark_pipeline.constructs import DataFrameReader
from spark_pipeline.engines.avro_types import converter_problem
from spark_pipeline.jobfile.config import (
    DEFAULT_WRITER_BUILDER,
    JobCommitPolicy,
    JobConfig,
    JobConfigError,
    KeyMessage,
    TaskEngineKind,
    WriterOutputFormat,
    build_branch,
)
from spark_pipeline.jobfile.partitions import PARTITIONER_KEY
from spark_pipeline.jobfile.plugins import import_class, make_construct
from spark_pipeline.writers import AvroDataWriterBuilder

DIRECTORY_SOURCE = "spark_pipeline.sources.directory.DirectorySource"
INPUT_FORMAT_KEY = "source.filebased.format"
SPARK_ONLY_INPUTS = frozenset({"parquet", "orc", "csv"})
"""The directory source's input formats only the DataFrame engine reads (directory.SPARK_ONLY_FORMATS)."""
DATAFRAME_FORMATS = frozenset({WriterOutputFormat.AVRO, WriterOutputFormat.PARQUET, WriterOutputFormat.ORC,
                               WriterOutputFormat.JSON})
"""The output formats of Spark's writers here: what the default writer builder writes on the DataFrame engine."""
RECORDS_FORMATS = frozenset(WriterOutputFormat(f) for f in AvroDataWriterBuilder.SUPPORTED_OUTPUT_FORMATS)
"""What the default writer builder writes on the records engine."""


@dataclass(frozen=True)
class EngineChoice:
    """The engine a run uses and why: `kind` is dataframe or records, never auto."""

    kind: TaskEngineKind
    reason: str

    def properties(self) -> dict[str, str]:
        """What JobRunStarted records about the choice."""
        return {ENGINE_PROPERTY: self.kind.value, REASON_PROPERTY: self.reason}


def unsupported(config: JobConfig) -> list[str]:
    """What in the job the DataFrame engine cannot run yet, one line per construct (empty: it runs the job)."""
    reasons = []
    reasons += source_blockers(config)
    if config.fork_operator_class is not None:
        reasons.append(f"fork.operator.class={config.fork_operator_class} is a record construct (the DataFrame "
                       f"engine forks every record to every branch, Gobblin's IdentityForkOperator)")
    for branch in config.branches:
        where = f" (branch {branch.index})" if config.fork_branches > 1 else ""
        for key, value in (("converter.classes", branch.converter_classes),  # `.N` keys: a branch's own
                           ("qualitychecker.row.policies", branch.row_policy_classes)):
            if value:
                reasons.append(f"{key}.{branch.index} names a branch's record constructs ({', '.join(value)}): "
                               f"only the master branch's run on the DataFrame engine")
        if branch.writer_builder_class != DEFAULT_WRITER_BUILDER:
            reasons.append(f"writer.builder.class{where}={branch.writer_builder_class} is a record writer")
        webhdfs = [key for key, folder in (("writer.staging.dir", branch.writer_staging_dir),
                                           ("writer.output.dir", branch.writer_output_dir))
                   if folder is not None and urls.parse(folder).scheme is urls.Scheme.WEBHDFS]
        if webhdfs:
            reasons.append(f"{' and '.join(webhdfs)}{where} name webhdfs:// folders, which the Hadoop client pyspark "
                           f"bundles cannot write (its shaded Jersey lacks RuntimeDelegateImpl); hdfs:// folders run "
                           f"on the DataFrame engine")
        if branch.writer_output_format not in DATAFRAME_FORMATS:
            reasons.append(f"writer.output.format{where}={branch.writer_output_format.value} is not a format of "
                           f"Spark's writers here ({', '.join(sorted(DATAFRAME_FORMATS))})")
    if config.source_class == DIRECTORY_SOURCE and (config.converter_classes or config.row_policy_classes):
        reasons.append("converter.classes / qualitychecker.row.policies with the directory source: its records reach "
                       "record constructs on the records engine only so far")
    else:
        converters = converter_problem(config)  # the master branch's, through mapInArrow, when Spark can hold them
        if converters is not None:
            reasons.append(converters)
    return list(dict.fromkeys(reasons))


def source_blockers(config: JobConfig) -> list[str]:
    """Why the job's source cannot be read as a DataFrame: it offers no DataFrameReader, or its reader says why."""
    try:
        source = import_class(config.source_class)
    except ValueError as e:
        return [f"source.class={config.source_class} does not import: {e}"]
    if not issubclass(source, DataFrameReader):
        return [f"source.class={config.source_class} has no DataFrame reader (a Source may offer one by "
                f"implementing spark_pipeline.constructs.DataFrameReader)"]
    blocker = make_construct(config, "source.class", config.source_class, DataFrameReader).frame_blocker()
    return [] if blocker is None else [blocker]


def spark_only_input(config: JobConfig) -> str | None:
    """The directory source's input format when only Spark's readers read it (None otherwise)."""
    if config.source_class != DIRECTORY_SOURCE:
        return None
    given = config.properties.get(INPUT_FORMAT_KEY, "").strip().lower()
    return given if given in SPARK_ONLY_INPUTS else None


def spark_only_error(config: JobConfig, file_format: str, why: str) -> ConfigError:
    """The error for an input format only Spark reads in a job the DataFrame engine will not run."""
    return ConfigError(f"{INPUT_FORMAT_KEY}={file_format} is read by the DataFrame engine only, but job "
                       f"{config.job_name!r} cannot run on it: {why}")


def dataframe_blocker(config: JobConfig) -> str | None:
    """Why the job will not run on the DataFrame engine (None: it may); for validating Spark-only output formats."""
    if config.task_engine is TaskEngineKind.RECORDS:
        return "task.engine=records"
    try:
        reasons = unsupported(config)
    except JobConfigError as e:
        return f"its branch settings are invalid ({e})"
    return "; ".join(reasons) or None


def engine_problems(config: JobConfig) -> list[KeyMessage]:
    """What in the job only the DataFrame engine runs, when that engine cannot run it, as (key, message): an input
    format only Spark's readers read, an output format of the default writer builder only Spark's writers write.

    The checks of a job that depend on its engine; the job file's own are jobfile.validation's.
    """
    spark_input = spark_only_input(config)
    partitioned = partition_problems(config)
    outputs = [(key, output) for key, output in default_writer_outputs(config) if output not in RECORDS_FORMATS]
    if spark_input is None and not outputs:
        return partitioned  # what either engine reads and writes
    blocker = dataframe_blocker(config)
    problems: list[KeyMessage] = []
    if spark_input and blocker:
        problems.append((INPUT_FORMAT_KEY, f"{INPUT_FORMAT_KEY!r}: {spark_input} is read by the DataFrame engine only "
                                           f"(task.engine), which cannot run this job: {blocker}"))
    written = RECORDS_FORMATS if blocker else DATAFRAME_FORMATS
    for key, output in outputs:
        if output in written:
            continue
        spark_only = (f"; the DataFrame engine (task.engine) writes it, but cannot run this job: {blocker}"
                      if blocker and output in DATAFRAME_FORMATS else "")
        problems.append((key, f"{key!r}: {output.value} is not written by {DEFAULT_WRITER_BUILDER} (it writes "
                              f"{', '.join(sorted(written))}){spark_only}"))
    return problems + partitioned


PARTITIONED_FORMATS = frozenset({WriterOutputFormat.AVRO, WriterOutputFormat.PARQUET, WriterOutputFormat.ORC})
"""The output formats a time partitioner splits (the DataFrame engine counts each partition's file's records from its
blocks or footer)."""


def partition_problems(config: JobConfig) -> list[KeyMessage]:
    """A time partitioner with an output format whose files' records cannot be counted per partition."""
    if not config.properties.get(PARTITIONER_KEY, "").strip():
        return []
    return [(key, f"{key!r}: {output.value} output is not split into time partitions ({PARTITIONER_KEY}); "
                  f"partitioned output is {', '.join(sorted(f.value for f in PARTITIONED_FORMATS))}")
            for key, output in default_writer_outputs(config) if output not in PARTITIONED_FORMATS]


def default_writer_outputs(config: JobConfig) -> list[tuple[str, WriterOutputFormat]]:
    """The output format of each branch the default writer builder writes, with the key it is read from (branches
    whose settings are invalid left out: the job file's checks report them)."""
    outputs = []
    for n in range(config.fork_branches):
        branch, sources, _ = build_branch(config.properties, n, config.fork_branches)
        if branch is not None and branch.writer_builder_class == DEFAULT_WRITER_BUILDER:
            key = sources.get("writer.output.format", ("writer.output.format",))[0]
            outputs.append((key, branch.writer_output_format))
    return outputs


def dataframe_only_formats(config: JobConfig) -> set[WriterOutputFormat]:
    """The output formats of the job's branches that their records-engine writer does not write: the default writer
    builder's beyond RECORDS_FORMATS, a builder of the job's own's beyond its SUPPORTED_OUTPUT_FORMATS (AVRO when it
    does not say)."""
    formats: set[WriterOutputFormat] = set()
    for branch in config.branches:
        written: frozenset[str] = RECORDS_FORMATS
        if branch.writer_builder_class != DEFAULT_WRITER_BUILDER:
            builder = import_class(branch.writer_builder_class)
            written = frozenset(str(f).upper() for f in getattr(builder, "SUPPORTED_OUTPUT_FORMATS", ("AVRO",)))
        if branch.writer_output_format.value not in written:
            formats.add(branch.writer_output_format)
    return formats


def sql_stages_error(config: JobConfig, keys: list[str], why: str) -> ConfigError:
    """The error for SQL stages in a job the DataFrame engine will not run."""
    return ConfigError(f"{' and '.join(keys)}: Spark SQL stages run on the DataFrame engine only, but job "
                       f"{config.job_name!r} cannot run on it: {why}")


def choose(config: JobConfig) -> EngineChoice:
    """The engine `task.engine` asks for; a ConfigError naming the key when `dataframe` is asked for a job it cannot
    run, or when the records engine would have to run Spark SQL stages or write a format only Spark's writers
    write."""
    kind = config.task_engine
    stages = [key for key, value in (("converter.sql.select", config.converter_sql_select),
                                     ("qualitychecker.row.sql", config.row_policy_sql),
                                     ("converter.dataframe.functions", config.converter_dataframe_functions or None))
              if value is not None]
    spark_input = spark_only_input(config)
    if kind is TaskEngineKind.RECORDS:
        if stages:
            raise sql_stages_error(config, stages, "task.engine=records")
        if spark_input:
            raise spark_only_error(config, spark_input, "task.engine=records")
        return EngineChoice(TaskEngineKind.RECORDS, "task.engine=records")
    reasons = unsupported(config)
    if stages and reasons:
        raise sql_stages_error(config, stages, "; ".join(reasons))
    if spark_input and reasons and kind is TaskEngineKind.AUTO:
        raise spark_only_error(config, spark_input, "; ".join(reasons))
    formats = {b.writer_output_format for b in config.branches} - {WriterOutputFormat.AVRO}
    if reasons and kind is TaskEngineKind.DATAFRAME:
        raise ConfigError(f"task.engine=dataframe: job {config.job_name!r} cannot run on the DataFrame engine: "
                          f"{'; '.join(reasons)} (set task.engine to auto or records)")
    spark_only = dataframe_only_formats(config)
    if reasons and spark_only:
        raise ConfigError(f"task.engine=auto: writer.output.format={', '.join(sorted(spark_only))} is written by the "
                          f"DataFrame engine only, but job {config.job_name!r} cannot run on it: {'; '.join(reasons)}")
    if reasons:
        return EngineChoice(TaskEngineKind.RECORDS, f"task.engine=auto chose records: {'; '.join(reasons)}")
    if kind is TaskEngineKind.AUTO and config.job_commit_policy is JobCommitPolicy.PARTIAL and not formats:
        return EngineChoice(TaskEngineKind.RECORDS, "task.engine=auto chose records: job.commit.policy=partial, and "
                                                    "a failed Spark job keeps no partial output to publish (set "
                                                    "task.engine=dataframe to run it anyway: a failed task then "
                                                    "publishes nothing)")
    return EngineChoice(TaskEngineKind.DATAFRAME, f"task.engine={kind.value}: every construct of the job has a "
                                                  f"DataFrame stage")
