"""Pytest plugin giving tests a real Spark standalone cluster on loopback: ``spark_cluster`` (shared by the session).

A master and two workers run from pyspark's own `spark-class` (:class:`localservers.spark.
LocalSparkCluster`). When the cluster cannot start, tests skip with the reason, except under ``CI=true`` where they
fail: CI must never go green by silently skipping the cluster tests. A test that kills a worker restarts it before
it ends (the cluster is shared). Enable with ``pytest_plugins = ["tests.spark_cluster_plugin"]``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localservers.errors import SparkClusterError
from localservers.spark import LocalSparkCluster
from tests.unavailable import unavailable


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    """A started master and two workers (1 core, 512m each), stopped at the end of the session."""
    cluster = LocalSparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
    except SparkClusterError as e:
        unavailable("Spark standalone cluster", str(e))
    try:
        yield cluster
    finally:
        cluster.stop()
