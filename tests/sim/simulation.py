"""A deterministic fault simulation of publishing, in the spirit of FoundationDB's: one seed, one scenario.

A scenario drives many runs of two jobs against one log and one set of folders, in this process (tasks run
in-process, no Spark), while a seeded plan fails file operations and log appends and kills the driver between
any two I/O calls. Between runs the source grows (the synthetic source pulls new records each run), operators
run `recover` and `recover --release`, an event of an unknown newer version may appear in the log, and a commit
shard task of a run whose driver was killed may run later (an executor slow to start it, or Spark running it again
after an executor was lost), after newer runs; in a table scenario (a tenth) the log has three partitions and most
runs of its table job commit in two shards, the driver killed between them now and then (TABLE_LOG_PARTITIONS).
Behind the protocol's back: a task-output file is changed, truncated or deleted after its task recorded it; a record
in the log is damaged (a flipped bit, a torn write; on SQLite); and a store refuses every publish for a whole run, so
that clean-up runs while that run's sequences are unsettled.
After every step: no source record is published twice; no changed task output is published; the task output a
pending sequence still needs is on disk (unless the simulation itself removed it); no clean-up deleted outside its
job's folder; a released sequence was rolled back; a damaged log was refused by the run that read it. Once faults
stop and runs go on: every record up to each watermark is published exactly once, nothing else is, and `verify`
passes. Refusals (a commit refusing changed output, a run refusing a damaged log) are allowed outcomes.

With `--engine dataframe` the scenario's runs extract with the DataFrame engine on a local Spark session (Spark's
writers on the real disk: the faults hit the driver's log appends, file operations and crashes, and the commit path
both engines share); the settling runs stay on the records engine, so the two engines take turns on one history.

    python -m tests.sim.simulation --seed 17            # replay one scenario, printing what it did
    python -m tests.sim.simulation --first 0 --count 200   # a range of seeds
    python -m tests.sim.simulation --engine dataframe --first 0 --count 5
    python -m tests.sim.simulation --store kafka --first 100000 --count 50 --table-rate 0.3   # as `make test` does
    python -m tests.sim.simulation --first 0 --count 300 --keep-going --json   # count failures, one JSON line
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from events.codec import UNCHECKED_FRAME_MAGIC, Record
from events.commit import FsRenameStep
from events.errors import MissingRecordsError, OncelogError
from events.log import EventLog, open_log
from events.log.sqlite import SqliteLog
from filesystems import urls
from filesystems.base import FileSystem
from filesystems.local import LOCAL
from projections.projector import Projector
from projections.state import DamagedHistoryError, State
from projections.views import SequenceView
from replay.verify import verify
from spark_pipeline.commit.engine import InProcessCommitEngine, job_publisher
from spark_pipeline.commit.session import IncompleteHistoryError, open_session
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.shards import ShardSummary, ShardWork, commit_shard
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.engines.attempts import TaskOutcome
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.engines.choice import EngineChoice
from spark_pipeline.engines.dataframe.engine import DataFrameTaskEngine
from spark_pipeline.engines.spark import TaskProgress
from spark_pipeline.jobfile.config import JobConfig, TaskEngineKind
from spark_pipeline.jobfile.paths import RUN_ID
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher, commit_settings
from spark_pipeline.writers import attempt_output_dir
from tests.fault.pipeline_checks import published_records_of
from tests.fault.soak import broker
from tests.sim.faults import (
    FaultPlan,
    FaultyEventLog,
    FaultyFileSystem,
    OutputChange,
    RecordDamage,
    SimulatedCrash,
    change_output,
    damaged_value,
    sha256_of,
)
from tests.sim.tables import PUBLISHER_KEYS, TABLE_KEYS, FaultyTables, TableFormat, parquet_records, table_records

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOBS = ("simA", "simB")
DATASET_URN = "ds"
DATASETS = tuple(f"{DATASET_URN}.{n}" for n in range(2))
"""Each job's datasets (the synthetic source's `<dataset.urn>.<n>`)."""
STEPS = 8
SETTLE_RUNS = 8
NEWER_VERSION = 9999
OUTPUT_CHANGE_RATE = 0.25
"""Of the faulty runs whose tasks wrote output: how many then see one task-output file changed before the commit."""
ZOMBIE_RATE = 0.15
"""Of the faulty runs whose tasks wrote output: how many leave a zombie attempt writing one of a task's files late."""
LOSE_END_RATE = 0.05
"""Of the steps: how many are followed by a sequence's end lost from the log (then restored)."""
TABLE_RATE = 0.1
"""Of the scenarios: how many have their second job publish into a table (Parquet on the records engine) instead of
into folders: half of them an Iceberg table (a SQLite catalog of the scenario's own), half a Delta table."""
DELTA_SHARE = 0.5
"""Of the table scenarios: how many publish into a Delta table (the others: Iceberg)."""
PUBLISH_CALLS = frozenset({"rename", "copy"})
"""The file calls that publish: a `stuck-publish` step fails every one of them for a whole run."""
LOG_PARTITIONS = 2
"""The partitions of a scenario's log (a table scenario's: TABLE_LOG_PARTITIONS)."""
TABLE_LOG_PARTITIONS = 3
"""The partitions of a table scenario's log. A dataset's events live in partition crc32(urn) mod partitions, and
crc32 is affine: on two partitions the synthetic datasets ds.0 to ds.3 all fall in one, so no commit of a
two-partition scenario ever splits into two shards (a shard is a set of whole partitions); on three, ds.0 and ds.1
fall in partitions 1 and 2, a shard each with two or three shards: each shard plans its own table group."""
TABLE_SHARDED_RATE = 0.75
"""Of the table jobs: how many commit in shards (`job.commit.on.executors`, two or three shards: each dataset its
own), decided apart from the other settings (seeds keep their draws); the others commit on the driver."""
SHARD_BOUNDARY_CRASH_RATE = 0.2
"""Of the boundaries between two shards of a commit while faults are on: how many the driver dies at (the shards
before it committed, those after it still in flight: they may run late, and the next run recovers them)."""

