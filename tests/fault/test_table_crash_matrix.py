"""The crash matrix of the table publishers (Iceberg, Delta): the driver killed before, inside and after the table
commit, then the job run again; read back through pyiceberg's scan or deltalake's reader, every record up to the
watermarks is in the table exactly once.

Points (spark_pipeline/commit/faults.py): `before-table-commit` (the files moved into the table's data folder, no
snapshot), `after-table-commit` (the snapshot, or the Delta log entry, committed, nothing of it in the log: the rerun's
recovery must find the snapshot by its id, or the Delta app transaction by its version, not commit again) and
`during-cleanup` (the sequences recorded as completed). The driver dies in this process (in_process_crash.py) on the
SQLite log, the DataFrame engine (the Parquet writer) and the driver's commit; one canary kills a real `oncelog run`
process inside the (Iceberg) table commit.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from events.commit import (
    TABLE_GROUP,
    TABLE_MEMBERS,
    TABLE_STEPS,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    DeltaCommitStep,
    TableCommitStep,
    decode_members,
)
from events.log import open_log
from projections.projector import Projector
from projections.views import RunStatus
from replay.tables import commit_key
from replay.verify import verify
from spark_pipeline.commit.faults import CRASH_EXIT_CODE, FaultPoint
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.tables import iceberg
from spark_pipeline.tables.base import DATASET_WATERMARKS
from spark_pipeline.tables.delta_publisher import app_id
from tests.fault.in_process_crash import driver_killed_in_process
from tests.fault.pipeline_checks import DATASETS, PARTITIONS, RECORDS, run_cli, write_job

TABLE = "lake.events"
POINTS = [FaultPoint.BEFORE_TABLE_COMMIT, FaultPoint.AFTER_TABLE_COMMIT, FaultPoint.DURING_CLEANUP]
"""Before, inside (committed to the table, not yet recorded) and after the table commit."""


class Format(StrEnum):
    ICEBERG = "iceberg"
    DELTA = "delta"

    @property
    def keys(self) -> dict[str, str]:
        """The job file keys that publish into the matrix's table in this format."""
        if self is Format.ICEBERG:
            return {"data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher",
                    "iceberg.table": TABLE}
        return {"data.publisher.type": "spark_pipeline.tables.delta_publisher.DeltaTablePublisher",
                "delta.table": TABLE}


def table_job(base: Path, table_format: Format = Format.ICEBERG) -> Path:
    """The matrix's synthetic job (two datasets of two partitions), published into one table."""
    return write_job(base, f"sqlite:///{base / 'log.db'}", "full", None, **{
        **table_format.keys, "writer.output.format": "PARQUET", "task.engine": "dataframe",
        "job.commit.on.executors": False})


@pytest.mark.parametrize("table_format", list(Format))
@pytest.mark.parametrize("point", POINTS, ids=[str(p) for p in POINTS])
def test_a_crash_around_the_table_commit_then_a_rerun_publishes_exactly_once(point: FaultPoint, table_format: Format,
                                                                             tmp_path: Path,
                                                                             spark: SparkSession) -> None:
    job = table_job(tmp_path, table_format)
    with driver_killed_in_process(job, point, spark) as death:
        assert death.cause is not None and f"injected crash at {point}" in death.cause, death.cause
        again = JobLauncher(load_job_config(job), spark=spark).run()
        assert again.status is RunStatus.COMMITTED, again.error
        if point is not FaultPoint.DURING_CLEANUP:
            assert len(again.recovered) == DATASETS, again.recovered
    if table_format is Format.ICEBERG:
        table_holds_exactly_once(tmp_path, runs=2)
    else:
        delta_table_holds_exactly_once(tmp_path, runs=2)


def test_a_process_killed_inside_the_table_commit_then_a_rerun_publishes_exactly_once(tmp_path: Path,
                                                                                      spark: SparkSession) -> None:
    job = table_job(tmp_path)
    crashed = run_cli(job, crash_at=str(FaultPoint.AFTER_TABLE_COMMIT))
    assert crashed.returncode == CRASH_EXIT_CODE, f"exit {crashed.returncode}\n{crashed.stderr[-3000:]}"
    assert f"injected crash at {FaultPoint.AFTER_TABLE_COMMIT}" in crashed.stderr
    table = iceberg.load_table(table_ref(tmp_path))
    assert table is not None and len(table.metadata.snapshots) == 1, "the crash came right after the first commit"
    again = JobLauncher(load_job_config(job), spark=spark).run()
    assert again.status is RunStatus.COMMITTED, again.error
    table_holds_exactly_once(tmp_path, runs=2)


def table_ref(base: Path) -> iceberg.TableRef:
    warehouse = str((base / "published").resolve())
    return iceberg.TableRef("oncelog", f"sqlite:///{warehouse}/iceberg-catalog.db", warehouse, TABLE,
                            f"{warehouse}/lake/events")


