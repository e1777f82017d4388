"""A deterministic fault simulation of publishing, in the spirit of FoundationDB's: one seed, one scenario.

A scenario drives many runs of two jobs against one log and one set of folders, in this process (tasks run
in-process, no Spark), while a seeded plan fails file operations and log appends and kills the driver between
any two I/O calls. Between runs the source grows (the synthetic source pulls new records each run), operators
run `recover` and `recover --release`, an event of an unknown newer version may appear in the log, and a commit
shard task of a run whose driver was killed may run later (an executor slow to start it, or Spark running it again
after an executor was lost), after newer runs.
After every step: no source record is published twice. Once faults stop and runs go on: every record up to each
watermark is published exactly once, nothing else is, and `verify` passes.

With `--engine dataframe` the scenario's runs extract with the DataFrame engine on a local Spark session (Spark's
writers on the real disk: the faults hit the driver's log appends, file operations and crashes, and the commit path
both engines share); the settling runs stay on the records engine, so the two engines take turns on one history.

    python -m tests.sim.simulation --seed 17            # replay one scenario, printing what it did
    python -m tests.sim.simulation --first 0 --count 200   # a range of seeds
    python -m tests.sim.simulation --engine dataframe --first 0 --count 5
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from events.codec import UNCHECKED_FRAME_MAGIC, Record
from events.errors import OncelogError
from events.log import EventLog, open_log
from events.log.sqlite import SqliteLog
from filesystems.base import FileSystem
from filesystems.local import LOCAL
from projections.projector import Projector
from replay.verify import verify
from spark_pipeline.commit.engine import InProcessCommitEngine, job_publisher
from spark_pipeline.commit.session import IncompleteHistoryError, open_session
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.shards import ShardSummary, ShardWork, commit_shard
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.engines.choice import EngineChoice
from spark_pipeline.engines.dataframe.engine import DataFrameTaskEngine
from spark_pipeline.jobfile.config import JobConfig, TaskEngineKind
from spark_pipeline.jobfile.paths import RUN_ID
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher, commit_settings
from tests.fault.pipeline_checks import published_records_of
from tests.sim.faults import FaultPlan, FaultyEventLog, FaultyFileSystem, SimulatedCrash

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOBS = ("simA", "simB")
STEPS = 8
SETTLE_RUNS = 8
NEWER_VERSION = 9999

OpenLog = Callable[[Path], EventLog]
Assignment = tuple[JobConfig, ShardWork, CommitSettings]


class RecordingCommitEngine(InProcessCommitEngine):
    """Commits shards in this process; when the driver is killed meanwhile, keeps the shards it had not heard back
    from: their tasks may still run (or start) after it died."""

    def __init__(self, log: EventLog, fs: FileSystem, in_flight: list[Assignment]) -> None:
        super().__init__(log, fs)
        self.in_flight = in_flight

    def run(self, config: JobConfig, work: Sequence[ShardWork], settings: CommitSettings) -> list[ShardSummary]:
        publisher = job_publisher(config)
        summaries = []
        for index, shard in enumerate(work):
            try:
                summaries.append(commit_shard(shard, self.log, self.fs, settings, publisher))
            except SimulatedCrash:
                self.in_flight.extend((config, unheard, settings) for unheard in work[index:])
                raise
        return summaries


class SimTaskEngine(InProcessTaskEngine):
    """Tasks in this process without retry pauses; shards through a RecordingCommitEngine."""

    def __init__(self, log: EventLog, in_flight: list[Assignment]) -> None:
        super().__init__(log.writer, slots=2, sleep=lambda _: None)
        self.in_flight = in_flight

    def commit_engine(self, log: EventLog, fs: FileSystem) -> RecordingCommitEngine:
        return RecordingCommitEngine(log, fs, self.in_flight)


class SimDataFrameEngine(DataFrameTaskEngine):
    """The DataFrame engine's tasks on a shared local Spark session, without retry pauses; shards through a
    RecordingCommitEngine (in this process, through the faulty log and file system)."""

    def __init__(self, config: JobConfig, spark: SparkSession, in_flight: list[Assignment]) -> None:
        super().__init__(config, spark, EngineChoice(TaskEngineKind.DATAFRAME, "a dataframe scenario"),
                         sleep=lambda _: None)
        self.in_flight = in_flight

    def commit_engine(self, log: EventLog, fs: FileSystem) -> RecordingCommitEngine:
        return RecordingCommitEngine(log, fs, self.in_flight)


class ScenarioFailed(AssertionError):
    """A scenario broke exactly-once; the message says how and how to replay it."""


@dataclass
class Outcome:
    """What one scenario did."""

    seed: int
    steps: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    records: int = 0


def sqlite_log(base: Path) -> EventLog:
    """The scenario's log: a SQLite file of its own, two partitions."""
    return open_log(f"sqlite:///{base / 'events.db'}?partitions=2")


