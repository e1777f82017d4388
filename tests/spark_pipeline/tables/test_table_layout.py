"""Where a table job's data files lie: under the table's `data/` folder, with no folder per dataset (each new folder
costs a file-system call a rename does not need), and every published path distinct."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from spark_pipeline.tables.base import data_file_path
from spark_pipeline.tables.files import local
from spark_pipeline.tables.iceberg import TableRef, load_table
from tests.spark_pipeline.tables.table_jobs import run_table_job

SEGMENT = st.text(st.sampled_from("ab+%._-2B"), min_size=1, max_size=6)
RELATIVE = st.lists(SEGMENT, min_size=1, max_size=4).map("/".join)


@given(st.lists(RELATIVE, min_size=2, max_size=6, unique=True))
def test_distinct_published_paths_stay_distinct_in_the_table(relatives: list[str]) -> None:
    assert len({data_file_path("/t", relative) for relative in relatives}) == len(relatives)


@given(st.sampled_from(["", "/", "//", "file://", "file:///", "s3a://b/"]), st.lists(
    st.text(st.sampled_from("a./"), max_size=4), max_size=4).map("/".join))
def test_a_data_files_local_path_is_the_one_path_makes_of_it(prefix: str, rest: str) -> None:
    path = prefix + rest
    expected = str(Path(path.removeprefix("file://"))) if path.startswith(("file://", "/")) else path
    assert local(path) == expected


def test_a_dataset_folder_becomes_part_of_the_file_name_and_time_partitions_stay_folders() -> None:
    assert data_file_path("/t", "ds.1/2026/11/26/03/p0_0-3.parquet") == "/t/data/2026/11/26/03/ds.1+p0_0-3.parquet"
    assert data_file_path("/t", "a+b%3A/p0_0-3.parquet") == "/t/data/a%2Bb%253A+p0_0-3.parquet"
    assert data_file_path("/t", "p0+1.parquet") == "/t/data/p0%2B1.parquet"


def test_a_table_job_creates_no_folder_per_dataset(tmp_path: Path) -> None:
    ref = run_table_job(tmp_path, runs=2, **{"source.synthetic.datasets": 5})
    data = Path(ref.location) / "data"
    assert sorted(p.name.split("+")[0] for p in data.iterdir()) == sorted([f"ice.{d}" for d in range(5)] * 2)
    assert all(p.is_file() for p in data.iterdir())
    assert _rows(ref) == 2 * 5 * 3


def _rows(ref: TableRef) -> int:
    table = load_table(ref)
    assert table is not None
    return table.scan().to_arrow().num_rows
