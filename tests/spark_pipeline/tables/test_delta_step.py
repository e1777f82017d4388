"""The DeltaCommit step on real Delta tables (delta-rs) and real Parquet files: one write transaction per sequence,
carrying the dataset's app transaction, found again by it and never made twice; the table created by the first
commit; a new column added before the data's commit; a table that cannot take the data, a foreign writer under our
app id, or a table that cannot be opened fail the step naming them, with nothing committed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from events.commit import CommitSequencePlanned, DeltaCommitStep, FsRenameStep
from events.log import open_log
from filesystems.local import LOCAL
from spark_pipeline.commit.sequence import Outcome
from spark_pipeline.commit.session import open_session
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.steps import CommitStepError, DeltaCommitCommitStep, PublishRoots, UnsettledCommitStepError
from spark_pipeline.tables.delta import COMMIT_ID
from spark_pipeline.tables.delta_publisher import location_problem
from spark_pipeline.tables.storage import LOCAL_STORAGE

APP = "oncelog/job/ds"


def delta_step(location: Path, version: int, sequence: str) -> DeltaCommitStep:
    return DeltaCommitStep(table="lake.events", location=str(location), app_id=APP, version=version,
                           commit_id=f"job/ds/{sequence}", metadata={"oncelog.watermarks": '{"p0":[0,3]}'})


def parquet(path: Path, first: int, **extra: pa.Array) -> str:
    """A Parquet file of three records, offsets first..first+2 and a binary column (as Kafka's value), with `extra`
    columns; its name has a ':' and a space, as a dataset's or partition's may."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {"dataset": pa.array(["ds"] * 3), "offset": pa.array(range(first, first + 3), pa.int64()),
               "value": pa.array([b"v"] * 3, pa.binary()), **extra}
    pq.write_table(pa.table(columns), path)
    return str(path)


def history(location: Path) -> list[str]:
    """The commit ids of the table's commits, oldest first (commits that carry none, e.g. a schema change: '-')."""
    return [h.get(COMMIT_ID, "-") for h in reversed(DeltaTable(str(location)).history())]


def test_a_sequence_commits_once_found_again_by_its_app_transaction(tmp_path: Path) -> None:
    table = tmp_path / "lake" / "events"
    files = [parquet(table / "data" / "ds" / "ds:0_0-3 a.parquet", 0), parquet(table / "data" / "ds" / "b.parquet", 3)]
    step = DeltaCommitCommitStep(delta_step(table, 1, "run-1"), files)
    assert not step.verify()  # no table yet
    step.execute()
    assert step.verify()
    step.execute()  # a rerun that missed the record: the commit finds its app transaction first
    assert history(table) == ["job/ds/run-1"]
    read = DeltaTable(str(table))
    assert read.transaction_version(APP) == 1
    assert sorted(read.to_pyarrow_table()["offset"].to_pylist()) == list(range(6))
    assert read.history()[0]["oncelog.watermarks"] == '{"p0":[0,3]}'

    second = DeltaCommitCommitStep(delta_step(table, 2, "run-2"), [parquet(table / "data" / "ds" / "c.parquet", 6)])
    assert not second.verify()
    second.execute()
    assert history(table) == ["job/ds/run-1", "job/ds/run-2"]
    assert sorted(DeltaTable(str(table)).to_pyarrow_table()["offset"].to_pylist()) == list(range(9))
    with pytest.raises(CommitStepError, match=r"'oncelog/job/ds' is at version 2, past this sequence's 1") as ahead:
        step.verify()  # the table moved past it: another log, or another writer under our app id
    assert not isinstance(ahead.value, UnsettledCommitStepError)  # read and decided: the sequence may be given up


def test_a_new_column_is_added_before_the_data_that_brings_it(tmp_path: Path) -> None:
    table = tmp_path / "events"
    DeltaCommitCommitStep(delta_step(table, 1, "run-1"), [parquet(table / "data" / "a.parquet", 0)]).execute()
    with_amount = parquet(table / "data" / "b.parquet", 3, amount=pa.array([7, 8, 9], pa.int64()))
    DeltaCommitCommitStep(delta_step(table, 2, "run-2"), [with_amount]).execute()
    rows = DeltaTable(str(table)).to_pyarrow_table().sort_by("offset")
    assert rows["amount"].to_pylist() == [None, None, None, 7, 8, 9]
    assert history(table) == ["job/ds/run-1", "-", "job/ds/run-2"]  # the column added by a commit of its own


def test_a_table_that_cannot_take_the_data_fails_the_step_naming_it_and_commits_nothing(tmp_path: Path) -> None:
    table = tmp_path / "events"
    DeltaCommitCommitStep(delta_step(table, 1, "run-1"), [parquet(table / "data" / "a.parquet", 0)]).execute()
    bad = table / "data" / "b.parquet"
    pq.write_table(pa.table({"dataset": pa.array(["ds"]), "offset": pa.array(["three"])}), bad)
    step = DeltaCommitCommitStep(delta_step(table, 2, "run-2"), [str(bad)])
    with pytest.raises(CommitStepError, match=r"Delta table 'lake\.events' at .* cannot take the data") as raised:
        step.execute()
    assert "column 'offset' is int64 in the table, string in the data" in str(raised.value)
    assert history(table) == ["job/ds/run-1"]
    assert not step.verify()


