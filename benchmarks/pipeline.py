"""Pipeline throughput: a Kafka topic to files, oncelog's job beside Spark's own batch and streaming jobs, same Spark.

    python -m benchmarks.pipeline [--quick] [--records N] [--partitions P] [--repeats R] [--datasets D]
                                  [--records-per-dataset M] [--warm-up W] [--warm-up-rounds R] [--warm-up-most M]
                                  [--increments I] [--increment-records K]

One topic (8 partitions) holds N realistic records (keys, 117-176 byte JSON values), produced before any timing. Every
side reads it from the beginning to the end and writes snappy Avro files into a new folder of its own, in ONE
SparkSession (`local[*]`), made by oncelog's own `spark_session`, so Spark's Kafka and Avro connectors come from the
cache as in every oncelog run (`oncelog spark jars` fetches them once). The sides:

- oncelog, each task engine the job config accepts: `task.engine: records` (Gobblin's constructs, records through
  Python) and `task.engine: dataframe` (Spark does the data work; its figures are null while the job config does not
  accept the key). KafkaTopicSource, the audit log in a Kafka topic on the same broker, `JobLauncher(config,
  spark=spark).run()` timed from launch to return; the log must pass `oncelog verify`. Plus one run writing Parquet
  (`writer.output.format: parquet`, on the DataFrame engine when there is one; null when no writer accepts it).
- unguarded: a Spark batch job on the same offsets (Kafka's batch reader with `assign` and exact starting / ending
  offsets → Avro files): no log, no commit, nothing exactly-once; the floor Spark itself sets.
- unguarded, no wait: the same job with the `kafka.fetch.max.wait.ms` the DataFrame engine's reader sets (Spark's
  reader fetches once more at the end of each range, and the broker holds that fetch for 500 ms by default): what
  the engine costs beyond Spark itself, that tuning set aside (`ratio_dataframe_unguarded_no_wait`).
- Structured Streaming: a Kafka source, `trigger(availableNow=True)`, a checkpointed Avro file sink, timed from
  `start()` to its end.

Each side's output is read back: every offset of every partition exactly once. After an untimed warm-up (a small
synthetic job, then, on a topic of its own as large as a repeat's, rounds of every side once: six at least, then until
the headline engine's last three warm-up runs are within 5% of each other, fourteen at most; `warm_up_compile_s` and
`warm_up_seconds` are each round's JIT compiling and headline engine run), and a wait until the JVM's JIT compilers are
idle (`jit_settle_s`), the sides rotate which goes first. Each run's note gives its JIT compiling, JVM GC time and the
broker's CPU seconds. Figures are records/s at the median repeat, and CPU µs per record of this process tree (the
broker left out).

Small increments: a topic of its own gets K new records (10,000) before each of I rounds (20); each round runs the same
oncelog job again (its watermarks say where to start) and restarts the same Structured Streaming query from its
checkpoint (availableNow), as a scheduler would run either; the first round of each is untimed (a first run). Figures:
the median seconds of a round.

The commit phase is measured on a synthetic job with D datasets (1,000): from the CommitSequencePlanned batch to the
run's JobRunCommitted, over the launcher's wall time, read from the log's timestamps.

The Kafka broker is `$KAFKA_BOOTSTRAP`, or a local one started for the run. Last line of stdout: the JSON figures. See
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

import fastavro
import pyspark
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession, functions
from rich.console import Console
from rich.table import Table

from benchmarks.common import emit_result, kafka_bootstrap, note
from events.errors import OncelogError
from events.log import open_log
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.connectors import CONNECTORS, fetch_connectors
from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.sources.kafka_frame import FETCH_WAIT_MS

CODEC = "snappy"
PARTITIONS = 8
FULL = {"records": 1_000_000, "repeats": 5, "records_per_dataset": 1_000, "warm_up": 1_000_000, "warm_up_rounds": 6,
        "warm_up_most": 14, "increments": 20, "increment_records": 10_000}
QUICK = {"records": 100_000, "repeats": 1, "records_per_dataset": 100, "warm_up": 20_000, "warm_up_rounds": 1,
         "warm_up_most": 1, "increments": 5, "increment_records": 10_000}
"""Warm-up records: as many as a timed repeat (full), so that C2 compiles the Kafka-to-Avro path before the timed
repeats; after 200k-record rounds the engine's 1M-record runs kept C2 compiling 2.7 s a run for several runs, and
kept getting faster through the eighth (docs/benchmarks.md, eighteenth round)."""
DATASETS = 1_000
SETTLED, SETTLED_RUNS = 0.05, 3
"""The warm-up goes on past its least rounds until the headline engine's last SETTLED_RUNS warm-up runs took at most
SETTLED longer than the fastest of them. Its Spark job keeps getting faster for 15-20 runs in one JVM (2.0 → 1.5 s
alone); after six rounds, in two runs of six of the twentieth round, the first timed repeats were still on that slope,
11-12% over the median (docs/benchmarks.md, twenty-first round)."""
TARGETS = {"ratio": 1.0, "commit_share_1000": 0.05, "ratio_dataframe_unguarded": 0.95, "ratio_dataframe_sss": 0.95,
           "cpu_dataframe_over_sss": 1.05, "increment_ratio": 0.67, "slowest_over_median": 0.1}
"""Issue 10's targets; `ratio` (oncelog / Structured Streaming) and the commit share are the pipeline issue's; the
spread of the engine's repeats (its slowest at most 10% over its median, the first included) issue 25's."""
AVRO = "avro"
KAFKA_COLUMNS = ("topic", "partition", "offset", "unix_millis(timestamp) AS timestamp", "key", "value")
"""What Spark's own sides write of each Kafka record: the columns the records engine's Avro files hold."""


class Side(StrEnum):
    """A side of the big-batch comparison."""

    RECORDS = "records"
    DATAFRAME = "dataframe"
    PARQUET = "parquet"
    UNGUARDED = "unguarded"
    UNGUARDED_NO_WAIT = "unguarded_no_wait"
    SSS = "sss"


class Engine(StrEnum):
    """oncelog's task engines (`task.engine`)."""

    RECORDS = "records"
    DATAFRAME = "dataframe"


