"""Every app transaction of a Delta table from one read of its log (`delta_log`), on real tables written by delta-rs:
the same versions delta-rs answers app id by app id, at every table version, across a checkpoint, a log cleaned up
before it, a checkpoint in parts; a log missing a commit the state needs is a TableError naming it."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from events.commit import DeltaCommitStep
from filesystems.local import LOCAL
from spark_pipeline.commit.tables import TableMember, commit_together
from spark_pipeline.tables import delta, delta_log
from spark_pipeline.tables.errors import TableError
from spark_pipeline.tables.storage import LOCAL_STORAGE

DATASETS = 6
APPS = [f"oncelog/job/ds.{d}" for d in range(DATASETS)] + ["oncelog/job/never"]


def commit_run(root: Path, run: int, datasets: Iterable[int]) -> None:
    """One Delta transaction of `datasets`, each dataset's app transaction at its `run`-th version."""
    members = []
    for d in datasets:
        path = root / "data" / f"ds.{d}.{run}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"offset": pa.array([run], pa.int64())}), path)
        members.append(TableMember(DeltaCommitStep(table="events", location=str(root), app_id=f"oncelog/job/ds.{d}",
                                                   version=run, commit_id=f"job/ds.{d}/run-{run}", metadata={}),
                                   (str(path),)))
    assert {o.done for o in commit_together(members, LOCAL)} == {"executed"}


def delta_rs(root: Path, version: int | None = None) -> dict[str, int | None]:
    """delta-rs's answer for each app id, at `version` (the latest if None)."""
    table = DeltaTable(str(root))
    if version is not None:
        table.load_as_version(version)
    return {app: table.transaction_version(app) for app in APPS}


def ours(root: Path, version: int) -> dict[str, int | None]:
    found = delta_log.app_transactions(LOCAL_STORAGE, str(root), version)
    return {app: found.get(app) for app in APPS}


def log(root: Path) -> Path:
    return root / "_delta_log"


def test_the_log_read_once_says_what_delta_rs_says_at_every_version(tmp_path: Path) -> None:
    root = tmp_path / "events"
    commit_run(root, 1, range(DATASETS))
    commit_run(root, 2, range(0, DATASETS, 2))  # every other dataset moves on
    DeltaTable(str(root)).create_checkpoint()
    commit_run(root, 3, range(0, DATASETS, 3))
    commit_run(root, 2, [1, 5])  # the odd ones but 3 (at version 3 now) move on too
    latest = DeltaTable(str(root)).version()
    assert list(log(root).glob("*.checkpoint.parquet")) and latest >= 3
    for version in range(latest + 1):
        assert ours(root, version) == delta_rs(root, version)
    assert ours(root, latest)["oncelog/job/ds.3"] == 3 and ours(root, latest)["oncelog/job/never"] is None
    table = DeltaTable(str(root))
    assert delta.transaction_versions(table, delta.DeltaRef("events", str(root)), APPS) == delta_rs(root)


def test_a_log_cleaned_up_before_its_checkpoint_is_read_from_the_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "events"
    commit_run(root, 1, range(DATASETS))
    commit_run(root, 2, range(DATASETS // 2))
    DeltaTable(str(root)).create_checkpoint()
    checkpoint = DeltaTable(str(root)).version()
    expected = delta_rs(root)
    for old in range(checkpoint):
        (log(root) / f"{old:020d}.json").unlink()
    assert ours(root, checkpoint) == expected
    commit_run(root, 3, range(1))
    assert ours(root, checkpoint + 1) == delta_rs(root)


def test_a_checkpoint_in_parts_is_read_whole(tmp_path: Path) -> None:
    """A checkpoint in two parts (as Spark writes big ones): both parts' app transactions."""
    root = tmp_path / "events"
    commit_run(root, 1, range(DATASETS))
    commit_run(root, 2, range(DATASETS // 2))
    DeltaTable(str(root)).create_checkpoint()
    version = DeltaTable(str(root)).version()
    expected = delta_rs(root)
    single = log(root) / f"{version:020d}.checkpoint.parquet"
    state = pq.read_table(single)
    half = state.num_rows // 2
    for part, rows in ((1, state.slice(0, half)), (2, state.slice(half))):
        pq.write_table(rows, log(root) / f"{version:020d}.checkpoint.{part:010d}.0000000002.parquet")
    single.unlink()
    for old in range(version):
        (log(root) / f"{old:020d}.json").unlink()  # the parts are the only state there is
    assert ours(root, version) == expected
    (log(root) / f"{version:020d}.checkpoint.0000000002.0000000002.parquet").unlink()
    with pytest.raises(TableError, match=f"lacks the commit 0 .*version {version}"):
        ours(root, version)  # an incomplete checkpoint is none: the log from its start is needed, and gone


def test_a_log_missing_a_commit_is_refused_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "events"
    for run in (1, 2, 3):
        commit_run(root, run, range(DATASETS))
    (log(root) / f"{1:020d}.json").rename(tmp_path / "moved.json")
    with pytest.raises(TableError, match=f"Delta log {log(root)} lacks the commit 1"):
        ours(root, 2)
    shutil.move(tmp_path / "moved.json", log(root) / f"{1:020d}.json")
    assert ours(root, 2) == delta_rs(root)


def test_logs_this_reading_does_not_follow_are_left_to_delta_rs() -> None:
    assert delta_log.readable(None, {}) and delta_log.readable(["deletionVectors"], {"delta.appendOnly": "true"})
    assert not delta_log.readable(["v2Checkpoint"], {})
    assert not delta_log.readable([], {"delta.setTransactionRetentionDuration": "interval 1 days"})
