"""Job configuration: Gobblin's keys in YAML or `.properties`/`.pull`/`.job` files, validated before anything runs.

`spark_pipeline.jobs.load_job_config(path)` parses, substitutes `${...}`, imports every configured construct class,
checks every key against the core model and the `CONFIG_MODEL`s the constructs declare (jobfile/validation.py) and
what depends on the engine that runs the job (engines/choice.py), and raises one `JobConfigError` listing every
problem (file, line, key) — or returns a frozen `JobConfig`. The key reference is docs/job-config.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from events.errors import ConfigError
from events.log import DEFAULT_URL, parse_url
from events.log.kafka.config import is_secret
from filesystems import urls
from spark_pipeline.jobfile.cron import CronSchedule, parse_cron
from spark_pipeline.jobfile.formats import Problem

DEFAULT_WRITER_BUILDER = "spark_pipeline.writers.AvroDataWriterBuilder"
DEFAULT_PUBLISHER = "spark_pipeline.publisher.BaseDataPublisher"
DEFAULT_SPARK_MASTER = "local[*]"
MAX_BRANCHES = 1000
DEFAULT_BRANCH_NAME_PREFIX = "fork_"  # Gobblin's ConfigurationKeys.DEFAULT_FORK_BRANCH_NAME
SPARK_PREFIX = "spark."
LOG_PREFIX = "oncelog.log."

__all__ = [
    "DEFAULT_PUBLISHER", "DEFAULT_WRITER_BUILDER", "BranchConfig", "JobCommitPolicy", "JobConfig",
    "JobConfigError", "PolicyType", "Problem", "QualityPolicy", "TaskEngineKind", "WorkUnitRetryPolicy",
    "WriterOutputFormat",
]


class JobConfigError(ConfigError):
    """A job configuration is invalid; `problems` lists every one found, each naming its file, line and key."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        header = f"invalid job configuration ({count} problem{'s' if count != 1 else ''}); nothing was run:"
        super().__init__("\n".join([header, *(f"  {p}" for p in self.problems)]))


class JobCommitPolicy(StrEnum):
    """Gobblin's `job.commit.policy`: which task outputs of a run get published."""

    FULL = "full"  # publish only if every task succeeded
    PARTIAL = "partial"  # publish even if some tasks failed; the publisher decides about failed tasks' data
    SUCCESSFUL = "successful"  # publish the output of the tasks that succeeded


class WorkUnitRetryPolicy(StrEnum):
    """Gobblin's `workunit.retry.policy`: whether the next run retries the work units a run failed to commit."""

    ALWAYS = "always"
    ONPARTIAL = "onpartial"  # only when job.commit.policy is partial
    ONFULL = "onfull"  # only when job.commit.policy is full
    NEVER = "never"


class PolicyType(StrEnum):
    """What a failing quality policy does: MANDATORY (Gobblin: FAIL) fails, OPTIONAL informs, ERR_FILE diverts rows."""

    MANDATORY = "MANDATORY"
    OPTIONAL = "OPTIONAL"
    ERR_FILE = "ERR_FILE"  # row-level only: a failing record goes to qualitychecker.row.err.file


class WriterOutputFormat(StrEnum):
    """Gobblin's `writer.output.format` values; each writer builder supports a subset."""

    AVRO = "AVRO"
    PARQUET = "PARQUET"
    ORC = "ORC"
    JSON = "JSON"
    CSV = "CSV"
    TXT = "TXT"
    PROTOBUF = "PROTOBUF"


class TaskEngineKind(StrEnum):
    """`task.engine`: where a task's records go — Spark DataFrames in the JVM, Python records, or chosen per job."""

    DATAFRAME = "dataframe"
    RECORDS = "records"
    AUTO = "auto"  # dataframe when every construct of the job supports it, else records


DEFAULT_EXECUTORS_MIN_DATASETS = 10_000
"""Below this many datasets the driver commits a run quicker than shard tasks do (benchmarks.commit_scale on 2
cores: 1.1 s against 5.1 s at 1,000 datasets, 10.0 s against 11.3 s at 10,000)."""
DEFAULT_MOVES_AHEAD_MIN_DATASETS = 5_000
"""From this many datasets committed one after another on local disk, a child process makes their folder moves ahead
(the committer makes them itself until the child has started, 100-150 ms). In-process A/B, commit wall a dataset:
no gain at 1,000 datasets, none measurable at 5,000, a fifth at 20,000 (docs/benchmarks.md, fifteenth round)."""
DEFAULT_FENCE_FRESH_MS = 200
"""How long a fence probe that passed answers later checks (`job.commit.fence.fresh.ms`)."""


