"""The real-process SIGKILL soak on Gobblin's MyTopic example: kill `oncelog run` anywhere, run again, count records.

A Kafka topic `MyTopic.<random>` with two partitions is the source; the job runs through the real CLI
(`python -m oncelog run job.yaml --json`) in a session of its own, with its event log on SQLite or on Kafka (a
fresh topic). Each iteration produces a random number of records (values `p<partition>-<n>`, unique), starts a
run and kills its whole session (the driver's process group, with Spark's JVM, and PySpark's worker daemon, which
puts itself in a process group of its own) with SIGKILL: at a random instant, a random moment after the first task
started, or — every third iteration — as soon as the run's `CommitSequencePlanned` is in the log (random delays
alone rarely land in the few milliseconds of the commit). Then a run that is not killed. After every run no id is
published twice; after the un-killed one every produced id is published exactly once, each partition's watermark
is its end offset, nothing is pending, no run folder is left behind, and verify finds nothing (the checks of
`oncelog verify --publish-dir`, in this process: a Python start per iteration spared).

With `--output iceberg` the same job publishes into an hourly-partitioned Iceberg table instead (Parquet written by
the DataFrame engine, Gobblin's time partitioner on the Kafka record's timestamp, spread over a few hours so that a
run adds files to several partitions, late ones included); its iterations kill the run, in turn, at a random moment
within its commit (after its CommitSequencePlanned, up to the measured length of the last commits: before, inside
and after the table commit; the first one's commit creates the table), within 6 ms of its table commit writing the
table's next metadata file (before the catalog points at it, or after: the table committed, the log not yet), and at
a random instant or during the tasks. After every run the table is read back
through pyiceberg's scan: no id twice, each with the timestamp produced, each data file in the hour partition of its
timestamps, no data file (nor sequence's table commit) in two snapshots; after the un-killed one also every id once,
and the snapshots exactly the table commits of the completed sequences; verify (which checks the table too) finds
nothing.

    python -m tests.fault.soak --iterations 200 --store kafka --seed 7 [--output iceberg] [--bootstrap HOST:PORT]
        [--work-dir DIR]

Without --bootstrap (or $KAFKA_BOOTSTRAP) a local broker is started for the soak. A failure names the seed and a
one-line command that replays the same schedule (record counts, kill modes and delays come from the seed; how far
a process got when the signal arrived does not).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum, StrEnum
from pathlib import Path
from random import Random
from typing import Any

import fastavro
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from events.commit import CommitSequenceCompleted, CommitSequencePlanned, TableCommitStep
from events.log import Subscription, open_log
from events.model import Event
from events.task import TaskStarted
from filesystems import urls
from filesystems.base import FileSystemError
from filesystems.router import FileSystems
from projections.projector import Projector
from replay.tables import commit_key, snapshot_keys
from replay.verify import verify
from spark_pipeline.jobfile.paths import RUN_ID
from spark_pipeline.tables import iceberg

REPO = Path(__file__).resolve().parents[2]
JOB = "MyTopicIngestion"
PARTITIONS = 2
MAX_RECORDS = 25
"""At most this many new records per partition per iteration: small batches, the JVM start dominates anyway."""
FIRST_ESTIMATE_S = 8.0
"""How long a run is guessed to take before one was measured (random kill instants fall within it)."""
TASK_WINDOW_S = 0.6
"""Kills after the first TaskStarted land up to this long after it: the tasks and the commit of a small batch."""
RERUNS = 4
"""Un-killed runs tried after a kill before the soak fails (a refused run is allowed; a loss or duplicate never)."""
REFUSED_PAUSE_S = 5.0
"""The pause after a refused run."""
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The driver JVM lives seconds: C1 alone and the serial collector start Spark markedly faster on a small box."""
RUN_TIMEOUT_S = 300.0
WATCH_POLL_S = 0.002
TABLE = "lake.events"
HOUR_MS = 3_600_000
HOURS = 4
"""The Iceberg soak's records carry Kafka timestamps in this many hours (the last one the current): a run adds files to
several hour partitions, and to hours an earlier run published (late data)."""
FIRST_COMMIT_ESTIMATE_S = 0.4
"""How long a commit (its first CommitSequencePlanned to its last CommitSequenceCompleted) is guessed to take before
one was measured: kills within the commit fall within it (measured: 0.37-0.57 s for two datasets into the table, most
of it loading pyiceberg for the first; the run ends about 0.1 s later)."""
TABLE_COMMIT_WINDOW_S = 0.006
"""Kills at a table commit land up to this long after the commit's new metadata file appeared: before the catalog
points at it, or after (the table committed, the log not yet). Measured: the sequence's completion is recorded about
5 ms after the metadata file is written."""
TABLE_POLL_S = 0.0005


