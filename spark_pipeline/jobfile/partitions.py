"""Gobblin's time-based writer partitioner: its keys, checked before anything runs, and the partition folder of an
event time, computed the same way by both engines (this module in Python, engines/dataframe/partitions.py as a Spark
expression built from the same tokens).

Gobblin's `TimeBasedAvroWriterPartitioner` names a record's folder from a timestamp: the first of
`writer.partition.columns` (nested as `a.b`) that holds a value, formatted in `writer.partition.timezone` by
`writer.partition.pattern` (Joda's DateTimeFormat letters) or, without a pattern, by `writer.partition.granularity`'s
(HOUR: `yyyy/MM/dd/HH`), between `writer.partition.prefix` and `.suffix`: `hourly/2026/11/26/03`. Where Gobblin falls
back to the wall clock, oncelog takes the record's `timestamp` field (the Kafka source's record timestamp), so that a
retry puts a record where its first attempt did. `oncelog.writer.partition.style: hive` is oncelog's own: Hive's
`key=value` folders (`dt=2026-11-26/hr=03`) for the granularity.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from events.errors import ConfigError

PARTITIONER_KEY = "writer.partitioner.class"
COLUMNS_KEY = "writer.partition.columns"
PATTERN_KEY = "writer.partition.pattern"
GRANULARITY_KEY = "writer.partition.granularity"
TIMEZONE_KEY = "writer.partition.timezone"
PREFIX_KEY = "writer.partition.prefix"
SUFFIX_KEY = "writer.partition.suffix"
TIME_UNIT_KEY = "writer.partition.timeUnit"
STYLE_KEY = "oncelog.writer.partition.style"
LATENESS_KEY = "writer.partition.allowed.lateness"
"""How late (event time) a record may come and still be in its partition before the partition is complete."""
SUCCESS_FILE_KEY = "writer.partition.success.file"
"""Whether a completed partition's folder gets Hadoop's empty `_SUCCESS` marker file."""
PARTITION_KEYS = (PARTITIONER_KEY, COLUMNS_KEY, PATTERN_KEY, GRANULARITY_KEY, TIMEZONE_KEY, PREFIX_KEY, SUFFIX_KEY,
                  TIME_UNIT_KEY, STYLE_KEY, LATENESS_KEY, SUCCESS_FILE_KEY)
"""Every key of the time partitioner (Gobblin's, and oncelog's style)."""

TIME_PARTITIONERS = frozenset({
    f"{package}.writer.partitioner.{name}"
    for package in ("org.apache.gobblin", "gobblin")
    for name in ("TimeBasedAvroWriterPartitioner", "TimeBasedWriterPartitioner")
})
"""Gobblin's time-based partitioner classes (the Apache package and the LinkedIn one before it)."""
DEFAULT_TIMEZONE = "America/Los_Angeles"
"""Gobblin's default (ConfigurationKeys.PST_TIMEZONE_NAME)."""
SOURCE_TIMESTAMP = "timestamp"
"""The record field the partitioner falls back to: the Kafka source's record timestamp (epoch milliseconds)."""
JODA_LETTERS = frozenset("GCYxweEyDMdaKhHkmsSzZ")
"""The pattern letters Joda's DateTimeFormat knows; any other letter outside quotes it rejects."""
SUPPORTED_LETTERS = "yMdHms"
"""The letters oncelog formats (numeric fields, the same on both engines)."""
FOLDER_TEXT = re.compile(r"^[A-Za-z0-9._=/-]*$")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
DURATION = re.compile(r"^(\d+)\s*(ms|s|m|h|d)$")
DURATION_MILLIS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
FIELD_ORDER = ("y", "M", "d", "H", "m", "s")
"""The numeric fields from coarsest to finest: a partition's bounds are known when its folder names a prefix of them."""
TRUE_WORDS = frozenset({"true", "yes", "1"})
FALSE_WORDS = frozenset({"false", "no", "0", ""})


