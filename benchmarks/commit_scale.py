"""The commit at scale: synthetic jobs of 1,000, 10,000 and 100,000 datasets, sharded commit beside the driver-only
path.

    python -m benchmarks.commit_scale [--quick] [--sizes 1000,10000,100000] [--log sqlite|kafka]
                                      [--paths both|sharded|driver-only] [--shards-on spark|in-process]
                                      [--record-shapes both|batched|per-event] [--records-per-dataset 2]
                                      [--second-run]

Each dataset has one partition and a few records (spark_pipeline/sources/synthetic.py); tasks run in the job's own
process (InProcessTaskEngine), so that what is measured is the commit machinery, not Spark's scheduling of tasks.
The sharded path's shards commit as Spark tasks on a local[*] session started before the run (`--shards-on spark`, as
a cluster's executors commit them, in parallel), or one after another in the job's process (`in-process`). Every job
runs in a fresh subprocess, so that its peak RSS (resource.getrusage) is its own: the driver's, with the tasks' small
per-work-unit objects included (an upper bound of the driver's alone). For each size and each path
(`job.commit.on.executors` true: commit shards; false: the driver-only path):

- commit_s: from the run's last task event to its JobRunCommitted (catch-up of the task events, the publisher's plan,
  the planned batch appended, every step applied and recorded, every sequence completed), from the events' emitted_at;
- commit_us_per_dataset: commit_s per dataset;
- driver_peak_rss_mib: the job process's peak resident set;
- recovery_s: a second job killed right after planning (ONCELOG_CRASH_AT=after-planning), then run again in a fresh
  process: its recovery phase, from its JobRunStarted to its WorkUnitsPlanned (every pending sequence finished, by
  the shards or by the driver as the path says, and the log folded again before planning); recovered: how many
  sequences it finished;
- max_event_bytes: the largest encoded value in the log (the codec refuses any over 256 KiB);
- second_run_commit_s (`--second-run`): the same job run again, its commit phase: every dataset's folder exists by
  then, so a folder job's commit creates none (a first run's new folders cost 0.6–1 ms each on the development VM).

Each is measured with both record shapes (`--record-shapes`): batched commit records (job.commit.batch.records, the
default) and a record per event as before batches (figures prefixed `per_event_`); commit_records_per_dataset counts
the records of commit events (keys `commit/…` and `batch/…`) per dataset.

The log is SQLite by default; `--log kafka` uses `$KAFKA_BOOTSTRAP` or a local broker started for the run (a topic per
job). Last line of stdout: the JSON figures (`driver_only_` prefix for the driver-only path).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import emit_result, kafka_bootstrap, note

FULL_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
PATHS = {"": "true", "driver_only_": "false"}
"""Figure prefix → job.commit.on.executors."""
RECORD_SHAPES = {"": True, "per_event_": False}
"""Figure prefix → job.commit.batch.records (today's batched records, or a record per event as before)."""
TARGETS = {"commit_s_100000": 20.0, "recovery_s_100000": 30.0, "driver_peak_rss_mib_100000": 1024.0,
           "max_event_bytes": 256 * 1024}
JOB = "scale"
TASK_EVENTS = ("TaskSucceeded", "TaskFailed")


def job_file(base: Path, url: str, datasets: int, records: int, on_executors: str, batch_records: bool = True
             ) -> Path:
    """A synthetic job of `datasets` one-partition datasets under `base`, its job file written there."""
    base.mkdir(parents=True, exist_ok=True)
    job = {
        "job.name": JOB, "source.class": "spark_pipeline.sources.synthetic.SyntheticSource", "dataset.urn": "bench",
        "source.synthetic.datasets": datasets, "source.synthetic.partitions": 1,
        "source.synthetic.records.per.run": records, "source.synthetic.payload.bytes": 20,
        "writer.staging.dir": str(base / "staging"), "writer.output.dir": str(base / "task-output"),
        "data.publisher.final.dir": str(base / "published"), "task.maxretries": 0, "oncelog.log.url": url,
        "job.commit.on.executors": on_executors, "job.commit.batch.records": batch_records,
    }
    path = base / f"{JOB}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


# --- in the child process -------------------------------------------------------------------------------------------


def peak_rss_mib() -> float:
    """This process's peak resident set so far, in MiB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_run(path: Path, shards_on: str = "in-process") -> dict[str, Any]:
    """Run the job once, tasks in this process, shards where `shards_on` says (ONCELOG_CRASH_AT may end the process
    on the way)."""
    from events.log import open_log
    from spark_pipeline.commit.faults import FaultInjector
    from spark_pipeline.engines.base import InProcessTaskEngine
    from spark_pipeline.jobs import load_job_config
    from spark_pipeline.launcher import JobLauncher

    config = load_job_config(path)
    with open_log(config.log_url, config.log_settings) as log:
        log.ensure_topic()
        engine = (InProcessTaskEngine(log.writer) if shards_on == "in-process"
                  else spark_shards_engine(log, config))
        engine.start()
        started = time.perf_counter()
        result = JobLauncher(config, engine=engine, log=log, faults=FaultInjector.from_env(os.environ)).run()
        seconds = time.perf_counter() - started
    return {"status": result.status.name, "error": result.error, "run_id": result.run_id, "job_s": seconds,
            "peak_rss_mib": peak_rss_mib(), "recovered": len(result.recovered),
            "recovered_completed": sum(1 for r in result.recovered if r.outcome.value == "completed")}


def spark_shards_engine(log: Any, config: Any) -> Any:
    """Tasks in this process, commit shards as Spark tasks on the session's executors (local[*]: one Python worker
    per core), as a cluster commits them; the session is started before the run's clock."""
    from spark_pipeline.commit.engine import CommitEngine
    from spark_pipeline.engines.base import InProcessTaskEngine
    from spark_pipeline.engines.spark import SparkCommitEngine, spark_session

    class SparkShards(InProcessTaskEngine):
        def __init__(self) -> None:
            super().__init__(log.writer)
            self.spark = spark_session(config)

        def commit_engine(self, log: Any, fs: Any) -> CommitEngine:
            return SparkCommitEngine(self.spark)

    return SparkShards()


