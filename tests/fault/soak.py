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

    python -m tests.fault.soak --iterations 200 --store kafka --seed 7 [--bootstrap HOST:PORT] [--work-dir DIR]

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

from events.commit import CommitSequencePlanned
from events.log import Subscription, open_log
from events.model import Event
from events.task import TaskStarted
from filesystems import urls
from filesystems.base import FileSystemError
from filesystems.router import FileSystems
from projections.projector import Projector
from replay.verify import verify
from spark_pipeline.jobfile.paths import RUN_ID

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
"""The pause after a refused run: a killed writer's open Kafka transaction holds the log until it times out
(KAFKA_WRITE_TIMEOUT_S, and the broker's next check for timed-out transactions)."""
KAFKA_WRITE_TIMEOUT_S = 6
"""The Kafka log's `write_timeout_s` (its writers' transaction timeout): a killed writer's open transaction is aborted
by the broker before the next run's wait for a stable log (10 s) gives up, so that run is not refused for it. A soak's
transactions last milliseconds."""
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The driver JVM lives seconds: C1 alone and the serial collector start Spark markedly faster on a small box."""
RUN_TIMEOUT_S = 300.0
WATCH_POLL_S = 0.002


class Store(StrEnum):
    """Where the job's event log lives."""

    SQLITE = "sqlite"
    KAFKA = "kafka"


class KillMode(Enum):
    """When the killed run of an iteration gets its SIGKILL."""

    RANDOM_INSTANT = "at a random instant"
    DURING_TASKS = "a random moment after its first TaskStarted"
    AFTER_PLANNING = "as soon as its CommitSequencePlanned was in the log"


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

    def replay_command(self, iterations: int | None = None) -> str:
        """The one-line command that replays this soak's schedule (up to `iterations`)."""
        return (f"python -m tests.fault.soak --iterations {iterations or self.iterations} --store {self.store} "
                f"--seed {self.seed}")


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
    refused_runs: list[str] = field(default_factory=list)
    """Un-killed runs that ended without committing (a refusal is allowed; a loss or duplicate never)."""
    records: int = 0
    seconds: float = 0.0

    def as_json(self, settings: SoakSettings) -> str:
        """One JSON line: the figures of the soak."""
        return json.dumps({"soak": "mytopic", "store": str(settings.store), "seed": settings.seed,
                           "iterations": self.iterations, "runs": self.runs, "kills": dict(self.kills),
                           "exited_before_kill": self.exited_before_kill,
                           "kills_leaving_a_pending_sequence": self.killed_with_pending,
                           "refused_runs": len(self.refused_runs), "records": self.records,
                           "seconds": round(self.seconds, 1)})


@dataclass(slots=True)
class Source:
    """The MyTopic topic and every id produced to it so far, per partition in offset order."""

    bootstrap: str
    topic: str
    produced: dict[int, list[str]]

    def produce(self, rng: Random, at_least_one: bool) -> int:
        """Produce 0..MAX_RECORDS new records per partition (at least one in all when asked); returns how many."""
        counts = [rng.randint(0, MAX_RECORDS) for _ in range(PARTITIONS)]
        if at_least_one and not any(counts):
            counts[rng.randrange(PARTITIONS)] = 1
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all"})
        for partition, count in enumerate(counts):
            ids = self.produced[partition]
            for n in range(len(ids), len(ids) + count):
                producer.produce(self.topic, value=f"p{partition}-{n}".encode(), partition=partition)
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
    # A killed writer's open transaction holds the topic's stable end until it times out: seconds, not the default 120.
    return f"kafka://{settings.bootstrap}?topic={topic}&write_timeout_s={KAFKA_WRITE_TIMEOUT_S}"


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
    }
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
                                          KillMode.AFTER_PLANNING: CommitSequencePlanned}
"""The event (of the killed run) that starts the countdown to the kill; at a random instant, the start does."""


def killed_run(job: Path, out_dir: Path, name: str, mode: KillMode, delay_s: float,
               watch: Subscription) -> RunOutcome:
    """Start a run and SIGKILL its session `delay_s` after its start or its trigger event; it may end first."""
    since = datetime.now(UTC)
    started = time.monotonic()
    proc, stdout, stderr = start_run(job, out_dir, name)
    trigger = TRIGGERS.get(mode)
    kill_at = started + delay_s if trigger is None else None
    try:
        while proc.poll() is None:
            if trigger is not None and kill_at is None and any(isinstance(e, trigger)
                                                               for e in new_events(watch, since)):
                kill_at = time.monotonic() + delay_s
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
    unknown = sorted(set(seen) - source.all_ids())
    if unknown:
        raise SoakFailure(f"after {after}: published ids never produced: {unknown[:8]}")
    return seen


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


