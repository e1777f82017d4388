"""Commit phase by file system: N datasets published on the local disk, on HDFS and on S3, side by side, same run.

    python -m benchmarks.commit_fs [--quick] [--datasets N] [--repeats R] [--parallelism P] [--recover-pending]

For each store a fresh folder gets N task-output files (2-8 KiB of random bytes each) under
`<root>/task-output/<run>/ds.<i>/part-00000.avro`, written before any timing. One CommitSequence per dataset is
planned as the default publisher plans it (FsRename to `<root>/published/ds.<i>/…`, HighWatermark, DatasetState)
and appended in one batch to a fresh SQLite log. Timed, as the launcher's `_publish` runs it after the planned
batch, in the same session: `Committer.commit_all` over the N views with the job's default commit parallelism (32):
every step verified or executed, the renames made durable, every step's events recorded (SQLite group commits).

Recovery is timed on a fresh session over a copy of the log taken right after planning, once the commit above has
moved every file: a driver killed at the end of the commit, so `committer.recover` finds every step done by
`verify()` (size and checksum of each published file). With --recover-pending, also recovery from a driver killed
right after planning (new task output, nothing moved), which runs the same `commit_all` as the commit. The fold of
the log when the session opens is reported apart.

The stores: the local disk (a temporary folder); HDFS, a local NameNode + DataNode from Hadoop's jars
(`localservers.hdfs`), or the folder `$ONCELOG_HDFS_URL` names (hdfs://, its HTTP address from
$HADOOP_CONF_DIR, or webhdfs://); S3, a local versitygw (`localservers.s3`), or the folder
`$ONCELOG_S3_URL` names (s3a://bucket/prefix, endpoint and keys from AWS's environment). Each repeat rotates the
order of the stores. Figures are at the median repeat; `*_cpu_us_per_dataset_*` is this process's CPU (the
servers' is `*_server_cpu_s_*`). Last line of stdout: the JSON figures.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.common import emit_result, note, time_once
from events.commit import (
    CommitSequencePlanned,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.log import open_log
from filesystems import urls
from filesystems.router import FileSystems
from localservers.hdfs import HdfsDaemon, LocalHdfs
from localservers.s3 import LocalS3
from spark_pipeline.commit.sequence import CommitResult, Outcome
from spark_pipeline.commit.session import CommitSession, open_session
from spark_pipeline.commit.settings import DEFAULT_PARALLELISM, CommitSettings
from spark_pipeline.commit.steps import PublishRoots

FULL = {"datasets": 1_000, "repeats": 3}
QUICK = {"datasets": 200, "repeats": 1}
JOB = "commit-fs-bench"
BUCKET = "oncelog-bench"
MIN_BYTES, MAX_BYTES = 2 << 10, 8 << 10
WRITERS = 16
"""Threads writing the task output (untimed set-up)."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Store(StrEnum):
    """The file systems compared."""

    LOCAL = "local"
    HDFS = "hdfs"
    S3 = "s3"


class Phase(StrEnum):
    """What is timed: the commit after planning, and recovery from two crash points; the value names the figures."""

    COMMIT = "commit"
    RECOVER_VERIFY = "recover_verify"
    """Every file already published, nothing recorded: each rename is verified (size + checksum), not redone."""
    RECOVER = "recover"
    """Every sequence pending, nothing moved: recovery does the whole commit."""


@dataclass(frozen=True)
class Target:
    """One store's folder for the benchmark, the job keys that reach it, and its server's pids (for their CPU)."""

    store: Store
    root: str
    properties: Mapping[str, str]
    server_pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Written:
    """One task-output file, as its task records it."""

    urn: str
    src: str
    dst: str
    size: int
    checksum: str


@dataclass(frozen=True)
class Sample:
    """One timed call: wall and process CPU seconds, the servers' CPU seconds, and the session's fold before it."""

    seconds: float
    cpu_seconds: float
    server_cpu_seconds: float | None
    fold_seconds: float


