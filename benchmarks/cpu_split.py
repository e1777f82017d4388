"""Where a pipeline run's CPU goes: per process and per JVM thread group, each side of `benchmarks.pipeline`.

    python -m benchmarks.cpu_split [--quick] [--records N] [--repeats R] [--sides dataframe,unguarded_no_wait,sss]
                                   [--warm-up W] [--jfr FILE] [--java-options=OPTIONS]

The sides are `benchmarks.pipeline`'s (same topic, same shared Spark session, same output checks, the same rotation
of which side goes first), and `dataframe_executor_moves`: the DataFrame engine moving its files with Python workers
on the executors, as it did under a local master before 26 November 2026, measured beside today's. Around each timed
run, exactly where its timer runs, every process of this tree (the broker left out) is read from /proc: this driver's
threads, the Spark JVM's threads, the Python workers. The CPU a run took is split into:

- processes: `driver` (this Python process), `jvm`, `python_workers` (pyspark.daemon and its workers, ended ones
  included), `other`;
- JVM thread groups, by the thread's native name (Linux keeps 15 characters): `task` ("Executor task launch
  worker", "Executor task idle worker" in Spark 4: Spark's tasks, the Kafka consumer's fetches included), `jit` (C1 /
  C2 compiler threads), `gc` (GC workers, G1's concurrent threads), `vm_thread` (safepoint operations), `kafka`
  (producer, admin and heartbeat threads), `spark_rpc` (dispatcher, netty, heartbeats), `scheduler` (DAG scheduler,
  task results), `listener_bus`, `stream_execution` (Structured Streaming's driver loop), `py4j` (the threads
  serving the Python calls: planning, Janino's compiles of generated code), `ended` (threads that ended during the
  run), `other`;
- driver thread groups: `main`, `librdkafka` (`rdk:` threads), `other`.

`--jfr FILE` records the timed runs with Java Flight Recorder (started by `jcmd` after the warm-up, settings
`profile`) and adds, per run, the JIT's long compilations (at least 100 ms, that setting's threshold) with their
time and the GC's pauses, and per side the hottest methods of the task threads (self samples). Last line of stdout:
the JSON figures. See docs/benchmarks.md.
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
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any
from unittest import mock

from rich.console import Console
from rich.table import Table

from benchmarks.common import emit_result, kafka_bootstrap, note
from benchmarks.pipeline import Bench, Side, prepare_topic, run_side, session
from spark_pipeline.connectors import fetch_connectors
from spark_pipeline.engines.dataframe import results
from spark_pipeline.engines.dataframe.results import MovePlace

FULL = {"records": 1_000_000, "repeats": 3, "warm_up": 200_000}
QUICK = {"records": 100_000, "repeats": 2, "warm_up": 20_000}


class Variant(StrEnum):
    """A side of `benchmarks.pipeline`, or the DataFrame engine as it was before a change (measured beside it)."""

    RECORDS = "records"
    DATAFRAME = "dataframe"
    PARQUET = "parquet"
    UNGUARDED = "unguarded"
    UNGUARDED_NO_WAIT = "unguarded_no_wait"
    SSS = "sss"
    DATAFRAME_EXECUTOR_MOVES = "dataframe_executor_moves"
    """The DataFrame engine moving its files with Python workers on the executors, as under a local master before
    26 November 2026 (results.move_place)."""

    @property
    def side(self) -> Side:
        """The pipeline benchmark's side it runs."""
        return Side.DATAFRAME if self is Variant.DATAFRAME_EXECUTOR_MOVES else Side(self.value)


@contextmanager
def variant_of(variant: Variant) -> Iterator[None]:
    """The engine set up as `variant` needs while its run lasts."""
    if variant is not Variant.DATAFRAME_EXECUTOR_MOVES:
        yield
        return
    with mock.patch.object(results, "move_place", lambda _spark: MovePlace.EXECUTORS):
        yield


DEFAULT_SIDES = (Variant.DATAFRAME, Variant.UNGUARDED_NO_WAIT, Variant.SSS)
PROC = Path("/proc")
TICK = os.sysconf("SC_CLK_TCK")


