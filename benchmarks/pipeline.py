"""Pipeline throughput: a Kafka topic to Avro files, oncelog's job beside Spark Structured Streaming, same Spark.

    python -m benchmarks.pipeline [--quick] [--records N] [--partitions P] [--repeats R] [--datasets D]
                                  [--records-per-dataset M] [--warm-up W]

One topic (8 partitions) holds N realistic records (keys, 117-176 byte JSON values), produced before any timing. Both
sides read it from the beginning to the end and write snappy Avro files into a new folder of their own, in ONE
SparkSession (`local[*]`, the same settings). oncelog's job (KafkaTopicSource, the default Avro writer, the audit log in
a Kafka topic on the same broker) runs through `JobLauncher(config, spark=spark).run()` and is timed from launch to
return. A Structured Streaming query (Kafka source, `trigger(availableNow=True)`, checkpointed Avro file sink) is timed
from `start()` to its end. Each side's output is read back: every offset of every partition exactly once. oncelog's
log must also pass `oncelog verify`. After an untimed warm-up on a smaller topic, the sides alternate which goes first.
Figures are records/s at the median repeat, and CPU µs per record of this process tree (the broker left out).

The commit phase is measured on a synthetic job with D datasets (1,000): from the CommitSequencePlanned batch to the
run's JobRunCommitted, over the launcher's wall time, read from the log's timestamps.

The connectors come from Maven Central, resolved once with Maven into ~/.cache/oncelog/spark-connectors. The Kafka
broker is `$KAFKA_BOOTSTRAP`, or a local one started for the run. Last line of stdout: the JSON figures. See
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import fastavro
import pyspark
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from rich.console import Console
from rich.table import Table

from benchmarks.common import emit_result, kafka_bootstrap, note
from events.log import open_log
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.config import JobConfig
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.spark_runner import SPARK_DEFAULTS

CODEC = "snappy"
PARTITIONS = 8
FULL = {"records": 1_000_000, "repeats": 5, "records_per_dataset": 1_000, "warm_up": 200_000}
QUICK = {"records": 100_000, "repeats": 1, "records_per_dataset": 100, "warm_up": 20_000}
"""Warm-up records: enough for Spark's JIT to compile the Kafka-to-Avro path (a first run is much slower)."""
DATASETS = 1_000
TARGETS = {"ratio": 1.0, "commit_share_1000": 0.05}
BUILT_IN_AVRO = "org.apache.spark.sql.avro.AvroFileFormat"
"""Spark 4's Avro FileFormat (writer and serializer) lives in spark-sql; spark-avro adds the `avro` name and V2 reads."""
CONNECTOR_FALLBACKS = ("4.2.0", "4.1.1", "4.0.0")
"""Older connector versions tried when Maven Central has none for pyspark's version (newest first)."""
TOKEN_FALLBACKS = ("4.0.0",)
"""spark-token-provider-kafka versions tried when the connector's own is missing (Central lacks 4.0.1 to 4.2.0)."""
CACHE = Path.home() / ".cache" / "oncelog" / "spark-connectors"


# --- connectors -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connectors:
    """The connector jars on Spark's classpath, and the Avro format name to write with."""

    jars: tuple[str, ...]
    kafka_version: str
    avro_format: str
    avro_source: str


def _pom(kafka: str, token: str, avro: str | None) -> str:
    """A pom whose runtime dependencies are the connectors (the token provider pinned to `token`)."""
    spark = "<groupId>org.apache.spark</groupId>"
    avro_dep = f"<dependency>{spark}<artifactId>spark-avro_2.13</artifactId><version>{avro}</version></dependency>"
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.oncelog</groupId><artifactId>bench-spark-connectors</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencyManagement><dependencies><dependency>{spark}
    <artifactId>spark-token-provider-kafka-0-10_2.13</artifactId><version>{token}</version>
  </dependency></dependencies></dependencyManagement>
  <dependencies>
    <dependency>{spark}<artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>{kafka}</version></dependency>
    {avro_dep if avro else ""}
  </dependencies>
