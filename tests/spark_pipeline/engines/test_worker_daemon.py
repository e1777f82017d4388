"""Python workers are forked from oncelog's daemon (spark_pipeline.engines.worker_daemon), holding its task modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobs import config_from_properties
from tests.spark_pipeline.engines.worker_probe import task_module_loaded
config = config_from_properties({
    "job.name": "probe", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
    "writer.staging.dir": "/tmp/s", "writer.output.dir": "/tmp/o", "data.publisher.final.dir": "/tmp/f",
    "spark.master": "local[1]", "spark.ui.enabled": "false"})
session = spark_session(config)
print(session.sparkContext.parallelize([0], 1).mapPartitions(task_module_loaded).collect())
session.stop()
"""


@pytest.mark.spark
def test_a_fresh_python_worker_starts_with_the_task_modules_loaded() -> None:
    """In a Spark of its own (a reused worker of another session would have imported them itself)."""
    ran = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=False,
                         cwd=Path(__file__).parents[3])
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().splitlines()[-1] == "[True]", ran.stdout