class Granularity(Enum):
    """Gobblin's DatePartitionType: the pattern a granularity stands for, and Hive's folders for it."""

    YEAR = ("yyyy", "'dt='yyyy")
    MONTH = ("yyyy/MM", "'dt='yyyy-MM")
    DAY = ("yyyy/MM/dd", "'dt='yyyy-MM-dd")
    HOUR = ("yyyy/MM/dd/HH", "'dt='yyyy-MM-dd/'hr='HH")
    MINUTE = ("yyyy/MM/dd/HH/mm", "'dt='yyyy-MM-dd/'hr='HH/'min='mm")

    @property
    def pattern(self) -> str:
        return self.value[0]

    @property
    def hive_pattern(self) -> str:
        return self.value[1]


class PartitionStyle(StrEnum):
    """`oncelog.writer.partition.style`: Gobblin's folders (the pattern's) or Hive's `key=value` folders."""

    GOBBLIN = "gobblin"
    HIVE = "hive"


class TimeUnit(Enum):
    """Gobblin's `writer.partition.timeUnit` (java.util.concurrent.TimeUnit): what a numeric column counts."""

    NANOSECONDS = (1, 1_000_000)
    MICROSECONDS = (1, 1_000)
    MILLISECONDS = (1, 1)
    SECONDS = (1_000, 1)
    MINUTES = (60_000, 1)
    HOURS = (3_600_000, 1)
    DAYS = (86_400_000, 1)

    def to_millis(self, value: int) -> int:
        """`value` in this unit as epoch milliseconds (floored, as Java's TimeUnit.toMillis for positive times)."""
        multiply, divide = self.value
        return value * multiply // divide


class Field(StrEnum):
    """A numeric field of a formatted date."""

    YEAR = "y"
    MONTH = "M"
    DAY = "d"
    HOUR = "H"
    MINUTE = "m"
    SECOND = "s"


@dataclass(frozen=True)
class Token:
    """One piece of a pattern: literal text, or a field padded to `width` digits (a two-letter year: its last two)."""

    text: str = ""
    field: Field | None = None
    width: int = 0

    def format(self, moment: dt.datetime) -> str:
        """This piece of the folder name of `moment` (a local time)."""
        if self.field is None:
            return self.text
        value = {Field.YEAR: moment.year, Field.MONTH: moment.month, Field.DAY: moment.day, Field.HOUR: moment.hour,
                 Field.MINUTE: moment.minute, Field.SECOND: moment.second}[self.field]
        if self.field is Field.YEAR and self.width == 2:
            value %= 100
        return str(value).rjust(self.width, "0")


def tokens(pattern: str) -> tuple[Token, ...]:
    """A Joda DateTimeFormat pattern as tokens: letter runs are fields, `'...'` quotes text (`''`: a quote), anything
    else is text. Letters Joda does not know are an error (as in Gobblin), and so are Joda's text fields (month
    names, time zones...), which oncelog does not format."""
    out: list[Token] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "'":
            end = i + 1
            text = ""
            while True:
                if end >= len(pattern):
                    raise ValueError(f"the quote at position {i + 1} is not closed")
                if pattern[end] == "'":
                    if end + 1 < len(pattern) and pattern[end + 1] == "'":
                        text += "'"
                        end += 2
                        continue
                    break
                text += pattern[end]
                end += 1
            out.append(Token(text="'" if end == i + 1 else text))
            i = end + 1
        elif char.isascii() and char.isalpha():
            end = i
            while end < len(pattern) and pattern[end] == char:
                end += 1
            count = end - i
            if char not in JODA_LETTERS:
                raise ValueError(f"{char!r} is not a pattern letter (Gobblin's Joda DateTimeFormat rejects it: "
                                   f"'Illegal pattern component: {char * count}'); quote text as 'text'")
            if char not in SUPPORTED_LETTERS or (char == "M" and count > 2):
                raise ValueError(f"{char * count!r} is a Joda pattern component oncelog does not format; folders "
                                   f"use the numeric fields {', '.join(SUPPORTED_LETTERS)} (MM, not MMM)")
            out.append(Token(field=Field(char), width=count))
            i = end
        else:
            out.append(Token(text=char))
            i += 1
    return tuple(merged(out))