class CommitOnExecutors(StrEnum):
    """`job.commit.on.executors`: where a run's commit sequences are planned, applied and recovered."""

    TRUE = "true"  # in commit shards, one Spark task per shard with its own fenced writer (Gobblin's scalable design)
    FALSE = "false"  # on the driver, in one batch
    AUTO = "auto"  # in shards from job.commit.executors.min.datasets datasets on, else on the driver


# --- value types shared by JobConfig and BranchConfig ------------------------------------------------------------

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
DOTTED_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def split_list(value: Any) -> Any:
    """Gobblin's getPropAsList: a comma-separated string becomes a tuple of trimmed, non-empty items."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


def _safe_name(value: str) -> str:
    """A name that becomes a Kafka transactional id and a path segment: letters, digits, '.', '_', '-'."""
    if not _SAFE_NAME.match(value):
        raise ValueError(f"{value!r} must be 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return value


def _class_path(value: str) -> str:
    """A dotted path `package.module.Class`."""
    if not DOTTED_PATH.match(value):
        raise ValueError(f"{value!r} is not a dotted path to a Python class (module.Class)")
    return value


def _function_path(value: str) -> str:
    """A Python function as `package.module:function` or `package.module.function`."""
    if not DOTTED_PATH.match(value.replace(":", ".", 1)) or value.count(":") > 1:
        raise ValueError(f"{value!r} is not a path to a Python function (module:function or module.function)")
    return value


def _policy_types(value: Any) -> Any:
    """Policy types, case-insensitive; Gobblin's FAIL is accepted as MANDATORY."""
    items = split_list(value)
    if isinstance(items, tuple):
        return tuple("MANDATORY" if str(i).upper() == "FAIL" else str(i).upper() for i in items)
    return items


def _log_url(value: str) -> str:
    """A log URL `open_log` accepts (sqlite:///path or kafka://host:port)."""
    try:
        parse_url(value)
    except ConfigError as e:
        raise ValueError(str(e)) from e
    return value


def _cron(value: str) -> str:
    """A schedule that parses and fires at least once more (see `parse_cron`)."""
    parse_cron(value)
    return value


def _upper(value: Any) -> Any:
    """Case-insensitive enum input (upper-case members)."""
    return value.upper() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    """Case-insensitive enum input (lower-case members)."""
    return value.lower() if isinstance(value, str) else value


def _boolean_word(value: Any) -> Any:
    """A YAML boolean as its word, so that true / false / auto settings take either."""
    return str(value).lower() if isinstance(value, bool) else _lower(value)


SafeName = Annotated[str, AfterValidator(_safe_name)]
ClassPath = Annotated[str, AfterValidator(_class_path)]
ClassPaths = Annotated[tuple[ClassPath, ...], BeforeValidator(split_list)]
FunctionPaths = Annotated[tuple[Annotated[str, AfterValidator(_function_path)], ...], BeforeValidator(split_list)]
PolicyTypes = Annotated[tuple[PolicyType, ...] | None, BeforeValidator(_policy_types)]
OutputFormat = Annotated[WriterOutputFormat, BeforeValidator(_upper)]
NonEmpty = Annotated[str, Field(min_length=1)]


@dataclass(frozen=True)
class QualityPolicy:
    """One quality policy class and what its failure does."""

    class_path: str
    type: PolicyType


def pair_policies(policies: tuple[str, ...], types: tuple[PolicyType, ...] | None) -> tuple[QualityPolicy, ...]:
    """Policies with their types; without a types key every policy is MANDATORY (a configured check is enforced)."""
    kinds = types if types is not None else (PolicyType.MANDATORY,) * len(policies)
    return tuple(QualityPolicy(p, t) for p, t in zip(policies, kinds, strict=True))


# --- the models ----------------------------------------------------------------------------------------------------