def kafka_log_at(bootstrap: str) -> OpenLog:
    """Scenario logs on a Kafka broker: a fresh two-partition topic each."""
    return lambda base: open_log(f"kafka://{bootstrap}?topic=oncelog.sim.{uuid.uuid4().hex[:10]}&partitions=2")


def write_job(base: Path, name: str, url: str, rng: random.Random) -> JobConfig:
    """A synthetic job of two datasets of one to three partitions under base/<name>, with seeded retry, attempt and
    commit-shard settings."""
    root = base / name
    job = {
        "job.name": name, "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.datasets": 2, "source.synthetic.partitions": rng.randint(1, 3),
        "source.synthetic.records.per.run": rng.randint(1, 4), "source.synthetic.payload.bytes": 0,
        "dataset.urn": "ds", "writer.staging.dir": str(root / "staging"),
        "writer.output.dir": str(root / "task-output"), "data.publisher.final.dir": str(root / "published"),
        "job.commit.policy": rng.choice(["full", "partial", "successful"]),
        "task.maxretries": rng.randint(0, 1), "task.retry.intervalinsec": 0,
        "commit.sequence.max.attempts": rng.randint(1, 3), "commit.parallelism": 1, "oncelog.log.url": url,
        # Half the jobs commit in shards (in-process shard tasks, each with its own fenced writer), one or two of them.
        "job.commit.on.executors": rng.random() < 0.5, "job.commit.shards": rng.randint(1, 2),
    }
    path = base / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return load_job_config(path)


class Scenario:
    """One seeded scenario over a fresh folder and log."""

    def __init__(self, seed: int, base: Path, open_scenario_log: OpenLog = sqlite_log,
                 spark: SparkSession | None = None) -> None:
        self.seed = seed
        self.spark = spark
        """Given: the scenario's runs extract with the DataFrame engine on this session."""
        self.base = base
        self.rng = random.Random(seed)
        self.plan = FaultPlan(random.Random(seed * 7919 + 1))
        self.inner = open_scenario_log(base)
        self.inner.ensure_topic()
        self.log = FaultyEventLog(self.inner, self.plan)
        self.object_store = random.Random(seed * 31 + 7).random() < 0.5  # publishing as on S3: copy, check, delete
        self.fs = FaultyFileSystem(LOCAL, self.plan, object_store=self.object_store)
        self.configs = {name: write_job(base, name, self.inner.url, self.rng) for name in JOBS}
        self.outcome = Outcome(seed)
        self.outcome.steps["object-store" if self.object_store else "rename-store"] += 1
        self.late_shards: list[Assignment] = []
        """Shard tasks in flight when their driver was killed: they may run after it."""

    def play(self) -> Outcome:
        """Faulty steps, then settling runs without faults; checks after each."""
        try:
            for _ in range(STEPS):
                self._step()
                self._check_no_duplicates()
            self.plan.armed = False
            self._settle()
            self._check_exactly_once()
        finally:
            self.inner.close()
        self.outcome.faults = self.plan.injected
        return self.outcome

    def _step(self) -> None:
        newer = 1 if isinstance(self.inner, SqliteLog) else 0  # removing a record to "upgrade" needs SQLite
        late = 3 if self.late_shards else 0
        action = self.rng.choices(["run", "recover", "release", "newer-event", "late-shard"],
                                  weights=[10, 2, 2, newer, late])[0]
        config = self.configs[self.rng.choice(JOBS)]
        self.plan.armed = True
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
            else:
                self._newer_event(config)
        except SimulatedCrash:
            self.outcome.steps["driver-killed"] += 1
        except (OncelogError, OSError):
            self.outcome.steps["step-failed"] += 1

    def _run(self, config: JobConfig) -> None:
        engine = (SimTaskEngine(self.log, self.late_shards) if self.spark is None
                  else SimDataFrameEngine(config, self.spark, self.late_shards))
        result = JobLauncher(config, engine=engine, fs=self.fs, log=self.log).run()
        if self.spark is not None and result.status.name == "COMMITTED":
            self.outcome.steps["dataframe-committed"] += 1

    def _late_shard(self) -> None:
        """A shard task of a killed run runs now, from the start (whatever newer runs did since)."""
        config, work, settings = self.late_shards.pop(self.rng.randrange(len(self.late_shards)))
        commit_shard(work, self.log, self.fs, settings, job_publisher(config))

    def _recover(self, config: JobConfig, release: bool) -> None:
        with open_session(self.log, config.job_name, commit_settings(config), self.fs) as session:
            session.committer.recover(config.job_name)
            if release:
                for (job, urn), dataset in sorted(session.state.datasets.items()):
                    if job == config.job_name and dataset.blocked_by is not None:
                        session.committer.release(job, urn, "released by the simulated operator")

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
            for _ in range(SETTLE_RUNS):
                self._recover(config, release=True)
                engine = InProcessTaskEngine(self.log.writer, slots=2, sleep=lambda _: None)
                result = JobLauncher(config, engine=engine, fs=self.fs, log=self.log).run()
                if result.status.name == "COMMITTED" and not result.skipped:
                    break
            else:
                self._fail(f"{name} did not settle in {SETTLE_RUNS} fault-free runs")

    def _published(self, name: str, settled: bool) -> Counter[tuple[str, int, int]]:
        """The records of a job's published files; a damaged file (half a copy) may exist only while unsettled."""
        seen: Counter[tuple[str, int, int]] = Counter()
        for path in sorted((self.base / name / "published").rglob("*")):
            if path.is_file():
                try:
                    seen.update(published_records_of(path))
                except ValueError as e:
                    if settled or not self.object_store:
                        self._fail(f"{name}: published file {path} is damaged ({e})")
        return seen

    def _check_no_duplicates(self) -> None:
        for name in JOBS:
            seen = self._published(name, settled=False)
            twice = sorted(k for k, n in seen.items() if n > 1)
            if twice:
                self._fail(f"{name} published records twice: {twice[:5]}")

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
            if state.unsettled_datasets(name):
                self._fail(f"{name}: datasets still unsettled: {sorted(state.unsettled_datasets(name))}")
            for folder in ("staging", "task-output"):
                left = [p.name for p in (self.base / name / folder).glob("*") if RUN_ID.match(p.name)]
                if left:
                    self._fail(f"{name}: {folder} still holds run folders {left}")
            self.outcome.records += len(seen)

    def _fail(self, what: str) -> None:
        engine = "records" if self.spark is None else "dataframe"
        raise ScenarioFailed(f"seed {self.seed} ({engine} engine): {what}\n  replay: "
                             f"{replay_command(self.seed, engine)}")


