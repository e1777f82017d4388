"""Pre-flight checks: what can be known wrong about a job without Spark, found before Spark starts.

`validate` and `run` use them (after the job file's own checks), so that a mistake costs a second, not Spark's
start-up and a failed run. Each check is a small function of the job returning `Finding`s, each naming the key at
fault; `located` puts them on the job file's lines. They read and probe, never write:
- the folders: the input folder exists; staging, task output and publish folders can be reached and written under
  (HDFS's NameNode answers, S3 takes the credentials and has the bucket; `filesystems.probe`, short timeouts);
- the moves: each branch's staging, task-output and publish folders lie on one file system (files are moved from
  one to the next, and no file system renames into another);
- the Kafka source: its brokers answer (the Kafka config layer's client, a short timeout) and its topic whitelist
  matches topics;
- the SQL: each column `converter.sql.select` and `qualitychecker.row.sql` name exists, where the records' columns
  are known without Spark (the source's Avro schema, or its declared Spark schema, through the record converters'
  output schema; then the select list's output for the row policy);
- the time partitioner: each branch's records, where their schema is known the same way, have a column of
  `writer.partition.columns` holding a time (or the source's `timestamp` to fall back to).
What only Spark can tell (SQL over columns unknown here, e.g. an Avro directory's, or after DataFrame functions) is for
`validate --deep`, which plans the job as `run --explain` does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from time import monotonic
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata
from sqlglot import exp, parse_one
from sqlglot.errors import SqlglotError

from events.errors import ConfigError, KafkaSecurityError, OncelogError
from events.log.kafka.config import scrub, security_failure
from filesystems import urls
from filesystems.probe import PROBE_TIMEOUT_S, Probe, Use
from filesystems.settings import FileSystemSettings
from spark_pipeline.constructs import UNIT_COLUMN, DataFrameReader, SourceError
from spark_pipeline.jobfile.config import PATH_KEYS, JobConfig, branch_sources, construct_model
from spark_pipeline.jobfile.formats import Problem, parse_job_file
from spark_pipeline.jobfile.partitions import COLUMNS_KEY, avro_columns, avro_kind, event_columns, partitioning_of
from spark_pipeline.jobfile.plugins import import_class, make_construct
from spark_pipeline.jobfile.sql_columns import (
    columns_after,
    condition_columns,
    did_you_mean,
    missing,
    select_columns,
)
from spark_pipeline.sources.directory import DirectorySource
from spark_pipeline.sources.directory_settings import (
    DIRECTORY,
    FORMAT_KEY,
    SPARK_ONLY_FORMATS,
    SPARK_SCHEMA_KEY,
    DirectorySettings,
)
from spark_pipeline.sources.kafka_topic import KafkaSourceSettings, SourceCluster, select_topics
from spark_pipeline.tables.delta_publisher import DeltaSettings, DeltaTablePublisher, location_problem
from spark_pipeline.tables.publisher import CATALOG_URI_KEY, IcebergSettings, IcebergTablePublisher, catalog_problem
from spark_pipeline.tables.storage import TableStorage

QUIET = logging.getLogger("oncelog.preflight.kafka")
"""Where the Kafka probe's client logs: nowhere (its failures are the probe's findings)."""
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False
KAFKA_SLICE_S = 0.2
"""A metadata request of the Kafka probe waits this long at a time, so that all brokers refusing ends it early."""
MOVES = (("writer.staging.dir", "writer.output.dir", "each file a task writes in staging is moved to its task output"),
         ("writer.output.dir", "data.publisher.final.dir", "each file is published by a move from the task output"))
"""The hops a file takes: written in staging, moved to the task output, moved (published) to the publish folder."""


@dataclass(frozen=True)
class Finding:
    """One thing a run would fail on, naming the key at fault."""

    key: str
    message: str


Check = Callable[[JobConfig, Probe], list[Finding]]


def preflight(config: JobConfig, timeout_s: float = PROBE_TIMEOUT_S) -> list[Finding]:
    """Every pre-flight check of an (absolute) job, in order: folders across file systems, folders, Kafka."""
    probe = Probe(FileSystemSettings.of(config.properties), timeout_s)
    return [finding for check in CHECKS for finding in check(config, probe)]


def located(findings: list[Finding], job_file: Path, environ: Mapping[str, str]) -> list[Problem]:
    """The findings as problems of the job file, each on the line its key is set (when the file sets it)."""
    parsed = parse_job_file(job_file, environ)
    return [parsed.located(f.key, f.message) for f in findings]


def branch_folders(config: JobConfig) -> Iterator[tuple[int, dict[str, tuple[str, str]]]]:
    """Each branch's staging, task-output and publish folder: base key -> (the key it is read from, the location)."""
    for n in range(config.fork_branches):
        sources = branch_sources(config.properties, n, config.fork_branches)
        branch = config.branch(n)
        yield n, {base: (sources[base][0], value) for base, field in PATH_KEYS.items()
                  if base in sources and (value := getattr(branch, field))}