</project>
"""


def _attempts(version: str) -> Iterator[tuple[str, str, str | None]]:
    """(kafka connector, token provider, spark-avro or None) to try: pyspark's own version first."""
    yield version, version, version
    older = [v for v in CONNECTOR_FALLBACKS if _version_key(v) < _version_key(version)]
    for kafka in [version, *older]:
        tokens = [kafka, *(v for v in TOKEN_FALLBACKS if v != kafka and _version_key(v)[0] == _version_key(kafka)[0])]
        for token in tokens:
            yield kafka, token, None


def _version_key(version: str) -> tuple[int, ...]:
    """`4.2.0` → (4, 2, 0), for ordering versions."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _maven(pom: str, staging: Path) -> list[Path] | None:
    """Copy the pom's runtime dependencies into `staging/libs` with Maven; None when it cannot resolve them."""
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "pom.xml").write_text(pom)
    done = subprocess.run(["mvn", "-B", "-ntp", "-f", str(staging / "pom.xml"), "dependency:copy-dependencies",
                           f"-DoutputDirectory={staging / 'libs'}", "-DincludeScope=runtime"],
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging / "libs", ignore_errors=True)
        return None
    return sorted((staging / "libs").glob("*.jar"))


def connector_jars(version: str, spark_jars: Path) -> Connectors:
    """The Kafka (and Avro) connectors for pyspark `version`, resolved with Maven once, then read from the cache."""
    manifest = CACHE / version / "manifest.json"
    cached = _cached(manifest)
    if cached is not None:
        return cached
    if shutil.which("mvn") is None:
        raise SystemExit("Maven (`mvn`) is needed once, to fetch the Spark Kafka connector from Maven Central")
    bundled = {_artifact(p.name) for p in spark_jars.glob("*.jar")}
    for kafka, token, avro in _attempts(version):
        note(f"resolving spark-sql-kafka-0-10 {kafka} (token provider {token}, spark-avro {avro}) with Maven")
        staging = CACHE / version / f"kafka-{kafka}-token-{token}-avro-{avro}"
        jars = _maven(_pom(kafka, token, avro), staging)
        if jars is None:
            continue
        kept = tuple(str(j) for j in jars if _artifact(j.name) not in bundled)  # Spark's own jars stay Spark's
        found = Connectors(kept, kafka, "avro" if avro else BUILT_IN_AVRO,
                           f"spark-avro {avro}" if avro else f"built into spark-sql {version}")
        manifest.with_suffix(".tmp").write_text(json.dumps(found.__dict__))
        manifest.with_suffix(".tmp").replace(manifest)  # written last, whole: the jars are in place
        return found
    raise SystemExit(f"Maven could not resolve org.apache.spark:spark-sql-kafka-0-10_2.13 for Spark {version}")


def _cached(manifest: Path) -> Connectors | None:
    """The connectors a previous run resolved, if the manifest and every jar it names are still there."""
    if not manifest.is_file():
        return None
    data = json.loads(manifest.read_text())
    found = Connectors(tuple(data["jars"]), data["kafka_version"], data["avro_format"], data["avro_source"])
    return found if all(Path(j).is_file() for j in found.jars) else None


def _artifact(jar: str) -> str:
    """A jar's artifact id, without its version: `kafka-clients-3.9.2.jar` → `kafka-clients`."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar)


def start_spark(connectors: Connectors) -> SparkSession:
    """ONE SparkSession for both sides: local[*], oncelog's Spark defaults, the connector jars."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers need oncelog's packages
    builder = SparkSession.builder.appName("oncelog pipeline benchmark").master("local[*]")
    settings = {**SPARK_DEFAULTS, "spark.ui.enabled": "false", "spark.jars": ",".join(connectors.jars),
                "spark.sql.avro.compression.codec": CODEC}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
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
             f'"ms":{(i * 31) % 2_000},"agent":"{AGENTS[i % len(AGENTS)]}","session":"{(i * 2_654_435_761) % 2**32:08x}"}}')
    return f"user-{user}".encode(), value.encode()


def create_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    """A plain topic, created now (the broker auto-creates nothing)."""
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=60)


