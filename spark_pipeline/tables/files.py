"""What the table formats share about the data files they commit: the files' Arrow schema, and which of its columns a
table's columns cannot take. Arrow only: neither pyiceberg nor deltalake is loaded here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from spark_pipeline.tables.errors import TableDataError, TableError

if TYPE_CHECKING:
    from spark_pipeline.tables.storage import TableStorage


def files_schema(files: Sequence[str], storage: TableStorage | None = None) -> pa.Schema:
    """The Arrow schema of the data: every file's columns, in order of first appearance (read through `storage`'s file
    system; none: local disk)."""
    try:
        schemas = [_read_schema(path, storage) for path in files]
    except (OSError, ValueError, TypeError, pa.ArrowException) as e:
        raise TableError(f"cannot read the Parquet schema of the data files (the first {files[0]}): "
                         f"{first_line(e)}") from e
    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (ValueError, TypeError, pa.ArrowException) as e:  # files whose columns no one table can take together
        raise TableDataError(f"the data files' columns do not agree (the first {files[0]}, of {len(files)}): "
                             f"{first_line(e)}") from e


def _read_schema(path: str, storage: TableStorage | None) -> pa.Schema:
    if storage is None:
        return pq.read_schema(local(path))
    with storage.parquet(path) as file:
        return file.schema_arrow


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
    (integers, floats, strings, binaries: tables read their strings and binaries back as Arrow's large or view ones)."""
    families = (pa.types.is_integer, pa.types.is_floating,
                lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
                lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t))
    return data == table or any(family(data) and family(table) for family in families)


def local(path: str) -> str:
    """A data file's path as Arrow opens it (file:// URLs as plain paths)."""
    return str(Path(path.removeprefix("file://"))) if path.startswith(("file://", "/")) else path


def first_line(error: BaseException) -> str:
    """A library error in one line, its type first: what a step's failure says."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
