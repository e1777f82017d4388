"""Table publishing: a Kafka topic into an Iceberg table and a Delta table, beside the same job publishing Parquet
folders, in one run; and the table commit of a many-dataset job.

    python -m benchmarks.tables [--quick] [--records N] [--partitions P] [--repeats R] [--datasets D]
                                [--commit-repeats C]

One topic (8 partitions) holds N page-view records (pipeline.py's), produced before any timing with Kafka timestamps
spread over hours from a day before the run (37 ms apart: 1M records span about ten hours), so that the time
partitioner (`HOUR`, UTC, on the
record's timestamp) splits every dataset's output into hourly partitions. Every side is oncelog's DataFrame engine
writing snappy Parquet, in ONE SparkSession, timed from launch to return; they differ only in their publisher:

- folders: the default publisher, hourly partition folders under `data.publisher.final.dir`;
- iceberg: `IcebergTablePublisher` into a new table (SQLite catalog in the warehouse);
- delta: `DeltaTablePublisher` into a new table.

Each side's output is read back (pyarrow over the folders' files, pyiceberg's scan, deltalake's reader): every offset
of every partition exactly once, or the benchmark fails. After an untimed warm-up of each side on a smaller topic, the
sides rotate which goes first. Figures: records/s at the median repeat, and the table sides over the folder side.

The table commit: a synthetic job of D datasets (10,000; `--quick` 1,000), one partition and a few records each,
published by each table publisher and, beside it, by the folder publisher, each committed on the driver (a table
job's default; `job.commit.on.executors: false` for the folder job too); its commit phase from the run's last
task event to JobRunCommitted, read from the log's timestamps (benchmarks.pipeline's phases); `--commit-repeats`
runs of each side (3; `--quick` 1), the sides rotating which goes first, the median the figure (single runs of one code
were seen to differ by 3× on this VM).

The Kafka broker is `$KAFKA_BOOTSTRAP`, or a local one started for the run. Last line of stdout: the JSON figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.common import emit_result, kafka_bootstrap, note
from benchmarks.pipeline import (
    Bench,
    Timed,
    audited,
    phases,
    prepare_topic,
    session,
    timing,
)
from events.errors import OncelogError
from projections.views import RunStatus
from spark_pipeline.connectors import fetch_connectors
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.launcher import JobLauncher

PARTITIONS = 8
HOUR_MS = 3_600_000
FIRST_TS_MS = (time.time_ns() // 1_000_000 // HOUR_MS - 24) * HOUR_MS
"""The start of the hour a day before the run: a fixed date would age out of the broker's retention (7 days by
default: the topic's records deleted while the benchmark reads them) and lie after a clock set back."""
STEP_MS = 37
"""Record i's Kafka timestamp is FIRST_TS_MS + 37·i: 97,297 records an hour."""
FULL = {"records": 1_000_000, "repeats": 3, "datasets": 10_000, "warm_up": 100_000, "commit_repeats": 3}
QUICK = {"records": 100_000, "repeats": 1, "datasets": 1_000, "warm_up": 20_000, "commit_repeats": 1}
TARGETS = {"iceberg_over_folders": 0.9, "delta_over_folders": 0.9, "iceberg_commit_s_10000": 5.0,
           "delta_commit_s_10000": 5.0}
"""The tables issue's targets."""
HOURLY = {"writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
          "writer.partition.granularity": "HOUR", "writer.partition.timezone": "UTC"}
"""Gobblin's time partitioner, hourly, on the record's timestamp (no partition column: the Kafka timestamp)."""


class Side(StrEnum):
    """Where a side publishes."""

    FOLDERS = "folders"
    ICEBERG = "iceberg"
    DELTA = "delta"


PUBLISHERS: dict[Side, dict[str, str]] = {
    Side.FOLDERS: {},
    Side.ICEBERG: {"data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher",
                   "iceberg.table": "bench.events"},
    Side.DELTA: {"data.publisher.type": "spark_pipeline.tables.delta_publisher.DeltaTablePublisher",
                 "delta.table": "bench.events"},
}
"""Each side's publisher keys (the warehouse or the folders: data.publisher.final.dir)."""


def job_config(base: Path, log_url: str, keys: Mapping[str, str]) -> JobConfig:
    """An oncelog job on the DataFrame engine writing snappy Parquet under `base`, its log at `log_url`."""
    return config_from_properties({
        "job.name": "bench-tables", "writer.staging.dir": str(base / "staging"),
        "writer.output.dir": str(base / "task-output"), "data.publisher.final.dir": str(base / "published"),
        "writer.output.format": "PARQUET", "writer.codec.type": "snappy", "task.engine": "dataframe",
        "oncelog.log.url": log_url, "task.maxretries": "0", "task.retry.intervalinsec": "0",
        "spark.master": "local[*]", **keys})


def accepted_sides(work: Path) -> list[Side]:
    """The sides whose publisher the job config accepts (a table format not built yet: left out, figures null)."""
    sides = []
    for side, keys in PUBLISHERS.items():
        try:
            job_config(work / "probe", f"sqlite:///{work / 'probe.db'}", {**topic_keys("127.0.0.1:9", "probe"),
                                                                           **keys})
        except OncelogError as e:
            note(f"{side}: the job config does not accept {keys}: {' '.join(str(e).split())[:300]}")
            continue
        sides.append(side)
    return sides