@dataclass
class Samples:
    """Every sample, by store and phase, and the machine's load after each repeat."""

    by: dict[tuple[Store, Phase], list[Sample]] = field(default_factory=dict)
    load: list[float] = field(default_factory=list)

    def add(self, store: Store, phase: Phase, sample: Sample) -> None:
        self.by.setdefault((store, phase), []).append(sample)

    def median(self, store: Store, phase: Phase, pick: Callable[[Sample], float | None]) -> float | None:
        values = [v for s in self.by.get((store, phase), []) if (v := pick(s)) is not None]
        return statistics.median(values) if values else None


# --- the stores ---------------------------------------------------------------------------------------------------


@contextmanager
def local_target(work: Path) -> Iterator[Target]:
    """A folder on the local disk (the benchmark's temporary folder)."""
    yield Target(Store.LOCAL, str(work / "local"), {})


@contextmanager
def hdfs_target(work: Path) -> Iterator[Target]:
    """A fresh folder on `$ONCELOG_HDFS_URL`'s HDFS, else on a local HDFS started now and stopped after."""
    explicit = os.environ.get("ONCELOG_HDFS_URL", "").strip()
    if explicit:
        yield Target(Store.HDFS, urls.join(explicit, f"oncelog-bench-{uuid.uuid4().hex[:8]}"), {})
        return
    server = LocalHdfs(work / "hdfs")
    note(f"starting a local HDFS in {server.work_dir} (set ONCELOG_HDFS_URL to use a running one)")
    server.start()
    try:
        pids = tuple(pid for d in HdfsDaemon if (pid := server.pid(d)) is not None)
        yield Target(Store.HDFS, f"{server.url}/bench", {"dfs.namenode.http-address": server.http_address}, pids)
    finally:
        server.stop()


@contextmanager
def s3_target(work: Path) -> Iterator[Target]:
    """A fresh folder on `$ONCELOG_S3_URL`'s store, else in a bucket of a local versitygw started now."""
    explicit = os.environ.get("ONCELOG_S3_URL", "").strip()
    if explicit:
        yield Target(Store.S3, urls.join(explicit, f"oncelog-bench-{uuid.uuid4().hex[:8]}"), {})
        return
    server = LocalS3(work / "s3")
    note(f"starting a local S3 server (versitygw) in {server.work_dir} (set ONCELOG_S3_URL to use a running one)")
    server.start()
    try:
        server.create_bucket(BUCKET)
        pid = server.pid()
        yield Target(Store.S3, f"s3a://{BUCKET}/bench",
                     {"fs.s3a.endpoint": server.endpoint_url, "fs.s3a.access.key": server.access_key,
                      "fs.s3a.secret.key": server.secret_key, "fs.s3a.path.style.access": "true",
                      "fs.s3a.endpoint.region": server.region}, (pid,) if pid else ())
    finally:
        server.stop()


def server_cpu(pids: tuple[int, ...]) -> float | None:
    """CPU seconds the server processes have used so far (None without /proc or pids)."""
    if not pids:
        return None
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total / CLOCK_TICKS


# --- one round: task output, plan, commit ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    """A fresh folder with N task-output files, and the log their sequences are planned in."""

    target: Target
    root: str
    log_url: str
    run_id: str
    written: tuple[Written, ...]
    parallelism: int

    @property
    def settings(self) -> CommitSettings:
        """The job's commit settings: the round's roots, default attempts, the parallelism measured."""
        return CommitSettings(PublishRoots.of([urls.join(self.root, "task-output")],
                                              [urls.join(self.root, "published")]), parallelism=self.parallelism)

    @property
    def crash_log_url(self) -> str:
        """A copy of the log taken right after planning: what a driver killed during the commit leaves."""
        return self.log_url.replace(".db", "-crashed.db")


def content(i: int) -> bytes:
    """Dataset i's file: 2-8 KiB of random bytes (deterministic)."""
    rng = random.Random(i)
    return rng.randbytes(rng.randint(MIN_BYTES, MAX_BYTES))


def write_task_output(fs: FileSystems, root: str, run_id: str, datasets: int) -> tuple[Written, ...]:
    """N task-output files, one per dataset, written in parallel; each recorded with size and sha256."""

    def write(i: int) -> Written:
        data, relative = content(i), f"ds.{i}/part-00000.avro"
        src = urls.join(root, "task-output", run_id, relative)
        out = fs.open_write(src)
        out.write(data)
        out.close()
        return Written(f"ds.{i}", src, urls.join(root, "published", relative), len(data),
                       hashlib.sha256(data).hexdigest())

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        return tuple(pool.map(write, range(datasets)))


