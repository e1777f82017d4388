"""Shared fixtures: a real Kafka broker, HDFS, S3-compatible server and Spark cluster, and fresh logs of every store.

Markers follow from what a test uses: a test asking (directly or through other fixtures) for a server's fixture, or
parametrized onto a store that needs one, is marked with that server (`spark`, `kafka`, `hdfs`, `s3`, `cluster`,
`browser`), so `make test-fast` can leave them out without anyone remembering to mark them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

pytest_plugins = ["tests.kafka_plugin", "tests.log_fixtures", "tests.spark_plugin", "tests.hdfs_plugin",
                  "tests.s3_plugin", "tests.remote_fs_plugin", "tests.spark_cluster_plugin", "tests.browser"]

FIXTURE_MARKERS = {
    "spark": "spark", "spark_cluster": "cluster", "browser": "browser",
    "kafka_bootstrap": "kafka", "secure_kafka": "kafka", "kafka4_bootstrap": "kafka", "kafka_cluster": "kafka",
    "restartable_kafka": "kafka", "hdfs": "hdfs", "s3": "s3", "restartable_s3": "s3",
}
"""A fixture -> the marker of the server it starts."""
PARAMETER_MARKERS = {"kafka": "kafka", "kafka4": "kafka", "hdfs": "hdfs", "s3": "s3"}
"""A parameter value naming a store -> the marker of its server (fixtures that ask for it at run time)."""
SLOWEST_MODULES = (
    "tests/sim/test_simulation.py", "tests/fault/test_soak.py", "tests/fault/test_concurrent_runs.py",
    "tests/fault/test_crash_matrix.py", "tests/spark_pipeline/engines/test_isolation.py",
    "tests/spark_pipeline/test_pipeline.py", "tests/fault/test_crash_matrix_remote.py",
    "tests/fault/test_standalone_cluster.py", "tests/fault/test_mytopic_remote.py",
    "tests/fault/test_table_crash_matrix.py", "tests/oncelog/cli/test_run_cli.py",
)
"""The modules taking the most worker time in CI's runs, longest first (tests/fault, tests/sim and tests/contract under
`pytest -n 2`, once commands started short-lived driver JVMs: simulation 542 s, soak 364, concurrent runs 261, crash
matrix 206, remote crash matrix 73, standalone cluster 66, MyTopic remote 62, table crash matrix 35; CI's last run
before: isolation 186, pipeline 146). `make test` hands whole modules to its two workers in collection order
(`--dist loadscope --no-loadscope-reorder`): the longest first, so that none of them starts last and leaves one worker
running alone at the end."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the servers its fixtures and store parameters need; the slowest modules first."""
    items.sort(key=_module_rank(items))
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        values = {v for v in callspec.params.values() if isinstance(v, str)} if callspec is not None else set()
        needed = {FIXTURE_MARKERS[n] for n in names if n in FIXTURE_MARKERS}
        needed |= {PARAMETER_MARKERS[v] for v in values if v in PARAMETER_MARKERS}
        for marker in sorted(needed):
            item.add_marker(marker)


def _module_rank(items: list[pytest.Item]) -> Callable[[pytest.Item], tuple[int, int]]:
    """A sort key putting `SLOWEST_MODULES` first in their order, then the other modules with the most tests first
    (xdist's own order); a stable sort keeps each module's tests in their order."""
    counts = Counter(item.nodeid.split("::")[0] for item in items)

    def rank(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::")[0]
        known = SLOWEST_MODULES.index(module) if module in SLOWEST_MODULES else len(SLOWEST_MODULES)
        return known, -counts[module]
    return rank