def child_scan(path: Path, run_id: str) -> dict[str, Any]:
    """The run's commit phase from its events' times, and the largest encoded value in the whole log."""
    from events.codec import EventCodec
    from events.log import open_log
    from spark_pipeline.jobs import load_job_config

    config = load_job_config(path)
    codec = EventCodec()
    largest, largest_type, last_task, committed, events, commit_records = 0, "", 0.0, 0.0, 0, 0
    started, planned = 0.0, 0.0
    with open_log(config.log_url, config.log_settings) as log:
        for record in log.read_records():
            if record.value is None:
                continue
            events += 1
            commit_records += record.key.startswith((b"commit/", b"batch/"))
            event = codec.decode(record.value, record.topic, record.partition, record.offset, record.key)
            if len(record.value) > largest:
                largest, largest_type = len(record.value), event.event_type()
            if event.run_id != run_id:
                continue
            at = event.emitted_at.timestamp()
            if event.event_type() in TASK_EVENTS:
                last_task = max(last_task, at)
            elif event.event_type() == "JobRunCommitted":
                committed = max(committed, at)
            elif event.event_type() == "JobRunStarted":
                started = at
            elif event.event_type() == "WorkUnitsPlanned" and not planned:
                planned = at
    return {"commit_s": committed - last_task, "recovery_s": planned - started, "max_event_bytes": largest,
            "max_event_type": largest_type, "events": events, "commit_records": commit_records}


def child_main(argv: list[str]) -> None:
    """`--child run|scan <job file> [run id]`: one step, its figures as JSON on stdout."""
    step, path = argv[0], Path(argv[1])
    if step == "run":
        figures = child_run(path, os.environ.get("ONCELOG_BENCH_SHARDS_ON", "in-process"))
    else:
        figures = child_scan(path, argv[2])
    sys.stdout.write(json.dumps(figures) + "\n")


