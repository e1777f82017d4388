"""A Delta table's partition column from the job's time partitioner, and each data file's value of it. Arrow only:
deltalake is not loaded here.

Delta partitions by columns whose value is one per file, kept in the add action (`partitionValues`), not in the file.
The time partitioner's column (epoch millis, a timestamp, a date) holds many values per file, all within one period
(see partitioning.py), so the table gets a column of its own, `<column>_<period>` (`timestamp_hour`): the period's
start, of the column's kind:

- an integer column (epoch time in `writer.partition.timeUnit`): a `long`, the column floored to one hour or one day
  in that unit (`truncate`, as the Iceberg spec: months and years have no fixed width, such a table is unpartitioned);
- a timestamp column: a timestamp of the same type, the UTC period's first instant;
- a date column: a date, the period's first day (an hour: its day).

A file's value is the period of its column's values (the Parquet statistics of its footer, read once per commit, else
the column read): values in two periods are refused, as pyiceberg's `add_files` refuses them. A file whose column is
null throughout has a null value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from spark_pipeline.jobfile.partitions import COLUMNS_KEY
from spark_pipeline.tables.errors import TableError
from spark_pipeline.tables.files import Footer, first_line
from spark_pipeline.tables.partitioning import Period, TablePartitioning, column_type
from spark_pipeline.tables.storage import TableStorage

DateLike = TypeVar("DateLike", dt.date, dt.datetime)
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
"""How Delta writes a timestamp partition value (UTC for a timestamp with a time zone)."""


@dataclass(frozen=True)
class DeltaPartitioning:
    """The table's partition column `field` (the period's start of `partitioning.column`)."""

    partitioning: TablePartitioning
    field: pa.Field

    @property
    def name(self) -> str:
        return str(self.field.name)


def delta_partitioning(partitioning: TablePartitioning, schema: pa.Schema, where: str) -> DeltaPartitioning | None:
    """The partition column a table created for data of `schema` gets; None (unpartitioned) when the column's type
    has no fixed period (an integer by months or years, a string); a TableError naming the key if the data lacks it."""
    kind = column_type(schema, partitioning.column, where)
    name = partitioning.field_name()
    if pa.types.is_integer(kind) and partitioning.truncate_width() is not None:
        return DeltaPartitioning(partitioning, pa.field(name, pa.int64()))
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        return DeltaPartitioning(partitioning, pa.field(name, kind))
    return None


def partition_value(partitioning: DeltaPartitioning, footer: Footer, storage: TableStorage, where: str) -> str | None:
    """The file's value of the partition column, as Delta writes it: the one period its column's values lie in (None:
    the column is null throughout); a TableError naming the file if they lie in two."""
    low, high = _min_max(footer, storage, partitioning.partitioning.column, where)
    if low is None or high is None:
        return None
    first, last = (_period_start(partitioning, v) for v in (low, high))
    if first != last:
        raise TableError(f"{where}: the data file {footer.path} holds values of {partitioning.partitioning.column!r} "
                         f"in two {partitioning.partitioning.period.value}s ({_text(first)}, {_text(last)}); each "
                         f"partition folder must lie within one UTC period ({COLUMNS_KEY}, writer.partition.pattern, "
                         f"writer.partition.timezone)")
    return _text(first)


def _min_max(footer: Footer, storage: TableStorage, column: str, where: str) -> tuple[Any, Any]:
    """The least and greatest value of `column` in the file: its row groups' statistics (in the footer read already)
    where every one has them, else the column read."""
    try:
        metadata = footer.metadata
        index = next((i for i in range(metadata.num_columns) if metadata.schema.column(i).path == column), None)
        stats = [metadata.row_group(g).column(index).statistics for g in range(metadata.num_row_groups)
                 ] if index is not None else []
        if stats and all(s is not None and (s.has_min_max or s.null_count == s.num_values) for s in stats):
            bounds = [(s.min, s.max) for s in stats if s.has_min_max]
            if not bounds:
                return None, None
            if all(isinstance(v, dt.datetime | dt.date | int) for b in bounds for v in b):
                return min(b[0] for b in bounds), max(b[1] for b in bounds)
        with storage.parquet(footer.path) as file:
            values = file.read(columns=[column]).column(0)
        both = pc.min_max(values)
        return both["min"].as_py(), both["max"].as_py()
    except (OSError, ValueError, KeyError, pa.ArrowException) as e:
        raise TableError(f"{where}: cannot read {column!r} of the data file {footer.path}: {first_line(e)}") from e


def _period_start(partitioning: DeltaPartitioning, value: Any) -> int | dt.datetime | dt.date:
    """The first instant (or unit, or day) of the period `value` lies in."""
    period = partitioning.partitioning.period
    if isinstance(value, dt.datetime):
        utc = value.astimezone(dt.UTC) if value.tzinfo is not None else value
        start = utc.replace(minute=0, second=0, microsecond=0)
        if period is not Period.HOUR:
            start = start.replace(hour=0)
        return _day_start(start, period)
    if isinstance(value, dt.date):
        return _day_start(value, period)
    width = partitioning.partitioning.truncate_width()
    if width is None:
        raise TableError(f"the partition column {partitioning.name!r} has no fixed width")
    return int(value) - int(value) % width


def _day_start(value: DateLike, period: Period) -> DateLike:
    """A day's or date's start of its month or year (as it is for days and hours)."""
    if period is Period.MONTH:
        return value.replace(day=1)
    if period is Period.YEAR:
        return value.replace(month=1, day=1)
    return value


def _text(value: int | dt.datetime | dt.date) -> str:
    """A partition value as Delta writes it in an add action."""
    if isinstance(value, dt.datetime):
        return value.strftime(TIMESTAMP_FORMAT)
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def partition_values(partitioning: DeltaPartitioning | None, columns: Sequence[str], footer: Footer,
                     storage: TableStorage, where: str) -> dict[str, str | None]:
    """A file's partition values for a table partitioned by `columns`: the job's partition column's, if the table's
    is it; a TableError naming the keys if the table is partitioned by a column the job's partitioner does not make."""
    if not columns:
        return {}
    if partitioning is None or list(columns) != [partitioning.name]:
        made = partitioning.name if partitioning is not None else "none"
        raise TableError(f"{where} is partitioned by {', '.join(columns)}; the job's time partitioner makes {made} "
                         f"(writer.partitioner.class, {COLUMNS_KEY}, writer.partition.pattern): nothing was "
                         f"committed")
    return {partitioning.name: partition_value(partitioning, footer, storage, where)}