OpenLog = Callable[[Path, int], EventLog]
"""The scenario's log in a folder, with that many partitions."""
Assignment = tuple[JobConfig, ShardWork, CommitSettings]
AfterTasks = Callable[[JobConfig, str, Sequence[TaskOutcome]], None]
"""Called with the job and run id once a run's tasks ended (and recorded what they wrote), before its commit."""


@dataclass
class ShardWatch:
    """What a scenario's commit engines share: the plan (it may kill the driver between two shards), the shard tasks
    in flight when the driver died, each job's kind of output (`iceberg`, `delta`, `folder`) and the step counts."""

    plan: FaultPlan
    in_flight: list[Assignment]
    outputs: dict[str, TableFormat] = field(default_factory=dict)
    steps: Counter[str] = field(default_factory=Counter)


class RecordingCommitEngine(InProcessCommitEngine):
    """Commits shards in this process, one after another, the driver killed between two of them now and then; when
    the driver is killed, keeps the shards it had not heard back from: their tasks may still run (or start) after it
    died. A commit of several shards is counted as `<output>-commit-in-shards` (`iceberg`, `delta`, `folder`)."""

    def __init__(self, log: EventLog, fs: FileSystem, watch: ShardWatch) -> None:
        super().__init__(log, fs)
        self.watch = watch

    def run(self, config: JobConfig, work: Sequence[ShardWork], settings: CommitSettings) -> list[ShardSummary]:
        publisher = job_publisher(config)
        summaries = []
        plan = self.watch.plan
        if len(work) > 1:
            self.watch.steps[f"{self.watch.outputs.get(config.job_name, 'folder')}-commit-in-shards"] += 1
        for index, shard in enumerate(work):
            try:
                if index and plan.armed and plan.rng.random() < SHARD_BOUNDARY_CRASH_RATE:
                    plan.injected["shard-boundary:driver-killed"] += 1
                    raise SimulatedCrash(f"between commit shards {work[index - 1].shard} and {shard.shard}")
                summaries.append(commit_shard(shard, self.log, self.fs, settings, publisher))
            except SimulatedCrash:
                self.watch.in_flight.extend((config, unheard, settings) for unheard in work[index:])
                raise
        return summaries


class SimTaskEngine(InProcessTaskEngine):
    """Tasks in this process without retry pauses; shards through a RecordingCommitEngine."""

    def __init__(self, log: EventLog, watch: ShardWatch, after_tasks: AfterTasks) -> None:
        super().__init__(log.writer, slots=2, sleep=lambda _: None)
        self.watch = watch
        self.after_tasks = after_tasks

    def run(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], progress: TaskProgress
            ) -> list[TaskOutcome]:
        outcomes = super().run(config, run_id, mwus, progress)
        self.after_tasks(config, run_id, outcomes)
        return outcomes

    def commit_engine(self, log: EventLog, fs: FileSystem) -> RecordingCommitEngine:
        return RecordingCommitEngine(log, fs, self.watch)


class SimDataFrameEngine(DataFrameTaskEngine):
    """The DataFrame engine's tasks on a shared local Spark session, without retry pauses; shards through a
    RecordingCommitEngine (in this process, through the faulty log and file system)."""

    def __init__(self, config: JobConfig, spark: SparkSession, watch: ShardWatch, after_tasks: AfterTasks) -> None:
        super().__init__(config, spark, EngineChoice(TaskEngineKind.DATAFRAME, "a dataframe scenario"),
                         sleep=lambda _: None)
        self.watch = watch
        self.after_tasks = after_tasks

    def run(self, config: JobConfig, run_id: str, mwus: list[MultiWorkUnit], progress: TaskProgress
            ) -> list[TaskOutcome]:
        outcomes = super().run(config, run_id, mwus, progress)
        self.after_tasks(config, run_id, outcomes)
        return outcomes

    def commit_engine(self, log: EventLog, fs: FileSystem) -> RecordingCommitEngine:
        return RecordingCommitEngine(log, fs, self.watch)


class ScenarioFailed(AssertionError):
    """A scenario broke exactly-once; the message says how and how to replay it."""


@dataclass
class Outcome:
    """What one scenario did."""

    seed: int
    steps: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    records: int = 0


def sqlite_log(base: Path, partitions: int) -> EventLog:
    """The scenario's log: a SQLite file of its own, of `partitions` partitions."""
    return open_log(f"sqlite:///{base / 'events.db'}?partitions={partitions}")


KAFKA_CLIENT_SETTINGS = "reconnect.backoff.ms=20"
"""librdkafka settings of the scenarios' clients. A new client's first metadata request moves from the bootstrap
connection to the broker it learns of, and librdkafka holds that move back by half of reconnect.backoff.ms (100 ms
by default): 50 ms of each writer's start, and a scenario starts about 70 writers (fenced shard writers, leases).
The broker never goes away in a scenario, so the backoff is pure waiting here: 20 ms makes the move take ~11 ms."""


def kafka_log_at(bootstrap: str) -> OpenLog:
    """Scenario logs on a Kafka broker: a fresh topic each, of the scenario's partitions."""
    return lambda base, partitions: open_log(f"kafka://{bootstrap}?topic=oncelog.sim.{uuid.uuid4().hex[:10]}"
                                             f"&partitions={partitions}&{KAFKA_CLIENT_SETTINGS}")


