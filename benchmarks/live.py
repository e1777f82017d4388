"""Live view: time to the first current answer from a snapshot, and catch-up events/s from scratch.

    python -m benchmarks.live [--quick] [--events N] [--batch N]

The history is benchmarks.rebuild's (many runs of two jobs over 50 datasets, failures and crashes), cut at N events
(1M; 100k with --quick), on a fresh 6-partition topic of a real Kafka broker (`$KAFKA_BOOTSTRAP`, or a local one
started for the run): the first 99% appended, rebuilt and saved as the snapshot (untimed), then the last 1%.
Timed, each as a real `oncelog serve` process (`python -m oncelog.cli.serve serve`):

- `start_s`: from starting the process to the first 200 of `/datasets` (it answers 503 until caught up): the
  interpreter's start, the snapshot's load and decode, the tail's fold.
- `live_eps`: with `--from-scratch` (no snapshot), the events folded to the end seen at start per second of the
  catch-up, as the process measures it (`/health`'s `catch_up`); `scratch_start_s` is that run's time to 200.
  `live_cpu_us` / `live_cpu_eps`: the same catch-up per CPU second of the serve process (librdkafka's threads
  included, the broker not): what it costs, steadier than wall-clock on a shared, loaded machine.

`rebuild_eps`: the snapshot-making rebuild of the first 99% (`Projector.rebuild`, in this process, same machine, same
minutes), and `live_vs_rebuild` = `live_eps / rebuild_eps`: the view's catch-up against the batch projector's.

Checks: both views answer the same `/datasets` and `/runs`, equal to `Projector(log).rebuild()`'s state, and the
from-scratch view folded all N events. Last line of stdout: the JSON figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import emit_result, kafka_bootstrap, note
from benchmarks.rebuild import (
    PARTITIONS,
    check,
    delete_topics,
    history_records,
    prepare_log,
)
from events.log import open_log
from projections.projector import Projector
from replay.live.documents import dataset_doc, run_doc

TARGETS = {"start_s": ("<=", 10.0), "live_eps": (">=", 20_000.0)}
WAIT_S = 600.0
STOP_S = 60.0
PAGE = 1_000
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback port free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> tuple[int, Any]:
    """(status, JSON body) of GET path on the view; (0, None) while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, None


def walk(port: int, path: str, name: str) -> list[Any]:
    """Every item of a paged view."""
    items: list[Any] = []
    after = ""
    while True:
        status, body = get(port, f"{path}?limit={PAGE}{after}")
        check(status == 200, f"{path}: {status} {body}")
        items += body[name]
        if body["next"] is None:
            return items
        after = f"&after={body['next']}"


def serve_once(url: str, log_file: Path, *options: str) -> dict[str, Any]:
    """Start `oncelog serve`, time it to the first 200 of /datasets, read its health and views, stop it."""
    port = free_port()
    command = [sys.executable, "-m", "oncelog.cli.serve", "serve", "--log", url, "--port", str(port),
               "--snapshot-every", "0", "--loglevel", "warning", *options]
    started = time.perf_counter()
    with log_file.open("wb") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        busy = 0
        while (status := get(port, "/datasets")[0]) != 200:
            check(process.poll() is None, f"serve exited ({process.returncode}): {log_file.read_text()[-2000:]}")
            check(time.perf_counter() - started < WAIT_S, f"serve not current after {WAIT_S:.0f}s")
            busy += status == 503
            time.sleep(0.05)
        start_s = time.perf_counter() - started
        health = get(port, "/health")[1]
        return {"start_s": start_s, "health": health, "answered_503": busy, "datasets": walk(port, "/datasets",
                "datasets"), "runs": walk(port, "/runs", "runs")}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: that process alone
            process.wait(10)
        check(process.returncode == 0, f"serve exited with {process.returncode}: {log_file.read_text()[-2000:]}")


def run(count: int, batch: int, work_dir: Path) -> dict[str, Any]:
    """Prepare the history and its snapshot, then time the two views; returns the figures."""
    with kafka_bootstrap() as bootstrap:
        topic = f"oncelog.bench.live.{uuid.uuid4().hex[:12]}"
        url = f"kafka://{bootstrap}?topic={topic}&partitions={PARTITIONS}"
        log = open_log(url)
        try:
            log.ensure_topic()
            prepared = prepare_log(log, history_records(count), count, batch)
            expected, _ = Projector(log).rebuild()
            note("timing `oncelog serve` from the snapshot")
            current = serve_once(url, work_dir / "snapshot.log")
            note(f"current after {current['start_s']:.2f}s; timing `oncelog serve --from-scratch`")
            scratch = serve_once(url, work_dir / "scratch.log", "--from-scratch")
        finally:
            log.close()
            delete_topics(bootstrap, [topic, f"{topic}.snapshots"])
    datasets = [dataset_doc(v) for v in sorted(expected.datasets.values(), key=lambda v: (v.dataset_urn, v.job))]
    runs = [run_doc(expected, v) for _, v in sorted(expected.runs.items())]
    for name, served in (("snapshot", current), ("scratch", scratch)):
        check(served["datasets"] == datasets and served["runs"] == runs, f"the {name} view differs from the rebuild")
    catch_up, tail = scratch["health"]["catch_up"], current["health"]["catch_up"]
    check(catch_up["events"] == count and not catch_up["from_snapshot"], f"from scratch: {catch_up}")
    check(tail["from_snapshot"] and tail["events"] == prepared["tail"], f"from the snapshot: {tail}")
    return {
        "events": count, "tail_events": prepared["tail"], "snapshot_bytes": prepared["snapshot_bytes"],
        "start_s": round(current["start_s"], 3), "start_catch_up_s": tail["seconds"],
        "live_eps": catch_up["events_per_second"], "scratch_catch_up_s": catch_up["seconds"],
        "live_cpu_us": round(catch_up["cpu_seconds"] / count * 1e6, 1),
        "live_cpu_eps": round(count / catch_up["cpu_seconds"]) if catch_up["cpu_seconds"] > 0 else None,
        "scratch_start_s": round(scratch["start_s"], 3),
        "rebuild_eps": round(prepared["head"] / prepared["head_rebuild_s"]),
        "live_vs_rebuild": round(catch_up["events_per_second"] / (prepared["head"] / prepared["head_rebuild_s"]), 2),
        "answered_503": current["answered_503"] + scratch["answered_503"], "datasets": len(datasets), "runs": len(runs),
    }


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run, print the figures and the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.live", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k events (under two minutes, broker start included)")
    parser.add_argument("--events", type=int, help="how many events (default: 100k with --quick, else 1M)")
    parser.add_argument("--batch", type=int, default=10_000, help="events per atomic batch (default 10k)")
    args = parser.parse_args(argv)
    count = args.events or (100_000 if args.quick else 1_000_000)
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-live-") as work_dir:
        figures = run(count, args.batch, Path(work_dir))
    for name, (sense, bound) in TARGETS.items():
        figures[f"{name}_target_met"] = figures[name] <= bound if sense == "<=" else figures[name] >= bound
    emit_result(figures, title=f"live view, {count:,} events ({figures['tail_events']:,} after the snapshot)")


if __name__ == "__main__":
    main()
