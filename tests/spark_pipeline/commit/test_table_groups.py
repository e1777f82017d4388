"""A run's table steps made together (`spark_pipeline.commit.tables`), on real tables (pyiceberg's SQL catalog on
SQLite, delta-rs) and real Parquet files: many datasets' sequences in one snapshot or one Delta transaction, found again
member by member, never committed twice; a dataset whose data the table refuses fails alone."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyiceberg.table import Table

from events.commit import (
    TABLE_GROUP,
    TABLE_MEMBERS,
    CommitSequencePlanned,
    DeltaCommitStep,
    TableCommitStep,
    decode_members,
)
from filesystems.local import LOCAL
from spark_pipeline.commit.steps import CommitStepError, DeltaCommitCommitStep, TableCommitCommitStep
from spark_pipeline.commit.tables import TableMember, TableOutcome, commit_together
from spark_pipeline.tables import iceberg
from spark_pipeline.tables.base import DATASET_WATERMARKS, group_of

DATASETS = 5
GROUP = "job/run-1/0f0f0f0f"


def parquet(path: Path, dataset: str, amount: pa.Array | None = None) -> str:
    """Three records of `dataset`, with an `amount` column (a long unless given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    amounts = amount if amount is not None else pa.array([1, 2, 3], pa.int64())
    pq.write_table(pa.table({"dataset": pa.array([dataset] * 3), "offset": pa.array([0, 1, 2], pa.int64()),
                             "amount": amounts}), path)
    return str(path)


def summary(dataset: str) -> dict[str, str]:
    return {"oncelog.job": "job", "oncelog.run-id": "run-1", "oncelog.dataset": dataset, "oncelog.records": "3",
            "oncelog.watermarks": json.dumps({f"{dataset}:0": [0, 3]})}


def iceberg_members(warehouse: Path, bad: int | None = None, group: str = GROUP, first: int = 0
                    ) -> list[TableMember]:
    """A member per dataset (`first` on), each with one file in the table's data folder (dataset `bad`'s amounts are
    text), numbered from 0 in `group`."""
    members = []
    for d in range(first, first + DATASETS):
        text = pa.array(["x", "y", "z"]) if d == bad else None
        file = parquet(warehouse / "lake" / "events" / "data" / f"ds.{d}.parquet", f"ds.{d}", text)
        spec = TableCommitStep(catalog_uri=f"sqlite:///{warehouse / 'iceberg-catalog.db'}", catalog_name="oncelog",
                               warehouse=str(warehouse), table="lake.events",
                               location=str(warehouse / "lake" / "events"), commit_id=f"job/ds.{d}/seq-{d}",
                               summary=summary(f"ds.{d}"), group=group, member=d - first)
        members.append(TableMember(spec, (file,)))
    return members


def delta_members(root: Path, bad: int | None = None) -> list[TableMember]:
    members = []
    for d in range(DATASETS):
        text = pa.array(["x", "y", "z"]) if d == bad else None
        file = parquet(root / "data" / f"ds.{d}.parquet", f"ds.{d}", text)
        spec = DeltaCommitStep(table="events", location=str(root), app_id=f"oncelog/job/ds.{d}", version=1,
                               commit_id=f"job/ds.{d}/seq-{d}", metadata=summary(f"ds.{d}"))
        members.append(TableMember(spec, (file,)))
    return members


def table_of(member: TableMember) -> Table:
    spec = member.spec
    assert isinstance(spec, TableCommitStep)
    table = iceberg.load_table(iceberg.TableRef.of(spec))
    assert table is not None
    return table


def done(outcomes: list[TableOutcome]) -> list[str | None]:
    return [o.done for o in outcomes]


def test_a_runs_iceberg_commits_are_one_snapshot_found_again_by_each_member(tmp_path: Path) -> None:
    members = iceberg_members(tmp_path)
    assert done(commit_together(members, LOCAL)) == ["executed"] * DATASETS
    table = table_of(members[0])
    assert len(table.metadata.snapshots) == 1
    made = table.metadata.snapshots[0].summary
    assert made is not None
    props = made.additional_properties
    assert props[TABLE_GROUP] == GROUP and decode_members(props[TABLE_MEMBERS]) == set(range(DATASETS))
    assert props["oncelog.records"] == str(3 * DATASETS) and props["oncelog.job"] == "job"
    assert "oncelog.dataset" not in props  # not shared: each dataset's ranges are under its name instead
    assert set(json.loads(props[DATASET_WATERMARKS])) == {f"ds.{d}" for d in range(DATASETS)}
    assert len(table.scan().to_arrow()) == 3 * DATASETS

    for member in members:  # each one's own verify finds it in the run's snapshot
        spec = member.spec
        assert isinstance(spec, TableCommitStep)
        assert TableCommitCommitStep(spec, member.files).verify()
    assert done(commit_together(members, LOCAL)) == ["verified"] * DATASETS  # a rerun: nothing committed again
    assert len(table_of(members[0]).metadata.snapshots) == 1


def test_the_groups_of_one_runs_shards_are_told_apart(tmp_path: Path) -> None:
    """A run whose commit is sharded plans each shard's sequences apart, numbered from 0: each shard's group is its
    own, so a shard's members are never taken for another's already committed."""
    shards = [CommitSequencePlanned(job="job", run_id="run-1", dataset_urn=f"ds.{d}", sequence_id=f"seq-{d}", steps=())
              for d in range(2 * DATASETS)]
    first, second = group_of(shards[:DATASETS]), group_of(shards[DATASETS:])
    assert first != second and first.startswith("job/run-1/") and group_of(shards[:DATASETS]) == first
    assert done(commit_together(iceberg_members(tmp_path, group=first), LOCAL)) == ["executed"] * DATASETS
    members = iceberg_members(tmp_path, group=second, first=DATASETS)
    assert done(commit_together(members, LOCAL)) == ["executed"] * DATASETS
    assert len(table_of(members[0]).scan().to_arrow()) == 2 * 3 * DATASETS


def test_a_dataset_whose_data_the_table_refuses_fails_alone(tmp_path: Path) -> None:
    first = iceberg_members(tmp_path / "first")
    commit_together(first[:1], LOCAL)  # the table exists, `amount` a long
    members = iceberg_members(tmp_path / "first", bad=3)[1:]
    outcomes = commit_together(members, LOCAL)
    assert [o.done for o in outcomes] == ["executed", "executed", None, "executed"]
    error = outcomes[2].error
    assert isinstance(error, CommitStepError) and "ds.3.parquet" in str(error) and "amount" in str(error)
    datasets = table_of(members[0]).scan().to_arrow()["dataset"].to_pylist()
    assert sorted(set(datasets)) == ["ds.0", "ds.1", "ds.2", "ds.4"]


def test_a_runs_delta_commits_are_one_transaction_with_each_datasets_app_transaction(tmp_path: Path) -> None:
    root = tmp_path / "events"
    members = delta_members(root)
    assert done(commit_together(members, LOCAL)) == ["executed"] * DATASETS
    table = DeltaTable(str(root))
    commits = [h for h in table.history() if "oncelog.sequences" in h]
    assert len(commits) == 1 and commits[0]["oncelog.sequences"] == str(DATASETS)
    assert {table.transaction_version(f"oncelog/job/ds.{d}") for d in range(DATASETS)} == {1}
    for member in members:
        spec = member.spec
        assert isinstance(spec, DeltaCommitStep)
        assert DeltaCommitCommitStep(spec, member.files).verify()
    assert done(commit_together(members, LOCAL)) == ["verified"] * DATASETS
    assert len(DeltaTable(str(root)).history()) == 1


def test_a_delta_dataset_whose_data_the_table_refuses_fails_alone(tmp_path: Path) -> None:
    root = tmp_path / "events"
    commit_together(delta_members(root)[:1], LOCAL)
    members = delta_members(root, bad=2)[1:]
    outcomes = commit_together(members, LOCAL)
    assert [o.done for o in outcomes] == ["executed", None, "executed", "executed"]
    assert "ds.2.parquet" in str(outcomes[1].error)
    table = DeltaTable(str(root))
    assert sorted(set(table.to_pyarrow_table(columns=["dataset"])["dataset"].to_pylist())) == [
        "ds.0", "ds.1", "ds.3", "ds.4"]
