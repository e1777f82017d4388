"""`oncelog replay --until OFFSET|TIMESTAMP`: the state as of a point in the log's history."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from events.errors import ConfigError
from events.log import EventLog
from projections.projector import FoldReport, Progress, Projector
from projections.state import State

_PER_PARTITION = re.compile(r"^\d+:\d+(,\d+:\d+)*$")


def parse_until(log: EventLog, until: str) -> dict[int, int]:
    """Where a fold must stop (exclusive offsets per partition) for `until`.

    `N` folds up to and including offset N (any partition of a SQLite log, whose offsets are global; a Kafka log
    needs `P:N[,P:N...]` unless it has one partition); `P:N,...` per partition, inclusive; an ISO-8601 time
    (`2026-11-21T12:00:00Z`; no zone means UTC) folds every event emitted at or before it.
    """
    text = until.strip()
    if text.isdigit():
        offset = int(text)
        if log.url.startswith("kafka:") and log.partitions > 1:
            raise ConfigError(
                f"--until {text}: offsets are per partition in a Kafka log of {log.partitions} partitions; "
                f"give one per partition, e.g. --until 0:{offset},1:{offset}, or a time"
            )
        return {p: offset + 1 for p in range(log.partitions)}
    if _PER_PARTITION.match(text):
        given = {int(p): int(o) + 1 for p, o in (pair.split(":") for pair in text.split(","))}
        unknown = sorted(p for p in given if p >= log.partitions)
        if unknown:
            raise ConfigError(f"--until {text}: partitions {unknown} do not exist (the log has {log.partitions})")
        return {p: given.get(p, 0) for p in range(log.partitions)}
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise ConfigError(
            f"--until {until!r} is neither an offset (N or P:N,...) nor an ISO-8601 time (2026-11-21T12:00:00Z)"
        ) from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return log.offsets_for_time(int(moment.timestamp() * 1000) + 1)


def state_as_of(log: EventLog, until: str, progress: Progress | None = None) -> tuple[State, FoldReport]:
    """The state folded up to `until` (a snapshot is used when it lies before that point)."""
    return Projector(log).rebuild(use_snapshot=True, until=parse_until(log, until), progress=progress)