def plan(run_id: str, written: tuple[Written, ...]) -> list[CommitSequencePlanned]:
    """One sequence per dataset, as BaseDataPublisher plans it: FsRename, HighWatermark, DatasetState."""
    planned = []
    for i, w in enumerate(written):
        partition, value = f"{w.urn}:0", 1_000 + i
        planned.append(CommitSequencePlanned(
            job=JOB, run_id=run_id, dataset_urn=w.urn, sequence_id=run_id,
            steps=(FsRenameStep(src=w.src, dst=w.dst, size=w.size, checksum=w.checksum),
                   HighWatermarkStep(partition=partition, low_watermark=0, value=value),
                   DatasetStateStep(watermarks={partition: value}, records_published=100, files_published=1))))
    return planned


def new_round(target: Target, fs: FileSystems, work: Path, tag: str, datasets: int, parallelism: int) -> Round:
    """A fresh folder and its task output (untimed set-up)."""
    run_id = f"run-{tag}"
    root = urls.join(target.root, tag)
    written = write_task_output(fs, root, run_id, datasets)
    return Round(target, root, f"sqlite:///{work / f'events-{target.store}-{tag}.db'}", run_id, written, parallelism)


def copy_log(source_url: str, target_url: str) -> None:
    """Copy a SQLite log, consistently, with SQLite's own backup (its WAL included)."""
    with closing(sqlite3.connect(source_url.removeprefix("sqlite:///"))) as source, \
            closing(sqlite3.connect(target_url.removeprefix("sqlite:///"))) as target:
        source.backup(target)


def timed(target: Target, run: Callable[[], object], fold_seconds: float) -> Sample:
    """Time `run`, with the store's server CPU over the same span."""
    before = server_cpu(target.server_pids)
    wall, cpu = time_once(run)
    after = server_cpu(target.server_pids)
    return Sample(wall, cpu, None if before is None or after is None else after - before, fold_seconds)


def opened(prepared: Round, log_url: str, fs: FileSystems, stack: ExitStack) -> tuple[CommitSession, float]:
    """A session over a log (the writer, then the strict fold), and the seconds it took to open."""
    started = time.perf_counter()
    log = stack.enter_context(open_log(log_url))
    session = stack.enter_context(open_session(log, JOB, prepared.settings, fs))
    return session, time.perf_counter() - started


def commit(prepared: Round, fs: FileSystems) -> Sample:
    """As the launcher: append every plan in one batch, then time `commit_all` over their views (same session).

    A copy of the log is taken right after the plans are appended, for the recovery of `recover_verify`."""
    results: list[CommitResult] = []
    with ExitStack() as stack:
        session, fold_seconds = opened(prepared, prepared.log_url, fs, stack)
        planned = plan(prepared.run_id, prepared.written)
        session.sink.emit(planned)
        copy_log(prepared.log_url, prepared.crash_log_url)
        views = [session.state.sequences[(p.job, p.dataset_urn, p.sequence_id)] for p in planned]
        sample = timed(prepared.target, lambda: results.extend(session.committer.commit_all(views)), fold_seconds)
        check(prepared, fs, session, results, Phase.COMMIT)
    return sample


def recover(prepared: Round, log_url: str, fs: FileSystems, phase: Phase) -> Sample:
    """Time `committer.recover` on a fresh session over a log whose N sequences are all pending."""
    results: list[CommitResult] = []
    with ExitStack() as stack:
        session, fold_seconds = opened(prepared, log_url, fs, stack)
        if len(session.state.pending_sequences(JOB)) != len(prepared.written):
            raise SystemExit(f"{prepared.target.store} {phase}: the log does not hold {len(prepared.written)} "
                             f"pending sequences")
        sample = timed(prepared.target, lambda: results.extend(session.committer.recover(JOB)), fold_seconds)
        check(prepared, fs, session, results, phase)
    return sample


def plan_only(prepared: Round, fs: FileSystems) -> None:
    """Append the plans and stop: what a driver killed right after planning leaves."""
    with open_log(prepared.log_url) as log, open_session(log, JOB, prepared.settings, fs) as session:
        session.sink.emit(plan(prepared.run_id, prepared.written))