def write_job(base: Path, name: str, url: str, rng: random.Random, table: str | None = None,
              kind: TableFormat = TableFormat.ICEBERG, shards: int | None = None) -> JobConfig:
    """A synthetic job of two datasets of one to three partitions under base/<name>, with seeded retry, attempt and
    commit-shard settings; with `table`, published into that table of format `kind` (its warehouse:
    base/<name>/published); with `shards`, committing in that many shards on executors (0: on the driver) whatever
    was drawn."""
    root = base / name
    job = {
        "job.name": name, "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.partitions": rng.randint(1, 3),
        "source.synthetic.records.per.run": rng.randint(1, 4), "source.synthetic.payload.bytes": 0,
        "dataset.urn": DATASET_URN, "source.synthetic.datasets": len(DATASETS),
        "writer.staging.dir": str(root / "staging"), "writer.output.dir": str(root / "task-output"),
        "data.publisher.final.dir": str(root / "published"),
        "job.commit.policy": rng.choice(["full", "partial", "successful"]),
        "task.maxretries": rng.randint(0, 1), "task.retry.intervalinsec": 0,
        "commit.sequence.max.attempts": rng.randint(1, 3), "commit.parallelism": 1, "oncelog.log.url": url,
        # Half the jobs commit in shards (in-process shard tasks, each with its own fenced writer), one or two of them.
        "job.commit.on.executors": rng.random() < 0.5, "job.commit.shards": rng.randint(1, 2),
        # A fenced writer is a thread paused by the scheduler here, not a process paused for seconds: a release need not
        # wait the default 200 ms for its fresh probes to expire, thousands of times a run.
        "job.commit.fence.fresh.ms": 2,
    }
    # A quarter of the jobs append a record per event, as before batched commit records (no draw: seeds stay as they
    # were): both shapes of the log are played.
    job["job.commit.batch.records"] = job["source.synthetic.records.per.run"] != 4
    # Two jobs in three make their folder moves ahead of their sequences, in batches (the in-thread mover: the file
    # system's every call may fail), as a commit of many datasets does on local disk; the rest one in each sequence.
    if job["source.synthetic.partitions"] != 1:
        job["job.commit.moves.ahead.min.datasets"] = 2
    if table is not None:
        job |= {**PUBLISHER_KEYS[kind], TABLE_KEYS[kind]: table, "writer.output.format": "PARQUET",
                "writer.builder.class": "tests.sim.tables.ParquetDataWriterBuilder"}
    if shards is not None:
        job |= {"job.commit.on.executors": shards > 0, "job.commit.shards": max(1, shards)}
    path = base / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return load_job_config(path)