def table_holds_exactly_once(base: Path, runs: int) -> None:
    """Read back through pyiceberg: every record up to each committed watermark once, and nothing else; one snapshot
    per run, listing the run's completed sequences (its datasets' watermark ranges), each completed sequence in one
    snapshot, no data file added twice; verify passes."""
    table = iceberg.load_table(table_ref(base))
    assert table is not None
    completed = records_once_as_the_log_says(base, table.scan(selected_fields=("dataset", "partition", "offset"))
                                             .to_arrow(), runs)
    listed = [f"{props[TABLE_GROUP]}#{n}" for s in table.metadata.snapshots if s.summary
              for props in [s.summary.additional_properties] for n in decode_members(props[TABLE_MEMBERS])]
    assert sorted(listed) == sorted(commit_key(s) for s in completed if isinstance(s, TableCommitStep)), (
        "each completed sequence is in exactly one snapshot, and no other")
    assert len(table.metadata.snapshots) == runs, "one snapshot per run, whatever the datasets"
    added = sum(int(s.summary.additional_properties["added-data-files"]) for s in table.metadata.snapshots
                if s.summary)
    files = table.inspect.files()["file_path"].to_pylist()
    assert len(files) == len(set(files)) == added, "a data file in two snapshots"
    for snapshot in table.metadata.snapshots:
        assert snapshot.summary is not None
        assert_ranges(snapshot.summary.additional_properties)


def delta_table_holds_exactly_once(base: Path, runs: int) -> None:
    """Read back through deltalake's reader: every record up to each committed watermark once, and nothing else;
    every commit is one completed sequence's (its id, its watermark ranges), each dataset's app transaction at its
    `runs`-th version, no data file added twice; verify passes."""
    location = base / "published" / "lake" / "events"
    table = DeltaTable(str(location))
    completed = records_once_as_the_log_says(
        base, table.to_pyarrow_table(columns=["dataset", "partition", "offset"]), runs)
    commits = [h for h in table.history() if "oncelog.sequences" in h]
    assert len(commits) == runs, "one commit per run, whatever the datasets"
    assert sum(int(h["oncelog.sequences"]) for h in commits) == len(completed) == DATASETS * runs
    assert {table.transaction_version(app_id("crashy", f"ds.{d}")) for d in range(DATASETS)} == {runs}
    actions = [json.loads(line) for entry in sorted((location / "_delta_log").glob("*.json"))
               for line in entry.read_text().splitlines()]
    added = [action["add"]["path"] for action in actions if "add" in action]
    assert len(added) == len(set(added)) == len(table.file_uris()), "a data file added twice"
    for commit in commits:
        assert_ranges(commit)


def assert_ranges(properties: Mapping[str, Any]) -> None:
    """A run's table commit says each of its datasets' ranges, each `RECORDS` offsets long."""
    ranges = json.loads(properties[DATASET_WATERMARKS])
    assert set(ranges) == {f"ds.{d}" for d in range(DATASETS)}
    assert {high - low for dataset in ranges.values() for low, high in dataset.values()} == {RECORDS}, ranges


def records_once_as_the_log_says(base: Path, rows: pa.Table, runs: int) -> list[TableCommitStep | DeltaCommitStep]:
    """`rows` (dataset, partition, offset) hold every record up to each committed watermark once, and nothing else;
    verify passes, no sequence is pending, each partition's watermark is `runs` runs' records. Returns the table steps
    of the completed sequences."""
    seen = Counter(zip(rows["dataset"].to_pylist(), rows["partition"].to_pylist(), rows["offset"].to_pylist(),
                       strict=True))
    twice = {k: n for k, n in seen.items() if n > 1}
    assert not twice, f"in the table more than once: {sorted(twice)[:5]}"
    with open_log(f"sqlite:///{base / 'log.db'}") as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
        report = verify(log)
        events = [e.event for e in log.read()]
        ended = {e.sequence_id for e in events if isinstance(e, CommitSequenceCompleted)}
        completed = [step for e in events if isinstance(e, CommitSequencePlanned) and e.sequence_id in ended
                     for step in e.steps if isinstance(step, TABLE_STEPS)]
    assert report.ok, "\n".join(str(v) for v in report.violations)
    assert state.pending_sequences("crashy") == []
    watermarks = {(urn, p): v for (_, urn), d in state.datasets.items() for p, v in d.watermarks.items()}
    assert watermarks == {(f"ds.{d}", f"ds.{d}:{p}"): RECORDS * runs for d in range(DATASETS)
                          for p in range(PARTITIONS)}
    expected = {(urn, int(p.rsplit(":", 1)[1]), o) for (urn, p), w in watermarks.items() for o in range(w)}
    assert set(seen) == expected, f"{len(seen)} records in the table, the watermarks say {len(expected)}"
    return completed
