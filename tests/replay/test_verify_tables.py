"""`oncelog verify` checks the Iceberg tables a log's TableCommit steps committed to: each completed table commit in one
snapshot (a run's sequences share one), in the table's current history, adding the sequences' files; no data file
added twice, no source offset in two snapshots. Real runs (the records engine writing Parquet, the Iceberg publisher, a
SQLite catalog) make the table; each test then damages it by hand as another writer or an operator could, and verify
names the table, snapshot and file."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table

from events.commit import TABLE_COMMIT_ID, TABLE_GROUP, TABLE_MEMBERS
from events.log import open_log
from replay.verify import verify
from spark_pipeline.tables import iceberg
from tests.spark_pipeline.tables.table_jobs import run_table_job


def violations(base: Path) -> list[tuple[str, str]]:
    with open_log(f"sqlite:///{base / 'log.db'}") as log:
        return [(v.kind, v.message) for v in verify(log).violations]


def table_of(ref: iceberg.TableRef) -> Table:
    table = iceberg.load_table(ref)
    assert table is not None
    return table


def data_files(table: Table) -> list[str]:
    return sorted(table.inspect.files()["file_path"].to_pylist())


@pytest.fixture
def two_runs(tmp_path: Path) -> iceberg.TableRef:
    """Two runs of two datasets: two snapshots of ours, each one run's two sequences; verify finds nothing."""
    ref = run_table_job(tmp_path, runs=2)
    table = table_of(ref)
    assert len(table.metadata.snapshots) == 2 and len(data_files(table)) == 4
    assert violations(tmp_path) == []
    return ref


def test_a_second_append_of_published_files_is_found_naming_each_file_and_both_snapshots(
        two_runs: iceberg.TableRef, tmp_path: Path) -> None:
    table = table_of(two_runs)
    first = table.metadata.snapshots[0]
    assert first.summary is not None
    copied = {k: first.summary.additional_properties[k] for k in (TABLE_COMMIT_ID, TABLE_GROUP, TABLE_MEMBERS)}
    added_by = first.snapshot_id
    entries = table.inspect.entries().to_pylist()
    files = sorted(e["data_file"]["file_path"] for e in entries if e["snapshot_id"] == added_by)
    assert len(files) == 2
    table.add_files(files, snapshot_properties=copied, check_duplicate_files=False)  # a replayed commit
    again = table_of(two_runs).metadata.current_snapshot_id
    assert again is not None
    found = violations(tmp_path)
    assert {kind for kind, _ in found} == {"table-file-twice", "table-committed-twice", "table-offset-twice"}
    messages = "\n".join(message for _, message in found)
    for file in files:
        assert f"data file {file} is added by snapshots {sorted([added_by, again])}" in messages
    assert "'lake.events'" in messages
    group = copied[TABLE_GROUP]
    for member in (0, 1):
        assert f"snapshots {[added_by, again]} all commit '{group}#{member}'" in messages


def test_a_rolled_back_and_an_expired_snapshot_are_found_naming_their_sequences(
        two_runs: iceberg.TableRef, tmp_path: Path) -> None:
    table = table_of(two_runs)
    snapshots = table.metadata.snapshots
    table.manage_snapshots().rollback_to_snapshot(snapshots[0].snapshot_id).commit()  # the second run's rolled back
    found = violations(tmp_path)
    assert [kind for kind, _ in found] == ["table-commit-rolled-back"] * 2
    assert all(f"snapshot {snapshots[1].snapshot_id} of sequence" in m and "rolled back" in m for _, m in found)

    table_of(two_runs).maintenance.expire_snapshots().by_id(snapshots[1].snapshot_id).commit()
    kinds = [kind for kind, _ in violations(tmp_path)]
    assert kinds == ["table-commit-missing"] * 2


def test_a_foreign_writer_is_left_alone_and_a_lost_table_is_found(two_runs: iceberg.TableRef, tmp_path: Path) -> None:
    table = table_of(two_runs)
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(table.scan(limit=1).to_arrow(), foreign)
    table.add_files([str(foreign)], snapshot_properties={"writer": "another engine"})
    assert violations(tmp_path) == []  # a snapshot without our commit id is not ours to check

    catalog = Path(two_runs.warehouse) / "iceberg-catalog.db"
    catalog.unlink()
    found = violations(tmp_path)
    assert [kind for kind, _ in found] == ["table-missing"]
    assert "'lake.events'" in found[0][1] and "4 sequence(s) committed to it" in found[0][1]
    assert not catalog.exists()  # the check created no catalog