class Scenario:
    """One seeded scenario over a fresh folder and log."""

    def __init__(self, seed: int, base: Path, open_scenario_log: OpenLog = sqlite_log,
                 spark: SparkSession | None = None, table_rate: float = TABLE_RATE) -> None:
        self.seed = seed
        self.spark = spark
        """Given: the scenario's runs extract with the DataFrame engine on this session."""
        self.base = base
        self.rng = random.Random(seed)
        self.plan = FaultPlan(random.Random(seed * 7919 + 1))
        self.table_rate = table_rate
        table_job = random.Random(seed * 9973 + 11).random() < table_rate
        self.tables = {JOBS[1]: f"lake.{JOBS[1].lower()}"} if table_job else {}
        """The jobs that publish into a table, and their table."""
        self.inner = open_scenario_log(base, TABLE_LOG_PARTITIONS if table_job else LOG_PARTITIONS)
        self.inner.ensure_topic()
        self.log = FaultyEventLog(self.inner, self.plan)
        self.object_store = random.Random(seed * 31 + 7).random() < 0.5  # publishing as on S3: copy, check, delete
        self.fs = FaultyFileSystem(LOCAL, self.plan, object_store=self.object_store)
        delta_table = random.Random(seed * 6007 + 5).random() < DELTA_SHARE
        self.table_format = TableFormat.DELTA if delta_table else TableFormat.ICEBERG
        """The format of the scenario's table (if a job publishes into one)."""
        shard_rng = random.Random(seed * 7727 + 13)
        table_shards = shard_rng.randint(2, 3) if shard_rng.random() < TABLE_SHARDED_RATE else 0
        self.faulty_tables = FaultyTables(self.plan, base / "foreign")
        self.configs = {name: write_job(base, name, self.inner.url, self.rng, self.tables.get(name), self.table_format,
                                        table_shards if name in self.tables else None)
                        for name in JOBS}
        self.outcome = Outcome(seed)
        self.outcome.steps["object-store" if self.object_store else "rename-store"] += 1
        if self.tables:
            self.outcome.steps[f"{self.table_format}-table"] += 1
        self.late_shards: list[Assignment] = []
        """Shard tasks in flight when their driver was killed: they may run after it."""
        self.watch = ShardWatch(self.plan, self.late_shards, {name: self.table_format for name in self.tables},
                                self.outcome.steps)
        self.end_rng = random.Random(seed * 104_729 + 3)
        """Decides when a sequence's end is lost (`_maybe_lose_end`)."""
        self.changed: dict[str, tuple[OutputChange, str | None]] = {}
        """Task-output files the simulation changed after their task recorded them: the change, the new SHA-256."""
        self.zombie_writes: dict[str, str] = {}
        """The SHA-256 of each file a zombie attempt wrote late -> its path: content nobody may publish."""
        self.checked = State()
        """The log as folded by the last check: between two checks the log only grows (a record the simulation
        damages or removes within a step is restored or gone before the step's check), so each check folds only
        what was appended since, not the whole history again."""

    def play(self) -> Outcome:
        """Faulty steps, then settling runs without faults; checks after each."""
        if not self.tables:
            return self._play()
        with self.faulty_tables.installed():
            return self._play()

    def _play(self) -> Outcome:
        try:
            for _ in range(STEPS):
                self._step()
                self._maybe_lose_end()
                self._check_step()
            self.plan.armed = False
            try:
                self._settle()
            except (OncelogError, OSError) as e:
                self._fail(f"fault-free settling failed: {type(e).__name__}: {e}")
            self._check_step()
            self._check_exactly_once()
        finally:
            self.inner.close()
        self.outcome.faults = self.plan.injected
        return self.outcome

    def _step(self) -> None:
        sqlite = 1 if isinstance(self.inner, SqliteLog) else 0  # changing or removing a record needs SQLite
        late = 3 if self.late_shards else 0
        action = self.rng.choices(["run", "recover", "release", "newer-event", "late-shard", "damage-record",
                                   "stuck-publish"],
                                  weights=[10, 2, 2, sqlite, late, 1, 2])[0]
        config = self.configs[self.rng.choice(JOBS)]
        self.plan.armed = True
        self.fs.scope = str(self.base / config.job_name)
        self.outcome.steps[action] += 1
        try:
            if action == "run":
                self._run(config)
            elif action == "recover":
                self._recover(config, release=False)
            elif action == "release":
                self._recover(config, release=True)
            elif action == "late-shard":
                self._late_shard()
            elif action == "damage-record":
                self._damage_record(config) if sqlite else self._damage_replica(config)
            elif action == "stuck-publish":
                self._stuck_publish(config)
            else:
                self._newer_event(config)
        except SimulatedCrash:
            self.outcome.steps["driver-killed"] += 1
        except (OncelogError, OSError):
            self.outcome.steps["step-failed"] += 1

    def _run(self, config: JobConfig) -> None:
        engine = (SimTaskEngine(self.log, self.watch, self._after_tasks) if self.spark is None
                  else SimDataFrameEngine(config, self.spark, self.watch, self._after_tasks))
        result = JobLauncher(config, engine=engine, fs=self.fs, log=self.log).run()
        if self.spark is not None and result.status.name == "COMMITTED":
            self.outcome.steps["dataframe-committed"] += 1

    def _after_tasks(self, config: JobConfig, run_id: str, outcomes: Sequence[TaskOutcome]) -> None:
        """Between a run's tasks and its commit: a zombie attempt may write late, a task-output file may change."""
        self._zombie_write(config, run_id, outcomes)
        self._change_output(config, run_id)

    def _zombie_write(self, config: JobConfig, run_id: str, outcomes: Sequence[TaskOutcome]) -> None:
        """Sometimes (while faults are on): another attempt of a task that succeeded (a zombie: Spark ran the task
        again, and the first copy lived on) writes one of the task's files late, where that attempt writes
        (writers.attempt_output_dir); that must never be a file the log recorded, nor be published."""
        recorded = [(outcome, file) for outcome in outcomes for result in outcome.results
                    for file in result.output_files]
        if not self.plan.armed or not recorded or self.rng.random() >= ZOMBIE_RATE:
            return
        outcome, file = self.rng.choice(recorded)
        output_dir = str(config.branch(file.branch).writer_output_dir)
        folder = attempt_output_dir(output_dir, run_id, outcome.task_id, outcome.attempts + 1)
        target = urls.join(folder, urls.relative_to(file.path, file.folder or urls.join(output_dir, run_id)))
        self.plan.injected["zombie-attempt:late-write"] += 1
        if target in {f.path for _, f in recorded}:
            self._fail(f"a zombie attempt of task {outcome.task_id} writes {target}, a file the log recorded as "
                       f"another attempt's output: attempts must write in folders of their own")
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_bytes(b"zombie " + self.rng.randbytes(32))
        self.zombie_writes[sha256_of(Path(target))] = target

    def _change_output(self, config: JobConfig, run_id: str) -> None:
        """Sometimes (while faults are on): one task-output file of the run is changed, truncated or deleted after its
        task recorded its size and SHA-256; the commit must refuse it (and never publish the changed content)."""
        if not self.plan.armed or self.rng.random() >= OUTPUT_CHANGE_RATE:
            return
        folder = self.base / config.job_name / "task-output" / run_id
        files = sorted(str(p) for p in folder.rglob("*")
                       if p.is_file() and not p.name.startswith((".", "_")) and str(p) not in self.changed)
        if not files:
            return
        path = self.rng.choice(files)
        change = self.rng.choice(list(OutputChange))
        self.changed[path] = (change, change_output(Path(path), change, self.rng))
        self.plan.injected[f"output-changed:{change}"] += 1

    def _late_shard(self) -> None:
        """A shard task of a killed run runs now, from the start (whatever newer runs did since)."""
        config, work, settings = self.late_shards.pop(self.rng.randrange(len(self.late_shards)))
        self.fs.scope = str(self.base / config.job_name)
        self._change_output(config, work.run_id)
        commit_shard(work, self.log, self.fs, settings, job_publisher(config))

    def _stuck_publish(self, config: JobConfig) -> None:
        """A run during which the store refuses every publish: its sequences stay pending (or are abandoned), and its
        own clean-up, then the next run's, run while they are unsettled: neither may delete what they still need."""
        self.plan.failing = PUBLISH_CALLS
        try:
            self._run(config)
        finally:
            self.plan.failing = frozenset()
        Projector(self.inner).catch_up(self.checked)
        if self.checked.unsettled_datasets(config.job_name):
            self.plan.injected["cleanup:while-unsettled"] += 1

    def _recover(self, config: JobConfig, release: bool) -> None:
        with open_session(self.log, config.job_name, commit_settings(config), self.fs) as session:
            session.committer.recover(config.job_name)
            if release:
                for (job, urn), dataset in sorted(session.state.datasets.items()):
                    if job == config.job_name and dataset.blocked_by is not None:
                        sequence_id = session.committer.release(job, urn, "released by the simulated operator")
                        self._check_rolled_back(session.state.sequences[(job, urn, sequence_id)])

    def _check_rolled_back(self, sequence: SequenceView) -> None:
        """A release that returned must have rolled back every step the sequence applied (else what it published
        stays published while its range is pulled again)."""
        left = sorted(sequence.applied - sequence.rolled_back)
        if left:
            files = [s.dst for i, s in enumerate(sequence.steps) if i in left and isinstance(s, FsRenameStep)]
            self._fail(f"{sequence.job}: `recover --release` of {sequence.dataset_urn} released sequence "
                       f"{sequence.sequence_id} with steps {left} applied and not rolled back (still published: "
                       f"{files[:3]})")

    def _damage_record(self, config: JobConfig) -> None:
        """Damage one record of the log (SQLite): the next run must refuse the log and publish nothing; then the
        operator restores the record (from a replica, say)."""
        damage = self.rng.choice(list(RecordDamage))
        assert isinstance(self.inner, SqliteLog)
        with sqlite3.connect(self.inner.path) as conn:
            rows = conn.execute("SELECT seq, value FROM oncelog_records WHERE topic = ? AND value IS NOT NULL "
                                "ORDER BY seq", (self.inner.topic,)).fetchall()
            if not rows:
                return
            seq, value = self.rng.choice(rows)
            if damage is RecordDamage.MISSING:
                saved = conn.execute("SELECT * FROM oncelog_records WHERE seq = ?", (seq,)).fetchone()
                conn.execute("DELETE FROM oncelog_records WHERE seq = ?", (seq,))
            else:
                conn.execute("UPDATE oncelog_records SET value = ? WHERE seq = ?",
                             (damaged_value(value, damage, self.rng), seq))
        self.plan.injected[f"record-damaged:{damage}"] += 1
        before = self._published(config.job_name, settled=False)
        self.plan.armed = False
        refusal: type[OncelogError] = MissingRecordsError if damage is RecordDamage.MISSING else IncompleteHistoryError
        try:
            self._run(config)
        except refusal:
            pass
        else:
            self._fail(f"a run planned from a log whose record at offset {seq} is damaged ({damage})")
        finally:
            with sqlite3.connect(self.inner.path) as conn:
                if damage is RecordDamage.MISSING:
                    conn.execute(f"INSERT INTO oncelog_records VALUES ({', '.join('?' * len(saved))})", saved)
                else:
                    conn.execute("UPDATE oncelog_records SET value = ? WHERE seq = ?", (value, seq))
        if self._published(config.job_name, settled=False) != before:
            self._fail(f"a run that could not read the whole log (offset {seq}: {damage}) published something")

    def _damage_replica(self, config: JobConfig) -> None:
        """Kafka: a record is damaged (a flipped bit, a torn write). A client cannot change a record in the topic, so
        a replica of it is written with that record produced with the damaged value in its place; a run on the
        replica must refuse it, publishing nothing, and the scenario goes on with the intact topic (the operator
        restores the damaged one from it)."""
        damage = self.rng.choice([RecordDamage.BIT_FLIP, RecordDamage.TORN_WRITE])
        records = list(self.inner.read_records())
        values = [i for i, r in enumerate(records) if r.value]
        if not values:
            return
        index = self.rng.choice(values)
        value = records[index].value
        assert value is not None
        damaged = [Record(r.partition, r.key, damaged_value(value, damage, self.rng) if i == index else r.value,
                          r.timestamp_ms) for i, r in enumerate(records)]
        self.plan.injected[f"record-damaged:{damage}"] += 1
        self._refused_replica(config, damaged, IncompleteHistoryError, f"record {index} is damaged ({damage})")

    def _maybe_lose_end(self) -> None:
        """Now and then, after a step, the end of a sequence is lost (`_lose_end`); decided by a generator of its own,
        so that the scenario's other steps and faults stay what they were without it."""
        if self.end_rng.random() < LOSE_END_RATE:
            config = self.configs[self.end_rng.choice(JOBS)]
            self.fs.scope = str(self.base / config.job_name)
            self.outcome.steps["lose-end"] += 1
            self._lose_end(config)

    def _lose_end(self, config: JobConfig) -> None:
        """The end of a commit sequence after which its dataset planned another is gone: on Kafka as compaction after
        a wrong tombstone leaves the topic (a replica without it, as in `_damage_replica`), on SQLite deleted with the
        chain of predecessors relinked, as retention's own deletions are (nothing but the fold can tell). The next run
        must refuse the log (DamagedHistoryError), publishing nothing; then the record is back."""
        records = list(self.inner.read_records())
        ends: dict[tuple[str, ...], list[int]] = {}
        plans: dict[tuple[str, ...], list[tuple[int, str]]] = {}
        for i, record in enumerate(records):  # by key (commit/<job>/<dataset>/<sequence>/<what>): nothing to decode
            parts = record.key.decode(errors="replace").split("/")
            if record.value is None or len(parts) < 5 or parts[0] != "commit":
                continue
            if parts[4] in ("COMPLETED", "ABANDONED"):
                ends.setdefault(tuple(parts[1:4]), []).append(i)
            elif parts[4] == "PLANNED":
                plans.setdefault(tuple(parts[1:3]), []).append((i, parts[3]))
        lost = [found[0] for (job, urn, sequence_id), found in ends.items() if len(found) == 1 and any(
            i > found[0] and other != sequence_id for i, other in plans.get((job, urn), ()))]
        if not lost:
            return
        index = self.end_rng.choice(sorted(lost))
        self.plan.injected["record-damaged:end-lost"] += 1
        what = f"the end of a commit sequence (record {index}) is gone"
        if not isinstance(self.inner, SqliteLog):
            self._refused_replica(config, [Record(r.partition, r.key, r.value, r.timestamp_ms)
                                           for i, r in enumerate(records) if i != index], DamagedHistoryError, what)
            return
        seq, partition, topic = records[index].offset, records[index].partition, self.inner.topic
        with sqlite3.connect(self.inner.path) as conn:
            saved = conn.execute("SELECT * FROM oncelog_records WHERE seq = ?", (seq,)).fetchone()
            (prev,) = conn.execute("SELECT prev FROM oncelog_records WHERE seq = ?", (seq,)).fetchone()
            conn.execute("DELETE FROM oncelog_records WHERE seq = ?", (seq,))
            conn.execute("UPDATE oncelog_records SET prev = ? WHERE prev = ?", (prev, seq))
            conn.execute("UPDATE oncelog_heads SET last_seq = ? WHERE topic = ? AND last_seq = ?", (prev, topic, seq))
        try:
            self._refused(config, self.log, DamagedHistoryError, what)
        finally:
            with sqlite3.connect(self.inner.path) as conn:
                conn.execute(f"INSERT INTO oncelog_records VALUES ({', '.join('?' * len(saved))})", saved)
                conn.execute("UPDATE oncelog_records SET prev = ? WHERE topic = ? AND partition = ? AND prev = ? "
                             "AND seq > ?", (seq, topic, partition, prev, seq))
                conn.execute("UPDATE oncelog_heads SET last_seq = ? WHERE topic = ? AND partition = ? AND "
                             "last_seq = ?", (seq, topic, partition, prev))

    def _refused_replica(self, config: JobConfig, records: list[Record], refusal: type[OncelogError],
                         what: str) -> None:
        """A replica of the (Kafka) log holding `records` in its own topic: a run on it must refuse it."""
        replica = open_log(self.inner.url.replace(f"topic={self.inner.topic}", f"topic={self.inner.topic}.replica-"
                                                  f"{uuid.uuid4().hex[:6]}"))
        try:
            replica.ensure_topic()
            with replica.writer("sim-replica") as writer:
                writer.append_records(records)
            self._refused(config, FaultyEventLog(replica, self.plan), refusal, what)
        finally:
            replica.close()

    def _refused(self, config: JobConfig, log: EventLog, refusal: type[OncelogError], what: str) -> None:
        """A fault-free run of `config` on `log` must refuse it with `refusal`, publishing nothing."""
        before = self._published_files(config.job_name)
        self.plan.armed = False
        engine = SimTaskEngine(log, ShardWatch(self.plan, []), lambda *_: None)
        try:
            JobLauncher(config, engine=engine, fs=self.fs, log=log).run()
        except refusal:
            pass
        else:
            self._fail(f"a run planned from a log where {what}")
        if self._published_files(config.job_name) != before:
            self._fail(f"a run that could not read the whole log ({what}) published something")

    def _published_files(self, name: str) -> set[tuple[str, int, int]]:
        """Each file under a job's publish folder, with its size and modification time: what any publish changes
        (cheaper than reading their records, `_published`)."""
        return {(str(path), stat.st_size, stat.st_mtime_ns) for path in (self.base / name / "published").rglob("*")
                if path.is_file() and (stat := path.stat())}

    def _newer_event(self, config: JobConfig) -> None:
        """A newer oncelog appends an event this one cannot read: the next run must stop before extracting."""
        name = b"JobRunStarted"
        value = bytes([UNCHECKED_FRAME_MAGIC, len(name)]) + name + NEWER_VERSION.to_bytes(2, "big") + b"\x00" * 8
        with self.inner.writer("sim-newer-oncelog") as writer:
            writer.append_records([Record(0, f"run/{config.job_name}/future/STARTED".encode(), value, 0)])
        before = self._published(config.job_name, settled=False)
        self.plan.armed = False
        try:
            self._run(config)
        except IncompleteHistoryError:
            pass
        else:
            self._fail("a run planned from a log holding an event it cannot read")
        if self._published(config.job_name, settled=False) != before:
            self._fail("a run that could not read the whole log published something")
        self._upgrade(value)

    def _upgrade(self, value: bytes) -> None:
        """The operator upgrades oncelog: the simulation makes the unreadable record go away (SQLite logs only)."""
        if not isinstance(self.inner, SqliteLog):
            raise NotImplementedError("newer-version events are simulated on SQLite logs only")
        with sqlite3.connect(self.inner.path) as conn:
            gone = conn.execute("SELECT seq, prev FROM oncelog_records WHERE value = ? ORDER BY seq", (value,))
            for seq, prev in gone.fetchall():  # linked past, as the store's own deletions are (not damage)
                conn.execute("DELETE FROM oncelog_records WHERE seq = ?", (seq,))
                conn.execute("UPDATE oncelog_records SET prev = ? WHERE prev = ? AND seq > ?", (prev, seq, seq))
                conn.execute("UPDATE oncelog_heads SET last_seq = ? WHERE last_seq = ?", (prev, seq))

    def _settle(self) -> None:
        """Without faults: release what is blocked and run each job until a run commits everything it owes."""
        for name, config in self.configs.items():
            self.fs.scope = str(self.base / name)
            skipped: dict[str, str] = {}
            for _ in range(SETTLE_RUNS):
                self._recover(config, release=True)
                engine = InProcessTaskEngine(self.log.writer, slots=2, sleep=lambda _: None)
                result = JobLauncher(config, engine=engine, fs=self.fs, log=self.log).run()
                if result.status.name == "COMMITTED" and not result.skipped:
                    break
                skipped = result.skipped
            else:
                self._fail(f"{name} did not settle in {SETTLE_RUNS} fault-free runs (the last one skipped "
                           f"{skipped or 'nothing'})")

    def _published(self, name: str, settled: bool) -> Counter[tuple[str, int, int]]:
        """The records of a job's published files (a table job's: the Parquet files in its table's data folder); a
        damaged file (half a copy) may exist only while unsettled."""
        seen: Counter[tuple[str, int, int]] = Counter()
        root, read = ((self.base / name / "published" / Path(*self.tables[name].split(".")) / "data", parquet_records)
                      if name in self.tables else (self.base / name / "published", published_records_of))
        for path in sorted(root.rglob("*")):
            if path.is_file():
                try:
                    seen.update(read(path))
                except ValueError as e:
                    if settled or not self.object_store:
                        self._fail(f"{name}: published file {path} is damaged ({e})")
        return seen

    def _check_step(self) -> None:
        """What must hold after every step, faults or not."""
        self._check_no_duplicates()
        self._check_changed_not_published()
        self._check_needed_output_kept()
        if self.fs.violations:
            self._fail("a clean-up deleted outside its job's folder: " + "; ".join(self.fs.violations[:3]))

    def _check_no_duplicates(self) -> None:
        for name in JOBS:
            seen = self._published(name, settled=False)
            twice = sorted(k for k, n in seen.items() if n > 1)
            if twice:
                self._fail(f"{name} published records twice: {twice[:5]}")

    def _check_changed_not_published(self) -> None:
        """No published file holds the content of a task-output file as it was changed after its task recorded it.
        The half of an unchanged file that a copy cut short left behind is not such content, even when its bytes are
        those of another file truncated (every file of one format and schema begins alike)."""
        changed = {sha: (path, str(change)) for path, (change, sha) in self.changed.items() if sha is not None}
        changed |= {sha: (path, "written late by a zombie attempt") for sha, path in self.zombie_writes.items()}
        if not changed:
            return
        for name in JOBS:
            for path in sorted((self.base / name / "published").rglob("*")):
                if not path.is_file() or (found := changed.get(sha := sha256_of(path))) is None:
                    continue
                half, source = self.fs.half_copies.get(str(path), ("", ""))
                if half != sha or source in self.changed:
                    self._fail(f"{name}: published {path}, which holds {found[0]} as changed ({found[1]}) after its "
                               f"task recorded it: a commit must refuse output that is not what its task wrote")

    def _check_needed_output_kept(self) -> None:
        """The task output of every pending sequence is on disk (or already published): a clean-up must never delete
        what a sequence still has to publish (files the simulation itself deleted excepted)."""
        Projector(self.inner).catch_up(self.checked)
        for sequence in self.checked.sequences.values():
            if not sequence.pending or not sequence.plan_complete:
                continue
            for index, step in enumerate(sequence.steps):
                if (isinstance(step, FsRenameStep) and step.src not in self.changed and not LOCAL.exists(step.src)
                        and not LOCAL.holds(step.dst, step.size, step.checksum)):
                    self._fail(f"{sequence.job}: the task output {step.src} of pending sequence {sequence.sequence_id}"
                               f" ({sequence.dataset_urn}, step {index}) is gone and {step.dst} does not hold it: a "
                               f"clean-up deleted what a sequence still had to publish")

    def _check_exactly_once(self) -> None:
        state, _ = Projector(self.inner).rebuild(use_snapshot=False)
        report = verify(self.inner)
        if not report.ok:
            self._fail("verify: " + "; ".join(str(v) for v in report.violations[:5]))
        for name in JOBS:
            seen = self._published(name, settled=True)
            expected = {(urn, int(p.rsplit(":", 1)[1]), o) for (job, urn), d in state.datasets.items() if job == name
                        for p, w in d.watermarks.items() for o in range(w)}
            if set(seen) != expected or any(n > 1 for n in seen.values()):
                self._fail(f"{name}: published {len(seen)} records, watermarks say {len(expected)}; missing "
                           f"{sorted(expected - set(seen))[:5]}, extra {sorted(set(seen) - expected)[:5]}")
            if name in self.tables:
                self._check_table(name, seen)
            if state.unsettled_datasets(name):
                self._fail(f"{name}: datasets still unsettled: {sorted(state.unsettled_datasets(name))}")
            for folder in ("staging", "task-output"):
                left = [p.name for p in (self.base / name / folder).glob("*") if RUN_ID.match(p.name)]
                if left:
                    self._fail(f"{name}: {folder} still holds run folders {left}")
            self.outcome.records += len(seen)

    def _check_table(self, name: str, published: Counter[tuple[str, int, int]]) -> None:
        """A scan of the job's table reads exactly the records its data folder holds, each once (another writer's
        records aside)."""
        scanned = table_records(self.base / name / "published", self.tables[name], self.table_format)
        if scanned != published:
            self._fail(f"{name}: the table {self.tables[name]} reads {sum(scanned.values())} records, its data folder "
                       f"holds {sum(published.values())}; twice {sorted(k for k, n in scanned.items() if n > 1)[:5]}, "
                       f"not in the table {sorted(published - scanned)[:5]}, not in the folder "
                       f"{sorted(scanned - published)[:5]}")

    def _fail(self, what: str) -> None:
        engine = "records" if self.spark is None else "dataframe"
        raise ScenarioFailed(f"seed {self.seed} ({engine} engine): {what}\n  replay: "
                             f"{replay_command(self.seed, engine, self.table_rate)}")