def test_a_table_that_cannot_be_opened_fails_the_step_and_the_preflight_naming_it(tmp_path: Path) -> None:
    table = tmp_path / "events"
    (table / "_delta_log").mkdir(parents=True)
    (table / "_delta_log" / "00000000000000000000.json").write_text("this is no Delta log\n")
    step = DeltaCommitCommitStep(delta_step(table, 1, "run-1"), [parquet(table / "data" / "a.parquet", 0)])
    with pytest.raises(UnsettledCommitStepError, match=f"cannot open Delta table 'lake.events' at {table}"):
        step.verify()
    assert "cannot be opened" in str(location_problem(str(table), LOCAL_STORAGE))
    assert location_problem(str(tmp_path / "new" / "table"), LOCAL_STORAGE) is None  # created by the first commit
    (tmp_path / "file").write_text("")
    assert "is no folder" in str(location_problem(str(tmp_path / "file" / "table"), LOCAL_STORAGE))


@pytest.mark.parametrize("breakage", ["log-entry-a-folder", "log-folder-a-file"])
def test_a_table_whose_log_cannot_be_read_leaves_the_step_unsettled(breakage: str, tmp_path: Path) -> None:
    """A table whose state cannot be read tells nothing about the step's commit: verify, and an execute that fails on
    it, raise UnsettledCommitStepError (the sequence stays pending), never a decided failure."""
    table = tmp_path / "events"
    DeltaCommitCommitStep(delta_step(table, 1, "run-1"), [parquet(table / "data" / "a.parquet", 0)]).execute()
    log = table / "_delta_log"
    if breakage == "log-entry-a-folder":
        (log / "00000000000000000000.json").unlink()
        (log / "00000000000000000000.json").mkdir()
    else:
        for entry in log.iterdir():
            entry.unlink()
        log.rmdir()
        log.write_text("")
    step = DeltaCommitCommitStep(delta_step(table, 2, "run-2"), [parquet(table / "data" / "b.parquet", 3)])
    with pytest.raises(UnsettledCommitStepError, match="Delta table 'lake.events'"):
        step.verify()
    with pytest.raises(UnsettledCommitStepError, match="Delta table 'lake.events'"):
        step.execute()


def test_a_commit_whose_answer_was_lost_is_found_by_the_step(tmp_path: Path) -> None:
    """delta-rs writes the commit, then fails on its checkpoint (a folder where the checkpoint file goes) and raises:
    the step asks the table again, finds its app transaction, and is done; the commit is not made twice."""
    table = tmp_path / "events"
    DeltaCommitCommitStep(delta_step(table, 1, "run-1"), [parquet(table / "data" / "a.parquet", 0)]).execute()
    DeltaTable(str(table)).alter.set_table_properties({"delta.checkpointInterval": "1"})  # version 1
    (table / "_delta_log" / "00000000000000000002.checkpoint.parquet").mkdir()
    step = DeltaCommitCommitStep(delta_step(table, 2, "run-2"), [parquet(table / "data" / "b.parquet", 3)])
    assert step.execute() == []
    assert step.verify()
    assert history(table) == ["job/ds/run-1", "-", "job/ds/run-2"]
    assert sorted(DeltaTable(str(table)).to_pyarrow_table()["offset"].to_pylist()) == list(range(6))


@pytest.mark.parametrize("committed", [False, True], ids=["table-untouched", "table-committed"])
def test_releasing_an_abandoned_sequence_is_refused_once_the_table_holds_its_commit(committed: bool,
                                                                                 tmp_path: Path) -> None:
    """A sequence whose rename fails until its attempts run out, while the table holds its app transaction from before
    a crash: it is never abandoned (a release would have to move back files that are the table's). Without the commit
    in the table, it is abandoned and the release goes ahead."""
    table = tmp_path / "published" / "events"
    source = tmp_path / "task-output" / "a.parquet"
    parquet(source, 0)
    spec = delta_step(table, 1, "r1")
    dst = table / "data" / "a.parquet"
    rename = FsRenameStep(src=str(source), dst=str(dst), size=source.stat().st_size, checksum="0" * 64)
    if committed:  # the commit made before a crash, of the file as the rename would have placed it
        parquet(dst, 0)
        DeltaCommitCommitStep(spec, [str(dst)]).execute()
        dst.unlink()
    roots = PublishRoots.of([tmp_path / "task-output"], [tmp_path / "published"])
    with open_log(f"sqlite:///{tmp_path / 'log.db'}") as log:
        log.ensure_topic()
        with open_session(log, "job", CommitSettings(roots, 1), LOCAL) as session:
            session.sink.emit([CommitSequencePlanned(job="job", run_id="r1", dataset_urn="ds", sequence_id="r1",
                                                     steps=(rename, spec))])
            outcome = session.committer.recover("job")[0].outcome  # the checksum is wrong: the rename fails
            if committed:  # never given up while the table holds its commit: no release can undo it
                assert outcome is Outcome.FAILED
                assert [v.sequence_id for v in session.state.pending_sequences("job")] == ["r1"]
                with pytest.raises(CommitStepError, match="not blocked"):
                    session.committer.release("job", "ds", "retry")
            else:
                assert outcome is Outcome.ABANDONED
                assert session.committer.release("job", "ds", "retry") == "r1"