ENGINE_KEY, FORMAT_KEY = "task.engine", "writer.output.format"


# --- the session ----------------------------------------------------------------------------------------------------


def session_config(work: Path, spark_conf: Mapping[str, str] | None = None) -> JobConfig:
    """The job config the shared session is made from: local[*], oncelog's Spark defaults, no UI, snappy Avro, and
    `spark_conf` over them (spark.* keys: benchmarks.cpu_split's JVM options)."""
    return config_from_properties({
        "job.name": "bench-pipeline", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "writer.staging.dir": str(work / "unused-staging"), "writer.output.dir": str(work / "unused-output"),
        "data.publisher.final.dir": str(work / "unused-published"), "spark.master": "local[*]",
        "spark.ui.enabled": "false", "spark.sql.avro.compression.codec": CODEC, **(spark_conf or {})})


def start_spark(work: Path, spark_conf: Mapping[str, str] | None = None) -> SparkSession:
    """ONE SparkSession for every side, made as every oncelog run makes its own (connector jars included); this
    process adopts its descendants' orphans first, so that their CPU stays counted (`adopt_orphans`)."""
    adopt_orphans()
    spark = spark_session(session_config(work, spark_conf))
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --- data ---------------------------------------------------------------------------------------------------------


PAGES = ("/", "/search", "/cart", "/checkout", "/product/{}", "/account/orders", "/help/shipping-and-returns")
AGENTS = ("Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4)", "okhttp/4.12.0")


def payload(i: int) -> tuple[bytes, bytes]:
    """A page-view record: key `user-N`, a 100-200 byte JSON value."""
    user = (i * 7919) % 50_021
    page = PAGES[i % len(PAGES)].format(i % 9_973)
    value = (f'{{"event_id":{i},"user":"user-{user}","page":"{page}","ts":{1_795_000_000_000 + 37 * i},'
             f'"ms":{(i * 31) % 2_000},"agent":"{AGENTS[i % len(AGENTS)]}",'
             f'"session":"{(i * 2_654_435_761) % 2**32:08x}"}}')
    return f"user-{user}".encode(), value.encode()


def create_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    """A plain topic, created now (the broker auto-creates nothing)."""
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=60)