class Store(StrEnum):
    """Where the job's event log lives."""

    SQLITE = "sqlite"
    KAFKA = "kafka"


class Output(StrEnum):
    """What the job publishes into."""

    FOLDERS = "folders"
    """Gobblin's MyTopic example: Avro files in a folder per dataset."""
    ICEBERG = "iceberg"
    """An hourly-partitioned Iceberg table: Parquet by the DataFrame engine, split by the Kafka record's timestamp."""


class KillMode(Enum):
    """When the killed run of an iteration gets its SIGKILL."""

    RANDOM_INSTANT = "at a random instant"
    DURING_TASKS = "a random moment after its first TaskStarted"
    AFTER_PLANNING = "as soon as its CommitSequencePlanned was in the log"
    DURING_COMMIT = "a random moment within its commit, after its CommitSequencePlanned"
    AT_TABLE_COMMIT = "as its table commit wrote the table's next metadata file"


class SoakFailure(AssertionError):
    """Exactly-once (or the soak's own machinery) broke; the message says where and how to replay it."""


@dataclass(frozen=True, slots=True)
class SoakSettings:
    """One soak: how many iterations, on which log store, from which seed, against which broker, in which folder."""

    iterations: int
    store: Store
    seed: int
    bootstrap: str
    work_dir: Path
    output: Output = Output.FOLDERS

    def replay_command(self, iterations: int | None = None) -> str:
        """The one-line command that replays this soak's schedule (up to `iterations`)."""
        output = f" --output {self.output}" if self.output is not Output.FOLDERS else ""
        return (f"python -m tests.fault.soak --iterations {iterations or self.iterations} --store {self.store} "
                f"--seed {self.seed}{output}")

    @property
    def published(self) -> Path:
        """The publish folder (the Iceberg warehouse for a table job)."""
        return self.work_dir / "published"


@dataclass(frozen=True, slots=True)
class Estimates:
    """How long a run and its commit took last time: random kill instants and kills within the commit fall within."""

    run_s: float = FIRST_ESTIMATE_S
    commit_s: float = FIRST_COMMIT_ESTIMATE_S


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """One `oncelog run`: whether we killed it, how it exited, how long it took, where its output went."""

    name: str
    killed: bool
    returncode: int
    seconds: float
    stdout: Path
    stderr: Path
    note: str = ""

    def summary(self) -> dict[str, Any]:
        """The run's JSON summary (`run --json`), or {} when it printed none (killed, or a failure before it)."""
        try:
            document = json.loads(self.stdout.read_text(errors="replace") or "{}")
        except json.JSONDecodeError:
            return {}
        return document if isinstance(document, dict) else {}

    def describe(self) -> str:
        """How the run ended, with the tail of its output when it did not end well."""
        how = f"killed {self.note}" if self.killed else ", ".join(filter(None, [f"exit {self.returncode}", self.note]))
        text = f"run {self.name}: {how} after {self.seconds:.1f}s"
        if not self.killed and self.returncode != 0:
            summary = self.summary()
            text += (f"; status {summary.get('status')}, error {summary.get('error')!r}" if summary else
                     f"\n--- stderr tail ({self.stderr}) ---\n{tail(self.stderr)}")
        return text


@dataclass(slots=True)
class SoakReport:
    """What a soak did: runs killed by mode, where the kills landed, refused runs, and its wall time."""

    iterations: int = 0
    runs: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    exited_before_kill: int = 0
    killed_with_pending: int = 0
    killed_after_table_commit: int = 0
    """Kills that left a sequence pending whose snapshot the table already held (the table committed, the log not)."""
    refused_runs: list[str] = field(default_factory=list)
    """Un-killed runs that ended without committing (a refusal is allowed; a loss or duplicate never)."""
    records: int = 0
    seconds: float = 0.0

    def as_json(self, settings: SoakSettings) -> str:
        """One JSON line: the figures of the soak."""
        table = ({"kills_between_table_commit_and_its_record": self.killed_after_table_commit}
                 if settings.output is Output.ICEBERG else {})
        return json.dumps({"soak": "mytopic", "output": str(settings.output), "store": str(settings.store),
                           "seed": settings.seed, "iterations": self.iterations, "runs": self.runs,
                           "kills": dict(self.kills), "exited_before_kill": self.exited_before_kill,
                           "kills_leaving_a_pending_sequence": self.killed_with_pending, **table,
                           "refused_runs": len(self.refused_runs), "records": self.records,
                           "seconds": round(self.seconds, 1)})