_FROZEN = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class BranchKeys(BaseModel):
    """The keys a fork branch may override with a `.N` suffix; JobConfig holds the unsuffixed values."""

    model_config = _FROZEN

    converter_classes: ClassPaths = Field(default=(), alias="converter.classes")
    row_policy_classes: ClassPaths = Field(default=(), alias="qualitychecker.row.policies")
    row_policy_types: PolicyTypes = Field(default=None, alias="qualitychecker.row.policy.types")
    row_err_file: NonEmpty | None = Field(default=None, alias="qualitychecker.row.err.file")
    task_policy_classes: ClassPaths = Field(default=(), alias="qualitychecker.task.policies")
    task_policy_types: PolicyTypes = Field(default=None, alias="qualitychecker.task.policy.types")
    writer_builder_class: ClassPath = Field(default=DEFAULT_WRITER_BUILDER, alias="writer.builder.class")
    writer_output_format: OutputFormat = Field(default=WriterOutputFormat.AVRO, alias="writer.output.format")
    writer_staging_dir: NonEmpty | None = Field(default=None, alias="writer.staging.dir")
    writer_output_dir: NonEmpty | None = Field(default=None, alias="writer.output.dir")
    publisher_final_dir: NonEmpty | None = Field(default=None, alias="data.publisher.final.dir")


class BranchConfig(BranchKeys):
    """The effective settings of one fork branch (Gobblin's `.N`-suffixed keys, with fallbacks); see `JobConfig.branch`.

    Field aliases are the unsuffixed Gobblin keys.
    """

    model_config = _FROZEN

    index: int
    name: SafeName = Field(alias="fork.branch.name")

    @property
    def row_policies(self) -> tuple[QualityPolicy, ...]:
        """This branch's row-level policies (run after its converters) with their types."""
        return pair_policies(self.row_policy_classes, self.row_policy_types)

    @property
    def task_policies(self) -> tuple[QualityPolicy, ...]:
        """This branch's task-level policies with their types."""
        return pair_policies(self.task_policy_classes, self.task_policy_types)


