"""The columns a job's Spark SQL (`converter.sql.select`, `qualitychecker.row.sql`) names, read without Spark.

Parsed with sqlglot's Spark dialect. Only what is certain is said: an expression sqlglot cannot parse, or one whose
columns it cannot tell (a subquery), names nothing here and is left to `validate --deep` (Spark's own analysis).
Column names compare as Spark compares them by default: case-insensitively. A name like `a.b` reads the column `a`
(a struct's field, or `records.a`): only the first part is checked.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

TABLE = "records"
"""The name the select list reads from (`SELECT <list> FROM records`)."""


@dataclass(frozen=True)
class SelectColumns:
    """What a select list reads and outputs: the columns it names, its aliases (Spark lets a later item use an
    earlier alias), and its output names (None: unknown, e.g. an unaliased expression or a struct's `.*`)."""

    reads: tuple[str, ...]
    aliases: frozenset[str]
    outputs: tuple[str, ...] | None
    star: bool


def select_columns(select: str) -> SelectColumns | None:
    """The columns a select list reads and outputs; None when sqlglot cannot tell (left to Spark)."""
    try:
        parsed = sqlglot.parse_one(f"SELECT {select} FROM {TABLE}", read="spark")
    except SqlglotError:
        return None
    if not isinstance(parsed, exp.Select) or _has_subquery(parsed.expressions):
        return None
    aliases = frozenset(e.alias.lower() for e in parsed.expressions if isinstance(e, exp.Alias))
    outputs: list[str] | None = []
    star = False
    for item in parsed.expressions:
        if isinstance(item, exp.Star):
            star = True
        elif isinstance(item, exp.Alias | exp.Column) and not _is_struct_star(item):
            if outputs is not None:
                outputs.append(item.alias_or_name)
        else:
            outputs = None
    reads = _names(c for e in parsed.expressions for c in e.find_all(exp.Column))
    return SelectColumns(reads, aliases, None if outputs is None else tuple(outputs), star)


def condition_columns(condition: str) -> tuple[str, ...] | None:
    """The columns a SQL condition names; None when sqlglot cannot tell (left to Spark)."""
    try:
        parsed = sqlglot.parse_one(condition, read="spark")
    except SqlglotError:
        return None
    if not isinstance(parsed, exp.Expression) or _has_subquery([parsed]):
        return None
    return _names(parsed.find_all(exp.Column))


def columns_after(select: SelectColumns, columns: tuple[str, ...]) -> tuple[str, ...] | None:
    """The columns a select list outputs over `columns` (None: unknown without Spark)."""
    if select.outputs is None:
        return None
    return (*columns, *select.outputs) if select.star else select.outputs


def missing(names: Iterable[str], columns: Iterable[str], allowed: Iterable[str] = ()) -> list[str]:
    """The names that are none of `columns` (nor `allowed`), compared case-insensitively, in order."""
    known = {c.lower() for c in (*columns, *allowed)}
    return [n for n in names if n.lower() not in known]


def did_you_mean(name: str, columns: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest column, or '' when none is close."""
    by_lower = {c.lower(): c for c in columns}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def _names(columns: Iterable[exp.Column]) -> tuple[str, ...]:
    """Each column's root name (the first part that is not the table), once, in order of appearance."""
    found: dict[str, str] = {}
    for column in sorted(columns, key=_start):
        parts = [p.name for p in column.parts]
        if len(parts) > 1 and parts[0].lower() == TABLE:
            parts = parts[1:]
        if parts and parts[0] and parts[0] != "*":
            found.setdefault(parts[0].lower(), parts[0])
    return tuple(found.values())


def _start(column: exp.Column) -> int:
    """Where a column starts in the text (sqlglot finds them breadth first)."""
    start = column.parts[0].meta.get("start") if column.parts else None
    return start if isinstance(start, int) else 0


def _has_subquery(expressions: Iterable[exp.Expression]) -> bool:
    """Whether an expression holds a query of its own (whose columns are another table's)."""
    return any(e.find(exp.Subquery, exp.Select) is not None for e in expressions)


def _is_struct_star(item: exp.Expression) -> bool:
    """`s.*`: a struct's fields, unknown without its type."""
    return isinstance(item, exp.Column) and isinstance(item.this, exp.Star)
