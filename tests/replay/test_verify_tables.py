"""`oncelog verify` checks the Iceberg tables a log's TableCommit steps committed to: one snapshot per completed table
commit, in the table's current history, adding the sequence's files; no data file added twice, no source offset in
two snapshots. Real runs (the records engine writing Parquet, the Iceberg publisher, a SQLite catalog) make the table;
each test then damages it by hand as another writer or an operator could, and verify names the table, snapshot and
file."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from pyiceberg.table import Table

from events.commit import TABLE_COMMIT_ID, TABLE_WATERMARKS
from events.log import open_log
from filesystems.local import LOCAL
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.tables import iceberg

TABLE = "lake.events"


def run_table_job(base: Path, runs: int) -> iceberg.TableRef:
    """`runs` runs of a synthetic job (two datasets, three records per run) publishing into one Iceberg table."""
    job = {"job.name": "ice", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
           "source.synthetic.datasets": 2, "source.synthetic.partitions": 1, "source.synthetic.records.per.run": 3,
           "source.synthetic.payload.bytes": 0, "writer.staging.dir": str(base / "staging"),
           "writer.output.dir": str(base / "task-output"), "data.publisher.final.dir": str(base / "warehouse"),
           "data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher", "iceberg.table": TABLE,
           "writer.output.format": "PARQUET", "writer.builder.class": "tests.sim.tables.ParquetDataWriterBuilder",
           "oncelog.log.url": f"sqlite:///{base / 'log.db'}"}
    path = base / "ice.yaml"
    path.write_text(yaml.safe_dump(job))
    config = load_job_config(path)
    with open_log(config.log_url) as log:
        for _ in range(runs):
            engine = InProcessTaskEngine(log.writer, slots=1, sleep=lambda _: None)
            result = JobLauncher(config, engine=engine, fs=LOCAL, log=log).run()
            assert result.status is RunStatus.COMMITTED, result.error
    warehouse = str((base / "warehouse").resolve())
    return iceberg.TableRef("oncelog", f"sqlite:///{warehouse}/iceberg-catalog.db", warehouse, TABLE,
                            f"{warehouse}/lake/events")


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
    """Two runs of two datasets: four snapshots of ours, each one sequence's; verify finds nothing."""
    ref = run_table_job(tmp_path, runs=2)
    table = table_of(ref)
    assert len(table.metadata.snapshots) == 4 and len(data_files(table)) == 4
    assert violations(tmp_path) == []
    return ref


def test_a_second_append_of_a_published_file_is_found_naming_the_file_and_both_snapshots(
        two_runs: iceberg.TableRef, tmp_path: Path) -> None:
    table = table_of(two_runs)
    first = table.metadata.snapshots[0]
    assert first.summary is not None
    copied = {k: first.summary.additional_properties[k] for k in (TABLE_COMMIT_ID, TABLE_WATERMARKS)}
    added_by = first.snapshot_id
    entries = table.inspect.entries().to_pylist()
    file = next(e["data_file"]["file_path"] for e in entries if e["snapshot_id"] == added_by)
    table.add_files([file], snapshot_properties=copied, check_duplicate_files=False)  # a replayed commit
    again = table_of(two_runs).metadata.current_snapshot_id
    assert again is not None
    found = dict(violations(tmp_path))
    assert set(found) == {"table-file-twice", "table-committed-twice", "table-offset-twice"}
    assert f"data file {file} is added by snapshots {sorted([added_by, again])}" in found["table-file-twice"]
    assert "'lake.events'" in found["table-file-twice"]
    assert f"snapshots {[added_by, again]} all carry the commit id {copied[TABLE_COMMIT_ID]!r}" \
        in found["table-committed-twice"]


def test_a_rolled_back_and_an_expired_snapshot_are_found_naming_their_sequence(
        two_runs: iceberg.TableRef, tmp_path: Path) -> None:
    table = table_of(two_runs)
    snapshots = table.metadata.snapshots
    table.manage_snapshots().rollback_to_snapshot(snapshots[2].snapshot_id).commit()  # the last one rolled back
    found = violations(tmp_path)
    assert [kind for kind, _ in found] == ["table-commit-rolled-back"]
    assert f"snapshot {snapshots[3].snapshot_id} of sequence" in found[0][1] and "rolled back" in found[0][1]

    table_of(two_runs).maintenance.expire_snapshots().by_id(snapshots[0].snapshot_id).commit()
    kinds = [kind for kind, _ in violations(tmp_path)]
    assert sorted(kinds) == ["table-commit-missing", "table-commit-rolled-back"]


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