class JobConfig(BranchKeys):
    """A validated job: Gobblin's keys as field aliases; build it with spark_pipeline.jobs' `load_job_config` or
    `config_from_properties`."""

    model_config = _FROZEN

    job_name: SafeName = Field(alias="job.name")
    job_group: SafeName | None = Field(default=None, alias="job.group")
    job_description: str | None = Field(default=None, alias="job.description")
    job_schedule: Annotated[str, AfterValidator(_cron)] | None = Field(default=None, alias="job.schedule")
    job_runonce: bool = Field(default=False, alias="job.runonce")
    job_disabled: bool = Field(default=False, alias="job.disabled")
    job_lock_enabled: bool = Field(default=True, alias="job.lock.enabled")
    source_class: ClassPath = Field(alias="source.class")
    fork_operator_class: ClassPath | None = Field(default=None, alias="fork.operator.class")
    fork_branches: int = Field(default=1, ge=1, le=MAX_BRANCHES, alias="fork.branches")
    publisher_type: ClassPath = Field(default=DEFAULT_PUBLISHER, alias="data.publisher.type")
    job_commit_policy: Annotated[JobCommitPolicy, BeforeValidator(_lower)] = Field(
        default=JobCommitPolicy.FULL, alias="job.commit.policy")
    task_max_retries: int = Field(default=5, ge=0, alias="task.maxretries")
    task_retry_interval_s: int = Field(default=300, ge=0, alias="task.retry.intervalinsec")
    task_engine: Annotated[TaskEngineKind, BeforeValidator(_lower)] = Field(
        default=TaskEngineKind.AUTO, alias="task.engine")
    converter_sql_select: NonEmpty | None = Field(default=None, alias="converter.sql.select")
    """A Spark SQL select list applied to every record (the DataFrame engine's converter): the output columns."""
    row_policy_sql: NonEmpty | None = Field(default=None, alias="qualitychecker.row.sql")
    """A Spark SQL condition every record must meet; what a failing record does is `qualitychecker.row.sql.type`."""
    row_policy_sql_type: Annotated[PolicyType, BeforeValidator(_upper)] = Field(
        default=PolicyType.MANDATORY, alias="qualitychecker.row.sql.type")
    """MANDATORY: a failing record fails its task; OPTIONAL: counted only; ERR_FILE: diverted to the error file."""
    converter_dataframe_functions: FunctionPaths = Field(default=(), alias="converter.dataframe.functions")
    """Python functions DataFrame -> DataFrame applied in order after the SQL stages (the DataFrame engine only)."""
    workunit_retry_enabled: bool = Field(default=True, alias="workunit.retry.enabled")
    workunit_retry_policy: Annotated[WorkUnitRetryPolicy, BeforeValidator(_lower)] | None = Field(
        default=None, alias="workunit.retry.policy")
    dataset_urn: NonEmpty | None = Field(default=None, alias="dataset.urn")
    log_url: Annotated[str, AfterValidator(_log_url)] = Field(default=DEFAULT_URL, alias="oncelog.log.url")
    commit_sequence_max_attempts: int = Field(default=3, ge=1, alias="commit.sequence.max.attempts")
    commit_parallelism: int = Field(default=32, ge=1, alias="commit.parallelism")
    commit_batch_records: bool = Field(default=True, alias="job.commit.batch.records")
    """true: many datasets' plans and completions are appended as one record each batch (events.batch); false: a
    record per event, as before batches existed."""
    commit_fence_fresh_ms: int = Field(default=DEFAULT_FENCE_FRESH_MS, ge=0, alias="job.commit.fence.fresh.ms")
    """How long a fence probe that found the committer's writer not fenced answers its later checks; a release of an
    abandoned sequence waits as long before it moves files back."""
    commit_shards: int | None = Field(default=None, ge=1, alias="job.commit.shards")
    """How many shards datasets are committed in (default, and at most: the events topic's partitions)."""
    commit_on_executors: Annotated[CommitOnExecutors, BeforeValidator(_boolean_word)] = Field(
        default=CommitOnExecutors.AUTO, alias="job.commit.on.executors")
    """true: shards plan, apply and recover their sequences in tasks of their own; false: the driver commits them
    all; auto: shards once a run commits (or recovers) job.commit.executors.min.datasets datasets."""
    commit_executors_min_datasets: int = Field(default=DEFAULT_EXECUTORS_MIN_DATASETS, ge=1,
                                               alias="job.commit.executors.min.datasets")
    """With job.commit.on.executors=auto, the fewest datasets committed in shards (fewer: on the driver)."""
    commit_moves_ahead_min_datasets: int = Field(default=DEFAULT_MOVES_AHEAD_MIN_DATASETS, ge=1,
                                                 alias="job.commit.moves.ahead.min.datasets")
    """From how many datasets committed one after another (local disk) a child process makes their folder moves ahead
    of the committer's thread."""
    spark_master: NonEmpty = Field(default=DEFAULT_SPARK_MASTER, alias="spark.master")
    properties: dict[str, str] = Field(default_factory=dict, repr=False)  # may hold secrets from ${env:...}

    @property
    def row_policies(self) -> tuple[QualityPolicy, ...]:
        """Row-level policies of the master branch (before the fork), with their types."""
        return pair_policies(self.row_policy_classes, self.row_policy_types)

    @property
    def schedule(self) -> CronSchedule | None:
        """The parsed `job.schedule`, or None for a job that runs only when launched."""
        return parse_cron(self.job_schedule) if self.job_schedule else None

    @property
    def effective_workunit_retry_policy(self) -> WorkUnitRetryPolicy:
        """Gobblin's rule: workunit.retry.policy when set, else always/never from workunit.retry.enabled."""
        if self.workunit_retry_policy is not None:
            return self.workunit_retry_policy
        return WorkUnitRetryPolicy.ALWAYS if self.workunit_retry_enabled else WorkUnitRetryPolicy.NEVER

    @property
    def retries_failed_work_units(self) -> bool:
        """Whether the next run re-plans the work units this job failed to commit (Gobblin's AbstractSource rule)."""
        policy = self.effective_workunit_retry_policy
        return (policy is WorkUnitRetryPolicy.ALWAYS
                or (policy is WorkUnitRetryPolicy.ONPARTIAL and self.job_commit_policy is JobCommitPolicy.PARTIAL)
                or (policy is WorkUnitRetryPolicy.ONFULL and self.job_commit_policy is JobCommitPolicy.FULL))

    @property
    def default_dataset_urn(self) -> str:
        """The URN of work units whose source sets none: dataset.urn, else the job name."""
        return self.dataset_urn or self.job_name

    @property
    def spark_conf(self) -> dict[str, str]:
        """Every `spark.*` key, for the SparkSession builder (spark.master always present)."""
        conf = {k: v for k, v in self.properties.items() if k.startswith(SPARK_PREFIX)}
        conf["spark.master"] = self.spark_master
        return conf

    @property
    def log_settings(self) -> dict[str, str]:
        """`oncelog.log.<setting>` keys other than the URL, for open_log (e.g. Kafka SASL settings)."""
        return {k[len(LOG_PREFIX):]: v for k, v in self.properties.items()
                if k.startswith(LOG_PREFIX) and k != "oncelog.log.url"}

    def branch(self, index: int) -> BranchConfig:
        """The effective settings of fork branch `index` (0 <= index < fork.branches)."""
        if not 0 <= index < self.fork_branches:
            raise IndexError(f"job {self.job_name!r} has {self.fork_branches} branch(es); no branch {index}")
        built, _, errors = build_branch(self.properties, index, self.fork_branches)
        if built is None:
            raise JobConfigError([Problem(f"job {self.job_name!r}", message, key=key) for key, message in errors])
        return built

    @property
    def branches(self) -> tuple[BranchConfig, ...]:
        """Every branch's effective settings, in order."""
        return tuple(self.branch(i) for i in range(self.fork_branches))

    def construct_settings(self, cls: type, branch: int | None = None) -> BaseModel:
        """The validated CONFIG_MODEL of a construct class, reading `key.N` over `key` when `branch` is given."""
        model = construct_model(cls)
        if model is None:
            raise TypeError(f"{qualified_name(cls)} declares no CONFIG_MODEL")
        data, used = construct_input(model, self.properties, branch)
        try:
            return model.model_validate(data)
        except ValidationError as e:
            errors = validation_messages(e, lambda alias: used.get(alias, alias), f"read by {qualified_name(cls)}")
            raise JobConfigError([Problem(f"job {self.job_name!r}", m, key=k) for k, m in errors]) from e