@dataclass(slots=True)
class Source:
    """The MyTopic topic and every id produced to it so far, per partition in offset order."""

    bootstrap: str
    topic: str
    produced: dict[int, list[str]]
    first_hour_ms: int | None = None
    """With a time: each record's Kafka timestamp is a random instant of the HOURS hours from it (else the producer's
    clock), kept in `timestamps`."""
    timestamps: dict[str, int] = field(default_factory=dict)

    def produce(self, rng: Random, at_least_one: bool) -> int:
        """Produce 0..MAX_RECORDS new records per partition (at least one in all when asked); returns how many."""
        counts = [rng.randint(0, MAX_RECORDS) for _ in range(PARTITIONS)]
        if at_least_one and not any(counts):
            counts[rng.randrange(PARTITIONS)] = 1
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all"})
        for partition, count in enumerate(counts):
            ids = self.produced[partition]
            for n in range(len(ids), len(ids) + count):
                value = f"p{partition}-{n}"
                if self.first_hour_ms is None:
                    producer.produce(self.topic, value=value.encode(), partition=partition)
                    continue
                self.timestamps[value] = self.first_hour_ms + rng.randrange(HOURS * HOUR_MS)
                producer.produce(self.topic, value=value.encode(), partition=partition,
                                 timestamp=self.timestamps[value])
            ids.extend(f"p{partition}-{n}" for n in range(len(ids), len(ids) + count))
        if left := producer.flush(60):
            raise SoakFailure(f"{left} record(s) to {self.topic} were not acknowledged within 60s")
        return sum(counts)

    def all_ids(self) -> set[str]:
        return {i for ids in self.produced.values() for i in ids}


def tail(path: Path, lines: int = 25) -> str:
    """The last lines of a file (a run's stderr)."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create a plain topic (brokers auto-create nothing)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30).values():
        future.result(timeout=30)


def log_url(settings: SoakSettings) -> str:
    """A log no other soak uses: a SQLite file in the work folder, or a fresh Kafka topic."""
    topic = f"oncelog.soak.{uuid.uuid4().hex[:12]}"
    if settings.store is Store.SQLITE:
        return f"sqlite:///{settings.work_dir / 'events.db'}?topic={topic}"
    # The default transaction timeout (write_timeout_s, 120 s): a killed run's open transaction (its driver's, a
    # task's) outlasts every rerun's wait, so each rerun must fence it (its writer's name), not wait it out.
    return f"kafka://{settings.bootstrap}?topic={topic}"


def write_job(settings: SoakSettings, topic: str, url: str) -> Path:
    """Gobblin's MyTopic example as a job file: the Kafka topic in, Avro files out, local[1] Spark."""
    base = settings.work_dir
    job = {
        "job.name": JOB, "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "kafka.brokers": settings.bootstrap, "topic.whitelist": topic,
        "writer.staging.dir": str(base / "staging"), "writer.output.dir": str(base / "task-output"),
        "data.publisher.final.dir": str(base / "published"), "job.commit.policy": "full",
        "task.maxretries": 1, "task.retry.intervalinsec": 0, "oncelog.log.url": url,
        "spark.master": "local[1]", "spark.ui.enabled": "false", "spark.driver.extraJavaOptions": JVM_OPTIONS,
        # the folder moves made by a child process, as for a commit of 1,000 datasets: killed with the run
        "job.commit.moves.ahead.min.datasets": 2,
    }
    if settings.output is Output.ICEBERG:
        job.update({"writer.output.format": "PARQUET", "task.engine": "dataframe",
                    "data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher",
                    "iceberg.table": TABLE,
                    "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedWriterPartitioner",
                    "writer.partition.timezone": "UTC", "writer.partition.granularity": "HOUR"})
    path = base / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def session_groups(session: int) -> set[int]:
    """The process groups of the live (not zombie) processes of a session, from /proc (Linux)."""
    groups: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        state, pgrp, sid = fields[0], int(fields[2]), int(fields[3])
        if sid == session and state not in {"Z", "X"}:
            groups.add(pgrp)
    return groups


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the run's process group first, then every other group of its session, until none is left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    if not Path("/proc/self/stat").exists():
        return  # no /proc: the process group is all we can name
    deadline = time.monotonic() + 30
    while groups := session_groups(proc.pid):
        if time.monotonic() > deadline:
            raise SoakFailure(f"processes of groups {sorted(groups)} survived SIGKILL for 30s")
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)


