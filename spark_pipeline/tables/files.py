"""What the table formats share about the data files they commit: each file's footer (read once per commit), the
files' Arrow schema, and which of its columns a table's columns cannot take. Arrow only: neither pyiceberg nor
deltalake is loaded here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spark_pipeline.tables.errors import TableDataError


@dataclass(frozen=True, eq=False)
class Footer:
    """A data file as a table commit records it, read once per commit (`TableStorage.footers`): its path, size and
    time, and its Parquet footer (the Arrow schema, the row count, each row group's column statistics)."""

    path: str
    size: int
    modified_ms: int
    """When the file was written (on HDFS: when it was read, as delta-rs stamps the files it writes)."""
    schema: pa.Schema
    """The Arrow schema as Arrow reads the file (`ParquetFile.schema_arrow`)."""
    metadata: pq.FileMetaData

    @property
    def rows(self) -> int:
        return int(self.metadata.num_rows)


def files_schema(footers: Sequence[Footer]) -> pa.Schema:
    """The Arrow schema of the data: every file's columns, in order of first appearance."""
    distinct: dict[bytes, pa.Schema] = {}  # most files share one schema: unified once (metadata told apart too)
    for footer in footers:
        distinct.setdefault(footer.schema.serialize().to_pybytes(), footer.schema)
    try:
        return pa.unify_schemas(list(distinct.values()), promote_options="permissive")
    except (ValueError, TypeError, pa.ArrowException) as e:  # files whose columns no one table can take together
        raise TableDataError(f"the data files' columns do not agree (the first {footers[0].path}, of {len(footers)}): "
                             f"{first_line(e)}") from e


def mismatched(columns: pa.Schema, data: pa.Schema) -> list[str]:
    """The data's columns whose type the table's column of that name (in `columns`) cannot take; a column the table
    lacks is no mismatch (the schema evolves)."""
    found = []
    for field in data:
        index = columns.get_field_index(field.name)
        if index < 0:
            continue
        theirs = columns.field(index).type
        if not fits(field.type, theirs):
            found.append(f"column {field.name!r} is {theirs} in the table, {field.type} in the data")
    return found


def fits(data: pa.DataType, table: pa.DataType) -> bool:
    """Whether a column of type `table` takes values of type `data`: the same type, or of one family that widens
    (integers, floats, strings, binaries: tables read their strings and binaries back as Arrow's large or view ones);
    records, lists and maps whose parts fit (a record field the table's lacks does not: only top-level columns are
    added to a table's schema)."""
    families = (pa.types.is_integer, pa.types.is_floating,
                lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
                lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t))
    if data == table or any(family(data) and family(table) for family in families):
        return True
    if pa.types.is_struct(data) and pa.types.is_struct(table):
        theirs = {table.field(i).name: table.field(i).type for i in range(table.num_fields)}
        return all(field.name in theirs and fits(field.type, theirs[field.name]) for field in data)
    if pa.types.is_map(data) and pa.types.is_map(table):
        return fits(data.key_type, table.key_type) and fits(data.item_type, table.item_type)
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_list_view, pa.types.is_large_list_view)
    if any(kind(data) for kind in lists) and any(kind(table) for kind in lists):
        return fits(data.value_type, table.value_type)
    return False


def local(path: str) -> str:
    """A data file's path as Arrow opens it (file:// URLs as plain paths, normalised as `Path` does: a table commit
    asks this of every file, so a path already normal is returned as it is)."""
    if not path.startswith(("file://", "/")):
        return path
    plain = path.removeprefix("file://")
    normal = plain.startswith("/") and "//" not in plain and "/." not in plain and not plain.endswith("/")
    return plain if normal else str(Path(plain))


def first_line(error: BaseException) -> str:
    """A library error in one line, its type first: what a step's failure says."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