# --- keys and constructs ------------------------------------------------------------------------------------------

CORE_KEYS = frozenset(f.alias for f in JobConfig.model_fields.values() if f.alias)
BRANCH_KEYS = frozenset(f.alias for f in BranchConfig.model_fields.values() if f.alias)
PATH_KEYS = {"writer.staging.dir": "writer_staging_dir", "writer.output.dir": "writer_output_dir",
              "data.publisher.final.dir": "publisher_final_dir"}
ROW_ERR_FILE = "qualitychecker.row.err.file"
DIRECTORY_SOURCE_FOLDER = "source.filebased.data.directory"
FOLDER_KEYS = (*PATH_KEYS, ROW_ERR_FILE, DIRECTORY_SOURCE_FOLDER)
"""Keys naming a folder the job reads or writes (local, HDFS or S3; the row error file local only)."""
BRANCH_FOLDER_KEYS = (*PATH_KEYS, ROW_ERR_FILE)  # these also take a `.N` branch suffix
LOCAL_ONLY_KEYS = (ROW_ERR_FILE,)  # appended to line by line: object stores cannot append
SPECULATION = "spark.speculation"
ROW_POLICIES, ROW_POLICY_TYPES = "qualitychecker.row.policies", "qualitychecker.row.policy.types"
TASK_POLICIES, TASK_POLICY_TYPES = "qualitychecker.task.policies", "qualitychecker.task.policy.types"
_SUFFIX = re.compile(r"^(.+)\.(\d+)$")

# --- Gobblin keys: what carries over (docs/job-config.md, "Moving a Gobblin job over") --------------------------------

_RUNNER = ("Gobblin's launcher and its MapReduce, YARN or thread-pool settings: every task runs on Spark "
           "(spark.master, spark.*)")
_STATE = "Gobblin's state store: job and dataset state is a projection of the event log (oncelog.log.url)"
_LOCK = "Gobblin's job lock (and its ZooKeeper): the lock lives in the event log (job.lock.enabled)"
_METRICS = ("Gobblin metrics and their reporters: every job, task and commit transition is an event in the log "
            "(oncelog audit, oncelog runs)")
_HISTORY = "Gobblin's job history store: run history is the event log (oncelog runs, oncelog audit)"
_EMAIL = "Gobblin's e-mail alerts: oncelog sends none; the exit code and oncelog runs say how a run ended"
_EXTRACT = ("Gobblin's Extract metadata and limits (namespace, table, full or delta): output is laid out by "
            "dataset.urn, and a run extracts what its source's watermarks say")
_WRITER = ("Gobblin's writer layout: files go under writer.output.dir by dataset, and a folder names its file system "
           "in its URL (hdfs://, s3a://)")