def start_run(job: Path, out_dir: Path, name: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """`oncelog run job --json` in a session of its own, its output in files (Spark's stderr can fill a pipe)."""
    stdout, stderr = out_dir / f"{name}.out", out_dir / f"{name}.err"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "oncelog", "run", str(job), "--json"], stdout=out, stderr=err,
                                cwd=REPO, start_new_session=True)
    return proc, stdout, stderr


def new_events(watch: Subscription, since: datetime) -> Iterator[Event]:
    """The events emitted at or after `since` among those the watch has not returned yet."""
    for logged in watch.poll(timeout=WATCH_POLL_S):
        if logged.event.emitted_at >= since:
            yield logged.event


TRIGGERS: dict[KillMode, type[Event]] = {KillMode.DURING_TASKS: TaskStarted,
                                          KillMode.AFTER_PLANNING: CommitSequencePlanned,
                                          KillMode.DURING_COMMIT: CommitSequencePlanned}
"""The event (of the killed run) that starts the countdown to the kill; at a random instant, the start does."""


def metadata_files(table_metadata: Path) -> int:
    """How many metadata files the table's folder holds: each table commit (its creation too) writes one more."""
    try:
        return sum(1 for entry in os.scandir(table_metadata) if entry.name.endswith(".metadata.json"))
    except FileNotFoundError:
        return 0


def killed_run(job: Path, out_dir: Path, name: str, mode: KillMode, delay_s: float,
               watch: Subscription, table_metadata: Path) -> RunOutcome:
    """Start a run and SIGKILL its session `delay_s` after its start, its trigger event or (AT_TABLE_COMMIT) the next
    metadata file in `table_metadata`; it may end first."""
    since = datetime.now(UTC)
    metadata_before = metadata_files(table_metadata)
    started = time.monotonic()
    proc, stdout, stderr = start_run(job, out_dir, name)
    trigger = TRIGGERS.get(mode)
    at_table = mode is KillMode.AT_TABLE_COMMIT
    kill_at = started + delay_s if trigger is None and not at_table else None
    try:
        while proc.poll() is None:
            if trigger is not None and kill_at is None:
                fired = next((e for e in new_events(watch, since) if isinstance(e, trigger)), None)
                if fired is not None:  # counted from the event's emission, not from when the watch saw it
                    seen_late = max(0.0, (datetime.now(UTC) - fired.emitted_at).total_seconds())
                    kill_at = time.monotonic() + delay_s - seen_late
            elif at_table and kill_at is None:
                if metadata_files(table_metadata) > metadata_before:
                    kill_at = time.monotonic() + delay_s
                else:
                    time.sleep(TABLE_POLL_S)
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                kill_session(proc)
                return RunOutcome(name, True, proc.returncode, now - started, stdout, stderr,
                                  f"{mode.value} (+{delay_s:.3f}s)")
            if now - started > RUN_TIMEOUT_S:
                raise SoakFailure(f"run {name} did not end within {RUN_TIMEOUT_S:.0f}s\n{tail(stderr)}")
            if kill_at is not None:  # while watching, the poll itself waits
                time.sleep(min(0.05, max(0.0, kill_at - now)))
    finally:
        if proc.poll() is None:
            kill_session(proc)
    return RunOutcome(name, False, proc.returncode, time.monotonic() - started, stdout, stderr,
                      f"ended before its kill {mode.value} (+{delay_s:.3f}s)")