def check(prepared: Round, fs: FileSystems, session: CommitSession, results: list[CommitResult],
          phase: Phase) -> None:
    """Every sequence completed, every file published with its content, nothing left in task output (untimed)."""
    datasets = len(prepared.written)
    failed = [r for r in results if r.outcome is not Outcome.COMPLETED]
    if len(results) != datasets or failed:
        raise SystemExit(f"{prepared.target.store} {phase}: {len(results)} results for {datasets} datasets, "
                         f"{len(failed)} not completed (first: {failed[0].error if failed else '-'})")
    if session.state.pending_sequences(JOB):
        raise SystemExit(f"{prepared.target.store} {phase}: sequences still pending after the commit")
    verified = sum(r.verified for r in results)
    if phase is Phase.RECOVER_VERIFY and verified != datasets:  # the renames; the log's own steps run again
        raise SystemExit(f"{prepared.target.store} {phase}: {verified} steps found done, {datasets} expected")
    published = {f.path: f.size for f in fs.list_files(urls.join(prepared.root, "published"))}
    expected = {urls.normalize(w.dst): w.size for w in prepared.written}
    if published != expected:
        raise SystemExit(f"{prepared.target.store} {phase}: {len(published)} files published, {datasets} expected "
                         f"(or sizes differ)")
    if fs.list_files(urls.join(prepared.root, "task-output")):
        raise SystemExit(f"{prepared.target.store} {phase}: task output left behind after the commit")


def run_rounds(target: Target, fs: FileSystems, work: Path, tag: str, phases: list[Phase], datasets: int,
               parallelism: int) -> dict[Phase, Sample]:
    """The phases on one store: commit, then recovery from the crash after the moves (no new task output), then,
    if asked, recovery from the crash right after planning (a round of its own). Folders removed after."""
    samples: dict[Phase, Sample] = {}
    prepared = new_round(target, fs, work, tag, datasets, parallelism)
    try:
        samples[Phase.COMMIT] = commit(prepared, fs)
        if Phase.RECOVER_VERIFY in phases:
            samples[Phase.RECOVER_VERIFY] = recover(prepared, prepared.crash_log_url, fs, Phase.RECOVER_VERIFY)
    finally:
        fs.remove_tree(prepared.root)
    if Phase.RECOVER in phases:
        pending = new_round(target, fs, work, f"{tag}-pending", datasets, parallelism)
        try:
            plan_only(pending, fs)
            samples[Phase.RECOVER] = recover(pending, pending.log_url, fs, Phase.RECOVER)
        finally:
            fs.remove_tree(pending.root)
    return samples


# --- the run ------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the servers, then every phase on every store, `repeats` times, rotating the stores' order."""
    phases = [Phase.COMMIT, Phase.RECOVER_VERIFY] + ([Phase.RECOVER] if args.recover_pending else [])
    samples = Samples()
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-commit-fs-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        targets = [stack.enter_context(make(work)) for make in (local_target, hdfs_target, s3_target)]
        fs = FileSystems.of({k: v for t in targets for k, v in t.properties.items()})
        note("warm-up: 20 datasets on each store (untimed)")
        for target in targets:
            run_rounds(target, fs, work, "warm-up", [Phase.COMMIT], 20, args.parallelism)
        for repeat in range(args.repeats):
            for target in targets[repeat % 3:] + targets[:repeat % 3]:
                done = run_rounds(target, fs, work, f"r{repeat}", phases, args.datasets, args.parallelism)
                for phase, sample in done.items():
                    samples.add(target.store, phase, sample)
                    note(f"repeat {repeat + 1}/{args.repeats} {target.store} {phase}: {sample.seconds:.2f}s "
                         f"({sample.seconds / args.datasets * 1e6:,.0f} µs/dataset; fold {sample.fold_seconds:.2f}s)")
                samples.load.append(os.getloadavg()[0])
        for target in targets:
            fs.remove_tree(target.root)
    print_table(samples, phases, args.datasets)
    return figures(args, samples, phases)