_CLEANUP = "Gobblin's staging cleanup: oncelog removes staging and task output itself once a run commits"
_JARS = ("Gobblin's constructs are JVM classes: oncelog's are Python classes named by dotted path (JVM jars for "
         "Spark: spark.jars)")
_KAFKA = ("Gobblin's KafkaSource settings: read only by a Kafka source "
          "(spark_pipeline.sources.kafka_topic.KafkaTopicSource reads bootstrap.with.offset)")
_FS = ("Gobblin's default file system URI (state store, locks): a folder names its own file system in its URL "
       "(hdfs://, s3a://)")

GOBBLIN_KEYS_NOT_USED: dict[str, str] = {
    "launcher.type": _RUNNER,
    "taskexecutor.threadpool.size": _RUNNER,
    "tasktracker.threadpool.coresize": _RUNNER,
    "taskretry.threadpool.coresize": _RUNNER,
    "job.lock.dir": _LOCK,
    "job.lock.type": _LOCK,
    "job.jars": _JARS,
    "fs.uri": _FS,
    "extract.namespace": _EXTRACT,
    "extract.table.name": _EXTRACT,
    "extract.table.type": _EXTRACT,
    "extract.is.full": _EXTRACT,
    "writer.destination.type": _WRITER,
    "writer.file.path.type": _WRITER,
    "writer.file.path": _WRITER,
    "writer.file.name": _WRITER,
    "writer.include.record.count.in.file.names": _WRITER,
    "cleanup.staging.data.per.task": _CLEANUP,
    "cleanup.staging.data.by.initializer": _CLEANUP,
    "bootstrap.with.offset": _KAFKA,
    "reset.on.offset.out.of.range": _KAFKA,
    "topics.move.to.latest.offset": _KAFKA,
}
"""Gobblin keys with no meaning in oncelog → why: accepted with one warning listing them (branch `.N` forms too),
unless a construct of the job reads the key (then it has a meaning)."""

GOBBLIN_PREFIXES_NOT_USED: dict[str, str] = {
    "mr.": _RUNNER,
    "gobblin.cluster.": _RUNNER,
    "gobblin.yarn.": _RUNNER,
    "helix.": _RUNNER,
    "zookeeper.": _LOCK,
    "state.store.": _STATE,
    "metrics.": _METRICS,
    "job.history.store.": _HISTORY,
    "email.": _EMAIL,
    "extract.limit.": _EXTRACT,
    "kafka.workunit.": _KAFKA,
}
"""Key prefixes of Gobblin's subsystems oncelog has no counterpart for (metrics.enabled, metrics.log.dir, …)."""

REPLACE_FINAL_DIR = "data.publisher.replace.final.dir"
REPLACE_FINAL_DIR_REASON = "Gobblin's default (false): oncelog never deletes a publish folder, it adds each run's files"
"""Ignored when false; true (delete the publish folder before publishing) is an error: oncelog does not do that."""

WRITER_FS_URI, PUBLISHER_FS_URI = "writer.fs.uri", "data.publisher.fs.uri"
FS_URI_FOLDERS = {WRITER_FS_URI: ("writer.staging.dir", "writer.output.dir"),
                  PUBLISHER_FS_URI: ("data.publisher.final.dir",)}
"""Gobblin's file-system URI keys and the folder keys a bare path of which they resolve (`.N` forms per branch);
as in Gobblin's BaseDataPublisher, the publisher's folder falls back to writer.fs.uri."""

TASK_DATA_ROOT = "task.data.root.dir"
TASK_DATA_FOLDERS = {"writer.staging.dir": "task-staging", "writer.output.dir": "task-output"}
"""Gobblin derives the staging and output folders from task.data.root.dir when they are not set."""

COMMIT_PARALLELIZE, PARALLEL_COMMITS = "job.commit.parallelize", "job.commit.parallel.commits"
GOBBLIN_PARALLEL_COMMITS = 20  # Gobblin's DEFAULT_JOB_COMMIT_PARALLEL_COMMITS

