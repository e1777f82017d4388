"""A benchmark killed by SIGTERM or SIGHUP (`kill`, `timeout`, a closed terminal) still runs its `finally` blocks:
the broker it started is stopped, not left running."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from pathlib import Path
from benchmarks.common import stopped_cleanly_on_termination
done = Path(sys.argv[1])
try:
    with stopped_cleanly_on_termination():
        print("ready", flush=True)
        time.sleep(60)
finally:
    done.write_text("cleaned up")
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_terminated_benchmark_runs_its_finally_and_exits_128_plus_the_signal(tmp_path: Path,
                                                                               sig: signal.Signals) -> None:
    done = tmp_path / "done"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(done)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(sig)
    assert child.wait(timeout=30) == 128 + sig
    assert done.read_text() == "cleaned up"


def test_outside_the_block_the_signal_kills_as_before(tmp_path: Path) -> None:
    done = tmp_path / "done"
    script = HOLD.replace("with stopped_cleanly_on_termination():", "if True:")
    child = subprocess.Popen([sys.executable, "-c", script, str(done)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert not done.exists()
