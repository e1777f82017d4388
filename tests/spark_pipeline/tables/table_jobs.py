"""A synthetic job publishing into an Iceberg table on the records engine (Parquet by the simulation's writer): real
runs in this process, no Spark."""

from __future__ import annotations

from pathlib import Path

import yaml

from events.log import open_log
from filesystems.local import LOCAL
from projections.views import RunStatus
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.tables import iceberg

TABLE = "lake.events"


def run_table_job(base: Path, runs: int, **keys: str | int) -> iceberg.TableRef:
    """`runs` runs of a synthetic job (two datasets, three records per run) publishing into one Iceberg table (`keys`
    added to its job file, or removed by ''), each committed; the table's reference."""
    job = {"job.name": "ice", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
           "source.synthetic.datasets": 2, "source.synthetic.partitions": 1, "source.synthetic.records.per.run": 3,
           "source.synthetic.payload.bytes": 0, "writer.staging.dir": str(base / "staging"),
           "writer.output.dir": str(base / "task-output"), "data.publisher.final.dir": str(base / "warehouse"),
           "data.publisher.type": "spark_pipeline.tables.publisher.IcebergTablePublisher", "iceberg.table": TABLE,
           "writer.output.format": "PARQUET", "writer.builder.class": "tests.sim.tables.ParquetDataWriterBuilder",
           "oncelog.log.url": f"sqlite:///{base / 'log.db'}", **keys}
    path = base / "ice.yaml"
    path.write_text(yaml.safe_dump({key: value for key, value in job.items() if value != ""}))
    config = load_job_config(path)
    with open_log(config.log_url) as log:
        for _ in range(runs):
            engine = InProcessTaskEngine(log.writer, slots=1, sleep=lambda _: None)
            result = JobLauncher(config, engine=engine, fs=LOCAL, log=log).run()
            assert result.status is RunStatus.COMMITTED, result.error
    return table_ref(base)


def table_ref(base: Path) -> iceberg.TableRef:
    """The table of `run_table_job` under `base` (its default catalog)."""
    warehouse = str((base / "warehouse").resolve())
    return iceberg.TableRef("oncelog", f"sqlite:///{warehouse}/iceberg-catalog.db", warehouse, TABLE,
                            f"{warehouse}/lake/events")