def scratch_dir() -> str | None:
    """Where scenarios keep their folders: memory (/dev/shm) when there is one, since power cuts are not simulated
    and fsync there costs nothing; else the default temporary folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def replay_command(seed: int, engine: str = "records") -> str:
    """The one-line command that replays a scenario."""
    return f"python -m tests.sim.simulation --engine {engine} --seed {seed}"


def run_scenario(seed: int, work: Path, open_scenario_log: OpenLog = sqlite_log, spark: SparkSession | None = None
                 ) -> Outcome:
    """Play the scenario of one seed in a fresh folder under `work` (with `spark`: runs on the DataFrame engine)."""
    base = work / f"seed-{seed}"
    base.mkdir(parents=True)
    return Scenario(seed, base, open_scenario_log, spark).play()


def local_spark() -> SparkSession:
    """The local[2] Spark session of dataframe scenarios (one for all), as oncelog starts it (connectors included)."""
    from spark_pipeline.engines.spark import spark_session

    return spark_session(config_from_properties({
        "job.name": "simulation", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "writer.staging.dir": "/tmp/unused-s", "writer.output.dir": "/tmp/unused-o",
        "data.publisher.final.dir": "/tmp/unused-f", "spark.master": "local[2]", "spark.ui.enabled": "false"}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--store", choices=["sqlite", "kafka"], default="sqlite")
    parser.add_argument("--engine", choices=["records", "dataframe"], default="records",
                        help="the task engine of the scenarios' runs (dataframe: a local Spark session)")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "localhost:9092"),
                        help="the Kafka broker of --store kafka")
    args = parser.parse_args(argv)
    open_scenario_log = sqlite_log if args.store == "sqlite" else kafka_log_at(args.bootstrap)
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.count))
    totals: Counter[str] = Counter()
    spark = local_spark() if args.engine == "dataframe" else None
    with tempfile.TemporaryDirectory(prefix="oncelog-sim-", dir=scratch_dir()) as work:
        for seed in seeds:
            outcome = run_scenario(seed, Path(work), open_scenario_log, spark)
            totals.update(outcome.steps)
            totals.update(outcome.faults)
            if args.seed is not None:
                print(f"seed {seed}: steps {dict(outcome.steps)}, faults {dict(outcome.faults)}, "
                      f"{outcome.records} records published exactly once")
    print(f"{len(seeds)} scenario(s) passed; {dict(sorted(totals.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
