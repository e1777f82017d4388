"""The TableCommit step on a real pyiceberg SQL catalog (SQLite) and real Parquet files: one snapshot per sequence,
found again by its id, never made twice; a new column evolves the table in the same commit; a table that cannot take
the data, or a catalog that cannot be reached, fails the step naming them, with nothing committed."""

from __future__ import annotations

import dataclasses
import multiprocessing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from events.commit import TABLE_COMMIT_ID, TableCommitStep
from events.log import open_log
from projections.projector import Projector
from spark_pipeline.commit.steps import CommitStepError, TableCommitCommitStep, UnsettledCommitStepError
from spark_pipeline.tables import iceberg
from spark_pipeline.tables.publisher import IcebergSettings, catalog_problem
from tests.spark_pipeline.tables.table_jobs import run_table_job


def table_step(warehouse: Path, commit_id: str, catalog: str | None = None) -> TableCommitStep:
    return TableCommitStep(catalog_uri=catalog or f"sqlite:///{warehouse / 'iceberg-catalog.db'}",
                           catalog_name="oncelog", warehouse=str(warehouse), table="lake.events",
                           location=str(warehouse / "lake" / "events"), commit_id=commit_id,
                           summary={"oncelog.watermarks": '{"p0":[0,3]}'})


def parquet(path: Path, first: int, **extra: pa.Array) -> str:
    """A Parquet file of three records, offsets first..first+2, a binary column (as Kafka's value: the table reads
    it back as large_binary, and must take it again), with `extra` columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    offsets = list(range(first, first + 3))
    columns = {"dataset": pa.array(["ds"] * 3), "offset": pa.array(offsets, pa.int64()),
               "value": pa.array([b"v"] * 3, pa.binary()), **extra}
    pq.write_table(pa.table(columns), path)
    return str(path)


def scan(step: TableCommitStep) -> pa.Table:
    table = iceberg.load_table(iceberg.TableRef.of(step))
    assert table is not None
    return table.scan().to_arrow()


def snapshots(step: TableCommitStep) -> list[str]:
    """The commit ids of the table's snapshots, in order."""
    table = iceberg.load_table(iceberg.TableRef.of(step))
    assert table is not None
    return [s.summary.additional_properties.get(TABLE_COMMIT_ID, "") for s in table.metadata.snapshots
            if s.summary is not None]


def test_a_sequence_commits_one_snapshot_found_again_by_its_id_and_never_twice(tmp_path: Path) -> None:
    data = tmp_path / "lake" / "events" / "data"
    files = [parquet(data / "a.parquet", 0), parquet(data / "b.parquet", 3)]
    spec = table_step(tmp_path, "job/ds/run-1")
    step = TableCommitCommitStep(spec, files)
    assert not step.verify()
    step.execute()
    assert step.verify()
    step.execute()  # a rerun that missed the record: the append finds its snapshot first
    assert snapshots(spec) == ["job/ds/run-1"]
    rows = scan(spec)
    assert sorted(rows["offset"].to_pylist()) == list(range(6))
    table = iceberg.load_table(iceberg.TableRef.of(spec))
    current = table.current_snapshot() if table is not None else None
    summary = current.summary if current is not None else None
    assert summary is not None and summary.additional_properties["oncelog.watermarks"] == '{"p0":[0,3]}'

    other = TableCommitCommitStep(table_step(tmp_path, "job/ds/run-2"), files)
    with pytest.raises(CommitStepError, match="lake.events"):
        other.execute()  # the same files under another sequence: refused, no data file in two snapshots
    assert snapshots(spec) == ["job/ds/run-1"]


def test_a_new_column_evolves_the_table_in_the_same_commit(tmp_path: Path) -> None:
    data = tmp_path / "lake" / "events" / "data"
    first = table_step(tmp_path, "job/ds/run-1")
    TableCommitCommitStep(first, [parquet(data / "a.parquet", 0)]).execute()
    second = table_step(tmp_path, "job/ds/run-2")
    TableCommitCommitStep(second, [parquet(data / "b.parquet", 3, amount=pa.array([7, 8, 9], pa.int64()))]).execute()
    table = iceberg.load_table(iceberg.TableRef.of(second))
    assert table is not None and "amount" in table.schema().column_names
    assert len(table.metadata.snapshots) == 2  # the schema change made no snapshot of its own
    rows = scan(second).sort_by("offset")
    assert rows["amount"].to_pylist() == [None, None, None, 7, 8, 9]


def test_a_table_that_cannot_take_the_data_fails_the_step_naming_it_and_commits_nothing(tmp_path: Path) -> None:
    data = tmp_path / "lake" / "events" / "data"
    first = table_step(tmp_path, "job/ds/run-1")
    TableCommitCommitStep(first, [parquet(data / "a.parquet", 0)]).execute()
    bad = data / "b.parquet"
    pq.write_table(pa.table({"dataset": pa.array(["ds"]), "offset": pa.array(["three"])}), bad)
    step = TableCommitCommitStep(table_step(tmp_path, "job/ds/run-2"), [str(bad)])
    with pytest.raises(CommitStepError, match=r"'lake\.events'.*cannot take the data") as raised:
        step.execute()
    assert "offset" in str(raised.value)
    assert snapshots(first) == ["job/ds/run-1"]
    assert not step.verify()


