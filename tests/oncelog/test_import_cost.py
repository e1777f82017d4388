"""What loads without PySpark: the errors, the log-reading commands, verify and audit, and `oncelog --help`. Each
check runs in a fresh interpreter, since this one may have imported PySpark already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("module", ["oncelog.errors", "oncelog.cli.replay", "replay.verify", "replay.audit"])
def test_importing_loads_no_pyspark(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"import {module} loads PySpark: python -X importtime -c 'import {module}'"


def test_help_loads_no_pyspark() -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "oncelog", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    # -X importtime writes a line per module imported to stderr, nested under the module that imported it.
    loaded = [line for line in done.stderr.splitlines() if line.startswith("import time:") and "pyspark" in line]
    assert loaded == [], "\n".join(loaded[:5])
