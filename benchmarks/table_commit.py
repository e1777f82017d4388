"""The table part of a run's commit, in process: `commit_together` of D datasets' table steps into one Iceberg table
and one Delta table, a first run (the table created) and a second run into the same table.

    python -m benchmarks.table_commit [--datasets D] [--runs R] [--partitioned] [--formats iceberg,delta]

Each dataset has one small Parquet file per run (two records: partition, offset, epoch-millis timestamp, key, a 50-byte
payload), written under the table's `data/` folder before any timing, as a run's renames leave them. Timed: the one
`commit_together` call of each run (pyiceberg's SQL catalog on SQLite, delta-rs; local disk), every step checked
executed. `--partitioned`: the tables are partitioned by the timestamp's hour (`truncate`; Delta's `timestamp_hour`).
Last line of stdout: the JSON figures (seconds per format and run).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import emit_result, note
from events.commit import DeltaCommitStep, TableCommitStep
from filesystems.local import LOCAL
from spark_pipeline.commit.tables import TableMember, commit_together
from spark_pipeline.tables.partitioning import PARTITION_SPEC, Period, TablePartitioning

HOUR_MS = 3_600_000
FIRST_MS = 1_795_651_200_000  # 2026-11-26T00:00Z
FORMATS = ("iceberg", "delta")


def data_file(folder: Path, dataset: int, run: int) -> str:
    """Dataset `dataset`'s file of run `run`: two records within one hour."""
    path = folder / "data" / f"run-{run}" / f"ds-{dataset}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = FIRST_MS + run * HOUR_MS + dataset % 1000
    pq.write_table(pa.table({"partition": pa.array([0, 0], pa.int32()),
                             "offset": pa.array([2 * run, 2 * run + 1], pa.int64()),
                             "timestamp": pa.array([stamp, stamp + 1], pa.int64()),
                             "key": pa.array([f"ds-{dataset}", f"ds-{dataset}"]),
                             "payload": pa.array([b"x" * 50, b"y" * 50], pa.binary())}), path, compression="snappy")
    return str(path)


def summary(dataset: int, run: int, partitioned: bool) -> dict[str, str]:
    """A sequence's summary as the table publishers make it (`snapshot_summary`, the partition spec)."""
    spec = {PARTITION_SPEC: TablePartitioning("timestamp", Period.HOUR).encode()} if partitioned else {}
    return {"oncelog.job": "bench", "oncelog.run-id": f"run-{run}", "oncelog.dataset": f"ds-{dataset}",
            "oncelog.sequence-id": f"seq-{run}-{dataset}", "oncelog.records": "2",
            "oncelog.watermarks": json.dumps({f"ds-{dataset}:0": [2 * run, 2 * run + 2]}), **spec}


def members(kind: str, base: Path, datasets: int, run: int, partitioned: bool) -> list[TableMember]:
    """The run's table steps of `datasets` datasets, each with its file written."""
    found = []
    for d in range(datasets):
        meta = summary(d, run, partitioned)
        if kind == "iceberg":
            location = base / "lake" / "events"
            spec: TableCommitStep | DeltaCommitStep = TableCommitStep(
                catalog_uri=f"sqlite:///{base / 'iceberg-catalog.db'}", catalog_name="oncelog", warehouse=str(base),
                table="lake.events", location=str(location), commit_id=f"bench/ds-{d}/seq-{run}-{d}", summary=meta,
                group=f"bench/run-{run}/00000000", member=d)
        else:
            location = base / "events"
            spec = DeltaCommitStep(table="events", location=str(location), app_id=f"oncelog/bench/ds-{d}",
                                   version=run, commit_id=f"bench/ds-{d}/seq-{run}-{d}", metadata=meta)
        found.append(TableMember(spec, (data_file(location, d, run),)))
    return found


def measure(kind: str, base: Path, args: argparse.Namespace) -> list[float]:
    """Each run's `commit_together` seconds for `kind`."""
    seconds = []
    for run in range(1, args.runs + 1):
        prepared = members(kind, base, args.datasets, run, args.partitioned)
        started = time.perf_counter()
        outcomes = commit_together(prepared, LOCAL)
        seconds.append(time.perf_counter() - started)
        wrong = [(o.done, o.error) for o in outcomes if o.done != "executed"]
        if wrong:
            raise AssertionError(f"{kind} run {run}: {len(wrong)} step(s) not executed, the first {wrong[0]}")
        note(f"{kind} run {run}: {args.datasets:,} datasets committed in {seconds[-1]:.2f}s")
    return seconds


def main() -> None:
    """Run the benchmark; the figures' JSON is the last line of stdout."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--partitioned", action="store_true")
    parser.add_argument("--formats", default=",".join(FORMATS))
    args = parser.parse_args()
    figures: dict[str, Any] = {"datasets": args.datasets, "partitioned": args.partitioned}
    for kind in args.formats.split(","):
        with tempfile.TemporaryDirectory(prefix=f"oncelog-bench-{kind}-") as work:
            for run, seconds in enumerate(measure(kind, Path(work), args), 1):
                figures[f"{kind}_run{run}_s"] = round(seconds, 3)
    emit_result(figures, title=f"table commit of {args.datasets:,} datasets, in process")


if __name__ == "__main__":
    main()