class ProcessKind(StrEnum):
    """What a process of this tree is."""

    DRIVER = "driver"
    JVM = "jvm"
    PYTHON_WORKERS = "python_workers"
    OTHER = "other"


JVM_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("task", ("Executor task",)),
    ("jit", ("C1 CompilerThre", "C2 CompilerThre", "Sweeper thread")),
    ("gc", ("GC Thread", "G1 ", "VM Periodic", "GC ")),
    ("vm_thread", ("VM Thread",)),
    ("kafka", ("kafka",)),
    ("spark_rpc", ("dispatcher-", "rpc-", "netty", "shuffle-", "RPC", "driver-heartbea", "executor-heartb",
                   "map-output-disp", "block-manager")),
    ("scheduler", ("dag-scheduler", "task-result-get", "task-scheduler")),
    ("listener_bus", ("spark-listener",)),
    ("stream_execution", ("stream execution",)),
    ("py4j", ("Thread-",)),
)
"""JVM thread groups by the prefix of the thread's native name (15 characters at most); the first match wins."""


def jvm_group(name: str) -> str:
    """The group of a JVM thread, by its native name."""
    for group, prefixes in JVM_GROUPS:
        if name.startswith(prefixes):
            return group
    return "other"


def driver_group(name: str, tid: int, pid: int) -> str:
    """The group of a driver thread: its main thread, librdkafka's threads, the rest."""
    if tid == pid:
        return "main"
    return "librdkafka" if name.startswith("rdk:") else "other"


# --- /proc snapshots ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessCpu:
    """One process's CPU seconds at a moment: its own (all its threads, ended ones included), its reaped children's,
    and each live thread's (tid → name, seconds; read for the driver and the JVM only)."""

    kind: ProcessKind
    own: float
    reaped: float
    threads: Mapping[int, tuple[str, float]] = field(default_factory=dict)