def merged(parts: list[Token]) -> list[Token]:
    """Adjacent text tokens as one."""
    out: list[Token] = []
    for part in parts:
        if part.field is None and out and out[-1].field is None:
            out[-1] = Token(text=out[-1].text + part.text)
        else:
            out.append(part)
    return out


def folder_text_problem(text: str) -> str | None:
    """Why `text` (a pattern's text, a prefix, a suffix) cannot be part of a folder path below a dataset, or None."""
    if not FOLDER_TEXT.match(text):
        bad = sorted({c for c in text if not re.match(r"[A-Za-z0-9._=/-]", c)})
        return (f"it holds {', '.join(repr(c) for c in bad)}; a partition folder may hold letters, digits, '.', '_', "
                f"'-', '=' and '/' between folders")
    segments = text.strip("/").split("/")
    if text.strip("/") and any(s in ("", ".", "..") for s in segments):
        return "it makes an empty, '.' or '..' folder"
    return None


@dataclass(frozen=True)
class TimePartitioning:
    """A job's time partitioner, as both engines apply it."""

    columns: tuple[str, ...]
    """writer.partition.columns, in order (nested fields as `a.b`); empty: the record's `timestamp` only."""
    tokens: tuple[Token, ...]
    zone: str
    prefix: str = ""
    suffix: str = ""
    unit: TimeUnit = TimeUnit.MILLISECONDS

    lateness_ms: int = 0
    """writer.partition.allowed.lateness, in milliseconds."""
    success_file: bool = False
    """writer.partition.success.file: a completed partition's folder gets a `_SUCCESS` marker."""

    def path(self, millis: int) -> str:
        """The partition folder (below the dataset's) of an event time in epoch milliseconds."""
        moment = dt.datetime.fromtimestamp(millis // 1000, tz=ZoneInfo(self.zone))
        middle = "".join(token.format(moment) for token in self.tokens).strip("/")
        return "/".join(part.strip("/") for part in (self.prefix, middle, self.suffix) if part.strip("/"))

    def bounds(self, partition: str) -> tuple[int, int] | None:
        """The event times a partition folder holds, [start, end) in epoch milliseconds; None when its folder does not
        name its time from the year down (a pattern such as `HH` alone), or is not one of this partitioner's."""
        fields = [t.field for t in self.tokens if t.field is not None]
        if [f.value for f in fields] != list(FIELD_ORDER[:len(fields)]) or not fields:
            return None
        match = _label_regex(self).fullmatch(partition)
        if match is None:
            return None
        values = [int(v) for v in match.groups()]
        if self.tokens and any(t.field is Field.YEAR and t.width == 2 for t in self.tokens):
            values[0] += 2000
        parts = dict(zip(FIELD_ORDER, values))
        zone = ZoneInfo(self.zone)
        try:
            start = dt.datetime(parts["y"], parts.get("M", 1), parts.get("d", 1), parts.get("H", 0),
                                parts.get("m", 0), parts.get("s", 0), tzinfo=zone)
        except ValueError:
            return None
        finest = FIELD_ORDER[len(fields) - 1]
        if finest in ("H", "m", "s"):
            step = {"H": dt.timedelta(hours=1), "m": dt.timedelta(minutes=1), "s": dt.timedelta(seconds=1)}[finest]
            return _millis(start), _millis(start.astimezone(dt.UTC) + step)
        if finest == "d":
            end = (start.replace(tzinfo=None) + dt.timedelta(days=1)).replace(tzinfo=zone)
        elif finest == "M":
            end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
        else:
            end = start.replace(year=start.year + 1)
        return _millis(start), _millis(end)


def _millis(moment: dt.datetime) -> int:
    """An aware datetime as epoch milliseconds."""
    return (moment - EPOCH) // dt.timedelta(milliseconds=1)


def _label_regex(partitioning: TimePartitioning) -> re.Pattern[str]:
    """The regular expression of this partitioner's folders, a group per field (as `path` joins them)."""
    middle = "".join(re.escape(t.text) if t.field is None else (r"(\d+)" if t.width < 2 else rf"(\d{{{t.width}}})")
                     for t in partitioning.tokens)
    pieces = [re.escape(partitioning.prefix)] if partitioning.prefix else []
    pieces.append(middle.strip("/"))
    if partitioning.suffix:
        pieces.append(re.escape(partitioning.suffix))
    return re.compile("/".join(pieces))


def duration_millis(text: str) -> int:
    """A duration such as `30m` or `2h` (or `0`) in milliseconds; a ValueError saying what a duration is."""
    cleaned = text.strip().lower()
    if cleaned == "0":
        return 0
    match = DURATION.match(cleaned)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: a whole number and a unit, ms, s, m, h or d (such as 30m or "
                         f"2h; 0 for none)")
    return int(match.group(1)) * DURATION_MILLIS[match.group(2)]



def temporal_millis(value: object) -> int | None:
    """A date's or timestamp's value (a naive one is UTC, as Avro's) as epoch milliseconds; None for anything else."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return (aware - EPOCH) // dt.timedelta(milliseconds=1)
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days * 86_400_000
    return None


def partitioning_of(properties: Mapping[str, str]) -> TimePartitioning | None:
    """The job's time partitioner (None: output is not partitioned); a ValueError naming the key if a key is bad (the
    job file's checks report every problem before this runs: `partitioning_problems`)."""
    problems = partitioning_problems(properties)
    if problems:
        key, message = problems[0]
        raise ValueError(f"{key}: {message}")
    return _build(properties)


def _value(properties: Mapping[str, str], key: str) -> str:
    return str(properties.get(key, "")).strip()


def _build(properties: Mapping[str, str]) -> TimePartitioning | None:
    if not _value(properties, PARTITIONER_KEY):
        return None
    style = PartitionStyle(_value(properties, STYLE_KEY).lower() or PartitionStyle.GOBBLIN)
    granularity = Granularity[_value(properties, GRANULARITY_KEY).upper() or "HOUR"]
    pattern = _value(properties, PATTERN_KEY) or (
        granularity.hive_pattern if style is PartitionStyle.HIVE else granularity.pattern)
    columns = tuple(c.strip() for c in _value(properties, COLUMNS_KEY).split(",") if c.strip())
    return TimePartitioning(
        columns=columns, tokens=tokens(pattern), zone=_value(properties, TIMEZONE_KEY) or DEFAULT_TIMEZONE,
        prefix=_value(properties, PREFIX_KEY).strip("/"), suffix=_value(properties, SUFFIX_KEY).strip("/"),
        unit=TimeUnit[_value(properties, TIME_UNIT_KEY).upper() or "MILLISECONDS"],
        lateness_ms=duration_millis(_value(properties, LATENESS_KEY) or "0"),
        success_file=_value(properties, SUCCESS_FILE_KEY).lower() in TRUE_WORDS)


def partitioning_problems(properties: Mapping[str, str]) -> list[tuple[str, str]]:
    """Every problem of the partitioner's keys, each with the key it is about (the job file's checks)."""
    problems: list[tuple[str, str]] = []
    partitioner = _value(properties, PARTITIONER_KEY)
    given = [key for key in PARTITION_KEYS if key != PARTITIONER_KEY and _value(properties, key)]
    if not partitioner:
        problems += [(key, f"{key!r} is set but {PARTITIONER_KEY!r} is not: records are split into partition "
                           f"folders only with a time partitioner (org.apache.gobblin.writer.partitioner."
                           f"TimeBasedAvroWriterPartitioner)") for key in given]
        return problems
    if partitioner not in TIME_PARTITIONERS:
        problems.append((PARTITIONER_KEY, f"{partitioner!r} is not a partitioner oncelog applies; it applies "
                                          f"Gobblin's time-based ones: {', '.join(sorted(TIME_PARTITIONERS))}"))
    style = _value(properties, STYLE_KEY).lower()
    if style and style not in {s.value for s in PartitionStyle}:
        problems.append((STYLE_KEY, f"{style!r} is not a partition style (gobblin or hive)"))
    granularity = _value(properties, GRANULARITY_KEY).upper()
    if granularity and granularity not in Granularity.__members__:
        problems.append((GRANULARITY_KEY, f"{granularity!r} is not a granularity (one of "
                                          f"{', '.join(Granularity.__members__)})"))
    pattern = _value(properties, PATTERN_KEY)
    if pattern:
        if style == PartitionStyle.HIVE:
            problems.append((STYLE_KEY, f"{STYLE_KEY}=hive makes the folders from {GRANULARITY_KEY}; with "
                                        f"{PATTERN_KEY} set, write Hive's folders into the pattern itself "
                                        f"('dt='yyyy-MM-dd/'hr='HH) and drop the style"))
        try:
            text = "".join(t.text for t in tokens(pattern))
            if not any(t.field is not None for t in tokens(pattern)):
                problems.append((PATTERN_KEY, f"{pattern!r} has no date field: every record would go to one folder"))
            elif (why := folder_text_problem(text)) is not None:
                problems.append((PATTERN_KEY, f"{pattern!r}: {why}"))
        except ValueError as e:
            problems.append((PATTERN_KEY, f"{pattern!r}: {e}"))
    zone = _value(properties, TIMEZONE_KEY)
    if zone and not _known_zone(zone):
        problems.append((TIMEZONE_KEY, f"{zone!r} is not a time zone ID (such as UTC or Europe/Berlin)"))
    unit = _value(properties, TIME_UNIT_KEY).upper()
    if unit and unit not in TimeUnit.__members__:
        problems.append((TIME_UNIT_KEY, f"{unit!r} is not a time unit (one of {', '.join(TimeUnit.__members__)})"))
    for key in (PREFIX_KEY, SUFFIX_KEY):
        if (why := folder_text_problem(_value(properties, key))) is not None:
            problems.append((key, f"{_value(properties, key)!r}: {why}"))
    try:
        duration_millis(_value(properties, LATENESS_KEY) or "0")
    except ValueError as e:
        problems.append((LATENESS_KEY, str(e)))
    success = _value(properties, SUCCESS_FILE_KEY).lower()
    if success not in TRUE_WORDS | FALSE_WORDS:
        problems.append((SUCCESS_FILE_KEY, f"{success!r} is not a boolean (true or false)"))
    columns = _value(properties, COLUMNS_KEY)
    if columns and not all(re.match(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$", c.strip())
                           for c in columns.split(",") if c.strip()):
        problems.append((COLUMNS_KEY, f"{columns!r}: each column is a field name, nested as a.b, comma-separated"))
    return problems


def _known_zone(zone: str) -> bool:
    """A zone both engines know: an IANA region ID (Joda's and Java's IDs are these), or UTC."""
    if zone not in ("UTC", "GMT") and ("/" not in zone or zone not in available_timezones()):
        return False
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


class ColumnKind(Enum):
    """What a partition column holds, from the records' schema: how its value becomes epoch milliseconds."""

    NUMBER = "number"  # in writer.partition.timeUnit
    MILLIS = "millis"  # the record's own `timestamp`, or Avro's timestamp-millis
    MICROS = "micros"  # Avro's timestamp-micros
    DAYS = "days"  # Avro's date


@dataclass(frozen=True)
class EventColumn:
    """A column the event time is read from: its path in the record and how its value is read."""

    path: tuple[str, ...]
    kind: ColumnKind


def event_columns(partitioning: TimePartitioning, kind_of: Callable[[str], ColumnKind | str | None],
                  names: Sequence[str]) -> tuple[EventColumn, ...]:
    """The columns a record's event time is read from, in order: the configured ones the records' schema has, then
    the record's `timestamp` (the source's record time) if it has one. `kind_of(column)`: the column's kind (a str:
    the type it has instead, not a time; None: no such column); `names`: the records' top-level columns. A ConfigError
    names the key when none is there or one is not a time."""
    found: list[EventColumn] = []
    for column in partitioning.columns:
        kind = kind_of(column)
        if isinstance(kind, str):
            raise ConfigError(f"{COLUMNS_KEY}: column {column!r} is {kind}; a partition column holds a time "
                                       f"(a long or int in {TIME_UNIT_KEY}, a date or a timestamp)")
        if kind is not None:
            found.append(EventColumn(tuple(column.split(".")), kind))
    shown = ", ".join(repr(n) for n in names) or "none"
    if partitioning.columns and not found:
        listed = ", ".join(repr(c) for c in partitioning.columns)
        verb = "is not a column" if len(partitioning.columns) == 1 else "are not columns"
        from spark_pipeline.jobfile.sql_columns import did_you_mean  # sqlglot: imported for this error only
        hint = did_you_mean(partitioning.columns[0], names) if len(partitioning.columns) == 1 else ""
        raise ConfigError(f"{COLUMNS_KEY}: {listed} {verb} of the records written{hint}; their columns: {shown}")
    own = kind_of(SOURCE_TIMESTAMP)
    if SOURCE_TIMESTAMP not in partitioning.columns and isinstance(own, ColumnKind):
        found.append(EventColumn((SOURCE_TIMESTAMP,), ColumnKind.MILLIS if own is ColumnKind.NUMBER else own))
    if not found:
        raise ConfigError(f"{COLUMNS_KEY} is not set and the records written have no {SOURCE_TIMESTAMP!r} "
                                   f"field (the Kafka source's record time; their columns: {shown}): name the "
                                   f"column that holds each record's time")
    return tuple(found)


def number_millis(kind: ColumnKind, unit: TimeUnit, value: int) -> int:
    """A column's number as epoch milliseconds, by what the column holds."""
    if kind is ColumnKind.NUMBER:
        return unit.to_millis(value)
    if kind is ColumnKind.MICROS:
        return value // 1000
    if kind is ColumnKind.DAYS:
        return value * 86_400_000
    return value


def avro_kind(schema: object, column: str) -> ColumnKind | str | None:
    """A column's kind in an Avro record schema (nested as a.b through records, nullable or not)."""
    current: object = schema
    for name in column.split("."):
        record = _non_null(current)
        if not isinstance(record, dict) or record.get("type") != "record":
            return None
        field = next((f for f in record.get("fields", ()) if f.get("name") == name), None)
        if field is None:
            return None
        current = field.get("type")
    leaf = _non_null(current)
    base = leaf.get("type") if isinstance(leaf, dict) else leaf
    logical = leaf.get("logicalType") if isinstance(leaf, dict) else None
    if logical in ("timestamp-millis", "local-timestamp-millis"):
        return ColumnKind.MILLIS
    if logical in ("timestamp-micros", "local-timestamp-micros"):
        return ColumnKind.MICROS
    if logical == "date":
        return ColumnKind.DAYS
    if base in ("long", "int"):
        return ColumnKind.NUMBER
    return f"of Avro type {base if isinstance(base, str) else 'record'}"


def _non_null(schema: object) -> object:
    """A union's one non-null member (a nullable field's type), else the schema itself."""
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        return members[0] if len(members) == 1 else schema
    return schema


def avro_columns(schema: object) -> tuple[str, ...]:
    """The top-level field names of an Avro record schema."""
    return tuple(f.get("name", "") for f in schema.get("fields", ())) if isinstance(schema, dict) else ()


def record_millis(columns: Sequence[EventColumn], partitioning: TimePartitioning, record: Mapping[str, Any]
                  ) -> int | None:
    """A record's event time: the first of `columns` holding a value, as epoch milliseconds (None: none does)."""
    for column in columns:
        value: Any = record
        for name in column.path:
            value = value.get(name) if isinstance(value, Mapping) else None
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            return number_millis(column.kind, partitioning.unit, value)
        millis = temporal_millis(value)
        if millis is not None:
            return millis
    return None