def check_exactly_once(settings: SoakSettings, url: str, source: Source, after: str) -> None:
    """Every produced id published once; watermarks at the partitions' ends; nothing pending or left; verify OK."""
    published = settings.work_dir / "published"
    check_none_missing(check_no_duplicates(published, source, after), source, after)
    with open_log(url) as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
        verified = verify(log, published)  # what `oncelog verify --publish-dir` checks, without a process per check
    pending = [f"{s.dataset_urn}/{s.sequence_id}" for s in state.pending_sequences(JOB)]
    if pending:
        raise SoakFailure(f"after {after}: commit sequences left pending: {pending}")
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


def pending_after_kill(url: str) -> int:
    """How many commit sequences the killed run left pending (the kill landed inside the commit)."""
    with open_log(url) as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
    return len(state.pending_sequences(JOB))


def kill_mode(iteration: int, rng: Random) -> KillMode:
    """Every third iteration kills after planning; the others at a random instant or during the tasks."""
    if iteration % 3 == 2:
        return KillMode.AFTER_PLANNING
    return rng.choice([KillMode.RANDOM_INSTANT, KillMode.DURING_TASKS])


def iterate(settings: SoakSettings, iteration: int, rng: Random, job: Path, url: str, source: Source,
            watch: Subscription, report: SoakReport, estimate_s: float) -> float:
    """One iteration: produce, a killed run, un-killed runs until one commits, the checks; returns the new estimate."""
    mode = kill_mode(iteration, rng)
    report.records += source.produce(rng, at_least_one=mode is not KillMode.RANDOM_INSTANT)
    delay = rng.uniform(0, estimate_s) if mode is KillMode.RANDOM_INSTANT else (
        rng.uniform(0, TASK_WINDOW_S) if mode is KillMode.DURING_TASKS else 0.0)
    runs = settings.work_dir / "runs"
    killed = killed_run(job, runs, f"{iteration:04d}-killed", mode, delay, watch)
    report.runs += 1
    history = [killed.describe()]
    if killed.killed:
        report.kills[mode.name] += 1
        report.killed_with_pending += pending_after_kill(url) > 0
    else:
        report.exited_before_kill += 1
        if killed.returncode != 0:
            report.refused_runs.append(f"iteration {iteration}: {killed.describe()}")
    check_no_duplicates(settings.work_dir / "published", source, killed.describe())
    for attempt in range(1, RERUNS + 1):
        rerun = full_run(job, runs, f"{iteration:04d}-rerun-{attempt}")
        report.runs += 1
        history.append(rerun.describe())
        check_no_duplicates(settings.work_dir / "published", source, rerun.describe())
        if rerun.returncode == 0:
            estimate_s = (estimate_s + rerun.seconds) / 2
            break
        report.refused_runs.append(f"iteration {iteration}: {rerun.describe()}")
        if attempt < RERUNS:
            time.sleep(REFUSED_PAUSE_S)
    else:
        tries = "\n".join(history)
        raise SoakFailure(f"iteration {iteration}: no un-killed run committed in {RERUNS} tries:\n{tries}")
    check_exactly_once(settings, url, source, f"iteration {iteration} ({'; '.join(history)})")
    print(f"soak {settings.store} iteration {iteration}: {'; '.join(history)}", file=sys.stderr, flush=True)
    return estimate_s


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
    source = Source(settings.bootstrap, topic, {p: [] for p in range(PARTITIONS)})
    url = log_url(settings)
    job = write_job(settings, topic, url)
    report = SoakReport()
    estimate = FIRST_ESTIMATE_S
    with watching(url) as watch:
        for iteration in range(settings.iterations):
            try:
                estimate = iterate(settings, iteration, rng, job, url, source, watch, report, estimate)
            except SoakFailure as e:
                report.seconds = time.monotonic() - started
                raise SoakFailure(f"soak failed at iteration {iteration} (seed {settings.seed}, store "
                                  f"{settings.store}, work dir {settings.work_dir}, log {url}): {e}\n"
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
    parser.add_argument("--bootstrap", help="A Kafka broker host:port (default: $KAFKA_BOOTSTRAP, else a local one)")
    parser.add_argument("--work-dir", type=Path, help="Where the soak's folders go (default: a fresh temp folder)")
    args = parser.parse_args(argv)
    work_dir = (args.work_dir or Path(tempfile.mkdtemp(prefix="oncelog-soak-"))).resolve()
    with broker(args.bootstrap, work_dir) as bootstrap:
        settings = SoakSettings(args.iterations, args.store, args.seed, bootstrap, work_dir / str(args.store))
        try:
            report = soak(settings)
        except SoakFailure as e:
            print(f"FAILED: {e}", file=sys.stderr)
            return 1
    print(report.as_json(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
