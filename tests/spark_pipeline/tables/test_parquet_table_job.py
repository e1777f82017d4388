"""A table job on the records engine with the shipped default writer (Parquet by pyarrow, no writer of the job's own):
two runs published into a local Iceberg table, each record read back once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from spark_pipeline.tables import iceberg
from tests.spark_pipeline.tables.table_jobs import run_table_job


def test_the_default_writer_publishes_parquet_into_an_iceberg_table_each_record_once(tmp_path: Path) -> None:
    ref = run_table_job(tmp_path, runs=2, **{"writer.builder.class": "", "task.engine": "records"})
    table = iceberg.load_table(ref)
    assert table is not None
    rows = table.scan().to_arrow()
    seen = Counter(zip(rows["dataset"].to_pylist(), rows["offset"].to_pylist(), strict=True))
    assert seen == Counter((f"ice.{d}", o) for d in range(2) for o in range(6))  # each record once
    files = sorted(Path(f.file.file_path.removeprefix("file://")) for f in table.scan().plan_files())
    assert sorted(f.name for f in files) == sorted(
        f"ice.{d}+ice.{d}%3A0_{r}.parquet" for r in ("0-3", "3-6") for d in range(2))
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression == "SNAPPY"
    assert len({s.summary.additional_properties["oncelog.commit-id"] for s in table.snapshots()
                if s.summary is not None}) == 2  # one snapshot per run