def stat_of(path: Path) -> tuple[str, list[str]] | None:
    """A /proc stat file's name (comm) and its fields from the 3rd (state) on; None if it is gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()


def process_kind(pid: int) -> ProcessKind | None:
    """The kind of process `pid` is; None for a Kafka broker (left out, as `benchmarks.pipeline` leaves it out)."""
    if pid == os.getpid():
        return ProcessKind.DRIVER
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return ProcessKind.OTHER
    if b"kafka.Kafka" in argv:
        return None
    if argv and argv[0].endswith(b"/java"):
        return ProcessKind.JVM
    if b"pyspark.daemon" in argv or b"pyspark.worker" in argv:
        return ProcessKind.PYTHON_WORKERS
    return ProcessKind.OTHER


def threads_of(pid: int) -> dict[int, tuple[str, float]]:
    """Each live thread of `pid`: its name and CPU seconds (user + system)."""
    threads = {}
    for task in (PROC / str(pid) / "task").iterdir():
        stat = stat_of(task / "stat")
        if stat is not None:
            name, fields = stat
            threads[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return threads


def snapshot() -> dict[int, ProcessCpu]:
    """Every process of this tree (this process and its descendants, a Kafka broker's subtree left out)."""
    parents: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = stat_of(entry / "stat")
            if stat is not None:
                stats[int(entry.name)] = stat[1]
                parents.setdefault(int(stat[1][1]), []).append(int(entry.name))
    found: dict[int, ProcessCpu] = {}
    stack = [os.getpid()]
    while stack:
        pid = stack.pop()
        kind = process_kind(pid)
        if kind is None or pid not in stats:
            continue
        fields = stats[pid]
        threads = threads_of(pid) if kind in (ProcessKind.DRIVER, ProcessKind.JVM) else {}
        found[pid] = ProcessCpu(kind, (int(fields[11]) + int(fields[12])) / TICK,
                                (int(fields[13]) + int(fields[14])) / TICK, threads)
        stack += parents.get(pid, [])
    return found


@dataclass(frozen=True)
class Split:
    """The CPU seconds of one timed run: per process kind, per JVM and driver thread group, per JVM thread name
    (its trailing number as N), with the run's wall clock."""

    started: float
    seconds: float
    processes: Mapping[str, float]
    jvm: Mapping[str, float]
    driver: Mapping[str, float]
    jvm_names: Mapping[str, float]

    @property
    def total(self) -> float:
        """The run's CPU seconds, every process of the tree."""
        return sum(self.processes.values())


def thread_deltas(before: ProcessCpu | None, after: ProcessCpu) -> Iterator[tuple[int, str, float]]:
    """Each live thread's CPU seconds between the snapshots (a new thread's since it started)."""
    earlier = before.threads if before is not None else {}
    for tid, (name, seconds) in after.threads.items():
        yield tid, name, seconds - earlier.get(tid, (name, 0.0))[1]


def add(totals: dict[str, float], key: str, seconds: float) -> None:
    """Add `seconds` to `totals[key]`."""
    totals[key] = totals.get(key, 0.0) + seconds


def split_of(before: Mapping[int, ProcessCpu], after: Mapping[int, ProcessCpu], started: float, seconds: float
             ) -> Split:
    """What each process and thread group took between two snapshots. A thread that ended in between shows as the
    difference between its process's CPU and its live threads' (`ended`); a process that ended in between counts in
    its parent's reaped children."""
    processes: dict[str, float] = {}
    jvm: dict[str, float] = {}
    driver: dict[str, float] = {}
    names: dict[str, float] = {}
    for pid, now in after.items():
        then = before.get(pid)
        own = now.own - (then.own if then else 0.0)
        add(processes, now.kind.value, own + now.reaped - (then.reaped if then else 0.0))
        if now.kind is ProcessKind.JVM:
            live = 0.0
            for _tid, name, delta in thread_deltas(then, now):
                add(jvm, jvm_group(name), delta)
                add(names, re.sub(r"\d+$", "N", name), delta)
                live += delta
            add(jvm, "ended", max(0.0, own - live))
        elif now.kind is ProcessKind.DRIVER:
            live = 0.0
            for tid, name, delta in thread_deltas(then, now):
                add(driver, driver_group(name, tid, pid), delta)
                live += delta
            add(driver, "ended", max(0.0, own - live))
    return Split(started, seconds, processes, jvm, driver, names)


@dataclass
class Recorder:
    """Brackets each timed run with /proc snapshots (`Bench.around`); the splits in the order run."""

    splits: list[Split] = field(default_factory=list)

    @contextmanager
    def around(self) -> Iterator[None]:
        """Snapshots just outside the benchmark's own timer."""
        before, started, wall = snapshot(), time.time(), time.perf_counter()
        yield
        seconds = time.perf_counter() - wall
        self.splits.append(split_of(before, snapshot(), started, seconds))


def jvm_pid() -> int:
    """The pid of the Spark JVM under this process."""
    pids = [pid for pid, p in snapshot().items() if p.kind is ProcessKind.JVM]
    if len(pids) != 1:
        raise RuntimeError(f"expected one JVM under this process, found {pids}")
    return pids[0]


# --- Java Flight Recorder -------------------------------------------------------------------------------------------


def jcmd(pid: int, *command: str) -> None:
    """A jcmd command to the JVM; a RuntimeError with its output if it fails."""
    done = subprocess.run(["jcmd", str(pid), *command], capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or "error" in done.stdout.lower():
        raise RuntimeError(f"jcmd {pid} {' '.join(command)}: {done.stdout.strip()} {done.stderr.strip()}")


def jfr_events(recording: Path, events: str) -> list[dict[str, Any]]:
    """The recording's events of the given types, from `jfr print --json` (stacks cut to 3 frames)."""
    done = subprocess.run(["jfr", "print", "--json", "--stack-depth", "3", "--events", events, str(recording)],
                          capture_output=True, text=True, timeout=600, check=True)
    return list(json.loads(done.stdout)["recording"]["events"])


def epoch(stamp: str) -> float:
    """An ISO timestamp from `jfr print --json` (nanoseconds, an offset) as epoch seconds."""
    trimmed = re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00")
    return datetime.fromisoformat(trimmed).timestamp()


def duration_s(value: Any) -> float:
    """A duration from `jfr print --json` ("PT0.0123S", or nanoseconds as a number) in seconds."""
    if isinstance(value, (int, float)):
        return float(value) / 1e9
    match = re.fullmatch(r"-?PT(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", str(value))
    if match is None:
        return 0.0
    hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + secs


@dataclass(frozen=True)
class JfrRun:
    """What the flight recorder saw during one timed run."""

    compilations: int
    compile_s: float
    gcs: int
    gc_pause_s: float


def jfr_per_run(recording: Path, windows: Sequence[tuple[float, float]]) -> list[JfrRun]:
    """Per timed run (its wall-clock window): the JIT's compilations and their time, the GC's collections and their
    pauses."""
    compiles = [(epoch(e["values"]["startTime"]), duration_s(e["values"]["duration"]))
                for e in jfr_events(recording, "jdk.Compilation")]
    gcs = [(epoch(e["values"]["startTime"]), duration_s(e["values"]["sumOfPauses"]))
           for e in jfr_events(recording, "jdk.GarbageCollection")]
    runs = []
    for start, seconds in windows:
        def inside(at: float) -> bool:
            return start <= at <= start + seconds  # noqa: B023 (used at once, in this iteration)

        mine = [d for at, d in compiles if inside(at)]
        paused = [d for at, d in gcs if inside(at)]
        runs.append(JfrRun(len(mine), sum(mine), len(paused), sum(paused)))
    return runs


def hot_methods(recording: Path, windows: Mapping[str, Sequence[tuple[float, float]]], top: int
                ) -> dict[str, list[tuple[str, float]]]:
    """Per side: the methods on top of the task threads' stacks (share of their samples) during its runs."""
    samples: dict[str, Counter[str]] = {side: Counter() for side in windows}
    for event in jfr_events(recording, "jdk.ExecutionSample"):
        values = event["values"]
        thread = (values.get("sampledThread") or {}).get("osName") or ""
        frames = (values.get("stackTrace") or {}).get("frames") or []
        if not thread.startswith("Executor task") or not frames:
            continue
        at = epoch(values["startTime"])
        method = frames[0]["method"]
        name = f"{method['type']['name']}.{method['name']}"
        for side, spans in windows.items():
            if any(start <= at <= start + seconds for start, seconds in spans):
                samples[side][name] += 1
    return {side: [(name, round(n / max(1, sum(c.values())), 3)) for name, n in c.most_common(top)]
            for side, c in samples.items()}


# --- the run --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One timed run of a side: which repeat, and its CPU split."""

    side: Variant
    repeat: int
    split: Split


def parse_args() -> argparse.Namespace:
    """The command line, with --quick's or the full run's defaults filled in."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100k records, 2 repeats")
    parser.add_argument("--records", type=int, help="records in the topic (1M; 100k with --quick)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of the topic")
    parser.add_argument("--repeats", type=int, help="timed runs of each side (3; 2 with --quick)")
    parser.add_argument("--warm-up", type=int, help="records of the untimed warm-up topic (200k; 20k with --quick)")
    parser.add_argument("--sides", default=",".join(DEFAULT_SIDES),
                        help=f"the sides, comma-separated, of {', '.join(Variant)} (default: %(default)s)")
    parser.add_argument("--jfr", type=Path, help="record the timed runs with Java Flight Recorder into this file")
    parser.add_argument("--java-options", default="",
                        help="the Spark JVM's options (spark.driver.extraJavaOptions); with '=' when they start with "
                             "a dash: --java-options=-XX:TieredStopAtLevel=1")
    parser.add_argument("--top", type=int, default=12, help="JVM thread names and hot methods shown (12)")
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    names = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = [name for name in names if name not in set(Variant)]
    if unknown or not names:
        parser.error(f"--sides {args.sides!r}: {', '.join(unknown) or 'no side'}; the sides are {', '.join(Variant)}")
    args.sides = [Variant(name) for name in names]
    return args


def measure(args: argparse.Namespace) -> tuple[list[Run], list[JfrRun] | None, dict[str, Any] | None]:
    """Warm up (untimed), then each side `repeats` times in rotation, every run split; the JFR figures if asked."""
    fetch_connectors()
    recorder = Recorder()
    runs: list[Run] = []
    spark_conf = {"spark.driver.extraJavaOptions": args.java_options} if args.java_options else {}
    with kafka_bootstrap() as bootstrap, session(bootstrap, spark_conf) as bench:
        missing = [s for s in args.sides if s.side not in (Side.UNGUARDED, Side.UNGUARDED_NO_WAIT, Side.SSS)
                   and bench.keys.get(s.side) is None]
        if missing:
            raise SystemExit(f"the job config does not accept the side(s) {missing}")
        topic, ends = prepare_topic(bench, args.records, args.partitions)
        warm_topic, warm_ends = prepare_topic(bench, args.warm_up, args.partitions)
        note("warming up (untimed): each side once on a small topic")
        for side in args.sides:
            with variant_of(side):
                run_side(bench, side.side, warm_topic, warm_ends, None)
        pid = jvm_pid()
        if args.jfr is not None:
            jcmd(pid, "JFR.start", "name=cpu_split", "settings=profile", f"filename={args.jfr.resolve()}")
        bench.around = recorder.around
        for repeat in range(args.repeats):
            shift = repeat % len(args.sides)
            for side in args.sides[shift:] + args.sides[:shift]:
                timed_run(bench, side, topic, ends, recorder, repeat)
                runs.append(Run(side, repeat, recorder.splits[-1]))
        bench.around = None
        if args.jfr is not None:
            jcmd(pid, "JFR.stop", "name=cpu_split")
    if args.jfr is None:
        return runs, None, None
    windows: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        windows.setdefault(run.side.value, []).append((run.split.started, run.split.seconds))
    per_run = jfr_per_run(args.jfr, [(r.split.started, r.split.seconds) for r in runs])
    return runs, per_run, hot_methods(args.jfr, windows, args.top)


def timed_run(bench: Bench, side: Variant, topic: str, ends: dict[int, int], recorder: Recorder, repeat: int) -> None:
    """One timed run of `side` (its output checked by the pipeline benchmark), and a note of its split."""
    count = len(recorder.splits)
    with variant_of(side):
        run_side(bench, side.side, topic, ends, None)
    if len(recorder.splits) != count + 1:
        raise RuntimeError(f"{side}: {len(recorder.splits) - count} timed blocks in one run, expected 1")
    split = recorder.splits[-1]
    note(f"repeat {repeat} {side}: {split.seconds:.2f}s, {split.total:.2f} CPU s "
         f"({', '.join(f'{k} {v:.2f}' for k, v in sorted(split.processes.items()))}; jvm "
         f"{', '.join(f'{k} {v:.2f}' for k, v in sorted(split.jvm.items(), key=lambda kv: -kv[1]) if v >= 0.05)})")


def columns(runs: Sequence[Run], key: str) -> list[str]:
    """The group names of `key` (processes, jvm, driver) over every run, the largest first."""
    totals: Counter[str] = Counter()
    for run in runs:
        totals.update(getattr(run.split, key))
    return [name for name, _ in totals.most_common()]


def print_runs(runs: Sequence[Run], jfr: Sequence[JfrRun] | None) -> None:
    """One row per timed run: wall, CPU, and its split by process and by JVM and driver thread group."""
    processes, jvm, driver = columns(runs, "processes"), columns(runs, "jvm"), columns(runs, "driver")
    table = Table(title="CPU seconds of each timed run, by process and by thread group")
    for name in ["side", "repeat", "wall s", "CPU s", *processes, *(f"jvm {g}" for g in jvm),
                 *(f"driver {g}" for g in driver), *(["compiles", "compile s", "GC pause s"] if jfr else [])]:
        table.add_column(name, justify="left" if name == "side" else "right")
    for index, run in enumerate(runs):
        s = run.split
        extra = [str(jfr[index].compilations), f"{jfr[index].compile_s:.2f}", f"{jfr[index].gc_pause_s:.2f}"] \
            if jfr else []
        table.add_row(run.side.value, str(run.repeat), f"{s.seconds:.2f}", f"{s.total:.2f}",
                      *(f"{s.processes.get(p, 0.0):.2f}" for p in processes),
                      *(f"{s.jvm.get(g, 0.0):.2f}" for g in jvm), *(f"{s.driver.get(g, 0.0):.2f}" for g in driver),
                      *extra)
    Console(file=sys.stdout, width=250).print(table)


def print_names(runs: Sequence[Run], top: int) -> None:
    """The JVM threads (by name, digits as N) that took the most CPU, per side, median over its repeats."""
    for side in dict.fromkeys(r.side for r in runs):
        mine = [r.split.jvm_names for r in runs if r.side is side]
        names = Counter[str]()
        for m in mine:
            names.update(m)
        table = Table(title=f"{side}: JVM threads by name, median CPU s of a run")
        table.add_column("thread")
        table.add_column("CPU s", justify="right")
        for name, _ in names.most_common(top):
            table.add_row(name, f"{statistics.median(m.get(name, 0.0) for m in mine):.2f}")
        Console(file=sys.stdout).print(table)


def median_groups(runs: Sequence[Run], key: str) -> dict[str, float]:
    """Each group's median CPU seconds over the runs."""
    names = columns(runs, key)
    return {n: round(statistics.median(getattr(r.split, key).get(n, 0.0) for r in runs), 3) for n in names}


def figures(args: argparse.Namespace, runs: Sequence[Run], jfr: Sequence[JfrRun] | None,
            hot: Mapping[str, Any] | None) -> dict[str, Any]:
    """Per side: the median split (all repeats, and the later repeats alone), each run's CPU; the JFR figures."""
    result: dict[str, Any] = {"records": args.records, "repeats": args.repeats, "sides": [s.value for s in args.sides],
                              "warm_up": args.warm_up, "java_options": args.java_options,
                              "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    for side in args.sides:
        mine = [r for r in runs if r.side is side]
        later = [r for r in mine if r.repeat > 0] or mine
        result[side.value] = {
            "cpu_s_each": [round(r.split.total, 2) for r in mine],
            "wall_s_each": [round(r.split.seconds, 2) for r in mine],
            "cpu_us_per_record": round(statistics.median(r.split.total for r in mine) / args.records * 1e6, 2),
            "processes": median_groups(mine, "processes"), "jvm": median_groups(mine, "jvm"),
            "driver": median_groups(mine, "driver"),
            "first_repeat": {"processes": {k: round(v, 3) for k, v in mine[0].split.processes.items()},
                             "jvm": {k: round(v, 3) for k, v in mine[0].split.jvm.items()}},
            "later_repeats_jvm": median_groups(later, "jvm"),
        }
        if jfr is not None:
            indices = [i for i, r in enumerate(runs) if r.side is side]
            result[side.value]["jfr_compile_s_each"] = [round(jfr[i].compile_s, 3) for i in indices]
            result[side.value]["jfr_compilations_each"] = [jfr[i].compilations for i in indices]
            result[side.value]["jfr_gc_pause_s_each"] = [round(jfr[i].gc_pause_s, 3) for i in indices]
    if hot is not None:
        result["hot_methods_task_threads"] = hot
    return result


def main() -> None:
    """Run the split; the figures' JSON is the last line of stdout."""
    args = parse_args()
    if not PROC.is_dir():
        raise SystemExit("cpu_split reads /proc: Linux only")
    if args.jfr is not None and shutil.which("jcmd") is None:
        raise SystemExit("--jfr needs the JDK's jcmd and jfr on PATH")
    runs, jfr, hot = measure(args)
    print_runs(runs, jfr)
    print_names(runs, args.top)
    emit_result(figures(args, runs, jfr, hot), title=f"cpu_split: {args.records:,} records")


if __name__ == "__main__":
    main()