def move_problems(config: JobConfig, probe: Probe) -> list[Finding]:
    """Each hop of a file (staging → task output → publish folder) stays on one file system: a move never crosses
    stores (it is a rename, or on S3 a copy within the store), so a job across two fails every task or commit."""
    findings = []
    for n, folders in branch_folders(config):
        for source, target, what in MOVES:
            if source not in folders or target not in folders:
                continue
            (source_key, source_at), (target_key, target_at) = folders[source], folders[target]
            if file_system(source_at) != file_system(target_at):
                findings.append(Finding(target_key, (
                    f"{source_key!r} ({source_at}) and {target_key!r} ({target_at}) lie on different file systems, "
                    f"and no file system moves files into another ({what}{_branch(config, n)}): put both on "
                    f"{file_system(target_at) or 'the local disk'}")))
    return findings


def folder_problems(config: JobConfig, probe: Probe) -> list[Finding]:
    """The input folder (directory source) must exist; each folder written must be reachable and writable."""
    findings = []
    asked: dict[tuple[str, Use], str | None] = {}

    def check(key: str, folder: str, use: Use) -> None:
        if (folder, use) not in asked:
            asked[(folder, use)] = probe.problem(folder, use)
        problem = asked[(folder, use)]
        if problem is not None:
            findings.append(Finding(key, f"{key!r} {folder}: {problem}"))

    if _source_of(config, DirectorySettings) is not None:
        check(DIRECTORY, urls.resolve_folder(config.properties[DIRECTORY]), Use.READ)
    for _, folders in branch_folders(config):
        for key, folder in folders.values():
            check(key, folder, Use.WRITE)
    return findings


def kafka_problems(config: JobConfig, probe: Probe) -> list[Finding]:
    """The Kafka source's brokers answer within the probe's timeout, take its credentials, and have topics its
    whitelist matches."""
    source = _source_of(config, KafkaSourceSettings)
    if source is None:
        return []
    settings = config.construct_settings(source)
    assert isinstance(settings, KafkaSourceSettings)
    cluster = SourceCluster(settings.model_copy(update={"timeout_s": probe.timeout_s}), config.log_url,
                            config.log_settings)
    where = ",".join(settings.brokers)
    try:
        metadata = cluster_metadata(cluster, probe.timeout_s)
    except KafkaSecurityError as e:
        return [Finding("kafka.security.protocol", f"Kafka brokers {where} refused the source's credentials: {e}")]
    except OncelogError as e:
        return [Finding("kafka.brokers", str(e))]
    try:
        select_topics(metadata, settings)
    except SourceError as e:
        return [Finding("topic.whitelist", str(e))]
    return []


@dataclass
class _Answers:
    """What librdkafka reported while the probe waited: a refused credential, its latest problem, all brokers down."""

    failure: KafkaSecurityError | None = None
    problem: str | None = None
    every_broker_down: bool = False