def test_a_catalog_that_cannot_be_reached_fails_the_step_naming_it(tmp_path: Path) -> None:
    spec = table_step(tmp_path, "job/ds/run-1", catalog="sqlite:////nonexistent-oncelog/catalog.db")
    step = TableCommitCommitStep(spec, [parquet(tmp_path / "a.parquet", 0)])
    assert not step.verify()  # a catalog file that does not exist holds no commit (and reading it creates none)
    with pytest.raises(CommitStepError, match="nonexistent-oncelog/catalog.db"):
        step.execute()
    (tmp_path / "not-sqlite.db").write_text("hello, this is no database file at all, it is text")
    unreadable = table_step(tmp_path, "job/ds/run-1", catalog=f"sqlite:///{tmp_path / 'not-sqlite.db'}")
    with pytest.raises(UnsettledCommitStepError, match="not-sqlite.db"):
        TableCommitCommitStep(unreadable, []).verify()


def test_the_catalog_probe_names_what_a_run_would_fail_on(tmp_path: Path) -> None:
    def problem(uri: str | None) -> str | None:
        settings = IcebergSettings.model_validate({"iceberg.table": "lake.events", "iceberg.catalog.uri": uri,
                                                   "data.publisher.final.dir": str(tmp_path / "warehouse"),
                                                   "writer.output.format": "PARQUET"})
        return catalog_problem(settings, str(tmp_path / "warehouse"), timeout_s=1.0)

    assert problem(None) is None  # in the warehouse, which the run creates
    assert "folder /nonexistent-oncelog does not exist" in str(problem("sqlite:////nonexistent-oncelog/c.db"))
    (tmp_path / "not-sqlite.db").write_text("hello, this is no database file at all, it is text")
    assert "cannot be read as SQLite" in str(problem(f"sqlite:///{tmp_path / 'not-sqlite.db'}"))
    assert "does not answer" in str(problem("http://127.0.0.1:9/catalog"))


def test_a_table_commit_that_cannot_tell_whether_it_took_effect_never_abandons_its_sequence(tmp_path: Path) -> None:
    """With one attempt allowed, a table whose catalog cannot be read fails the run's sequences but leaves them
    pending (a release would roll back files the table may reference); once the catalog answers, the next run
    completes them: each record in the table once."""
    catalog = tmp_path / "catalog.db"
    catalog.write_text("this is no SQLite database: the catalog cannot be read")
    keys: dict[str, str | int] = {"commit.sequence.max.attempts": 1, "iceberg.catalog.uri": f"sqlite:///{catalog}"}
    with pytest.raises(AssertionError, match="catalog.db"):
        run_table_job(tmp_path, runs=1, **keys)
    with open_log(f"sqlite:///{tmp_path / 'log.db'}") as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
    sequences = list(state.sequences.values())
    assert len(sequences) == 2 and all(s.pending for s in sequences), sequences
    catalog.unlink()  # the catalog answers again (an empty one: the table is created on the first commit)
    ref = run_table_job(tmp_path, runs=1, **keys)
    table = iceberg.load_table(dataclasses.replace(ref, catalog_uri=f"sqlite:///{catalog}"))
    assert table is not None
    rows = table.scan().to_arrow()
    assert sorted(zip(rows["dataset"].to_pylist(), rows["offset"].to_pylist(), strict=True)) == [
        (f"ice.{d}", o) for d in range(2) for o in range(6)]


def _open_catalog(path: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        iceberg.catalog_of(iceberg.TableRef("oncelog", f"sqlite:///{path}", str(Path(path).parent), "lake.events",
                                            str(Path(path).parent / "lake" / "events")))
        results.put("ok")
    except iceberg.TableError as e:
        results.put(str(e))


def test_commit_shards_opening_a_new_catalog_at_once_all_open_it(tmp_path: Path) -> None:
    """Commit shards in several processes reach a new SQL catalog together: pyiceberg creates its tables on first use,
    and one process's create lost to another's ("table … already exists") failed its commit (seen at 10,000 datasets;
    4 processes on 30 fresh catalogs: 32 of 120 failed before)."""
    context = multiprocessing.get_context("fork")  # the child runs Python alone: no JVM or client threads it needs
    failed = []
    for attempt in range(10):
        path = str(tmp_path / f"catalog-{attempt}.db")
        barrier, results = context.Barrier(4), context.Queue()
        processes = [context.Process(target=_open_catalog, args=(path, barrier, results)) for _ in range(4)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=60)
        failed += [r for r in (results.get(timeout=5) for _ in processes) if r != "ok"]
    assert failed == []
