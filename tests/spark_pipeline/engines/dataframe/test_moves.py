"""Where the DataFrame engine measures and moves a committed attempt's files: on the driver under a local master (no
Spark job, so no Python worker starts for it), on the executors on a cluster; both give the same results."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from pyspark.sql import SparkSession

from spark_pipeline.engines.dataframe.results import MovedFile, MovePlace, StagedFile, move_files, move_place
from spark_pipeline.engines.spark import JOB_GROUP_PROPERTIES

CONTENTS = [b"first file", b"second, longer file" * 100, b"", b"fourth"]


def staged(root: Path) -> list[StagedFile]:
    """Files as a committed attempt leaves them, each with its place in the task output."""
    files = []
    for unit, content in enumerate(CONTENTS):
        src = root / "staging" / f"_wu={unit}" / "part-00000.avro"
        src.parent.mkdir(parents=True)
        src.write_bytes(content)
        files.append(StagedFile(str(src), unit, str(root / "output" / f"ds.{unit}" / f"p_0-{unit}.avro")))
    return files


def relative(moved: list[MovedFile], root: Path) -> list[tuple[int, str, int, str]]:
    """The moved files, their paths relative to `root`."""
    return [(m.unit, str(Path(m.path).relative_to(root)), m.size, m.checksum) for m in moved]


def test_files_move_on_the_driver_under_a_local_master_and_alike_on_the_executors(spark: SparkSession,
                                                                                    tmp_path: Path) -> None:
    context = spark.sparkContext
    kept = {key: context.getLocalProperty(key) for key in JOB_GROUP_PROPERTIES}
    group = f"moves-{uuid.uuid4().hex}"
    context.setJobGroup(group, "the moves' Spark jobs")
    try:
        assert move_place(spark) is MovePlace.DRIVER  # the tests' master is local[2]
        on_driver = move_files(spark, {}, staged(tmp_path / "driver"))
        assert context.statusTracker().getJobIdsForGroup(group) == []
        on_executors = move_files(spark, {}, staged(tmp_path / "executors"), MovePlace.EXECUTORS)
        assert len(context.statusTracker().getJobIdsForGroup(group)) == 1
    finally:
        for key, value in kept.items():
            context._jsc.setLocalProperty(key, value)
    expected = [(unit, f"output/ds.{unit}/p_0-{unit}.avro", len(content), hashlib.sha256(content).hexdigest())
                for unit, content in enumerate(CONTENTS)]
    assert relative(on_driver, tmp_path / "driver") == expected
    assert relative(on_executors, tmp_path / "executors") == expected
    for place in ("driver", "executors"):
        assert not list((tmp_path / place / "staging").rglob("*.avro"))
        assert [p.read_bytes() for p in sorted((tmp_path / place / "output").rglob("*.avro"))] == CONTENTS
