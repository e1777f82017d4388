"""What every benchmark shares: a Kafka broker to run against, repeated timings, and the result printout.

Each benchmark prints a human-readable table, then its figures as one JSON object on the LAST line of stdout, so
a script can take `tail -n 1` of the output.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from localservers.kafka import LocalKafkaBroker


@contextmanager
def kafka_bootstrap() -> Iterator[str]:
    """`host:port` of a Kafka broker: `$KAFKA_BOOTSTRAP` if set, else a local broker started now, stopped after."""
    explicit = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    if explicit:
        yield explicit.removeprefix("kafka://")
        return
    with stopped_cleanly_on_termination(), tempfile.TemporaryDirectory(prefix="oncelog-bench-kafka-") as work_dir:
        broker = LocalKafkaBroker(Path(work_dir))
        note(f"starting a local Kafka broker in {work_dir} (set KAFKA_BOOTSTRAP to use a running one)")
        broker.start()
        try:
            yield broker.bootstrap
        finally:
            broker.stop()


TERMINATING = (signal.SIGTERM, signal.SIGHUP)
"""What `kill`, `timeout` and a closed terminal send: Python would die of them without running any `finally`."""


@contextmanager
def stopped_cleanly_on_termination() -> Iterator[None]:
    """Within the block, SIGTERM or SIGHUP exits by SystemExit (status 128 + the signal), so that every `finally`
    runs: a broker started for a benchmark is stopped, not left running after it. Off the main thread (where Python
    cannot take a signal), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_now(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    before = {sig: signal.signal(sig, exit_now) for sig in TERMINATING}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class Timing:
    """Each repeat of one measurement: wall-clock seconds, and the CPU seconds of this process (all its threads).

    On a shared machine wall-clock rates follow the load of others; CPU time per item stays what the code costs.
    """

    seconds: tuple[float, ...]
    cpu_seconds: tuple[float, ...]

    @classmethod
    def of(cls, samples: list[tuple[float, float]]) -> Timing:
        """From (wall, cpu) samples, as `time_once` returns them."""
        return cls(tuple(wall for wall, _ in samples), tuple(cpu for _, cpu in samples))

    @property
    def median(self) -> float:
        """The median repeat: what figures are reported at (robust to a repeat slowed by the machine's load)."""
        return statistics.median(self.seconds)

    @property
    def best(self) -> float:
        """The fastest repeat: the closest to what the code costs on an idle machine."""
        return min(self.seconds)

    def rate(self, count: int) -> float:
        """Items per second at the median time (the figure reported: the machine is shared, noise is high)."""
        return count / self.median

    def cpu_us(self, count: int) -> float:
        """The median process CPU time per item, in microseconds."""
        return statistics.median(self.cpu_seconds) / count * 1e6

    def spread(self, count: int) -> str:
        """The rates of every repeat, fastest first, for the table."""
        return ", ".join(f"{count / s:,.0f}" for s in sorted(self.seconds))


def freeze_fixtures() -> None:
    """Move every object alive now (the benchmark's prepared inputs) out of the garbage collector's sight.

    Fixtures such as a million pre-built events are no part of what is measured, yet every full collection during
    a timed run would walk them; a real writer or reader never holds them all.
    """
    gc.collect()
    gc.freeze()


def time_once(run: Callable[[], Any]) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call of `run`, after a full collection (none left over from before)."""
    gc.collect()
    started, started_cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - started, time.process_time() - started_cpu


def measure(run: Callable[[Any], Any], repeats: int, setup: Callable[[], Any] = lambda: None) -> Timing:
    """Time `run(setup())` `repeats` times; `setup` (untimed) prepares a fresh target each time."""
    samples = []
    for _ in range(repeats):
        prepared = setup()
        samples.append(time_once(partial(run, prepared)))
    return Timing.of(samples)


_STARTED = time.monotonic()


def note(message: str) -> None:
    """Progress for a human, on stderr (stdout carries only the result table and the JSON line)."""
    print(f"[{time.monotonic() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def emit_result(figures: dict[str, Any], title: str = "results") -> None:
    """Print the figures as a table, then as one JSON object: the last line of stdout."""
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures.items():
        table.add_row(name, _human(value))
    Console(file=sys.stdout).print(table)
    sys.stdout.write(json.dumps(figures) + "\n")
    sys.stdout.flush()


def _human(value: Any) -> str:
    """A figure as the table shows it: thousands separated, ratios with two decimals."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"