# --- in the parent --------------------------------------------------------------------------------------------------


def child(step: str, *args: str, env: dict[str, str] | None = None, may_die: bool = False) -> dict[str, Any]:
    """Run one step in a fresh Python process; its JSON figures ({} when it died as asked)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.commit_scale", "--child", step, *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})}, check=False)
    if done.returncode != 0:
        if may_die:
            return {}
        raise RuntimeError(f"{step} {' '.join(args)} exited {done.returncode}: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def log_url(template: str, folder: Path) -> str:
    """The log of one job: `{folder}` (SQLite: a file there) and `{topic}` (Kafka: a topic of its own) filled in."""
    return template.format(folder=folder, topic=f"bench-commit-scale-{uuid.uuid4().hex[:8]}")


def measure(base: Path, template: str, datasets: int, records: int, on_executors: str, shards_on: str,
            batch_records: bool, second_run: bool = False) -> dict[str, Any]:
    """One path at one size: a full run (`second_run`: and the same job again, publishing into the folders the first
    made), then a run killed after planning and its recovery."""
    where = {"ONCELOG_BENCH_SHARDS_ON": shards_on}
    path = job_file(base / "run", log_url(template, base / "run"), datasets, records, on_executors, batch_records)
    ran = child("run", str(path), env=where)
    if ran["status"] != "COMMITTED":
        raise RuntimeError(f"{datasets:,} datasets: the run ended {ran['status']}: {ran['error']}")
    scanned = child("scan", str(path), ran["run_id"])
    again: dict[str, Any] = {}
    if second_run:
        rerun = child("run", str(path), env=where)
        if rerun["status"] != "COMMITTED":
            raise RuntimeError(f"{datasets:,} datasets: the second run ended {rerun['status']}: {rerun['error']}")
        again = {"second_run_commit_s": round(child("scan", str(path), rerun["run_id"])["commit_s"], 3),
                 "second_run_peak_rss_mib": round(rerun["peak_rss_mib"], 1)}
    crash = job_file(base / "crash", log_url(template, base / "crash"), datasets, records, on_executors,
                     batch_records)
    killed = child("run", str(crash), env={**where, "ONCELOG_CRASH_AT": "after-planning"}, may_die=True)
    recovered = child("run", str(crash), env=where)
    if recovered["status"] != "COMMITTED":
        raise RuntimeError(f"{datasets:,} datasets: the run after the crash ended {recovered['status']}: "
                           f"{recovered['error']}")
    crash_scan = child("scan", str(crash), recovered["run_id"])
    shutil.rmtree(base, ignore_errors=True)
    return {
        "commit_s": round(scanned["commit_s"], 3), "job_s": round(ran["job_s"], 3),
        "commit_us_per_dataset": round(scanned["commit_s"] / datasets * 1e6, 1),
        "driver_peak_rss_mib": round(ran["peak_rss_mib"], 1),
        "recovery_s": round(crash_scan["recovery_s"], 3), "recovered": recovered["recovered"],
        "recovered_completed": recovered["recovered_completed"], "crashed_as_asked": not killed,
        "recovery_run_peak_rss_mib": round(recovered["peak_rss_mib"], 1),
        "max_event_bytes": max(scanned["max_event_bytes"], crash_scan["max_event_bytes"]),
        "max_event_type": scanned["max_event_type"], "events": scanned["events"],
        "commit_records_per_dataset": round(scanned["commit_records"] / datasets, 4), **again,
    }


@contextmanager
def log_template(kind: str) -> Iterator[str]:
    """The log URL of the jobs, `{folder}`/`{topic}` to fill: a SQLite file, or a Kafka topic on a broker."""
    if kind == "sqlite":
        yield "sqlite:///{folder}/events.db"
        return
    with kafka_bootstrap() as bootstrap:
        yield f"kafka://{bootstrap}?topic={{topic}}"


def paths(chosen: str) -> dict[str, str]:
    """The paths to measure (`--paths`): both, or only the sharded or the driver-only one (run the two side by side
    in two processes when the time matters more than a quiet machine)."""
    return {prefix: value for prefix, value in PATHS.items()
            if chosen == "both" or (chosen == "driver-only") == bool(prefix)}


def shapes(chosen: str) -> dict[str, bool]:
    """The record shapes to measure (`--record-shapes`): figure prefix → job.commit.batch.records."""
    return {prefix: value for prefix, value in RECORD_SHAPES.items()
            if chosen == "both" or (chosen == "per-event") == bool(prefix)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every size, both paths; the figures."""
    sizes = QUICK_SIZES if args.quick else tuple(int(s) for s in args.sizes.split(","))
    figures: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-commit-scale-"))
    try:
        with log_template(args.log) as template:
            for datasets in sizes:
                for shape, batch_records in shapes(args.record_shapes).items():
                    for path_prefix, on_executors in paths(args.paths).items():
                        prefix = shape + path_prefix
                        note(f"{datasets:,} datasets, {'driver only' if path_prefix else 'commit shards'}, "
                             f"{'a record per event' if shape else 'batched records'}: running")
                        found = measure(work / f"{prefix or 'sharded_'}{datasets}", template, datasets,
                                        args.records_per_dataset, on_executors, args.shards_on, batch_records,
                                        args.second_run)
                        note(f"  commit {found['commit_s']:.2f}s of {found['job_s']:.2f}s, "
                             f"{found['commit_us_per_dataset']:,.0f} µs/dataset, peak RSS "
                             f"{found['driver_peak_rss_mib']:,.0f} MiB, recovery of {found['recovered']:,} sequences "
                             f"{found['recovery_s']:.2f}s, largest event {found['max_event_bytes']:,} bytes "
                             f"({found['max_event_type']})")
                        for name, value in found.items():
                            if name != "max_event_bytes":
                                figures[f"{prefix}{name}_{datasets}"] = value
                        key = f"{prefix}max_event_bytes"
                        figures[key] = max(figures.get(key, 0), found["max_event_bytes"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures.update({"sizes": list(sizes), "paths": args.paths, "record_shapes": args.record_shapes,
                    "quick": args.quick, "log": args.log, "engine": "in-process", "shards_on": args.shards_on,
                    "records_per_dataset": args.records_per_dataset, "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2)})
    for name, target in TARGETS.items():
        if name in figures:
            figures[f"{name}_target_met"] = figures[name] <= target
    return figures


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 datasets only (under two minutes)")
    parser.add_argument("--second-run", action="store_true",
                        help="run each job twice and report the second commit too (second_run_commit_s): its datasets' "
                             "folders exist, so it measures the commit without creating them")
    parser.add_argument("--sizes", default=",".join(map(str, FULL_SIZES)), help="dataset counts, comma-separated")
    parser.add_argument("--log", choices=("sqlite", "kafka"), default="sqlite", help="the log's store")
    parser.add_argument("--paths", choices=("both", "sharded", "driver-only"), default="both",
                        help="which commit paths to measure")
    parser.add_argument("--shards-on", choices=("spark", "in-process"), default="spark",
                        help="where the sharded path's shards commit: Spark tasks on local[*] executors (as on a "
                             "cluster), or one after another in the job's process")
    parser.add_argument("--record-shapes", choices=("both", "batched", "per-event"), default="both",
                        help="batched commit records (job.commit.batch.records, the default), a record per event "
                             "(as before batches; figures prefixed per_event_), or both side by side")
    parser.add_argument("--records-per-dataset", type=int, default=2, help="records per dataset and run")
    return parser.parse_args()


def main() -> None:
    """Run the benchmark (or, with --child, one step of it); the figures' JSON is the last line of stdout."""
    if sys.argv[1:2] == ["--child"]:
        child_main(sys.argv[2:])
        return
    args = parse_args()
    emit_result(run(args), title="commit at scale: sharded commit beside the driver-only path")


if __name__ == "__main__":
    main()
