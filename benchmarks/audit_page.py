"""The audit page of a 10,000-dataset run: its size, and how long Chromium takes to load and lay it out.

    python -m benchmarks.audit_page [--datasets N] [--repeat N]

The run is benchmarks/audit_run.py's (the one `tests/replay/test_audit_html.py` checks: a work unit per dataset in 200
tasks, one failing once, every thousandth dataset's commit step failing once), appended to a SQLite log in a temporary
folder, audited and written as HTML. Needs Chromium (`chromium` on the PATH, or /usr/bin/chromium). Timed: `load_ms`
(median of `--repeat` loads, the others in `load_ms_all`), from navigation to the page loaded and laid out as the page
measures it (`performance.now()` at `load`, after a forced layout), in headless Chromium; `chromium_s` is the browser
process's wall-clock time (its start included). Figures depend on the machine and its load: compare them across runs
on one machine. Last line of stdout: the JSON figures.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.audit_run import large_run
from benchmarks.common import emit_result
from events.log import open_log
from replay.audit import audit
from replay.audit_html import write_html

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--mute-audio")
RENDER_TIMEOUT_S = 120
LOAD_PROBE = ("<script>addEventListener('load', () => { void document.body.offsetHeight; "
              "document.documentElement.dataset.loadedMs = performance.now().toFixed(0); });</script>")
"""Appended to a copy of the page: when it has loaded and been laid out, the time since navigation began."""
LOADED_MS = re.compile(r'<html[^>]*\sdata-loaded-ms="(\d+)"')

TARGET_LOAD_MS = 5000
"""What the page should stay under on the development VM (the former test's bound, now a figure)."""


def run(datasets: int, repeat: int, work_dir: Path) -> dict[str, Any]:
    """Build the run's log, write its page, load it `repeat` times; the figures."""
    with open_log(f"sqlite:///{work_dir / 'events.db'}") as log:
        log.ensure_topic()
        for batch in large_run("run-wide", datasets, tasks=200):
            log.append([part for event in batch for part in event.in_parts()])
        began = time.perf_counter()
        timeline = audit(log, "run-wide")
        report = work_dir / "wide.html"
        write_html(timeline, report)
        written_s = time.perf_counter() - began
    chromium = shutil.which("chromium") or CHROMIUM
    loads = [loaded(report, chromium, work_dir) for _ in range(repeat)]
    times = [load.ms for load in loads]
    return {"datasets": datasets, "page_bytes": report.stat().st_size, "audit_and_write_s": round(written_s, 3),
            "load_ms": round(statistics.median(times)), "load_ms_all": [round(t) for t in times],
            "chromium_s": round(statistics.median(load.wall_s for load in loads), 2),
            "load_target_met": statistics.median(times) < TARGET_LOAD_MS}


@dataclass(frozen=True)
class Load:
    """One load of the page: the milliseconds to loaded and laid out (as the page measured them), and Chromium's
    wall-clock seconds (its start included)."""

    ms: float
    wall_s: float


def loaded(page: Path, chromium: str, scratch: Path) -> Load:
    """Load a copy of `page` with LOAD_PROBE in headless Chromium (a fresh profile) and read what the probe measured."""
    probed = scratch / f"probed-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8") + LOAD_PROBE, encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="oncelog-chromium-") as profile:
        began = time.monotonic()
        done = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", probed.as_uri()],
                              capture_output=True, text=True, timeout=RENDER_TIMEOUT_S, check=False)
        wall = time.monotonic() - began
    found = LOADED_MS.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"chromium could not load {page} (exit {done.returncode}): {done.stderr[-2000:]}")
    return Load(float(found.group(1)), wall)


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run, print the figures and the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audit_page", description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=10_000, help="datasets of the run (default 10,000)")
    parser.add_argument("--repeat", type=int, default=3, help="page loads to time (default 3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="oncelog-bench-audit-page-") as work_dir:
        figures = run(args.datasets, args.repeat, Path(work_dir))
    emit_result(figures, title=f"audit page of a {args.datasets:,}-dataset run")


if __name__ == "__main__":
    main()