def print_table(samples: Samples, phases: list[Phase], datasets: int) -> None:
    """Each phase by store: seconds, µs per dataset, the ratio to local, this process's and the server's CPU."""
    table = Table(title=f"commit phase, {datasets:,} datasets (median of repeats)")
    for name in ("phase", "store", "seconds", "µs/dataset", "× local", "CPU µs/dataset", "server CPU s", "fold s"):
        table.add_column(name, justify="left" if name in ("phase", "store") else "right")
    for phase in phases:
        local = samples.median(Store.LOCAL, phase, lambda s: s.seconds)
        for store in Store:
            seconds = samples.median(store, phase, lambda s: s.seconds)
            if seconds is None or local is None:
                continue
            cpu = samples.median(store, phase, lambda s: s.cpu_seconds) or 0.0
            server = samples.median(store, phase, lambda s: s.server_cpu_seconds)
            fold = samples.median(store, phase, lambda s: s.fold_seconds)
            table.add_row(str(phase), str(store), f"{seconds:.3f}", f"{seconds / datasets * 1e6:,.0f}",
                          f"{seconds / local:.1f}", f"{cpu / datasets * 1e6:,.0f}",
                          "-" if server is None else f"{server:.2f}",
                          "-" if phase is Phase.COMMIT or fold is None else f"{fold:.2f}")
    Console(file=sys.stdout).print(table)


def figures(args: argparse.Namespace, samples: Samples, phases: list[Phase]) -> dict[str, Any]:
    """The JSON figures: per store and phase, seconds, µs per dataset, ratio to local, CPU."""
    result: dict[str, Any] = {}
    for phase in phases:
        local = samples.median(Store.LOCAL, phase, lambda s: s.seconds)
        for store in Store:
            seconds = samples.median(store, phase, lambda s: s.seconds)
            if seconds is None:
                continue
            name = phase.value
            result[f"{name}_s_{store}"] = round(seconds, 4)
            per = "us_per_dataset" if phase is Phase.COMMIT else f"{name}_us_per_dataset"
            result[f"{per}_{store}"] = round(seconds / args.datasets * 1e6, 1)
            if store is not Store.LOCAL and local:
                result[f"{name}_ratio_{store}"] = round(seconds / local, 2)
            cpu = samples.median(store, phase, lambda s: s.cpu_seconds)
            result[f"{name}_cpu_us_per_dataset_{store}"] = round((cpu or 0.0) / args.datasets * 1e6, 1)
            server = samples.median(store, phase, lambda s: s.server_cpu_seconds)
            if server is not None:
                result[f"{name}_server_cpu_s_{store}"] = round(server, 3)
            if phase is not Phase.COMMIT:
                result[f"{name}_fold_s_{store}"] = round(samples.median(store, phase, lambda s: s.fold_seconds)
                                                         or 0.0, 4)
        result[f"{phase}_s_each"] = {str(store): [round(s.seconds, 3) for s in samples.by.get((store, phase), [])]
                                     for store in Store}
    result.update({"datasets": args.datasets, "repeats": args.repeats, "parallelism": args.parallelism,
                   "quick": args.quick, "cpus": os.cpu_count(),
                   "load_avg_1m_max": max(samples.load) if samples.load else None,
                   "load_avg_1m_median": statistics.median(samples.load) if samples.load else None})
    return result


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 datasets, 1 repeat: under two minutes")
    parser.add_argument("--datasets", type=int, help="datasets (one file each) per commit (1,000; 200 with --quick)")
    parser.add_argument("--repeats", type=int, help="timed rounds per store and phase (3; 1 with --quick)")
    parser.add_argument("--parallelism", type=int, default=DEFAULT_PARALLELISM,
                        help=f"sequences committed at once (the job's commit.parallelism: {DEFAULT_PARALLELISM})")
    parser.add_argument("--recover-pending", action="store_true",
                        help="also time recovery with every sequence pending and nothing moved (new task output)")
    args = parser.parse_args()
    defaults = QUICK if args.quick else FULL
    args.datasets = args.datasets or defaults["datasets"]
    args.repeats = args.repeats or defaults["repeats"]
    if args.datasets < 2 or args.repeats < 1 or args.parallelism < 1:
        parser.error("--datasets must be at least 2, --repeats and --parallelism at least 1")
    return args


def main() -> None:
    args = parse_args()
    emit_result(run(args), title=f"commit_fs ({args.datasets:,} datasets)")


if __name__ == "__main__":
    main()
