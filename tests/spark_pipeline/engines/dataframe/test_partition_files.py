"""What the DataFrame engine reads back of a time-partitioned attempt (pure: files Spark's writers would leave): each
`_wu=<i>/_tp=<partition>` file's name in the task output, and its records counted from its blocks or footer."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

from events.job import WorkUnitSpec
from filesystems.router import FileSystems
from spark_pipeline.engines.dataframe.results import file_records, staged_files
from spark_pipeline.jobfile.config import WriterOutputFormat

UNIT = WorkUnitSpec(work_unit_id="ds.0:1@40", dataset_urn="ds.0", partition="ds.0:1", low_watermark=40,
                    expected_high_watermark=80, estimated_records=40)


def test_each_time_partition_folder_spark_wrote_becomes_a_file_named_by_the_range(tmp_path: Path) -> None:
    for hour in ("hourly%2F1970%2F01%2F01%2F00", "dt%3D1970-01-01%2Fhr%3D01"):  # Spark escapes '/' and '='
        folder = tmp_path / "_wu=0" / f"_tp={hour}"
        folder.mkdir(parents=True)
        (folder / "part-00000-abc.c000.avro").write_bytes(b"x")
    staged = staged_files(FileSystems.of({}), str(tmp_path), [UNIT], "/out", WriterOutputFormat.AVRO)
    assert [(s.partition, s.dst, s.counted) for s in staged] == [
        ("dt=1970-01-01/hr=01", "/out/ds.0/dt=1970-01-01/hr=01/ds.0%3A1_40-80.avro", WriterOutputFormat.AVRO),
        ("hourly/1970/01/01/00", "/out/ds.0/hourly/1970/01/01/00/ds.0%3A1_40-80.avro", WriterOutputFormat.AVRO)]


@pytest.mark.parametrize("output_format", [WriterOutputFormat.AVRO, WriterOutputFormat.PARQUET,
                                           WriterOutputFormat.ORC])
def test_a_files_records_are_counted_from_its_format(output_format: WriterOutputFormat, tmp_path: Path) -> None:
    path = tmp_path / "part"
    table = pa.table({"offset": list(range(1234))})
    if output_format is WriterOutputFormat.AVRO:
        schema = {"type": "record", "name": "R", "fields": [{"name": "offset", "type": "long"}]}
        buffer = io.BytesIO()
        fastavro.writer(buffer, schema, ({"offset": i} for i in range(1234)), sync_interval=1000, codec="deflate")
        path.write_bytes(buffer.getvalue())
    elif output_format is WriterOutputFormat.PARQUET:
        pq.write_table(table, path, row_group_size=100)
    else:
        orc.write_table(table, str(path))
    assert file_records(FileSystems.of({}), str(path), output_format) == 1234