def produce(bootstrap: str, topic: str, records: int) -> None:
    """N records spread over the topic's partitions by key, acknowledged before returning."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 500_000})
    for i in range(records):
        key, value = payload(i)
        while True:
            try:
                producer.produce(topic, value, key)
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


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system, reaped children included) of this process and its descendants: the Spark JVM
    and its Python workers; a Kafka broker started by this process is left out (Linux /proc; 0.0 elsewhere)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return 0.0
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
    return total


@dataclass(frozen=True)
class Timed:
    """One timed run: wall-clock seconds and the CPU seconds it took (this process, Spark's JVM and workers)."""

    seconds: float
    cpu: float


@contextmanager
def timing(into: list[Timed]) -> Iterator[None]:
    """Time the block (wall and CPU) into `into`."""
    cpu, started = tree_cpu_seconds(), time.perf_counter()
    yield
    seconds = time.perf_counter() - started
    into.append(Timed(seconds, tree_cpu_seconds() - cpu))


# --- the two sides ------------------------------------------------------------------------------------------------


@dataclass
class Bench:
    """What every run shares: the broker, the Spark session, the connectors, a work folder."""

    bootstrap: str
    spark: SparkSession
    connectors: Connectors
    work: Path
    topics: list[str] = field(default_factory=list)

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


def job_config(base: Path, log_url: str, source: dict[str, str]) -> JobConfig:
    """An oncelog job writing snappy Avro under `base`, with its log at `log_url`."""
    return JobConfig.from_properties({
        "job.name": "bench-pipeline", "writer.staging.dir": str(base / "staging"),
        "writer.output.dir": str(base / "task-output"), "data.publisher.final.dir": str(base / "published"),
        "writer.codec.type": CODEC, "oncelog.log.url": log_url, "task.maxretries": "0",
        "task.retry.intervalinsec": "0", "spark.master": "local[*]", **source,
    })


def run_oncelog(bench: Bench, topic: str, ends: dict[int, int]) -> tuple[Timed, dict[str, float]]:
    """oncelog's job over the whole topic: its timing from launch to return, and its phases; output checked."""
    base = bench.fresh("oncelog")
    log_url = bench.log_url()
    config = job_config(base, log_url, {
        "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
        "kafka.brokers": bench.bootstrap, "topic.whitelist": re.escape(topic)})
    launcher = JobLauncher(config, spark=bench.spark)
    timed: list[Timed] = []
    launched = time.time()
    with timing(timed):
        result = launcher.run()
    if result.status is not RunStatus.COMMITTED:
        raise AssertionError(f"oncelog run ended {result.status}: {result.error}")
    check_kafka_output(sorted((base / "published").rglob("*.avro")), ends)
    at = audited(log_url, launcher.run_id, base / "published", len(ends))
    shutil.rmtree(base)
    return timed[0], phases(at, launched, launched + timed[0].seconds)


def run_sss(bench: Bench, topic: str, ends: dict[int, int]) -> Timed:
    """A Structured Streaming query over the whole topic (availableNow), timed from start() to its end; output checked."""
    base = bench.fresh("sss")
    out, checkpoint = base / "out", base / "checkpoint"
    stream = (bench.spark.readStream.format("kafka").option("kafka.bootstrap.servers", bench.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
    shaped = stream.selectExpr("topic", "partition", "offset", "unix_millis(timestamp) AS timestamp", "key", "value")
    writer = (shaped.writeStream.format(bench.connectors.avro_format).option("compression", CODEC)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    timed: list[Timed] = []
    with timing(timed):
        query = writer.start(str(out))
        query.awaitTermination()
    if query.exception() is not None:
        raise AssertionError(f"Structured Streaming query failed: {query.exception()}")
    counted = bench.spark.read.format(bench.connectors.avro_format).load(str(out)).count()
    if counted != sum(ends.values()):
        raise AssertionError(f"Structured Streaming wrote {counted} records, expected {sum(ends.values())}")
    check_kafka_output(sorted(out.glob("part-*.avro")), ends)
    shutil.rmtree(base)
    return timed[0]


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
        "source.synthetic.records.per.run": str(records_per_dataset), "source.synthetic.payload.bytes": "100"})
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
    """Each side's timed seconds, and the machine's 1-minute load average after each timed run."""

    oncelog: list[Timed] = field(default_factory=list)
    sss: list[Timed] = field(default_factory=list)
    commit: list[dict[str, float]] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    oncelog_phases: list[dict[str, float]] = field(default_factory=list)


def timed_runs(bench: Bench, topic: str, ends: dict[int, int], repeats: int, samples: Samples) -> None:
    """Each side `repeats` times, alternating which goes first, so that neither is favoured by caches or load."""
    def oncelog() -> None:
        timed, spans = run_oncelog(bench, topic, ends)
        samples.oncelog.append(timed)
        samples.oncelog_phases.append(spans)
        samples.load.append(os.getloadavg()[0])
        note(f"oncelog: {sum(ends.values()) / timed.seconds:,.0f} records/s ({timed.seconds:.2f}s, {timed.cpu:.1f} CPU s)")

    def sss() -> None:
        timed = run_sss(bench, topic, ends)
        samples.sss.append(timed)
        samples.load.append(os.getloadavg()[0])
        note(f"Structured Streaming: {sum(ends.values()) / timed.seconds:,.0f} records/s ({timed.seconds:.2f}s, "
             f"{timed.cpu:.1f} CPU s)")

    for i in range(repeats):
        for side in ((oncelog, sss) if i % 2 == 0 else (sss, oncelog)):
            side()


def median_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the runs."""
    return {name: statistics.median(r[name] for r in runs) for name in runs[0]}


def print_phases(oncelog: dict[str, float], commit: dict[str, float], datasets: int) -> None:
    """The phase breakdown of both oncelog jobs, seconds and share of the job's wall time."""
    table = Table(title="oncelog phases (median seconds, share of the job)")
    table.add_column("phase")
    table.add_column(f"Kafka topic job ({PARTITIONS} datasets)", justify="right")
    table.add_column(f"synthetic job ({datasets:,} datasets)", justify="right")
    for name, seconds in oncelog.items():
        table.add_row(name, f"{seconds:.3f}s  {seconds / oncelog['job']:6.1%}",
                      f"{commit[name]:.3f}s  {commit[name] / commit['job']:6.1%}")
    Console(file=sys.stdout).print(table)


def throughput(records: int, oncelog: list[Timed], sss: list[Timed]) -> dict[str, Any]:
    """Records/s of each side at its median repeat and its best, their ratio, and CPU µs per record (median)."""
    oncelog_s, sss_s = statistics.median(t.seconds for t in oncelog), statistics.median(t.seconds for t in sss)
    oncelog_cpu, sss_cpu = statistics.median(t.cpu for t in oncelog), statistics.median(t.cpu for t in sss)
    return {
        "oncelog_rps": round(records / oncelog_s), "sss_rps": round(records / sss_s),
        "ratio": round(sss_s / oncelog_s, 3),
        "oncelog_rps_best": round(records / min(t.seconds for t in oncelog)),
        "sss_rps_best": round(records / min(t.seconds for t in sss)),
        "ratio_best": round(min(t.seconds for t in sss) / min(t.seconds for t in oncelog), 3),
        "oncelog_rps_each": [round(records / t.seconds) for t in oncelog],
        "sss_rps_each": [round(records / t.seconds) for t in sss],
        "oncelog_seconds": round(oncelog_s, 3), "sss_seconds": round(sss_s, 3),
        "oncelog_cpu_us": round(oncelog_cpu / records * 1e6, 2), "sss_cpu_us": round(sss_cpu / records * 1e6, 2),
        "cpu_ratio": round(sss_cpu / oncelog_cpu, 3) if oncelog_cpu else None,
    }


def figures(args: argparse.Namespace, samples: Samples, connectors: Connectors) -> dict[str, Any]:
    """What the benchmark reports: throughput, the commit share at 1,000 datasets, the load, the set-up."""
    commit = median_phases(samples.commit)
    share = statistics.median(r["commit"] / r["job"] for r in samples.commit)
    rates = throughput(args.records, samples.oncelog, samples.sss)
    result: dict[str, Any] = {
        **{k: rates.pop(k) for k in ("oncelog_rps", "sss_rps", "ratio")}, "commit_share_1000": round(share, 4),
        "records": args.records, **rates,
        "commit_seconds_1000": round(commit["commit"], 3), "job_seconds_1000": round(commit["job"], 3),
        "commit_share_1000_each": [round(r["commit"] / r["job"], 4) for r in samples.commit],
        "datasets": args.datasets, "records_1000": args.datasets * args.records_per_dataset,
        "codec": CODEC, "partitions": args.partitions, "repeats": args.repeats, "quick": args.quick,
        "cpus": os.cpu_count(), "load_avg_1m_median": round(statistics.median(samples.load), 2),
        "load_avg_1m_max": round(max(samples.load), 2), "spark": spark_version(),
        "kafka_connector": connectors.kafka_version, "avro_writer": connectors.avro_source,
    }
    result["ratio_target_met"] = result["ratio"] >= TARGETS["ratio"]
    result["commit_target_met"] = share <= TARGETS["commit_share_1000"]
    return result


def spark_version() -> str:
    """The version of pyspark (and so of Spark) in use."""
    return pyspark.__version__


def parse_args() -> argparse.Namespace:
    """The command line, with --quick's or the full run's defaults filled in."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100k records, one repeat (under two minutes)")
    parser.add_argument("--records", type=int, help="records in the topic (1M; 100k with --quick)")
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help="partitions of the topic")
    parser.add_argument("--repeats", type=int, help="timed runs of each side and of the commit job (5; 1 with --quick)")
    parser.add_argument("--datasets", type=int, default=DATASETS, help="datasets of the commit-phase job")
    parser.add_argument("--records-per-dataset", type=int, help="records per dataset there (1,000; 100 with --quick)")
    parser.add_argument("--warm-up", type=int, help="records of the untimed warm-up topic (200k; 20k with --quick)")
    args = parser.parse_args()
    defaults = QUICK if args.quick else FULL
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


@contextmanager
def session(bootstrap: str, connectors: Connectors) -> Iterator[Bench]:
    """The Spark session and a work folder; every topic the run created is deleted at the end."""
    spark = start_spark(connectors)
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-pipeline-"))
    bench = Bench(bootstrap, spark, connectors, work)
    try:
        yield bench
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if bench.topics:
            AdminClient({"bootstrap.servers": bootstrap}).delete_topics(bench.topics, operation_timeout=30)


def prepare_topic(bench: Bench, records: int, partitions: int) -> tuple[str, dict[int, int]]:
    """A new topic holding `records` records; its end offsets."""
    topic = f"bench-pipeline-{uuid.uuid4().hex[:8]}"
    create_topic(AdminClient({"bootstrap.servers": bench.bootstrap}), topic, partitions)
    bench.topics.append(topic)
    produce(bench.bootstrap, topic, records)
    ends = end_offsets(bench.bootstrap, topic, partitions)
    if sum(ends.values()) != records:
        raise AssertionError(f"{topic} holds {sum(ends.values())} records, not {records}")
    return topic, ends


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Prepare, warm up, measure; returns the figures."""
    connectors = connector_jars(spark_version(), Path(pyspark.__file__).parent / "jars")
    samples = Samples()
    with kafka_bootstrap() as bootstrap, session(bootstrap, connectors) as bench:
        note(f"producing {args.records:,} records to a {args.partitions}-partition topic on {bootstrap}")
        topic, ends = prepare_topic(bench, args.records, args.partitions)
        warm_topic, warm_ends = prepare_topic(bench, args.warm_up, args.partitions)
        note("warming up (untimed): each side once on a small topic, and a small synthetic job")
        run_oncelog(bench, warm_topic, warm_ends)
        run_sss(bench, warm_topic, warm_ends)
        run_commit_job(bench, 20, 100)
        timed_runs(bench, topic, ends, args.repeats, samples)
        for _ in range(args.repeats):
            spans = run_commit_job(bench, args.datasets, args.records_per_dataset)
            samples.commit.append(spans)
            samples.load.append(os.getloadavg()[0])
            note(f"{args.datasets:,} datasets: commit {spans['commit']:.2f}s of {spans['job']:.2f}s "
                 f"({spans['commit'] / spans['job']:.1%})")
    print_phases(median_phases(samples.oncelog_phases), median_phases(samples.commit), args.datasets)
    return figures(args, samples, connectors)


def main() -> None:
    """Run the benchmark; the figures' JSON is the last line of stdout."""
    args = parse_args()
    emit_result(run(args), title=f"pipeline: Kafka topic → Avro, {args.records:,} records ({CODEC})")


if __name__ == "__main__":
    main()