def cluster_metadata(cluster: SourceCluster, timeout_s: float) -> ClusterMetadata:
    """The cluster's metadata, or SourceError as soon as every broker refused (else after `timeout_s`); a refused
    credential is KafkaSecurityError. librdkafka's own lines are not shown: the error says what matters."""
    answers = _Answers()
    where = ",".join(cluster.settings.brokers)

    def on_error(error: KafkaError) -> None:
        answers.failure = answers.failure or security_failure(error, where, cluster.security)
        answers.problem = scrub(error.str(), cluster.security) if error.code() != KafkaError._ALL_BROKERS_DOWN \
            else answers.problem or error.str()
        answers.every_broker_down = answers.every_broker_down or error.code() == KafkaError._ALL_BROKERS_DOWN

    try:
        admin = AdminClient(cluster.config(error_cb=on_error, logger=QUIET))
    except KafkaException as e:
        raise SourceError(f"Kafka brokers {where}: {e}") from e
    deadline = monotonic() + timeout_s
    while True:
        try:
            metadata: ClusterMetadata = admin.list_topics(timeout=KAFKA_SLICE_S)
            return metadata
        except KafkaException as e:
            admin.poll(0)  # serves error_cb
            if answers.failure is not None:
                raise answers.failure from e
            if answers.every_broker_down or monotonic() >= deadline:
                how = (f"every Kafka broker of {where} refuses connections" if answers.every_broker_down
                       else f"no Kafka broker of {where} answers within {timeout_s:.0f}s")
                raise SourceError(f"{how}: {answers.problem or e}") from e


SELECT_KEY, POLICY_KEY = "converter.sql.select", "qualitychecker.row.sql"


def sql_problems(config: JobConfig, probe: Probe) -> list[Finding]:
    """Each column the SQL converter and the SQL row policy name exists in the records they see, where those
    columns are known without Spark (else nothing is said: `validate --deep` asks Spark)."""
    columns = source = source_columns(config)
    if columns is None or source is None or (config.converter_sql_select is None and config.row_policy_sql is None):
        return []
    findings = []
    if config.converter_sql_select is not None:
        select = select_columns(config.converter_sql_select)
        if select is None:
            return []
        absent = missing(select.reads, columns, (*select.aliases, UNIT_COLUMN))
        findings += [_missing_column(SELECT_KEY, config.converter_sql_select, name, columns, "the records")
                     for name in absent]
        after = columns_after(select, columns)
        if after is None:
            return findings
        columns, what = after, f"the records after {SELECT_KEY}"
    else:
        what = "the records"
    if config.converter_dataframe_functions or config.row_policy_sql is None:
        return findings
    names = condition_columns(config.row_policy_sql)
    for name in missing(names or (), columns, (UNIT_COLUMN,)):
        finding = _missing_column(POLICY_KEY, config.row_policy_sql, name, columns, what)
        if not missing((name,), source):
            finding = Finding(POLICY_KEY, f"{finding.message} (the source has it, but the row policy checks the "
                                          f"records after the SQL converter: Gobblin's order)")
        findings.append(finding)
    return findings


def source_columns(config: JobConfig) -> tuple[str, ...] | None:
    """The columns of the records the SQL stages see (the source's, through the record converters), when known
    without Spark; None otherwise."""
    try:
        source = import_class(config.source_class)
    except ValueError:
        return None  # the job file's own checks report it
    if not issubclass(source, DataFrameReader):
        return None  # the SQL keys are refused for the records engine (engine checks)
    schema = converted_schema(config)
    if schema is None:
        return _declared_spark_columns(config) if issubclass(source, DirectorySource) else None
    return avro_columns(schema)


def converted_schema(config: JobConfig) -> dict[str, Any] | None:
    """The Avro record schema of the source's records through the record converters, when the source declares it
    without Spark and the converters say theirs (None otherwise)."""
    try:
        reader = make_construct(config, "source.class", config.source_class, DataFrameReader)
        declared = reader.record_schema([])
    except (ValueError, TypeError, OncelogError):
        return None
    if declared is None:
        return None
    schema = json.loads(declared)
    if config.converter_classes:
        schema = _converted(config, config.converter_classes, schema)
    return schema if isinstance(schema, dict) and schema.get("type") == "record" else None


def partition_problems(config: JobConfig, probe: Probe) -> list[Finding]:
    """The time partitioner's columns are in each branch's records, with a time, where those records' schema is known
    without Spark (the SQL stages change the columns: `validate --deep` asks Spark then)."""
    try:
        partitioning = partitioning_of(config.properties)
    except ValueError:
        return []  # the job file's own checks report it
    if partitioning is None or config.converter_sql_select is not None or config.converter_dataframe_functions:
        return []
    schema = converted_schema(config)
    if schema is None:
        return []
    findings: list[Finding] = []
    for branch in config.branches:
        written = _converted(config, branch.converter_classes, schema) if branch.converter_classes else schema
        if not isinstance(written, dict) or written.get("type") != "record":
            continue
        try:
            event_columns(partitioning, partial(avro_kind, written), avro_columns(written))
        except ConfigError as e:
            findings.append(Finding(COLUMNS_KEY, f"{e}{_branch(config, branch.index)}"))
    return findings


