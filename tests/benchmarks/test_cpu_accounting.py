"""The pipeline benchmark's CPU figure counts every process its run started, those orphaned on the way included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ORPHAN_CPU_S = 0.6
MEASURE = """
import os, subprocess, sys, time
from benchmarks.pipeline import adopt_orphans, tree_cpu_seconds
if sys.argv[1] == "adopt":
    adopt_orphans()
before = tree_cpu_seconds()
subprocess.run([sys.executable, "-c", sys.argv[2], sys.argv[3]], check=True)
deadline = time.monotonic() + 30
while not os.path.exists(sys.argv[3]) and time.monotonic() < deadline:  # the orphan is done
    time.sleep(0.05)
time.sleep(0.2)
print(round(tree_cpu_seconds() - before, 3))
"""
BURN_IN_AN_ORPHAN = f"""
import os, sys, time
if os.fork() == 0:  # the grandchild: orphaned at once, it burns CPU after its parent is gone
    started = time.process_time()
    while time.process_time() - started < {ORPHAN_CPU_S}:
        pass
    open(sys.argv[1], "w").close()
os._exit(0)
"""


def tree_cpu_of_an_orphan(adopt: bool, done: Path) -> float:
    """The CPU a process measuring its tree sees while a grandchild orphaned at once burns ORPHAN_CPU_S (a process
    of its own: this one must not adopt the orphans of every later test)."""
    measured = subprocess.run([sys.executable, "-c", MEASURE, "adopt" if adopt else "leave", BURN_IN_AN_ORPHAN,
                               str(done)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return float(measured.stdout.split()[-1])


@pytest.mark.skipif(sys.platform != "linux", reason="the benchmark's CPU figure reads /proc (Linux only)")
def test_a_process_orphaned_mid_run_keeps_its_cpu_in_the_tree(tmp_path: Path) -> None:
    """A pyspark daemon stopped under its workers orphans them: reparented to init, their CPU left the tree (a repeat's
    CPU came out negative); adopted, it stays."""
    assert tree_cpu_of_an_orphan(True, tmp_path / "adopted") >= ORPHAN_CPU_S
    assert tree_cpu_of_an_orphan(False, tmp_path / "left") < ORPHAN_CPU_S / 2  # what the benchmark measured before
