"""Cron schedules: standard 5-field cron and Quartz 6/7-field expressions (as Gobblin's job.schedule)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from croniter import croniter

_QUARTZ_DAYS = frozenset("SUN MON TUE WED THU FRI SAT".split())


@dataclass(frozen=True)
class CronSchedule:
    """A validated `job.schedule`: as written, and the croniter form of it (Quartz forms have a seconds field)."""

    expression: str
    croniter_expression: str
    has_seconds: bool

    def next_after(self, moment: datetime) -> datetime:
        """The first fire time strictly after `moment` (naive or aware, as given)."""
        fire: datetime = croniter(self.croniter_expression, moment, second_at_beginning=self.has_seconds).get_next(
            datetime)
        return fire


def parse_cron(expression: str) -> CronSchedule:
    """Standard 5-field cron, or Gobblin's Quartz form `sec min hour day-of-month month day-of-week [year]`."""
    fields = expression.split()
    if len(fields) == 5:
        schedule = CronSchedule(expression, " ".join(fields), has_seconds=False)
    elif len(fields) in (6, 7):
        schedule = CronSchedule(expression, _from_quartz(fields), has_seconds=True)
    else:
        raise ValueError(
            f"{expression!r} has {len(fields)} fields; expected 5 (cron: min hour day month weekday) or 6-7 "
            "(Quartz: sec min hour day-of-month month day-of-week [year])"
        )
    try:
        schedule.next_after(datetime.now(UTC))
    except ValueError as e:  # croniter's errors are ValueErrors, including "never fires again"
        raise ValueError(f"invalid schedule {expression!r}: {e}") from e
    return schedule


def _from_quartz(fields: list[str]) -> str:
    """Translate a Quartz expression to croniter's seconds-first form (Quartz numbers weekdays 1=SUN..7=SAT)."""
    day_of_month, day_of_week = fields[3], fields[5]
    if (day_of_month == "?") == (day_of_week == "?"):
        raise ValueError("a Quartz expression needs '?' in exactly one of day-of-month and day-of-week")
    if "W" in day_of_month.upper() or day_of_month.upper().startswith("L-"):
        raise ValueError(f"day-of-month {day_of_month!r}: Quartz 'W' and 'L-n' are not supported")
    converted = list(fields)
    converted[3] = "*" if day_of_month == "?" else day_of_month
    converted[5] = "*" if day_of_week == "?" else ",".join(_quartz_weekday(t) for t in day_of_week.split(","))
    return " ".join(converted)


def _quartz_weekday(token: str) -> str:
    """One day-of-week list item, Quartz → croniter: `6#3` → `5#3`, `6L` → `L5`, `2-6/2` → `1-5/2`."""
    item = token.upper()
    if item == "L":
        return "6"  # Quartz: L alone in day-of-week is the last day of the week, Saturday
    if item.endswith("L"):
        return "L" + _quartz_day(item[:-1])
    if "#" in item:
        day, _, nth = item.partition("#")
        return f"{_quartz_day(day)}#{nth}"
    base, slash, step = item.partition("/")
    if base == "*":
        return item
    low, dash, high = base.partition("-")
    return _quartz_day(low) + (dash + _quartz_day(high) if dash else "") + slash + step


def _quartz_day(day: str) -> str:
    """A Quartz weekday (1-7 or SUN-SAT) as croniter's (0-6 or SUN-SAT)."""
    if day in _QUARTZ_DAYS:
        return day
    if day.isdigit() and 1 <= int(day) <= 7:
        return str(int(day) - 1)
    raise ValueError(f"day-of-week {day!r}: Quartz numbers days 1 (SUN) to 7 (SAT), or use SUN-SAT")