def topic_keys(bootstrap: str, topic: str) -> dict[str, str]:
    """The keys reading `topic` from its beginning, hourly partitions."""
    return {"source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource", "kafka.brokers": bootstrap,
            "topic.whitelist": topic, "bootstrap.with.offset": "earliest", **HOURLY}


def event_time_ms(i: int) -> int:
    """Record i's Kafka timestamp: 37 ms after record i-1's (hours of event time)."""
    return FIRST_TS_MS + STEP_MS * i


# --- reading back ---------------------------------------------------------------------------------------------------


def read_folders(published: Path) -> pa.Table:
    """Every Parquet file the folder publisher published (its partition folders included)."""
    files = sorted(published.rglob("*.parquet"))
    return pa.concat_tables(pq.read_table(f, columns=["partition", "offset"]) for f in files)


def read_iceberg(published: Path) -> pa.Table:
    """The Iceberg table, through pyiceberg's scan."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("oncelog", uri=f"sqlite:///{published / 'iceberg-catalog.db'}", warehouse=str(published))
    return catalog.load_table(PUBLISHERS[Side.ICEBERG]["iceberg.table"]).scan(
        selected_fields=("partition", "offset")).to_arrow()


def read_delta(published: Path) -> pa.Table:
    """The Delta table, through deltalake's reader."""
    from deltalake import DeltaTable

    return DeltaTable(str(published.joinpath(*PUBLISHERS[Side.DELTA]["delta.table"].split(".")))).to_pyarrow_table(
        columns=["partition", "offset"])


def data_folder(side: Side, published: Path) -> Path:
    """Where `side` publishes its data files: verify's publish folder (a table's metadata lies beside it)."""
    table = PUBLISHERS[side].get("iceberg.table") or PUBLISHERS[side].get("delta.table")
    return published.joinpath(*table.split("."), "data") if table else published


READERS: dict[Side, Callable[[Path], pa.Table]] = {Side.FOLDERS: read_folders, Side.ICEBERG: read_iceberg,
                                                   Side.DELTA: read_delta}


def check_exactly_once(table: pa.Table, ends: Mapping[int, int], side: Side) -> None:
    """Every offset of every partition exactly once: per partition, as many rows as distinct offsets as the end."""
    counts = table.group_by("partition").aggregate([("offset", "count"), ("offset", "count_distinct"),
                                                    ("offset", "min"), ("offset", "max")])
    found = {row["partition"]: (row["offset_count"], row["offset_count_distinct"], row["offset_min"],
                                row["offset_max"]) for row in counts.to_pylist()}
    expected = {p: (end, end, 0, end - 1) for p, end in ends.items() if end}
    if found != expected:
        raise AssertionError(f"{side}: (rows, distinct offsets, lowest, highest) per partition {found}, "
                             f"expected {expected}")
    if pc.sum(pc.is_null(table["offset"])).as_py():
        raise AssertionError(f"{side}: rows without an offset")


# --- the sides ------------------------------------------------------------------------------------------------------


def run_side(bench: Bench, side: Side, keys: Mapping[str, str]) -> tuple[Timed, JobLauncher, Path, str]:
    """One oncelog run publishing through `side`'s publisher; its timing, launcher, base folder and log URL."""
    base = bench.fresh(side.value)
    log_url = bench.log_url()
    launcher = JobLauncher(job_config(base, log_url, {**keys, **PUBLISHERS[side]}), spark=bench.spark)
    timed: list[Timed] = []
    with timing(timed):
        result = launcher.run()
    if result.status is not RunStatus.COMMITTED:
        raise AssertionError(f"oncelog run ({side}) ended {result.status}: {result.error}")
    return timed[0], launcher, base, log_url


def run_topic(bench: Bench, side: Side, topic: str, ends: Mapping[int, int]) -> Timed:
    """`side` over the whole topic, its output read back and checked."""
    timed, _, base, _ = run_side(bench, side, topic_keys(bench.bootstrap, topic))
    check_exactly_once(READERS[side](base / "published"), ends, side)
    shutil.rmtree(base)
    return timed


def run_commit(bench: Bench, side: Side, datasets: int) -> float:
    """A synthetic job of `datasets` datasets published by `side`; its commit phase in seconds."""
    keys = {"source.class": "spark_pipeline.sources.synthetic.SyntheticSource", "dataset.urn": "bench",
            "source.synthetic.datasets": str(datasets), "source.synthetic.partitions": "1",
            "source.synthetic.records.per.run": "2", "source.synthetic.payload.bytes": "50",
            "job.commit.on.executors": "false"}  # every side on the driver, as a table job's commit runs by default
    launched = time.time()
    timed, launcher, base, log_url = run_side(bench, side, keys)
    at = audited(log_url, launcher.run_id, data_folder(side, base / "published"), datasets)
    shutil.rmtree(base)
    return phases(at, launched, launched + timed.seconds)["commit"]