def _converted(config: JobConfig, classes: Sequence[str], schema: dict[str, Any]) -> Any:
    """The output schema of the record converters `classes` from `schema` (None: they cannot say it without a
    record)."""
    from spark_pipeline.constructs import Converter
    from spark_pipeline.engines.avro_types import schema_state
    from spark_pipeline.engines.records.flow import chain_schema

    try:
        converters = [make_construct(config, "converter.classes", p, Converter) for p in classes]
        return chain_schema(converters, schema, schema_state(config))[0]
    except Exception:  # user code: whatever it raises means its schema is unknown here (the engine says why)
        return None


def _declared_spark_columns(config: JobConfig) -> tuple[str, ...] | None:
    """The columns of a directory source's `source.filebased.schema` (Spark DDL), when the job declares them."""
    ddl = config.properties.get(SPARK_SCHEMA_KEY, "").strip()
    if not ddl or config.properties.get(FORMAT_KEY, "").strip().lower() not in SPARK_ONLY_FORMATS:
        return None
    try:
        table = parse_one(f"CREATE TABLE t ({ddl})", read="spark")
    except SqlglotError:
        return None
    schema = table.this if isinstance(table, exp.Create) else None
    if not isinstance(schema, exp.Schema):
        return None
    names = tuple(c.name for c in schema.expressions if isinstance(c, exp.ColumnDef))
    return names if names and len(names) == len(schema.expressions) else None


def _missing_column(key: str, sql: str, name: str, columns: tuple[str, ...], what: str) -> Finding:
    """The finding of a column the SQL of `key` names that `what` lacks."""
    return Finding(key, f"{key} {sql!r} names the column {name!r}, which {what} do not have"
                        f"{did_you_mean(name, columns)}; the columns: {', '.join(columns)}")


def file_system(location: str) -> str:
    """The file system a location lies on, as a URL prefix ('' for the local disk)."""
    return urls.parse(location).root


def _branch(config: JobConfig, n: int) -> str:
    return f", branch {n}" if config.fork_branches > 1 else ""


def _source_of(config: JobConfig, model: type[Any]) -> type | None:
    """The job's source class when it reads its keys with `model` (or a subclass): a source of that kind."""
    try:
        cls = import_class(config.source_class)
        found = construct_model(cls)
    except (ValueError, TypeError):
        return None  # the job file's own checks report it
    return cls if found is not None and issubclass(found, model) else None


def table_problems(config: JobConfig, probe: Probe) -> list[Finding]:
    """An Iceberg publisher's catalog can be reached, a Delta publisher's table created or opened
    (spark_pipeline/tables)."""
    try:
        publisher = import_class(config.publisher_type)
    except ValueError:
        return []  # the job file's own checks report it
    if issubclass(publisher, DeltaTablePublisher):
        return delta_problems(config, publisher)
    if not issubclass(publisher, IcebergTablePublisher):
        return []
    settings = config.construct_settings(publisher, 0)
    assert isinstance(settings, IcebergSettings)
    warehouse = urls.resolve_folder(str(config.branch(0).publisher_final_dir))
    problem = catalog_problem(settings, warehouse, probe.timeout_s)
    key = CATALOG_URI_KEY if settings.catalog_uri else "data.publisher.final.dir"
    return [Finding(key, f"{key!r}: the catalog of Iceberg table {settings.table!r}: {problem}")] if problem else []


def delta_problems(config: JobConfig, publisher: type[DeltaTablePublisher]) -> list[Finding]:
    """A Delta publisher's table: an existing one opens, a new one's folder can be created."""
    settings = config.construct_settings(publisher, 0)
    assert isinstance(settings, DeltaSettings)
    location = settings.location(urls.resolve_folder(str(config.branch(0).publisher_final_dir)))
    problem = location_problem(location, TableStorage(FileSystemSettings.of(config.properties)))
    return [Finding("delta.table", f"'delta.table': Delta table {settings.table!r}: {problem}")] if problem else []


CHECKS: tuple[Check, ...] = (sql_problems, partition_problems, move_problems, folder_problems, kafka_problems,
                             table_problems)
"""The checks, cheapest first."""

