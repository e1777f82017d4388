"""How the DataFrame engine counts each work unit's records read (pure): from an Avro file's block headers alone, from
every branch's files, and which jobs count from their files rather than observing Spark's rows."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.job import WorkUnitSpec
from filesystems.base import FileSystemError
from spark_pipeline.constructs import SourceError
from spark_pipeline.engines.dataframe.engine import Counting, branch_writers, read_counting
from spark_pipeline.engines.dataframe.results import MovedFile, avro_records, file_counts
from spark_pipeline.jobs import config_from_properties

SCHEMA = {"type": "record", "name": "R",
          "fields": [{"name": "offset", "type": "long"}, {"name": "value", "type": "bytes"}]}


def avro_file(records: int, codec: str, sync_interval: int, metadata: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    fastavro.writer(buffer, SCHEMA, ({"offset": i, "value": bytes(i % 300)} for i in range(records)), codec=codec,
                    sync_interval=sync_interval, metadata=metadata)
    return buffer.getvalue()


class Unseekable(io.BytesIO):
    """A stream that can only be read forward (an object store's body)."""

    def seekable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        raise io.UnsupportedOperation("seek")


@settings(max_examples=60, deadline=None)
@given(records=st.integers(0, 3_000), codec=st.sampled_from(["null", "deflate", "snappy"]),
       sync_interval=st.integers(16, 20_000),
       metadata=st.dictionaries(st.text(min_size=1, max_size=20).map(lambda k: f"user.{k}"), st.text(max_size=300),
                                max_size=40))
def test_an_avro_files_records_are_its_blocks_counts_seekable_or_not(records: int, codec: str, sync_interval: int,
                                                                       metadata: dict[str, str]) -> None:
    data = avro_file(records, codec, sync_interval, metadata)
    assert sum(b.num_records for b in fastavro.block_reader(io.BytesIO(data))) == records
    assert avro_records(io.BytesIO(data), "f.avro") == records
    assert avro_records(Unseekable(data), "f.avro") == records


def test_a_damaged_avro_file_is_an_error_naming_it() -> None:
    data = avro_file(500, "deflate", 200, {})
    with pytest.raises(FileSystemError, match="f.avro: not an Avro container file"):
        avro_records(io.BytesIO(b"PAR1" + data[4:]), "f.avro")
    with pytest.raises(FileSystemError, match="f.avro: an Avro block does not end with the file's sync marker"):
        avro_records(io.BytesIO(data[:-1] + bytes([data[-1] ^ 1])), "f.avro")
    with pytest.raises(FileSystemError, match="f.avro: "):
        avro_records(io.BytesIO(data[:-20]), "f.avro")


def unit(index: int, low: int, high: int) -> WorkUnitSpec:
    return WorkUnitSpec(work_unit_id=f"t.{index}:{index}@{low}", dataset_urn=f"t.{index}",
                        partition=f"t.{index}:{index}", low_watermark=low, expected_high_watermark=high,
                        estimated_records=high - low)


def moved(unit_index: int, records: int, partition: str = "") -> MovedFile:
    return MovedFile(unit_index, f"/out/{unit_index}/{partition}", 10, "0" * 64, partition, records)


def test_a_units_records_read_are_its_files_records_in_every_branch() -> None:
    units = [unit(0, 0, 10), unit(1, 5, 9), unit(2, 0, 0)]
    branch = [moved(0, 4, "a"), moved(0, 3, "b"), moved(1, 4)]
    assert file_counts(units, [branch, branch], offsets=True) == [7, 4, 0]
    with pytest.raises(SourceError, match="work unit t.1:1@5: branch 1's files hold 3 records, branch 0's 4"):
        file_counts(units, [branch, [moved(0, 7), moved(1, 3)]], offsets=True)


def test_files_holding_more_records_than_their_range_has_offsets_are_refused() -> None:
    units = [unit(0, 5, 9)]
    with pytest.raises(SourceError, match=r"t.0:0@5: its files hold 5 records, more than the 4 offsets of its range "
                                          r"\[5, 9\)"):
        file_counts(units, [[moved(0, 5)]], offsets=True)
    assert file_counts(units, [[moved(0, 5)]], offsets=False) == [5], "a file's lines are no offsets"


KAFKA = {"source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource", "kafka.brokers": "127.0.0.1:9",
         "topic.whitelist": "t", "task.engine": "dataframe"}


@pytest.mark.parametrize(("keys", "counting"), [
    ({}, Counting.FILES),
    ({"writer.output.format": "parquet"}, Counting.FILES),
    ({"writer.output.format": "json"}, Counting.OBSERVED),
    ({"qualitychecker.row.sql": "offset > 0"}, Counting.FILES),
    ({"qualitychecker.row.sql": "offset > 0", "qualitychecker.row.sql.type": "OPTIONAL"}, Counting.FILES),
    ({"qualitychecker.row.sql": "offset > 0", "qualitychecker.row.sql.type": "ERR_FILE",
      "qualitychecker.row.err.file": "/tmp/err"}, Counting.OBSERVED),
    ({"converter.sql.select": "offset, value"}, Counting.FILES),
    ({"converter.dataframe.functions": f"{__name__}:unchanged"}, Counting.OBSERVED),
    ({"fork.branches": "2", "writer.output.format.1": "json"}, Counting.OBSERVED),
    ({"source.class": "spark_pipeline.sources.synthetic.SyntheticSource", "kafka.brokers": None,
      "topic.whitelist": None}, Counting.PLANNED),
])
def test_a_job_counts_its_records_from_its_files_when_it_writes_every_record_it_reads_into_counted_files(
        keys: dict[str, str | None], counting: Counting, tmp_path: Path) -> None:
    properties = {
        "job.name": "j", "writer.staging.dir": str(tmp_path / "s"), "writer.output.dir": str(tmp_path / "o"),
        "data.publisher.final.dir": str(tmp_path / "p"), "oncelog.log.url": f"sqlite:///{tmp_path / 'l.db'}",
        **KAFKA, **keys}
    config = config_from_properties({k: v for k, v in properties.items() if v is not None})
    assert read_counting(config, branch_writers(config, None)) is counting


def unchanged(frame: object) -> object:
    """A DataFrame function (not run here: only named by a job's key)."""
    return frame
