"""What loads without PySpark: the errors, the log-reading commands, verify and audit, and `oncelog --help`; and
what loads without pyiceberg or deltalake: all of those, `import oncelog`, the commit and the job's pre-flight checks
(only the table publishers' commit steps load them). Each check runs in a fresh interpreter, since this one may have
imported PySpark, pyiceberg or deltalake already."""

from __future__ import annotations

import json
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


LAZY_ICEBERG = ["oncelog", "oncelog.errors", "oncelog.cli.replay", "replay.verify", "replay.audit",
                "spark_pipeline.preflight", "spark_pipeline.commit.sequence", "spark_pipeline.tables.publisher"]


@pytest.mark.parametrize("module", LAZY_ICEBERG)
def test_importing_loads_no_pyiceberg(module: str) -> None:
    assert loaded_roots(module, "pyiceberg") == [], (
        f"import {module} loads pyiceberg: python -X importtime -c 'import {module}'")


@pytest.mark.parametrize("module", [*LAZY_ICEBERG, "spark_pipeline.tables.delta_publisher"])
def test_importing_loads_no_deltalake(module: str) -> None:
    assert loaded_roots(module, "deltalake") == [], (
        f"import {module} loads deltalake: python -X importtime -c 'import {module}'")


def test_the_delta_commit_loads_deltalake() -> None:
    """The check above can fail: the module the DeltaCommit step imports on first use does load it."""
    assert "deltalake" in loaded_roots("spark_pipeline.tables.delta", "deltalake")


def test_the_table_commit_loads_pyiceberg() -> None:
    """The check above can fail: the module the TableCommit step imports on first use does load it."""
    assert "pyiceberg" in loaded_roots("spark_pipeline.tables.iceberg", "pyiceberg")


def loaded_roots(module: str, root: str) -> list[str]:
    """The modules under `root` that importing `module` loads, in a fresh interpreter."""
    code = (f"import json, sys, {module}; "
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == {root!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_help_loads_no_pyspark() -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "oncelog", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    # -X importtime writes a line per module imported to stderr, nested under the module that imported it.
    loaded = [line for line in done.stderr.splitlines() if line.startswith("import time:")
              and ("pyspark" in line or "pyiceberg" in line or "deltalake" in line)]
    assert loaded == [], "\n".join(loaded[:5])
