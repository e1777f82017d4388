"""A Delta job's mistakes, found before Spark starts (`oncelog validate`, `run`): each names its key; and the app
transaction version a Delta job's plan gives each dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from projections.views import DatasetView
from spark_pipeline.jobfile.config import JobConfigError
from spark_pipeline.jobfile.paths import absolute_config
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.preflight import Finding, preflight
from spark_pipeline.tables.delta_publisher import VERSION_PROPERTY, DeltaTablePublisher


def delta_job(base: Path, **keys: str) -> dict[str, str]:
    """A synthetic job publishing into a Delta table under `base`; `keys` add, override, or ('') remove keys."""
    job = {"job.name": "dl", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
           "writer.staging.dir": str(base / "staging"), "writer.output.dir": str(base / "task-output"),
           "data.publisher.final.dir": str(base / "warehouse"),
           "data.publisher.type": "spark_pipeline.tables.delta_publisher.DeltaTablePublisher",
           "delta.table": "lake.events", "writer.output.format": "PARQUET", "task.engine": "dataframe",
           "oncelog.log.url": f"sqlite:///{base / 'log.db'}", **keys}
    return {k: v for k, v in job.items() if v}


@pytest.mark.parametrize(("keys", "key", "says"), [
    ({"writer.output.format": "AVRO"}, "writer.output.format", "Delta publisher publishes Parquet data files"),
    ({"delta.table": "lake/events"}, "delta.table", "no table name"),
    ({"delta.table": ""}, "delta.table", "missing"),
    ({"data.publisher.final.dir": "webhdfs://nn:9870/warehouse"}, "data.publisher.final.dir", "ignores the URL's port"),
])
def test_a_job_file_mistake_is_refused_naming_its_key(keys: dict[str, str], key: str, says: str,
                                                      tmp_path: Path) -> None:
    with pytest.raises(JobConfigError) as refused:
        config_from_properties(delta_job(tmp_path, **keys))
    problems = [p for p in refused.value.problems if key in p.message]
    assert problems and says in problems[0].message, refused.value


def test_a_table_folder_that_cannot_be_created_is_found_before_spark_starts(tmp_path: Path) -> None:
    good = absolute_config(config_from_properties(delta_job(tmp_path)))
    assert [f for f in preflight(good) if f.key.startswith(("delta", "data.publisher"))] == []
    (tmp_path / "a-file").write_text("")
    bad = absolute_config(config_from_properties(delta_job(
        tmp_path, **{"data.publisher.final.dir": str(tmp_path / "a-file" / "warehouse")})))
    findings = [f for f in preflight(bad) if f.key == "delta.table"]
    assert findings == [Finding("delta.table", f"'delta.table': Delta table 'lake.events': the table's folder "
                                f"{tmp_path}/a-file/warehouse/lake/events cannot be created: {tmp_path}/a-file is "
                                f"no folder")]


def test_the_app_transaction_version_follows_the_dataset_state() -> None:
    """The next version is one past the one the dataset's state records; a sequence without files keeps it."""
    publisher = DeltaTablePublisher.__new__(DeltaTablePublisher)
    before = DatasetView(job="dl", dataset_urn="ds", properties={VERSION_PROPERTY: "4"})
    assert publisher.state_properties(before, commits=True) == {VERSION_PROPERTY: "5"}
    assert publisher.state_properties(before, commits=False) == {VERSION_PROPERTY: "4"}
    assert publisher.state_properties(None, commits=False) == {}
    assert publisher.state_properties(None, commits=True) == {VERSION_PROPERTY: "1"}
