"""An Iceberg table's partition spec from the job's time partitioner: which column, and by which period (hour, day,
month, year), the table is partitioned when oncelog creates it. Arrow only: pyiceberg is not loaded here.

Iceberg's time transforms take dates and timestamps and cut periods in UTC; the partition column is often epoch
milliseconds (a `long`: the Kafka source's `timestamp`). So the spec depends on the column's type in the data:

- a date or timestamp column: `hour`/`day`/`month`/`year` of it;
- an integer column (epoch time in `writer.partition.timeUnit`): `truncate(width)` of it, the width one hour or one day
  in that unit (months and years have no fixed width: such a table is created unpartitioned).

A spec is asked for only when every partition folder lies within one period of the spec, as pyiceberg's `add_files`
needs (it infers a file's partition from its column statistics, and refuses a file whose values span two): a single
partition column (Gobblin falls back to the next column for records without a value in the first), a pattern naming its
time from the year down, and periods that are UTC's (the time zone UTC; for hours, any zone whose offsets are whole
hours).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from enum import StrEnum
from zoneinfo import ZoneInfo

import pyarrow as pa

from spark_pipeline.jobfile.partitions import (
    COLUMNS_KEY,
    FIELD_ORDER,
    SOURCE_TIMESTAMP,
    TimePartitioning,
    TimeUnit,
)
from spark_pipeline.tables.errors import TableError

PARTITION_SPEC = "oncelog.partition-spec"
"""The TableCommit step's summary key holding the spec a table it creates gets (JSON; absent: unpartitioned)."""
UTC_ZONES = frozenset({"UTC", "GMT", "Etc/UTC", "Etc/GMT", "Z"})
HOUR_MS = 3_600_000
DAY_MS = 86_400_000
SAMPLE_DATES = tuple(dt.datetime(year, month, 1, 12) for year in (2000, 2026) for month in (1, 4, 7, 10))
"""Dates whose UTC offsets a zone must have in whole hours for its hours to be UTC's (summer and winter time)."""


class Period(StrEnum):
    """The period of a table partition: Iceberg's time transform of that name."""

    HOUR = "hour"
    DAY = "day"
    MONTH = "month"
    YEAR = "year"


PERIOD_OF_FIELD = {"y": Period.YEAR, "M": Period.MONTH, "d": Period.DAY, "H": Period.HOUR, "m": Period.HOUR,
                   "s": Period.HOUR}
"""The table period for a pattern's finest field (minutes and seconds lie within one hour)."""
FIXED_WIDTH_MS = {Period.HOUR: HOUR_MS, Period.DAY: DAY_MS}


@dataclass(frozen=True)
class TablePartitioning:
    """The partition a table's files are in: `column`'s `period`, the column counting `unit` if it is a number."""

    column: str
    period: Period
    unit: TimeUnit = TimeUnit.MILLISECONDS

    def encode(self) -> str:
        return json.dumps({"column": self.column, "period": self.period.value, "unit": self.unit.name},
                          sort_keys=True)

    @classmethod
    def decode(cls, text: str) -> TablePartitioning:
        value = json.loads(text)
        return cls(str(value["column"]), Period(value["period"]), TimeUnit[value["unit"]])

    def field_name(self) -> str:
        """The partition field's name (beside the table's columns: `timestamp_hour`)."""
        return f"{self.column.replace('.', '_')}_{self.period.value}"

    def truncate_width(self) -> int | None:
        """The width of `truncate` on an integer column counting `unit` for one period; None if no fixed width fits."""
        period_ms = FIXED_WIDTH_MS.get(self.period)
        if period_ms is None:
            return None
        multiply, divide = self.unit.value
        width, remainder = divmod(period_ms * divide, multiply)
        return width if width >= 1 and remainder == 0 else None


def table_partitioning(partitioning: TimePartitioning | None) -> TablePartitioning | None:
    """The table partitioning matching the job's time partitioner, or None (unpartitioned) when its folders do not
    each lie within one UTC period of a single column (see the module's doc)."""
    if partitioning is None or len(partitioning.columns) > 1:
        return None
    fields = [t.field.value for t in partitioning.tokens if t.field is not None]
    if not fields or fields != list(FIELD_ORDER[:len(fields)]):
        return None
    period = PERIOD_OF_FIELD[fields[-1]]
    if not _utc_periods(partitioning.zone, period):
        return None
    column = partitioning.columns[0] if partitioning.columns else SOURCE_TIMESTAMP
    return TablePartitioning(column, period, partitioning.unit)


def _utc_periods(zone: str, period: Period) -> bool:
    """Whether the zone's periods are UTC's: any period in UTC; hours in a zone whose offsets are whole hours."""
    if zone in UTC_ZONES:
        return True
    if period is not Period.HOUR:
        return False
    offsets = (d.replace(tzinfo=ZoneInfo(zone)).utcoffset() for d in SAMPLE_DATES)
    return all(o is not None and o % dt.timedelta(hours=1) == dt.timedelta(0) for o in offsets)


def column_type(schema: pa.Schema, column: str, where: str) -> pa.DataType:
    """The type of `column` (nested as `a.b`) in the data's schema; a TableError naming the key if it has none."""
    parts = column.split(".")
    fields: pa.Schema | pa.StructType = schema
    for depth, part in enumerate(parts, 1):
        index = fields.get_field_index(part)
        if index < 0:
            raise TableError(f"{where}: the partition column {column!r} ({COLUMNS_KEY}) is not a column of the data "
                             f"({', '.join(schema.names)})")
        kind = fields.field(index).type
        if depth == len(parts):
            return kind
        if not pa.types.is_struct(kind):
            raise TableError(f"{where}: the partition column {column!r} ({COLUMNS_KEY}): {part!r} is {kind}, no "
                             f"record of fields")
        fields = kind
    raise TableError(f"{where}: the partition column ({COLUMNS_KEY}) is empty")