def produce(bootstrap: str, topic: str, records: int, first: int = 0,
            timestamp_ms: Callable[[int], int] | None = None) -> None:
    """N records (numbered from `first`) spread over the topic's partitions by key, acknowledged before returning;
    record i's Kafka timestamp `timestamp_ms(i)` (default: the time it is produced)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 500_000})
    for i in range(first, first + records):
        key, value = payload(i)
        stamp = timestamp_ms(i) if timestamp_ms is not None else 0  # 0: librdkafka stamps it now
        while True:
            try:
                producer.produce(topic, value, key, timestamp=stamp)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not produce {records} records to {topic}")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end offset (the topic is new: every partition starts at 0)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()


# --- output checks ------------------------------------------------------------------------------------------------


def check_kafka_output(files: list[Path], ends: dict[int, int]) -> str:
    """Every offset of every partition present exactly once in the Avro files; returns their codec."""
    offsets: dict[int, list[int]] = {p: [] for p in ends}
    codecs = set()
    for path in files:
        with path.open("rb") as f:
            reader = fastavro.reader(f)
            codecs.add(reader.codec)
            for record in reader:
                row = cast(dict[str, Any], record)
                offsets[row["partition"]].append(row["offset"])
    for partition, end in ends.items():
        if sorted(offsets[partition]) != list(range(end)):
            found = offsets[partition]
            raise AssertionError(f"partition {partition}: {len(found)} records ({len(set(found))} distinct offsets) "
                                 f"written, expected offsets 0-{end - 1} once each")
    if codecs != {CODEC}:
        raise AssertionError(f"Avro codecs {codecs}, expected {CODEC}")
    return CODEC


def count_avro(files: list[Path]) -> int:
    """How many records the Avro files hold (from their block headers)."""
    total = 0
    for path in files:
        with path.open("rb") as f:
            total += sum(block.num_records for block in fastavro.block_reader(f))
    return total


# --- CPU accounting -------------------------------------------------------------------------------------------------


PR_SET_CHILD_SUBREAPER = 36
"""prctl(2): orphaned descendants are reparented to this process, not to init."""


def adopt_orphans() -> None:
    """Have the descendants whose parent exits first (Python workers whose `pyspark.daemon` was stopped) reparented
    to this process, which leaves them unreaped: alive or as zombies they stay in its tree, so their CPU stays in
    `tree_cpu_seconds`. Reparented to init, a process with seconds of CPU dropped out of the tree mid-run, and a
    repeat's CPU came out negative (-5.5 s). Linux only; elsewhere nothing."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system, reaped children included) of this process and its descendants: the Spark JVM
    and its Python workers; a Kafka broker started by this process is left out (Linux /proc; 0.0 elsewhere)."""
    return cpu_seconds()[0]


def cpu_seconds() -> tuple[float, float]:
    """This process tree's CPU seconds (`tree_cpu_seconds`) and every local Kafka broker's (Linux /proc; zeros
    elsewhere): the broker serves every side's reads, and a run it slows shows there."""
    proc = Path("/proc")
    if not proc.is_dir():
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    brokers: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            broker = b"kafka.Kafka" in (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # fields from the 3rd (state) on
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = sum(int(v) for v in fields[11:15]) / tick  # utime, stime, cutime, cstime
        if broker:
            brokers.add(pid)
    total, stack = 0.0, [os.getpid()]
    while stack:
        pid = stack.pop()
        if pid not in brokers:
            total += cpu.get(pid, 0.0)
            stack += children.get(pid, [])
    return total, sum(cpu[pid] for pid in brokers)


@dataclass(frozen=True)
class Timed:
    """One timed run: wall-clock seconds, the CPU seconds it took (this process, Spark's JVM and workers) and the
    local brokers' CPU seconds meanwhile."""

    seconds: float
    cpu: float
    broker_cpu: float = 0.0


Around = Callable[[], AbstractContextManager[object]]
"""What else brackets each timed block (benchmarks.cpu_split's per-thread CPU snapshots), exactly where the timer
does."""


@contextmanager
def timing(into: list[Timed], around: Around | None = None) -> Iterator[None]:
    """Time the block (wall and CPU) into `into`, inside `around` when given."""
    with around() if around is not None else nullcontext():
        (cpu, broker), started = cpu_seconds(), time.perf_counter()
        yield
        seconds = time.perf_counter() - started
        cpu_after, broker_after = cpu_seconds()
        into.append(Timed(seconds, cpu_after - cpu, broker_after - broker))


# --- the sides ------------------------------------------------------------------------------------------------------


@dataclass
class Bench:
    """What every run shares: the broker, the Spark session, a work folder, the job keys of each oncelog side."""

    bootstrap: str
    spark: SparkSession
    work: Path
    keys: dict[Side, dict[str, str] | None] = field(default_factory=dict)
    """Per oncelog side, the job keys that select it; None when the job config does not accept them yet."""
    topics: list[str] = field(default_factory=list)
    around: Around | None = None
    """Brackets each timed block besides the timer (None: nothing)."""

    def fresh(self, name: str) -> Path:
        """A new, empty folder for one run."""
        path = self.work / f"{name}-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        return path

    def log_url(self) -> str:
        """A fresh Kafka log (topic pre-created, so that creating it is not timed): a first run of the job."""
        topic = f"bench-pipeline-log-{uuid.uuid4().hex[:8]}"
        url = f"kafka://{self.bootstrap}?topic={topic}"
        with open_log(url) as log:
            log.ensure_topic()
        self.topics += [topic, f"{topic}.snapshots"]
        return url

    @property
    def primary(self) -> Side:
        """The oncelog side the headline figures (oncelog_rps, ratio, phases, increments) are of: the DataFrame
        engine when the job config accepts it, else the records engine."""
        return Side.DATAFRAME if self.keys.get(Side.DATAFRAME) is not None else Side.RECORDS


def job_config(base: Path, log_url: str, source: Mapping[str, str]) -> JobConfig:
    """An oncelog job writing snappy files under `base`, with its log at `log_url`."""
    return config_from_properties({
        "job.name": "bench-pipeline", "writer.staging.dir": str(base / "staging"),
        "writer.output.dir": str(base / "task-output"), "data.publisher.final.dir": str(base / "published"),
        "writer.codec.type": CODEC, "oncelog.log.url": log_url, "task.maxretries": "0",
        "task.retry.intervalinsec": "0", "spark.master": "local[*]", **source,
    })


def topic_source(bench: Bench, topic: str, side: Side) -> dict[str, str]:
    """The job keys reading `topic` with KafkaTopicSource on `side`'s engine (and format)."""
    keys = bench.keys.get(side)
    if keys is None:
        raise ValueError(f"the job config accepts no keys for the {side} side")
    return {"source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource", "kafka.brokers": bench.bootstrap,
            "topic.whitelist": re.escape(topic), **keys}


def side_keys(work: Path) -> dict[Side, dict[str, str] | None]:
    """The keys selecting each oncelog side, where the job config accepts them: `task.engine` (unknown before the
    DataFrame engine: then the records engine is the only one, selected by no key) and `writer.output.format`."""
    def accepted(keys: dict[str, str]) -> bool:
        probe = {"source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
                 "kafka.brokers": "127.0.0.1:9", "topic.whitelist": "probe", **keys}
        try:
            job_config(work / "probe", f"sqlite:///{work / 'probe.db'}", probe)
        except OncelogError as e:
            note(f"the job config does not accept {keys}: {' '.join(str(e).split())[:300]}")
            return False
        return True

    records = {ENGINE_KEY: Engine.RECORDS.value}
    dataframe = {ENGINE_KEY: Engine.DATAFRAME.value}
    keys: dict[Side, dict[str, str] | None] = {
        Side.RECORDS: records if accepted(records) else {},
        Side.DATAFRAME: dataframe if accepted(dataframe) else None,
    }
    parquet = {**(keys[Side.DATAFRAME] or {}), FORMAT_KEY: "parquet"}
    keys[Side.PARQUET] = parquet if accepted(parquet) else None
    return keys


def run_oncelog(bench: Bench, topic: str, ends: dict[int, int], side: Side) -> tuple[Timed, dict[str, float]]:
    """oncelog's job over the whole topic on `side`: its timing from launch to return, and its phases; output
    checked."""
    base = bench.fresh(side.value)
    log_url = bench.log_url()
    config = job_config(base, log_url, topic_source(bench, topic, side))
    launcher = JobLauncher(config, spark=bench.spark)
    timed: list[Timed] = []
    launched = time.time()
    with timing(timed, bench.around):
        result = launcher.run()
    if result.status is not RunStatus.COMMITTED:
        raise AssertionError(f"oncelog run ({side}) ended {result.status}: {result.error}")
    if side is Side.PARQUET:
        check_offsets(bench.spark.read.parquet(*map(str, sorted((base / "published").rglob("*.parquet")))), ends)
    else:
        check_kafka_output(sorted((base / "published").rglob("*.avro")), ends)
    at = audited(log_url, launcher.run_id, base / "published", len(ends))
    shutil.rmtree(base)
    return timed[0], phases(at, launched, launched + timed[0].seconds)


def kafka_batch(bench: Bench, topic: str, ends: dict[int, int], fetch_wait_ms: int | None = None) -> DataFrame:
    """Spark's Kafka batch reader on exactly the offsets [0, end) of each partition, as a work unit gives them;
    with Kafka's fetch.max.wait.ms unless `fetch_wait_ms` is given."""
    reader = bench.spark.read.format("kafka")
    if fetch_wait_ms is not None:
        reader = reader.option("kafka.fetch.max.wait.ms", str(fetch_wait_ms))
    return (reader.option("kafka.bootstrap.servers", bench.bootstrap)
            .option("assign", json.dumps({topic: sorted(ends)}))
            .option("startingOffsets", json.dumps({topic: {str(p): 0 for p in ends}}))
            .option("endingOffsets", json.dumps({topic: {str(p): end for p, end in ends.items()}}))
            .option("failOnDataLoss", "true").load())


def run_unguarded(bench: Bench, topic: str, ends: dict[int, int], fetch_wait_ms: int | None = None) -> Timed:
    """Spark alone: a batch read of the same offsets written as Avro (no log, no commit); output checked."""
    out = bench.fresh("unguarded") / "out"
    timed: list[Timed] = []
    with timing(timed, bench.around):
        kafka_batch(bench, topic, ends, fetch_wait_ms).selectExpr(*KAFKA_COLUMNS).write.format(AVRO).option(
            "compression", CODEC).save(str(out))
    check_kafka_output(sorted(out.glob("part-*.avro")), ends)
    shutil.rmtree(out.parent)
    return timed[0]


def start_sss(bench: Bench, topic: str, out: Path, checkpoint: Path) -> Timed:
    """Start (or restart, from its checkpoint) the Structured Streaming query over `topic`, availableNow; timed from
    start() to its end."""
    stream = (bench.spark.readStream.format("kafka").option("kafka.bootstrap.servers", bench.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
    writer = (stream.selectExpr(*KAFKA_COLUMNS).writeStream.format(AVRO).option("compression", CODEC)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    timed: list[Timed] = []
    with timing(timed, bench.around):
        query = writer.start(str(out))
        query.awaitTermination()
    if query.exception() is not None:
        raise AssertionError(f"Structured Streaming query failed: {query.exception()}")
    return timed[0]


def run_sss(bench: Bench, topic: str, ends: dict[int, int]) -> Timed:
    """A Structured Streaming query over the whole topic (availableNow), timed from start() to its end; output
    checked."""
    base = bench.fresh("sss")
    timed = start_sss(bench, topic, base / "out", base / "checkpoint")
    check_kafka_output(sorted((base / "out").glob("part-*.avro")), ends)
    shutil.rmtree(base)
    return timed


def check_offsets(df: DataFrame, ends: dict[int, int]) -> None:
    """Every offset of every partition exactly once in `df` (Spark aggregates: for formats fastavro cannot read)."""
    counts = df.groupBy("partition").agg(functions.count("offset").alias("records"),
                                         functions.countDistinct("offset").alias("distinct"),
                                         functions.min("offset").alias("low"), functions.max("offset").alias("high"))
    found = {row["partition"]: (row["records"], row["distinct"], row["low"], row["high"]) for row in counts.collect()}
    expected = {p: (end, end, 0, end - 1) for p, end in ends.items() if end}
    if found != expected:
        raise AssertionError(f"(records, distinct offsets, lowest, highest) per partition {found}, expected {expected}")


# --- small increments -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Increments:
    """Small increments: the seconds of each timed round, for oncelog's run and the restarted streaming query."""

    oncelog: tuple[Timed, ...]
    sss: tuple[Timed, ...]


def run_increments(bench: Bench, rounds: int, records: int, partitions: int) -> Increments:
    """`rounds` timed rounds (after an untimed first one) of `records` new records each: the same oncelog job run
    again, the same streaming query restarted from its checkpoint; the alternating order; every output checked."""
    topic = new_topic(bench, partitions)
    base = bench.fresh("increments")
    log_url = bench.log_url()
    config = job_config(base / "oncelog", log_url, topic_source(bench, topic, bench.primary))
    out, checkpoint = base / "sss" / "out", base / "sss" / "checkpoint"
    oncelog: list[Timed] = []
    sss: list[Timed] = []

    def run_job() -> Timed:
        launcher = JobLauncher(config, spark=bench.spark)
        timed: list[Timed] = []
        with timing(timed, bench.around):
            result = launcher.run()
        if result.status is not RunStatus.COMMITTED:
            raise AssertionError(f"oncelog increment run ended {result.status}: {result.error}")
        return timed[0]

    for i in range(rounds + 1):
        produce(bench.bootstrap, topic, records, first=i * records)
        sides: list[Callable[[], None]] = [lambda: oncelog.append(run_job()),
                                           lambda: sss.append(start_sss(bench, topic, out, checkpoint))]
        for side in sides if i % 2 == 0 else reversed(sides):
            side()
        if i:
            note(f"increment {i}/{rounds}: oncelog {oncelog[-1].seconds:.2f}s, Structured Streaming "
                 f"{sss[-1].seconds:.2f}s")
    ends = end_offsets(bench.bootstrap, topic, partitions)
    check_kafka_output(sorted(out.glob("part-*.avro")), ends)
    published = base / "oncelog" / "published"
    check_kafka_output(sorted(published.rglob("*.avro")), ends)
    with open_log(log_url) as log:
        report = verify(log, published)
    if not report.ok or report.pending:
        raise AssertionError(f"the increments' log fails verification: {report.violations[:3]} {report.pending[:3]}")
    shutil.rmtree(base)
    return Increments(tuple(oncelog[1:]), tuple(sss[1:]))


# --- the commit phase -----------------------------------------------------------------------------------------------


PHASES = ("setup", "planning", "tasks", "publish planning", "commit", "cleanup")


def audited(log_url: str, run_id: str, published: Path, datasets: int) -> dict[str, list[float]]:
    """Check the run's audit history (`oncelog verify`'s invariants over the whole log, every dataset's sequence
    completed) and return when each of its event types was emitted (epoch seconds, in log order)."""
    with open_log(log_url) as log:
        report = verify(log, published)
        at: dict[str, list[float]] = {}
        for logged in log.read():
            if logged.event.run_id == run_id:
                at.setdefault(logged.event.event_type(), []).append(logged.event.emitted_at.timestamp())
    if not report.ok or report.pending:
        raise AssertionError(f"the audit log fails verification: {report.violations[:3]} pending {report.pending[:3]}")
    if len(at.get("CommitSequenceCompleted", ())) != datasets:
        raise AssertionError(f"{len(at.get('CommitSequenceCompleted', ()))} sequences completed, not {datasets}")
    return at


def phases(at: dict[str, list[float]], launched: float, returned: float) -> dict[str, float]:
    """The run's phases in seconds, from its events' emitted_at (wall clock) and the launcher's start and return.

    setup: launch → JobRunStarted (log, lock, state); planning: → WorkUnitsPlanned; tasks: → the last TaskSucceeded
    (Spark scheduling included); publish planning: → the last CommitSequencePlanned (catch-up, the publisher's plan);
    commit: → JobRunCommitted (the planned batch appended, every step applied and recorded, every sequence completed);
    cleanup: → the launcher's return (staging removed, lock released, log closed).
    """
    marks = [launched, min(at["JobRunStarted"]), min(at["WorkUnitsPlanned"]), max(at["TaskSucceeded"]),
             max(at["CommitSequencePlanned"]), max(at["JobRunCommitted"]), returned]
    spans = {name: marks[i + 1] - marks[i] for i, name in enumerate(PHASES)}
    spans["commit to last CommitSequenceCompleted"] = max(at["CommitSequenceCompleted"]) - marks[4]
    spans["job"] = returned - launched
    return spans


def run_commit_job(bench: Bench, datasets: int, records_per_dataset: int) -> dict[str, float]:
    """A synthetic job over `datasets` datasets (one partition each); its phases, output checked."""
    base = bench.fresh("commit")
    log_url = bench.log_url()
    config = job_config(base, log_url, {
        "source.class": "spark_pipeline.sources.synthetic.SyntheticSource", "dataset.urn": "bench",
        "source.synthetic.datasets": str(datasets), "source.synthetic.partitions": "1",
        "source.synthetic.records.per.run": str(records_per_dataset), "source.synthetic.payload.bytes": "100",
        **(bench.keys.get(bench.primary) or {})})
    launcher = JobLauncher(config, spark=bench.spark)
    launched = time.time()
    result = launcher.run()
    returned = time.time()
    if result.status is not RunStatus.COMMITTED:
        raise AssertionError(f"synthetic run ended {result.status}: {result.error}")
    files = sorted((base / "published").rglob("*.avro"))
    written = count_avro(files)
    if len(files) != datasets or written != datasets * records_per_dataset:
        raise AssertionError(f"synthetic job published {written} records in {len(files)} files, expected "
                             f"{datasets * records_per_dataset} in {datasets}")
    at = audited(log_url, launcher.run_id, base / "published", datasets)
    shutil.rmtree(base)
    return phases(at, launched, returned)


# --- the run --------------------------------------------------------------------------------------------------------


@dataclass
class Samples:
    """Each side's timed runs, the increments, the commit job's phases, and the 1-minute load after each run."""

    sides: dict[Side, list[Timed]] = field(default_factory=dict)
    increments: Increments | None = None
    commit: list[dict[str, float]] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    oncelog_phases: list[dict[str, float]] = field(default_factory=list)
    jit_settle_s: float | None = None
    warm_up: WarmUp | None = None


@dataclass
class WarmUp:
    """Each warm-up round's seconds of JIT compiling, and its run of the headline engine."""

    compile_s: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def run_side(bench: Bench, side: Side, topic: str, ends: dict[int, int], samples: Samples | None) -> Timed:
    """One run of `side` over the topic, recorded into `samples` (None: a warm-up, not recorded); its timing."""
    spans: dict[str, float] | None = None
    compiled_before, collected_before = compile_ms(bench.spark), collection_ms(bench.spark)
    if side is Side.UNGUARDED:
        timed = run_unguarded(bench, topic, ends)
    elif side is Side.UNGUARDED_NO_WAIT:
        timed = run_unguarded(bench, topic, ends, FETCH_WAIT_MS)
    elif side is Side.SSS:
        timed = run_sss(bench, topic, ends)
    else:
        timed, spans = run_oncelog(bench, topic, ends, side)
    if samples is None:
        return timed
    samples.sides.setdefault(side, []).append(timed)
    samples.load.append(os.getloadavg()[0])
    if spans is not None and side is bench.primary:
        samples.oncelog_phases.append(spans)
    compiled = (compile_ms(bench.spark) - compiled_before) / 1000
    collected = (collection_ms(bench.spark) - collected_before) / 1000
    shown = "" if spans is None else "; " + ", ".join(f"{name} {seconds:.3f}s" for name, seconds in spans.items())
    note(f"{side}: {sum(ends.values()) / timed.seconds:,.0f} records/s ({timed.seconds:.2f}s, {timed.cpu:.1f} CPU s, "
         f"JIT compiling {compiled:.2f}s, JVM GC {collected:.2f}s, broker {timed.broker_cpu:.2f} CPU s{shown})")
    return timed


def big_batch_sides(bench: Bench) -> list[Side]:
    """The sides timed on the big topic each repeat: every engine the job config accepts, unguarded, streaming."""
    engines = [side for side in (Side.RECORDS, Side.DATAFRAME) if bench.keys.get(side) is not None]
    return [*engines, Side.UNGUARDED, Side.UNGUARDED_NO_WAIT, Side.SSS]


def compile_ms(spark: SparkSession) -> int:
    """The milliseconds the JVM's JIT compilers have spent so far (the `CompilationMXBean`'s total)."""
    return int(management(spark).getCompilationMXBean().getTotalCompilationTime())


def collection_ms(spark: SparkSession) -> int:
    """The milliseconds the JVM's garbage collectors have spent so far (every `GarbageCollectorMXBean`'s total)."""
    return sum(int(bean.getCollectionTime()) for bean in management(spark).getGarbageCollectorMXBeans())


def management(spark: SparkSession) -> Any:
    """The Spark JVM's `ManagementFactory` (its JIT and GC beans), through the session's gateway."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise RuntimeError("the Spark session has no JVM gateway to ask about its JIT and collections")
    return jvm.java.lang.management.ManagementFactory


def warm_up(bench: Bench, topic: str, ends: dict[int, int], least: int, most: int) -> WarmUp:
    """Untimed rounds of every side once over the warm-up topic: `least` of them, then until the headline engine's
    runs have settled (`settled`), `most` in all. One round left the JIT compiling through the first timed repeats,
    which were then the slowest of every side (docs/benchmarks.md, twelfth round)."""
    done = WarmUp()
    while len(done.compile_s) < most:
        before = compile_ms(bench.spark)
        for side in big_batch_sides(bench):
            timed = run_side(bench, side, topic, ends, None)
            if side is bench.primary:
                done.seconds.append(timed.seconds)
        done.compile_s.append((compile_ms(bench.spark) - before) / 1000)
        note(f"warm-up round {len(done.compile_s)}: {done.compile_s[-1]:.1f}s of JIT compiling, "
             f"{bench.primary} engine {done.seconds[-1]:.2f}s")
        if len(done.compile_s) >= least and settled(done.seconds):
            break
    return done


def settled(seconds: Sequence[float]) -> bool:
    """Whether the last SETTLED_RUNS runs took at most SETTLED longer than the fastest of them."""
    last = seconds[-SETTLED_RUNS:]
    return len(last) == SETTLED_RUNS and max(last) <= (1 + SETTLED) * min(last)


def settle_jit(spark: SparkSession, quiet_ms: int = 50, window_s: float = 3.0, limit_s: float = 300.0) -> float:
    """Wait until the JVM's JIT compilers are idle (less than `quiet_ms` of compiling in `window_s`), at most
    `limit_s`; returns the seconds waited. So that no timed repeat begins with the warm-up's compiling still queued
    (on 2 cores C2 has one thread). It does not make the first repeat as fast as the others (docs/benchmarks.md)."""
    started = time.monotonic()
    before = compile_ms(spark)
    while time.monotonic() - started < limit_s:
        time.sleep(window_s)
        now = compile_ms(spark)
        if now - before < quiet_ms:
            break
        before = now
    waited = time.monotonic() - started
    note(f"JIT settled after {waited:.0f}s ({compile_ms(spark) / 1000:.1f}s of compiling so far)")
    return waited


def timed_runs(bench: Bench, topic: str, ends: dict[int, int], repeats: int, samples: Samples) -> None:
    """Each side `repeats` times, rotating which goes first, so that neither is favoured by caches or load."""
    sides = big_batch_sides(bench)
    for i in range(repeats):
        shift = i % len(sides)
        for side in sides[shift:] + sides[:shift]:
            run_side(bench, side, topic, ends, samples)


def median_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the runs."""
    return {name: statistics.median(r[name] for r in runs) for name in runs[0]}


def print_phases(oncelog: dict[str, float], commit: dict[str, float], datasets: int, side: Side) -> None:
    """The phase breakdown of both oncelog jobs, seconds and share of the job's wall time."""
    table = Table(title=f"oncelog phases ({side} engine; median seconds, share of the job)")
    table.add_column("phase")
    table.add_column(f"Kafka topic job ({PARTITIONS} datasets)", justify="right")
    table.add_column(f"synthetic job ({datasets:,} datasets)", justify="right")
    for name, seconds in oncelog.items():
        table.add_row(name, f"{seconds:.3f}s  {seconds / oncelog['job']:6.1%}",
                      f"{commit[name]:.3f}s  {commit[name] / commit['job']:6.1%}")
    Console(file=sys.stdout).print(table)


def median_seconds(runs: list[Timed] | None) -> float | None:
    """The median wall seconds of a side's runs; None for a side that did not run."""
    return statistics.median(t.seconds for t in runs) if runs else None


def median_cpu(runs: list[Timed] | None) -> float | None:
    """The median CPU seconds of a side's runs; None for a side that did not run."""
    return statistics.median(t.cpu for t in runs) if runs else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator to 3 places; None when either is missing (a side that did not run) or zero."""
    return round(numerator / denominator, 3) if numerator and denominator else None


def side_figures(records: int, samples: Samples) -> dict[str, Any]:
    """Per side: records/s at the median repeat, every repeat's, and CPU µs per record (median); None where a side
    did not run."""
    result: dict[str, Any] = {}
    for side in Side:
        runs = samples.sides.get(side)
        seconds, cpu = median_seconds(runs), median_cpu(runs)
        result[f"{side}_rps"] = round(records / seconds) if seconds else None
        result[f"{side}_seconds"] = round(seconds, 3) if seconds else None
        result[f"{side}_cpu_us"] = round(cpu / records * 1e6, 2) if cpu is not None else None
        result[f"{side}_rps_each"] = [round(records / t.seconds) for t in runs] if runs else None
    return result


def slowest_over_median(runs: list[Timed] | None) -> float | None:
    """How much longer the slowest repeat took than the median one (0.1: 10% longer); None if the side did not run."""
    if not runs:
        return None
    seconds = [t.seconds for t in runs]
    return round(max(seconds) / statistics.median(seconds) - 1, 3)


def comparisons(samples: Samples, primary: Side) -> dict[str, Any]:
    """The ratios the targets are set on (the faster side's seconds over the slower's: above 1 is ahead)."""
    seconds = {side: median_seconds(samples.sides.get(side)) for side in Side}
    cpu = {side: median_cpu(samples.sides.get(side)) for side in Side}
    runs, sss = samples.sides[primary], samples.sides[Side.SSS]
    inc = samples.increments
    inc_oncelog = statistics.median(t.seconds for t in inc.oncelog) if inc and inc.oncelog else None
    inc_sss = statistics.median(t.seconds for t in inc.sss) if inc and inc.sss else None
    return {
        "ratio": ratio(seconds[Side.SSS], seconds[primary]),
        "ratio_best": ratio(min(t.seconds for t in sss), min(t.seconds for t in runs)),
        "ratio_dataframe_sss": ratio(seconds[Side.SSS], seconds[Side.DATAFRAME]),
        "ratio_dataframe_unguarded": ratio(seconds[Side.UNGUARDED], seconds[Side.DATAFRAME]),
        "ratio_dataframe_unguarded_no_wait": ratio(seconds[Side.UNGUARDED_NO_WAIT], seconds[Side.DATAFRAME]),
        "ratio_records_sss": ratio(seconds[Side.SSS], seconds[Side.RECORDS]),
        "ratio_records_unguarded": ratio(seconds[Side.UNGUARDED], seconds[Side.RECORDS]),
        "ratio_unguarded_sss": ratio(seconds[Side.SSS], seconds[Side.UNGUARDED]),
        "cpu_ratio": ratio(cpu[Side.SSS], cpu[primary]),
        "cpu_dataframe_over_sss": ratio(cpu[Side.DATAFRAME], cpu[Side.SSS]),
        "increment_s_oncelog": round(inc_oncelog, 3) if inc_oncelog else None,
        "increment_s_sss": round(inc_sss, 3) if inc_sss else None,
        "increment_ratio": ratio(inc_oncelog, inc_sss),
        "increment_s_oncelog_each": [round(t.seconds, 3) for t in inc.oncelog] if inc else None,
        "increment_s_sss_each": [round(t.seconds, 3) for t in inc.sss] if inc else None,
    }


def targets_met(result: Mapping[str, Any]) -> dict[str, bool | None]:
    """Each target met or not; None when its figure is missing (the DataFrame engine not there yet)."""
    def at_least(name: str, target: str) -> bool | None:
        return None if result[name] is None else result[name] >= TARGETS[target]

    def at_most(name: str, target: str) -> bool | None:
        return None if result[name] is None else result[name] <= TARGETS[target]

    return {
        "ratio_target_met": at_least("ratio", "ratio"),
        "commit_target_met": at_most("commit_share_1000", "commit_share_1000"),
        "dataframe_unguarded_target_met": at_least("ratio_dataframe_unguarded", "ratio_dataframe_unguarded"),
        "dataframe_sss_target_met": at_least("ratio_dataframe_sss", "ratio_dataframe_sss"),
        "dataframe_cpu_target_met": at_most("cpu_dataframe_over_sss", "cpu_dataframe_over_sss"),
        "increment_target_met": at_most("increment_ratio", "increment_ratio"),
        "dataframe_repeats_target_met": at_most("dataframe_slowest_over_median", "slowest_over_median"),
    }


def figures(args: argparse.Namespace, samples: Samples, primary: Side) -> dict[str, Any]:
    """What the benchmark reports: each side's throughput, the ratios, the increments, the commit share at 1,000
    datasets, the load, the set-up."""
    commit = median_phases(samples.commit)
    share = statistics.median(r["commit"] / r["job"] for r in samples.commit)
    sides = side_figures(args.records, samples)
    compared = comparisons(samples, primary)
    result: dict[str, Any] = {
        "oncelog_rps": sides[f"{primary}_rps"], "sss_rps": sides["sss_rps"], "ratio": compared.pop("ratio"),
        "dataframe_rps": sides["dataframe_rps"], "records_rps": sides["records_rps"],
        "unguarded_rps": sides["unguarded_rps"], "parquet_rps": sides["parquet_rps"],
        **{k: compared.pop(k) for k in ("ratio_dataframe_sss", "ratio_dataframe_unguarded",
                                        "ratio_dataframe_unguarded_no_wait")},
        "dataframe_cpu_us": sides["dataframe_cpu_us"],
        **{k: compared.pop(k) for k in ("increment_s_oncelog", "increment_s_sss", "increment_ratio")},
        "commit_share_1000": round(share, 4), "oncelog_engine": primary.value, "records": args.records,
        "oncelog_rps_best": round(args.records / min(t.seconds for t in samples.sides[primary])),
        "sss_rps_best": round(args.records / min(t.seconds for t in samples.sides[Side.SSS])),
        "oncelog_seconds": sides[f"{primary}_seconds"], "oncelog_cpu_us": sides[f"{primary}_cpu_us"],
        "oncelog_rps_each": sides[f"{primary}_rps_each"],
        "dataframe_slowest_over_median": slowest_over_median(samples.sides.get(Side.DATAFRAME)),
        "jit_settle_s": None if samples.jit_settle_s is None else round(samples.jit_settle_s, 1),
        "warm_up_compile_s": [round(c, 2) for c in samples.warm_up.compile_s] if samples.warm_up else None,
        "warm_up_seconds": [round(c, 3) for c in samples.warm_up.seconds] if samples.warm_up else None,
        "oncelog_broker_cpu_s_each": [round(t.broker_cpu, 2) for t in samples.sides[primary]],
        **compared, **sides,
        "commit_seconds_1000": round(commit["commit"], 3), "job_seconds_1000": round(commit["job"], 3),
        "commit_share_1000_each": [round(r["commit"] / r["job"], 4) for r in samples.commit],
        "datasets": args.datasets, "records_1000": args.datasets * args.records_per_dataset,
        "increments": args.increments, "increment_records": args.increment_records,
        "codec": CODEC, "partitions": args.partitions, "repeats": args.repeats, "quick": args.quick,
        "cpus": os.cpu_count(), "load_avg_1m_median": round(statistics.median(samples.load), 2),
        "load_avg_1m_max": round(max(samples.load), 2), "spark": spark_version(),
        "kafka_connector": CONNECTORS.kafka, "avro_writer": f"spark-avro {CONNECTORS.avro}",
    }
    return {**result, **targets_met(result)}


def spark_version() -> str:
    """The version of pyspark (and so of Spark) in use."""
    return pyspark.__version__


def parse_args() -> argparse.Namespace:
    """The command line, with --quick's or the full run's defaults filled in."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="100k records, one repeat, 5 increments (about three minutes)")
    parser.add_argument("--records", type=int, help="records in the topic (1M; 100k with --quick)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="partitions of the topic")
    parser.add_argument("--repeats", type=int, help="timed runs of each side and of the commit job (5; 1 with --quick)")
    parser.add_argument("--datasets", type=int, default=DATASETS, help="datasets of the commit-phase job")
    parser.add_argument("--records-per-dataset", type=int, help="records per dataset there (1,000; 100 with --quick)")
    parser.add_argument("--warm-up", type=int, help="records of the untimed warm-up topic (1M; 20k with --quick)")
    parser.add_argument("--warm-up-rounds", type=int,
                        help="least warm-up rounds (6; 1 with --quick), then more until the headline engine's runs "
                             "settle")
    parser.add_argument("--warm-up-most", type=int, help="most warm-up rounds (14; 1 with --quick)")
    parser.add_argument("--increments", type=int, help="timed small-increment rounds (20; 5 with --quick)")
    parser.add_argument("--increment-records", type=int, help="new records per increment (10,000)")
    args = parser.parse_args()
    defaults = QUICK if args.quick else FULL
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


@contextmanager
def session(bootstrap: str, spark_conf: Mapping[str, str] | None = None) -> Iterator[Bench]:
    """The Spark session (`spark_conf` over the benchmark's settings) and a work folder; every topic the run created
    is deleted at the end."""
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-pipeline-"))
    spark = start_spark(work, spark_conf)
    bench = Bench(bootstrap, spark, work, side_keys(work))
    try:
        yield bench
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if bench.topics:
            AdminClient({"bootstrap.servers": bootstrap}).delete_topics(bench.topics, operation_timeout=30)


def new_topic(bench: Bench, partitions: int) -> str:
    """A new, empty topic, deleted at the end of the run."""
    topic = f"bench-pipeline-{uuid.uuid4().hex[:8]}"
    create_topic(AdminClient({"bootstrap.servers": bench.bootstrap}), topic, partitions)
    bench.topics.append(topic)
    return topic


def prepare_topic(bench: Bench, records: int, partitions: int, timestamp_ms: Callable[[int], int] | None = None
                  ) -> tuple[str, dict[int, int]]:
    """A new topic holding `records` records (record i's Kafka timestamp `timestamp_ms(i)`); its end offsets."""
    topic = new_topic(bench, partitions)
    produce(bench.bootstrap, topic, records, timestamp_ms=timestamp_ms)
    ends = end_offsets(bench.bootstrap, topic, partitions)
    if sum(ends.values()) != records:
        raise AssertionError(f"{topic} holds {sum(ends.values())} records, not {records}")
    return topic, ends


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Prepare, warm up, measure; returns the figures."""
    fetch_connectors()  # Maven on the first run only; every later run reads the cache
    samples = Samples()
    with kafka_bootstrap() as bootstrap, session(bootstrap) as bench:
        note(f"oncelog sides: {', '.join(f'{s} {k}' for s, k in bench.keys.items() if k is not None)}; "
             f"headline engine: {bench.primary}")
        note(f"producing {args.records:,} records to a {args.partitions}-partition topic on {bootstrap}")
        topic, ends = prepare_topic(bench, args.records, args.partitions)
        warm_topic, warm_ends = prepare_topic(bench, args.warm_up, args.partitions)
        note("warming up (untimed): a small synthetic job, then rounds of each side once on a warm-up topic")
        run_commit_job(bench, 20, 100)  # first: run last, its code paths set the first repeats compiling
        samples.warm_up = warm_up(bench, warm_topic, warm_ends, args.warm_up_rounds, args.warm_up_most)
        samples.jit_settle_s = settle_jit(bench.spark)
        timed_runs(bench, topic, ends, args.repeats, samples)
        if bench.keys.get(Side.PARQUET) is not None:
            run_side(bench, Side.PARQUET, topic, ends, samples)
        note(f"small increments: {args.increments} rounds of {args.increment_records:,} new records")
        samples.increments = run_increments(bench, args.increments, args.increment_records, args.partitions)
        for _ in range(args.repeats):
            spans = run_commit_job(bench, args.datasets, args.records_per_dataset)
            samples.commit.append(spans)
            samples.load.append(os.getloadavg()[0])
            note(f"{args.datasets:,} datasets: commit {spans['commit']:.2f}s of {spans['job']:.2f}s "
                 f"({spans['commit'] / spans['job']:.1%})")
        primary = bench.primary
    print_phases(median_phases(samples.oncelog_phases), median_phases(samples.commit), args.datasets, primary)
    return figures(args, samples, primary)


def main() -> None:
    """Run the benchmark; the figures' JSON is the last line of stdout."""
    args = parse_args()
    emit_result(run(args), title=f"pipeline: Kafka topic → Avro, {args.records:,} records ({CODEC})")


if __name__ == "__main__":
    main()