@dataclass
class Samples:
    """Each side's timed runs on the topic, its table commit, and the 1-minute load after each run."""

    topic: dict[Side, list[Timed]] = field(default_factory=dict)
    commit_s: dict[Side, list[float]] = field(default_factory=dict)
    load: list[float] = field(default_factory=list)


def measure(bench: Bench, sides: list[Side], args: argparse.Namespace) -> Samples:
    """Warm up, then time every side `repeats` times (rotating), then each side's many-dataset commit."""
    samples = Samples()
    note(f"producing {args.records:,} records ({args.records * STEP_MS / HOUR_MS:.1f} hours of event time)")
    topic, ends = prepare_topic(bench, args.records, PARTITIONS, event_time_ms)
    warm_topic, warm_ends = prepare_topic(bench, args.warm_up, PARTITIONS, event_time_ms)
    note("warming up (untimed): each side once on a small topic")
    for side in sides:
        run_topic(bench, side, warm_topic, warm_ends)
    for i in range(args.repeats):
        for side in sides[i % len(sides):] + sides[:i % len(sides)]:
            timed = run_topic(bench, side, topic, ends)
            samples.topic.setdefault(side, []).append(timed)
            samples.load.append(os.getloadavg()[0])
            note(f"{side}: {args.records / timed.seconds:,.0f} records/s ({timed.seconds:.2f}s, {timed.cpu:.1f} CPU s)")
    for i in range(args.commit_repeats):
        for side in sides[i % len(sides):] + sides[:i % len(sides)]:
            seconds = run_commit(bench, side, args.datasets)
            samples.commit_s.setdefault(side, []).append(seconds)
            samples.load.append(os.getloadavg()[0])
            note(f"{side}: {args.datasets:,} datasets committed in {seconds:.2f}s")
    return samples


def figures(args: argparse.Namespace, samples: Samples) -> dict[str, Any]:
    """The figures the targets are set on, every repeat's, the load and the set-up; null for a side not built."""
    def rps(side: Side) -> int | None:
        runs = samples.topic.get(side)
        return round(args.records / statistics.median(t.seconds for t in runs)) if runs else None

    def over_folders(side: Side) -> float | None:
        table, folders = rps(side), rps(Side.FOLDERS)
        return round(table / folders, 3) if table and folders else None

    def commit(side: Side) -> float | None:
        runs = samples.commit_s.get(side)
        return round(statistics.median(runs), 3) if runs else None

    result: dict[str, Any] = {
        "iceberg_rps": rps(Side.ICEBERG), "delta_rps": rps(Side.DELTA), "folders_rps": rps(Side.FOLDERS),
        "iceberg_over_folders": over_folders(Side.ICEBERG), "delta_over_folders": over_folders(Side.DELTA),
        f"iceberg_commit_s_{args.datasets}": commit(Side.ICEBERG),
        f"delta_commit_s_{args.datasets}": commit(Side.DELTA),
        f"folders_commit_s_{args.datasets}": commit(Side.FOLDERS),
        **{f"{side}_rps_each": [round(args.records / t.seconds) for t in runs] for side, runs in samples.topic.items()},
        **{f"{side}_commit_s_each": [round(s, 3) for s in runs] for side, runs in samples.commit_s.items()},
        **{f"{side}_cpu_s": round(statistics.median(t.cpu for t in runs), 2) for side, runs in samples.topic.items()},
        "records": args.records, "partitions": PARTITIONS, "hours": round(args.records * STEP_MS / 3_600_000, 1),
        "datasets": args.datasets, "repeats": args.repeats, "commit_repeats": args.commit_repeats,
        "quick": args.quick, "cpus": os.cpu_count(),
        "load_avg_1m_median": round(statistics.median(samples.load), 2) if samples.load else None,
    }
    met = {f"{name}_target_met": (None if result.get(name) is None else
                                  result[name] >= target if name.endswith("over_folders") else result[name] <= target)
           for name, target in TARGETS.items()}
    return {**result, **met}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 records, 1 repeat, 1,000 datasets")
    parser.add_argument("--records", type=int, help="records in the topic (1,000,000)")
    parser.add_argument("--repeats", type=int, help="timed runs of each side (3)")
    parser.add_argument("--datasets", type=int, help="datasets of the table-commit job (10,000)")
    parser.add_argument("--warm-up", type=int, help="records of the untimed warm-up topic (100,000)")
    parser.add_argument("--commit-repeats", type=int,
                        help="runs of each side's many-dataset job, sides rotating; the median is the figure (3)")
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main() -> None:
    """Run the benchmark; the figures' JSON is the last line of stdout."""
    args = parse_args()
    fetch_connectors()
    with kafka_bootstrap() as bootstrap, session(bootstrap) as bench:
        sides = accepted_sides(bench.work)
        if Side.FOLDERS not in sides:
            raise SystemExit("the folder side (the baseline) is not accepted by the job config")
        samples = measure(bench, sides, args)
    emit_result(figures(args, samples), title=f"tables: Kafka topic → Parquet, {args.records:,} records, hourly")


if __name__ == "__main__":
    main()
