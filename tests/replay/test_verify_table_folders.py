"""`oncelog verify --publish-dir` pointed at a warehouse holding tables: the tables' own files (an Iceberg table's
`metadata/` folder and its SQLite catalog, a Delta table's `_delta_log/`) are no orphans, a stray file still is.
Real in-process runs (the records engine writing Parquet) make the tables; verify runs through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncelog.cli import app
from tests.spark_pipeline.tables.table_jobs import run_table_job

DELTA = {"data.publisher.type": "spark_pipeline.tables.delta_publisher.DeltaTablePublisher",
         "delta.table": "lake.events", "iceberg.table": ""}


@pytest.mark.parametrize(("keys", "own"), [({}, "metadata"), (DELTA, "_delta_log")], ids=["iceberg", "delta"])
def test_a_warehouses_table_files_are_no_orphans_a_stray_file_is(keys: dict[str, str], own: str,
                                                                  tmp_path: Path) -> None:
    run_table_job(tmp_path, 2, **keys)
    warehouse = tmp_path / "warehouse"
    table_files = [p for p in (warehouse / "lake" / "events" / own).rglob("*") if p.is_file()]
    assert table_files  # the table's own files are there to be mistaken for orphans
    log = f"sqlite:///{tmp_path / 'log.db'}"
    runner = CliRunner()
    clean = runner.invoke(app, ["verify", "--log", log, "--publish-dir", str(warehouse), "--json"])
    assert clean.exit_code == 0, clean.stdout + clean.stderr
    assert json.loads(clean.stdout)["violations"] == []

    stray = [warehouse / "lake" / "events" / "data" / "stray.parquet", warehouse / "lake" / "stray.json"]
    for path in stray:
        path.write_text("{}")
    found = runner.invoke(app, ["verify", "--log", log, "--publish-dir", str(warehouse), "--json"])
    assert found.exit_code == 1, found.stdout + found.stderr
    orphans = [v["message"] for v in json.loads(found.stdout)["violations"] if v["kind"] == "orphaned-file"]
    assert sorted(m.split(" is in")[0] for m in orphans) == sorted(str(p.resolve()) for p in stray)