def full_run(job: Path, out_dir: Path, name: str) -> RunOutcome:
    """A run that is not killed, to its end (a hung one is killed and fails the soak)."""
    started = time.monotonic()
    proc, stdout, stderr = start_run(job, out_dir, name)
    try:
        proc.wait(RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise SoakFailure(f"run {name} did not end within {RUN_TIMEOUT_S:.0f}s\n{tail(stderr)}") from e
    finally:
        if proc.poll() is None:
            kill_session(proc)
    return RunOutcome(name, False, proc.returncode, time.monotonic() - started, stdout, stderr)


def published_files(published: str | Path) -> list[str]:
    """The Avro files under a publish folder (a local path, hdfs://… or s3a://…)."""
    return [f.path for f in FileSystems.of({}).list_files(str(published)) if f.path.endswith(".avro")]


def record_value(record: object) -> str:
    """A published Kafka record's value (the source's id), from its Avro record."""
    if not isinstance(record, dict) or not isinstance(record.get("value"), bytes):
        raise SoakFailure(f"a published record is not a Kafka record with a bytes value: {record!r:.200}")
    return record["value"].decode()


def published_ids(published: str | Path) -> Counter[str]:
    """Every record id in every published Avro file, counted."""
    fs = FileSystems.of({})
    seen: Counter[str] = Counter()
    for path in published_files(published):
        try:
            with fs.open_read(path) as f:
                seen.update(record_value(record) for record in fastavro.reader(f))
        except (OSError, ValueError, EOFError, FileSystemError) as e:
            raise SoakFailure(f"published file {path} cannot be read: {type(e).__name__}: {e}") from e
    return seen


def check_no_duplicates(published: str | Path, source: Source, after: str) -> Counter[str]:
    """No id published twice, and none that was never produced; returns the counts."""
    seen = published_ids(published)
    duplicates = sorted(i for i, n in seen.items() if n > 1)
    if duplicates:
        raise SoakFailure(f"after {after}: {len(duplicates)} id(s) published more than once, e.g. "
                          f"{[(i, seen[i]) for i in duplicates[:8]]}; files: {files_of(published, duplicates[:3])}")
    check_counts(seen, source, after)
    return seen


def check_counts(seen: Counter[str], source: Source, after: str) -> None:
    """No id counted twice, and none that was never produced."""
    duplicates = sorted(i for i, n in seen.items() if n > 1)
    if duplicates:
        raise SoakFailure(f"after {after}: {len(duplicates)} id(s) published more than once, e.g. "
                          f"{[(i, seen[i]) for i in duplicates[:8]]}")
    unknown = sorted(set(seen) - source.all_ids())
    if unknown:
        raise SoakFailure(f"after {after}: published ids never produced: {unknown[:8]}")


def check_none_missing(seen: Counter[str], source: Source, after: str) -> None:
    """Every produced id is among those published."""
    missing = sorted(source.all_ids() - set(seen), key=lambda i: (i.split("-")[0], int(i.split("-")[1])))
    if missing:
        raise SoakFailure(f"after {after}: {len(missing)} produced id(s) never published, e.g. {missing[:8]}")


def files_of(published: str | Path, ids: Sequence[str]) -> dict[str, list[str]]:
    """Which published files hold each of these ids (for the failure message)."""
    fs = FileSystems.of({})
    where: dict[str, list[str]] = {i: [] for i in ids}
    for path in published_files(published):
        with fs.open_read(path) as f:
            for record in fastavro.reader(f):
                value = record_value(record)
                if value in where:
                    where[value].append(urls.relative_to(path, str(published)))
    return where


def table_ref(published: Path) -> iceberg.TableRef:
    """The soak's Iceberg table in the warehouse `published` (its default catalog)."""
    warehouse = str(published.resolve())
    return iceberg.TableRef("oncelog", f"sqlite:///{warehouse}/iceberg-catalog.db", warehouse, TABLE,
                            f"{warehouse}/lake/events")


def snapshot_commits(table: iceberg.Table) -> list[str]:
    """The table commits (`commit_key`) every snapshot of the table makes, in its history's order ('' for a snapshot
    that makes none: not ours)."""
    return [key for s in table.metadata.snapshots for key in (snapshot_keys(s) or {""})]


def check_table(published: Path, source: Source, after: str) -> Counter[str]:
    """Read back through pyiceberg: no id twice nor one never produced, each in the hour partition of its timestamp;
    no snapshot id twice, no data file in two snapshots. Returns the ids counted ({} before the table exists)."""
    table = iceberg.load_table(table_ref(published))
    if table is None:
        return Counter()
    ids = snapshot_commits(table)
    twice = sorted(i for i, n in Counter(ids).items() if n > 1 or not i)
    if twice:
        raise SoakFailure(f"after {after}: one sequence's table commit in more than one snapshot, or a snapshot of "
                          f"none: {twice[:8]}")
    files = table.inspect.files()
    paths = files["file_path"].to_pylist()
    added = sum(int(s.summary.additional_properties.get("added-data-files", "0")) for s in table.metadata.snapshots
                if s.summary)
    if len(paths) != len(set(paths)) or len(paths) != added:
        doubled = sorted(path for path, n in Counter(paths).items() if n > 1)
        raise SoakFailure(f"after {after}: a data file in two snapshots: the snapshots added {added} files, the "
                          f"table references {len(paths)} ({len(set(paths))} distinct), e.g. {doubled[:3]}")
    for path, partition, metrics in zip(paths, files["partition"].to_pylist(), files["readable_metrics"].to_pylist(),
                                        strict=True):
        bounds = metrics["timestamp"]
        hours = {partition["timestamp_hour"], bounds["lower_bound"] // HOUR_MS * HOUR_MS,
                 bounds["upper_bound"] // HOUR_MS * HOUR_MS}
        if len(hours) != 1:
            raise SoakFailure(f"after {after}: data file {path} is in partition {partition} but holds timestamps "
                              f"{bounds['lower_bound']}..{bounds['upper_bound']}")
    rows = table.scan(selected_fields=("value", "timestamp")).to_arrow()
    values = [bytes(v).decode() for v in rows["value"].to_pylist()]
    seen = Counter(values)
    check_counts(seen, source, after)
    wrong = [(v, ts) for v, ts in zip(values, rows["timestamp"].to_pylist(), strict=True)
             if source.timestamps.get(v) != ts]
    if wrong:
        raise SoakFailure(f"after {after}: records whose timestamp is not the one produced: {wrong[:8]}")
    return seen


def table_commits_of_completed(log_url_: str) -> list[str]:
    """The table commits (`commit_key`) of every completed sequence: each must be in exactly one snapshot."""
    planned: dict[tuple[str, str], list[str]] = {}
    completed: list[tuple[str, str]] = []
    with open_log(log_url_) as log:
        for logged in log.read():
            event = logged.event
            if isinstance(event, CommitSequencePlanned):
                planned.setdefault((event.dataset_urn, event.sequence_id), []).extend(
                    commit_key(s) for s in event.steps if isinstance(s, TableCommitStep))
            elif isinstance(event, CommitSequenceCompleted):
                completed.append((event.dataset_urn, event.sequence_id))
    return [i for key in completed for i in planned.get(key, [])]


def check_published(settings: SoakSettings, source: Source, after: str) -> Counter[str]:
    """No id published twice, none never produced (and for a table: each in its hour, no file in two snapshots)."""
    if settings.output is Output.ICEBERG:
        return check_table(settings.published, source, after)
    return check_no_duplicates(settings.published, source, after)


def check_exactly_once(settings: SoakSettings, url: str, source: Source, after: str) -> None:
    """Every produced id published once; watermarks at the partitions' ends; nothing pending or left; verify OK (and
    for a table: its snapshots are exactly the completed sequences' table commits)."""
    published = settings.published
    check_none_missing(check_published(settings, source, after), source, after)
    with open_log(url) as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
        verified = verify(log, published)  # what `oncelog verify --publish-dir` checks, without a process per check
    pending = [f"{s.dataset_urn}/{s.sequence_id}" for s in state.pending_sequences(JOB)]
    if pending:
        raise SoakFailure(f"after {after}: commit sequences left pending: {pending}")
    if settings.output is Output.ICEBERG:
        table = iceberg.load_table(table_ref(published))
        snapshots = Counter(snapshot_commits(table)) if table is not None else Counter()
        expected = Counter(table_commits_of_completed(url))
        if snapshots != expected:
            raise SoakFailure(f"after {after}: the table's snapshots are not the completed sequences' commits: "
                              f"more in the table {sorted((snapshots - expected).items())[:5]}, more in the log "
                              f"{sorted((expected - snapshots).items())[:5]} ({snapshots.total()} snapshots, "
                              f"{expected.total()} completed table commits)")
    for partition, ids in source.produced.items():
        view = state.datasets.get((JOB, f"{source.topic}.{partition}"))
        watermark = None if view is None else view.watermarks.get(f"{source.topic}:{partition}")
        if watermark != len(ids):
            raise SoakFailure(f"after {after}: partition {partition}'s watermark is {watermark}, its end offset "
                              f"{len(ids)}")
    for folder in ("staging", "task-output"):
        root = settings.work_dir / folder
        left = sorted(p.name for p in root.glob("*") if RUN_ID.match(p.name)) if root.exists() else []
        if left:
            raise SoakFailure(f"after {after}: {folder} still holds run folders {left}")
    if not verified.ok:
        raise SoakFailure(f"after {after}: verify --publish-dir found {len(verified.violations)} violation(s): "
                          + "; ".join(str(v) for v in verified.violations[:10]))


def pending_after_kill(settings: SoakSettings, url: str) -> tuple[int, int]:
    """How many commit sequences the killed run left pending (the kill landed inside the commit), and how many of
    those the table already holds a snapshot of (it landed between the table commit and its record in the log)."""
    with open_log(url) as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
    pending = state.pending_sequences(JOB)
    if settings.output is not Output.ICEBERG or not pending:
        return len(pending), 0
    table = iceberg.load_table(table_ref(settings.published))
    snapshots = set(snapshot_commits(table)) if table is not None else set()
    return len(pending), sum(any(isinstance(step, TableCommitStep) and commit_key(step) in snapshots
                                 for step in s.steps) for s in pending)


def kill_mode(iteration: int, rng: Random, output: Output) -> KillMode:
    """Every third iteration kills after planning; the others at a random instant or during the tasks. A table job's
    iterations kill within the commit (the first: the commit that creates the table), then at the table commit, then
    at a random instant or during the tasks, in turn."""
    if output is Output.ICEBERG and iteration % 3 < 2:
        return KillMode.DURING_COMMIT if iteration % 3 == 0 else KillMode.AT_TABLE_COMMIT
    if output is Output.FOLDERS and iteration % 3 == 2:
        return KillMode.AFTER_PLANNING
    return rng.choice([KillMode.RANDOM_INSTANT, KillMode.DURING_TASKS])


def completions(url: str, run_id: str) -> tuple[float, ...]:
    """When a run's commit recorded each sequence's completion, in seconds from its first CommitSequencePlanned."""
    planned: list[datetime] = []
    completed: list[datetime] = []
    with open_log(url) as log:
        for logged in log.read():
            event = logged.event
            if event.run_id == run_id and isinstance(event, CommitSequencePlanned):
                planned.append(event.emitted_at)
            elif event.run_id == run_id and isinstance(event, CommitSequenceCompleted):
                completed.append(event.emitted_at)
    if not planned:
        return ()
    return tuple(sorted((at - min(planned)).total_seconds() for at in completed))


def kill_delay(mode: KillMode, rng: Random, estimates: Estimates) -> float:
    """How long after the run's start (or its trigger event) the kill comes."""
    if mode is KillMode.RANDOM_INSTANT:
        return rng.uniform(0, estimates.run_s)
    if mode is KillMode.DURING_TASKS:
        return rng.uniform(0, TASK_WINDOW_S)
    if mode is KillMode.DURING_COMMIT:
        return rng.uniform(0, estimates.commit_s)
    if mode is KillMode.AT_TABLE_COMMIT:
        return rng.uniform(0, TABLE_COMMIT_WINDOW_S)
    return 0.0


def iterate(settings: SoakSettings, iteration: int, rng: Random, job: Path, url: str, source: Source,
            watch: Subscription, report: SoakReport, estimates: Estimates) -> Estimates:
    """One iteration: produce, a killed run, un-killed runs until one commits, the checks; returns the new estimates."""
    mode = kill_mode(iteration, rng, settings.output)
    report.records += source.produce(rng, at_least_one=mode is not KillMode.RANDOM_INSTANT)
    delay = kill_delay(mode, rng, estimates)
    runs = settings.work_dir / "runs"
    metadata = settings.published / "lake" / "events" / "metadata"
    killed = killed_run(job, runs, f"{iteration:04d}-killed", mode, delay, watch, metadata)
    report.runs += 1
    history = [killed.describe()]
    if killed.killed:
        report.kills[mode.name] += 1
        pending, table_committed = pending_after_kill(settings, url)
        report.killed_with_pending += pending > 0
        report.killed_after_table_commit += table_committed > 0
    else:
        report.exited_before_kill += 1
        if killed.returncode != 0:
            report.refused_runs.append(f"iteration {iteration}: {killed.describe()}")
    check_published(settings, source, killed.describe())
    for attempt in range(1, RERUNS + 1):
        rerun = full_run(job, runs, f"{iteration:04d}-rerun-{attempt}")
        report.runs += 1
        history.append(rerun.describe())
        check_published(settings, source, rerun.describe())
        if rerun.returncode == 0:
            ends = completions(url, str(rerun.summary().get("run_id", "")))  # its own sequences (recovered: others')
            estimates = Estimates((estimates.run_s + rerun.seconds) / 2,
                                  (estimates.commit_s + ends[-1]) / 2 if ends else estimates.commit_s)
            break
        report.refused_runs.append(f"iteration {iteration}: {rerun.describe()}")
        if attempt < RERUNS:
            time.sleep(REFUSED_PAUSE_S)
    else:
        tries = "\n".join(history)
        raise SoakFailure(f"iteration {iteration}: no un-killed run committed in {RERUNS} tries:\n{tries}")
    check_exactly_once(settings, url, source, f"iteration {iteration} ({'; '.join(history)})")
    print(f"soak {settings.store} {settings.output} iteration {iteration}: {'; '.join(history)}", file=sys.stderr,
          flush=True)
    return estimates


@contextmanager
def watching(url: str) -> Iterator[Subscription]:
    """A consumer group on the job's log (created here, as a run would), read from the beginning."""
    with open_log(url) as log:
        log.ensure_topic()
        watch = log.subscribe(f"soak-watch-{uuid.uuid4().hex[:8]}")
        try:
            yield watch
        finally:
            watch.close()


def soak(settings: SoakSettings) -> SoakReport:
    """Run the soak; raises SoakFailure (naming the seed and the replay command) at the first broken promise."""
    started = time.monotonic()
    rng = Random(settings.seed)
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    (settings.work_dir / "runs").mkdir(exist_ok=True)
    topic = f"MyTopic.{uuid.uuid4().hex[:12]}"
    create_topic(settings.bootstrap, topic, PARTITIONS)
    # A table job's records spread over the last HOURS hours (a broker keeps records by their timestamps' age).
    this_hour = int(time.time() * 1000) // HOUR_MS * HOUR_MS
    first_hour = None if settings.output is Output.FOLDERS else this_hour - (HOURS - 1) * HOUR_MS
    source = Source(settings.bootstrap, topic, {p: [] for p in range(PARTITIONS)}, first_hour)
    url = log_url(settings)
    job = write_job(settings, topic, url)
    report = SoakReport()
    estimates = Estimates()
    with watching(url) as watch:
        for iteration in range(settings.iterations):
            try:
                estimates = iterate(settings, iteration, rng, job, url, source, watch, report, estimates)
            except SoakFailure as e:
                report.seconds = time.monotonic() - started
                raise SoakFailure(f"soak failed at iteration {iteration} (seed {settings.seed}, store "
                                  f"{settings.store}, output {settings.output}, work dir {settings.work_dir}, log "
                                  f"{url}): {e}\n"
                                  f"replay: {settings.replay_command(iteration + 1)}\n"
                                  f"figures: {report.as_json(settings)}") from e
            report.iterations += 1
    report.seconds = time.monotonic() - started
    return report


@contextmanager
def broker(bootstrap: str | None, work_dir: Path) -> Iterator[str]:
    """The given broker, else $KAFKA_BOOTSTRAP, else a local broker started (and stopped) for the soak."""
    given = bootstrap or os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    if given:
        yield given.removeprefix("kafka://")
        return
    from localservers.kafka import LocalKafkaBroker

    local = LocalKafkaBroker(work_dir / "kafka")
    local.start()
    try:
        yield local.bootstrap
    finally:
        local.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: run a soak, print its figures as one JSON line; exit 1 with the replay line on failure."""
    parser = argparse.ArgumentParser(prog="python -m tests.fault.soak",
                                     description="The real-process SIGKILL soak on Gobblin's MyTopic example.")
    parser.add_argument("--iterations", type=int, default=int(os.environ.get("SOAK_ITERATIONS", "200")))
    parser.add_argument("--store", type=Store, choices=list(Store), default=Store.SQLITE)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED", "0")))
    parser.add_argument("--output", type=Output, choices=list(Output), default=Output.FOLDERS,
                        help="folders: Avro files (Gobblin's example); iceberg: an hourly-partitioned Iceberg table")
    parser.add_argument("--bootstrap", help="A Kafka broker host:port (default: $KAFKA_BOOTSTRAP, else a local one)")
    parser.add_argument("--work-dir", type=Path, help="Where the soak's folders go (default: a fresh temp folder)")
    args = parser.parse_args(argv)
    work_dir = (args.work_dir or Path(tempfile.mkdtemp(prefix="oncelog-soak-"))).resolve()
    with broker(args.bootstrap, work_dir) as bootstrap:
        settings = SoakSettings(args.iterations, args.store, args.seed, bootstrap,
                                work_dir / f"{args.store}-{args.output}", args.output)
        try:
            report = soak(settings)
        except SoakFailure as e:
            print(f"FAILED: {e}", file=sys.stderr)
            return 1
    print(report.as_json(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
