"""Pre-flight checks: what can be known wrong about a job without Spark, found before Spark starts.

`validate` and `run` use them (after the job file's own checks), so that a mistake costs a second, not Spark's
start-up and a failed run. Each check is a small function of the job returning `Finding`s, each naming the key at
fault; `located` puts them on the job file's lines. They read and probe, never write:
- the folders: the input folder exists; staging, task output and publish folders can be reached and written under
  (HDFS's NameNode answers, S3 takes the credentials and has the bucket; `filesystems.probe`, short timeouts);
- the moves: each branch's staging, task-output and publish folders lie on one file system (files are moved from
  one to the next, and no file system renames into another);
- the Kafka source: its brokers answer (the Kafka config layer's client, a short timeout) and its topic whitelist
  matches topics.
What only Spark can tell (SQL analysed against the source's columns) is for `validate --deep`, which plans the job as
`run --explain` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from time import monotonic
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata

from events.errors import KafkaSecurityError, OncelogError
from events.log.kafka.config import scrub, security_failure
from filesystems import urls
from filesystems.probe import PROBE_TIMEOUT_S, Probe, Use
from filesystems.settings import FileSystemSettings
from spark_pipeline.constructs import SourceError
from spark_pipeline.jobfile.config import PATH_KEYS, JobConfig, branch_sources, construct_model
from spark_pipeline.jobfile.formats import Problem, parse_job_file
from spark_pipeline.jobfile.plugins import import_class
from spark_pipeline.sources.directory_settings import DIRECTORY, DirectorySettings
from spark_pipeline.sources.kafka_topic import KafkaSourceSettings, SourceCluster, select_topics

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


CHECKS: tuple[Check, ...] = (move_problems, folder_problems, kafka_problems)
"""The checks, cheapest first."""

