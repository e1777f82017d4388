"""A note for job files written for the DataFrame engine's old stage order, when the SQL row policy ran before the
SQL converter: now converters come first, then quality checkers (Gobblin's order), so a row policy naming a column
that only the source has (one the select list drops or renames) no longer finds it.

Checked from the job file's text, without Spark: the policy's column names against the select list's output names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

POLICY_KEY = "qualitychecker.row.sql"
SELECT_KEY = "converter.sql.select"
_STRINGS = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NAMES = re.compile(r"`([^`]+)`|\b([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()(?!\s*\.)")
_ALIAS = re.compile(r"(?i)(?:\bas\s+|\s)`?([A-Za-z_][A-Za-z0-9_]*)`?\s*$")
_COLUMN = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)?`?([A-Za-z_][A-Za-z0-9_]*)`?$")
_AFTER_AS = re.compile(r"(?i)\bas\s+[A-Za-z_][A-Za-z0-9_]*(?:\s*\([^)]*\))?")
_WORDS = frozenset("""and or not null is in like rlike ilike between true false case when then else end distinct
exists interval div any some all escape""".split())


def sql_order_note(values: Mapping[str, str]) -> str | None:
    """The note for a job whose SQL row policy names a column its SQL converter does not output (None: no such)."""
    condition = values.get(POLICY_KEY, "").strip()
    select = values.get(SELECT_KEY, "").strip()
    if not condition or not select:
        return None
    outputs = output_names(select)
    if outputs is None:
        return None
    missing = sorted(n for n in condition_names(condition) if n.lower() not in outputs)
    if not missing:
        return None
    return (f"{POLICY_KEY} {condition!r} names {', '.join(missing)}, which {SELECT_KEY} does not output: the SQL row "
            f"policy now checks the records after the SQL converter (Gobblin's order: converters, then quality "
            f"checkers; before, it checked the source's records), so the run will refuse it. Name the converted "
            f"columns ({', '.join(sorted(outputs))}), or keep the column in the select list")


def output_names(select: str) -> set[str] | None:
    """The lower-case column names a select list outputs; None when it has `*` (every source column stays)."""
    names = set()
    for item in top_level_items(select):
        if item == "*" or item.endswith(".*"):
            return None
        column = _COLUMN.match(item) or _ALIAS.search(item)
        if column:
            names.add(column.group(1).lower())
    return names


def condition_names(condition: str) -> set[str]:
    """The column names a SQL condition uses: its identifiers that are no keyword, function or type."""
    text = _AFTER_AS.sub(" ", _STRINGS.sub(" ", condition))
    found = set()
    for match in _NAMES.finditer(text):
        name = match.group(1) or match.group(2)
        if name.lower() not in _WORDS and not name[0].isdigit():
            found.add(name)
    return found


def top_level_items(select: str) -> list[str]:
    """A select list's items: split at the commas outside parentheses and quotes."""
    items: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in select:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    items.append("".join(current).strip())
    return [i for i in items if i]