def scratch_dir() -> str | None:
    """Where scenarios keep their folders: memory (/dev/shm) when there is one, since power cuts are not simulated
    and fsync there costs nothing; else the default temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def replay_command(seed: int, engine: str = "records", table_rate: float = TABLE_RATE) -> str:
    """The one-line command that replays a scenario."""
    rate = f" --table-rate {table_rate}" if table_rate != TABLE_RATE else ""
    return f"python -m tests.sim.simulation --engine {engine}{rate} --seed {seed}"


def run_scenario(seed: int, work: Path, open_scenario_log: OpenLog = sqlite_log, spark: SparkSession | None = None,
                 table_rate: float = TABLE_RATE) -> Outcome:
    """Play the scenario of one seed in a fresh folder under `work` (with `spark`: runs on the DataFrame engine;
    `table_rate`: the share of seeds whose second job publishes into a table)."""
    base = work / f"seed-{seed}"
    base.mkdir(parents=True)
    return Scenario(seed, base, open_scenario_log, spark, table_rate).play()


def local_spark() -> SparkSession:
    """The local[2] Spark session of dataframe scenarios (one for all), as oncelog starts it (connectors included)."""
    from spark_pipeline.engines.spark import spark_session

    return spark_session(config_from_properties({
        "job.name": "simulation", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "writer.staging.dir": "/tmp/unused-s", "writer.output.dir": "/tmp/unused-o",
        "data.publisher.final.dir": "/tmp/unused-f", "spark.master": "local[2]", "spark.ui.enabled": "false"}))


FAULT_KINDS = ("output-changed", "record-damaged", "cleanup", "zombie-attempt", "table-commit", "shard-boundary")
"""Damage done beside the I/O calls, counted as `<kind>:<what>`; every other count is `<call>:<fault>`."""


def fault_kinds(totals: Counter[str]) -> Counter[str]:
    """The faults injected, by kind: each I/O fault summed over the calls it hit (`crash-before-io`), the damage
    beside the I/O calls as counted (`output-changed:truncated`)."""
    kinds: Counter[str] = Counter()
    for key, count in totals.items():
        kind, _, what = str(key).partition(":")  # str(): a Fault counted as itself would print as one
        if what:
            kinds[key if kind in FAULT_KINDS else what] += count
        elif kind.startswith("append-"):
            kinds[kind] += count
    return kinds


@dataclass
class RangeResult:
    """What a range of seeds did: how many ran and failed (the first failure's message), and the counts."""

    run: int = 0
    failed: list[int] = field(default_factory=list)
    first_failure: str | None = None
    totals: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, object]:
        """One JSON-able line: seeds run and failed, the first failing seed, faults by kind, steps."""
        faults = fault_kinds(self.totals)
        return {"seeds_run": self.run, "seeds_failed": len(self.failed),
                "first_failing_seed": self.failed[0] if self.failed else None,
                "faults": dict(sorted(faults.items())),
                "steps": {k: v for k, v in sorted(self.totals.items()) if ":" not in k and not k.startswith("append-")},
                "first_failure": self.first_failure}