GOBBLIN_CLASS_EQUIVALENTS: dict[str, str | None] = {
    "org.apache.gobblin.publisher.BaseDataPublisher": DEFAULT_PUBLISHER,
    "gobblin.publisher.BaseDataPublisher": DEFAULT_PUBLISHER,
    "org.apache.gobblin.writer.AvroDataWriterBuilder": DEFAULT_WRITER_BUILDER,
    "gobblin.writer.AvroDataWriterBuilder": DEFAULT_WRITER_BUILDER,
    "org.apache.gobblin.fork.IdentityForkOperator": None,  # None: oncelog's default does the same (key dropped)
    "gobblin.fork.IdentityForkOperator": None,
}
"""Gobblin's Java classes that have an oncelog equivalent, for the class keys below."""
GOBBLIN_CLASS_KEYS = ("data.publisher.type", "writer.builder.class", "fork.operator.class")


KeyMessage = tuple[str | None, str]
"""A problem not yet located in a file: the key it is about (None: the job as a whole) and the message."""



def qualified_name(cls: type) -> str:
    """A class's dotted path, as a job file names it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def split_suffix(key: str) -> tuple[str, int] | None:
    """`writer.output.dir.1` → ('writer.output.dir', 1); None when the key has no numeric branch suffix."""
    match = _SUFFIX.match(key)
    return (match.group(1), int(match.group(2))) if match else None


def is_folder_key(key: str) -> bool:
    """Whether a key names a folder (see FOLDER_KEYS), branch-suffixed forms included."""
    suffixed = split_suffix(key)
    return key in FOLDER_KEYS or (suffixed is not None and suffixed[0] in BRANCH_FOLDER_KEYS)


def folder_value(key: str, value: str) -> str:
    """A folder key's value as oncelog reads it: a local path as given (`file:///x` → `/x`), a remote URL
    normalized; a ValueError for a scheme oncelog cannot read or write, or a remote folder where only local works.

    Without this check, an unknown scheme (gs://…) would silently become a relative folder named after it.
    """
    if urls.has_scheme(value):
        location = urls.parse(value)
        if location.scheme is urls.Scheme.FILE:
            return location.path
        base = split_suffix(key)
        if (base[0] if base else key) in LOCAL_ONLY_KEYS:
            raise ValueError("must be a local folder (error files are appended to line by line)")
        return str(location)
    return value


def validation_messages(error: ValidationError, key_of: Callable[[str], str], owner: str = "",
                        skip_missing: frozenset[str] = frozenset()) -> list[KeyMessage]:
    """Pydantic errors as (key, message); `key_of` maps a field alias to the key the value came from."""
    out: list[KeyMessage] = []
    suffix = f" ({owner})" if owner else ""
    for err in error.errors():
        loc = err["loc"]
        if not loc:
            out.append((None, f"{err['msg']}{suffix}"))
            continue
        key = key_of(str(loc[0]))
        if err["type"] == "missing":
            if key not in skip_missing:
                out.append((key, f"required key {key!r} is missing or empty{suffix}"))
            continue
        item = f" item {int(loc[1]) + 1}" if len(loc) > 1 and isinstance(loc[1], int) else ""
        message = str(err["msg"]).removeprefix("Value error, ")
        shown = "a hidden value" if is_secret(key) else repr(err["input"])
        out.append((key, f"{key!r}{item}: {message} (got {shown}){suffix}"))
    return out


def construct_model(cls: type) -> type[BaseModel] | None:
    """The CONFIG_MODEL a construct class declares, or None; a CONFIG_MODEL that is no pydantic model is a TypeError."""
    model = getattr(cls, "CONFIG_MODEL", None)
    if model is None:
        return None
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    raise TypeError(f"{qualified_name(cls)}.CONFIG_MODEL must be a pydantic BaseModel subclass, not {model!r}")


def model_keys(model: type[BaseModel]) -> dict[str, str]:
    """The keys a CONFIG_MODEL reads (field aliases, else names) → field name."""
    keys: dict[str, str] = {}
    for name, info in model.model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        keys[alias or name] = name
    return keys


def _wants_sequence(annotation: Any) -> bool:
    """Whether a field takes a list-like value (then a comma-separated string is split, as Gobblin does)."""
    origin = get_origin(annotation)
    if annotation in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset):
        return True
    if origin is Union or origin is UnionType:
        return any(_wants_sequence(arg) for arg in get_args(annotation) if arg is not type(None))
    return False


def construct_input(model: type[BaseModel], values: Mapping[str, str],
                    branch: int | None) -> tuple[dict[str, Any], dict[str, str]]:
    """A construct's input (alias → value; `key.N` over `key` for branch N; empty means unset) and its source keys."""
    data: dict[str, Any] = {}
    used: dict[str, str] = {}
    for key, name in model_keys(model).items():
        candidates = (f"{key}.{branch}", key) if branch is not None else (key,)
        chosen = next((k for k in candidates if values.get(k, "").strip()), None)
        if chosen is None:
            continue
        raw = values[chosen].strip()
        data[key] = split_list(raw) if _wants_sequence(model.model_fields[name].annotation) else raw
        used[key] = chosen
    return data, used


def branch_sources(values: Mapping[str, str], n: int, branches: int) -> dict[str, tuple[str, str]]:
    """For branch n, each branch key → (the key its value is read from, the value); see docs/job-config.md."""
    out: dict[str, tuple[str, str]] = {}

    def take(base: str, *keys: str) -> None:
        chosen = next((k for k in keys if values.get(k, "").strip()), None)
        if chosen is not None:
            out[base] = (chosen, values[chosen].strip())

    for base in ("fork.branch.name", "converter.classes", ROW_POLICIES, ROW_POLICY_TYPES):
        take(base, f"{base}.{n}")  # branch-only: the unsuffixed keys belong to the master branch
    own = bool(values.get(f"{TASK_POLICIES}.{n}", "").strip())
    take(TASK_POLICIES, f"{TASK_POLICIES}.{n}" if own else TASK_POLICIES)
    take(TASK_POLICY_TYPES, f"{TASK_POLICY_TYPES}.{n}" if own else TASK_POLICY_TYPES)
    for base in ("qualitychecker.row.err.file", "writer.builder.class", "writer.output.format", *PATH_KEYS):
        take(base, f"{base}.{n}", base)
    name = out.get("fork.branch.name", ("", f"{DEFAULT_BRANCH_NAME_PREFIX}{n}"))[1]
    for base in PATH_KEYS:
        if base in out and out[base][0] == base and branches > 1:
            out[base] = (base, f"{out[base][1].rstrip('/')}/{name}")  # shared root: one sub-directory per branch
    return out


def build_branch(values: Mapping[str, str], n: int,
                 branches: int) -> tuple[BranchConfig | None, dict[str, tuple[str, str]], list[KeyMessage]]:
    """Branch n's effective settings, where each came from, and what is wrong with them."""
    sources = branch_sources(values, n, branches)
    data: dict[str, Any] = {base: raw for base, (_, raw) in sources.items()}
    data.setdefault("fork.branch.name", f"{DEFAULT_BRANCH_NAME_PREFIX}{n}")
    try:
        branch = BranchConfig.model_validate({"index": n, **data})
    except ValidationError as e:
        return None, sources, validation_messages(e, lambda alias: sources.get(alias, (alias, ""))[0])
    errors = policy_messages(branch.row_policy_classes, branch.row_policy_types,
                             sources.get(ROW_POLICY_TYPES, ("", ""))[0], row_level=True,
                             row_err_file=branch.row_err_file)
    errors += policy_messages(branch.task_policy_classes, branch.task_policy_types,
                              sources.get(TASK_POLICY_TYPES, ("", ""))[0], row_level=False)
    stray = f"{TASK_POLICY_TYPES}.{n}"
    if values.get(stray, "").strip() and sources.get(TASK_POLICIES, ("",))[0] != f"{TASK_POLICIES}.{n}":
        errors.append((stray, f"{stray!r} is set but {f'{TASK_POLICIES}.{n}'!r} is not; give both or neither"))
    return branch, sources, errors


def policy_messages(policies: tuple[str, ...], types: tuple[PolicyType, ...] | None, types_key: str, *,
                    row_level: bool, row_err_file: str | None = None) -> list[KeyMessage]:
    """Quality policies and types: one type per policy; ERR_FILE only for row policies, and with an error file."""
    if types is None:
        return []
    policies_key = types_key.replace(".policy.types", ".policies")
    if len(types) != len(policies):
        return [(types_key, f"{types_key!r} lists {len(types)} type(s) but {policies_key!r} lists "
                            f"{len(policies)} policies; give one type (MANDATORY or OPTIONAL) per policy")]
    if PolicyType.ERR_FILE in types and not row_level:
        return [(types_key, f"{types_key!r}: ERR_FILE applies to row-level policies only")]
    if PolicyType.ERR_FILE in types and row_err_file is None:
        return [(types_key, f"{types_key!r} uses ERR_FILE but 'qualitychecker.row.err.file' is not set")]
    return []
