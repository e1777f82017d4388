"""Gobblin's construct order on the DataFrame engine: converters (record, SQL, DataFrame functions) before the row
quality checkers (record and SQL), then the writer; and `oncelog validate`'s note for a job file written for the old
order (the SQL row policy before the SQL converter)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from oncelog.cli import app
from projections.views import RunStatus
from spark_pipeline.constructs import Record, RowLevelPolicy
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import avro_records, write_job

CENTS = "dataset, partition, offset, amount * 100 AS amount_cents, payload"
"""A SQL converter that drops `amount` and adds `amount_cents`."""


class EvenCents(RowLevelPolicy):
    """Passes records whose `amount_cents` (which only a converter makes) is a multiple of 200."""

    def check(self, record: Record) -> bool:
        return bool(record["amount_cents"] % 200 == 0)


def order_job(base: Path, **keys: object) -> Path:
    """A synthetic DataFrame-engine job diverting its failing records to an error file."""
    return write_job(base, f"sqlite:///{base / 'events.db'}", "full", None, **{
        "task.engine": "dataframe", "source.synthetic.datasets": 1, "source.synthetic.partitions": 1,
        "source.synthetic.records.per.run": 40, "qualitychecker.row.err.file": str(base / "err"), **keys})


def diverted(base: Path) -> list[dict[str, Any]]:
    """The error file's records."""
    return [json.loads(line) for path in sorted((base / "err").rglob("*.jsonl"))
            for line in path.read_text().splitlines()]


@pytest.mark.parametrize("policy", ["sql", "record"])
def test_row_policies_check_the_records_the_sql_converter_made(policy: str, tmp_path: Path,
                                                                spark: SparkSession) -> None:
    """A row policy naming the column a SQL converter adds: it checks the converted records, the failing ones go to
    the error file as the policy saw them (converted), the others are published."""
    keys: dict[str, object] = ({"qualitychecker.row.sql": "amount_cents % 200 = 0",
                                "qualitychecker.row.sql.type": "ERR_FILE"} if policy == "sql" else
                               {"qualitychecker.row.policies": f"{__name__}.EvenCents",
                                "qualitychecker.row.policy.types": "ERR_FILE"})
    result = JobLauncher(load_job_config(order_job(tmp_path, **{"converter.sql.select": CENTS, **keys})),
                         spark=spark).run()
    assert result.status is RunStatus.COMMITTED, result.error
    published, errors = avro_records(tmp_path / "published"), diverted(tmp_path)
    assert len(published) + len(errors) == 40 and published and errors
    assert all(set(r) == {"dataset", "partition", "offset", "amount_cents", "payload"} for r in published + errors)
    assert all(r["amount_cents"] % 200 == 0 for r in published)
    assert all(r["amount_cents"] % 200 != 0 for r in errors)


def test_validate_notes_a_sql_row_policy_naming_a_column_the_sql_converter_drops(tmp_path: Path) -> None:
    """The old order let `qualitychecker.row.sql` name the source's `amount` beside a converter dropping it."""
    old = order_job(tmp_path, **{"converter.sql.select": CENTS, "qualitychecker.row.sql": "amount >= 0"})
    ran = CliRunner().invoke(app, ["validate", str(old)])
    assert ran.exit_code == 1, ran.output  # the run would refuse it: named before Spark starts
    said = " ".join(ran.output.split())
    assert ("qualitychecker.row.sql 'amount >= 0' names the column 'amount', which the records after "
            "converter.sql.select do not have") in said and "(the source has it, but the row policy checks" in said
    assert ("note: " in said), said
    assert ("qualitychecker.row.sql 'amount >= 0' names amount, which converter.sql.select does not output: the SQL "
            "row policy now checks the records after the SQL converter") in said
    new = order_job(tmp_path, **{"converter.sql.select": CENTS, "qualitychecker.row.sql": "amount_cents >= 0"})
    ran = CliRunner().invoke(app, ["validate", str(new)])
    assert ran.exit_code == 0 and "note:" not in ran.output, ran.output