def play_range(seeds: Sequence[int], work: Path, open_scenario_log: OpenLog = sqlite_log,
               spark: SparkSession | None = None, keep_going: bool = False, verbose: bool = False,
               table_rate: float = TABLE_RATE) -> RangeResult:
    """Play seeds in order; stop at the first failing one unless `keep_going`."""
    result = RangeResult()
    for seed in seeds:
        result.run += 1
        try:
            outcome = run_scenario(seed, work, open_scenario_log, spark, table_rate)
        except Exception as e:  # a ScenarioFailed, or anything a broken protocol lets escape: the seed failed
            result.failed.append(seed)
            failure = str(e) if isinstance(e, ScenarioFailed) else (
                f"seed {seed}: {type(e).__name__}: {e}\n  replay: {replay_command(seed, table_rate=table_rate)}")
            result.first_failure = result.first_failure or failure
            if not keep_going:
                break
            continue
        result.totals.update(outcome.steps)
        result.totals.update(outcome.faults)
        if verbose:
            print(f"seed {seed}: steps {dict(outcome.steps)}, faults {dict(outcome.faults)}, "
                  f"{outcome.records} records published exactly once")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--store", choices=["sqlite", "kafka"], default="sqlite")
    parser.add_argument("--engine", choices=["records", "dataframe"], default="records",
                        help="the task engine of the scenarios' runs (dataframe: a local Spark session)")
    parser.add_argument("--bootstrap",
                        help="the Kafka broker of --store kafka (default: $KAFKA_BOOTSTRAP, else a local broker "
                             "started for the run)")
    parser.add_argument("--keep-going", action="store_true",
                        help="play every seed and count the failures (default: stop at the first failing seed)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line: seeds run and failed, faults")
    parser.add_argument("--table-rate", type=float, default=TABLE_RATE,
                        help=f"the share of seeds whose second job publishes into a table (default {TABLE_RATE}; the "
                             "Kafka test plays more)")
    args = parser.parse_args(argv)
    if not 0 <= args.table_rate <= 1:
        parser.error(f"--table-rate is a share of the seeds, from 0 to 1: got {args.table_rate}")
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.count))
    spark = local_spark() if args.engine == "dataframe" else None
    with tempfile.TemporaryDirectory(prefix="oncelog-sim-", dir=scratch_dir()) as work, ExitStack() as stack:
        open_scenario_log = (sqlite_log if args.store == "sqlite"
                             else kafka_log_at(stack.enter_context(broker(args.bootstrap, Path(work)))))
        result = play_range(seeds, Path(work), open_scenario_log, spark, args.keep_going,
                            verbose=args.seed is not None, table_rate=args.table_rate)
    if result.first_failure is not None:
        print(result.first_failure, file=sys.stderr)
    if args.json:
        print(json.dumps(result.summary()))
    else:
        print(f"{result.run} scenario(s) played, {len(result.failed)} failed"
              f"{f' (seeds {result.failed[:10]})' if result.failed else ''}; faults by kind "
              f"{dict(sorted(fault_kinds(result.totals).items()))}; steps {result.summary()['steps']}")
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
