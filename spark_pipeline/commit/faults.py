"""Fault injection for the crash matrix: kill the process at a named point of the publish protocol.

`ONCELOG_CRASH_AT=after-rename:2` kills the process with os._exit the second time it passes `after-rename`.
The injector is built once from the environment by whoever starts the work, and passed down explicitly (inside
CommitSettings): commit shard tasks on executors carry a copy, so a point a shard reaches kills that shard's Python
worker (the pass number counts per process), and the driver, finding the shard lost, crashes in turn.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from enum import StrEnum

CRASH_ENV = "ONCELOG_CRASH_AT"
CRASH_EXIT_CODE = 137


class FaultPoint(StrEnum):
    """Every point of the publish protocol the crash matrix kills the process at."""

    AFTER_TASK_OUTPUT = "after-task-output"
    AFTER_PLANNING = "after-planning"
    AFTER_RENAME = "after-rename"
    BEFORE_WATERMARK = "before-watermark"
    AFTER_WATERMARK = "after-watermark"
    BEFORE_COMPLETION = "before-completion"
    DURING_CLEANUP = "during-cleanup"
    BEFORE_TABLE_COMMIT = "before-table-commit"
    """A table publisher's sequence: its files moved into the table's data folder, the table not committed."""
    AFTER_TABLE_COMMIT = "after-table-commit"
    """The table's snapshot committed, nothing of it recorded in the log (verify() must find the snapshot)."""
    AFTER_COMPLETENESS = "after-completeness"
    """A time-partitioned job's sequence: its Completeness step done (`_SUCCESS` markers written), nothing of it
    recorded in the log (recovery must record each PartitionCompleted once)."""

    @classmethod
    def parse(cls, name: str) -> FaultPoint:
        """The point called `name`; a ValueError listing the known ones for a misspelled name."""
        try:
            return cls(name)
        except ValueError as e:
            raise ValueError(f"{CRASH_ENV}: unknown crash point {name!r}; known: {', '.join(FaultPoint)}") from e

    @property
    def in_commit_shard(self) -> bool:
        """Whether a sharded commit reaches this point inside a shard task (on an executor), not on the driver."""
        return self not in (FaultPoint.AFTER_TASK_OUTPUT, FaultPoint.DURING_CLEANUP)


    @property
    def table_only(self) -> bool:
        """Whether only a table publisher's sequence reaches this point (a folder job never does)."""
        return self in (FaultPoint.BEFORE_TABLE_COMMIT, FaultPoint.AFTER_TABLE_COMMIT)


    @property
    def completeness_only(self) -> bool:
        """Whether only a time-partitioned job's sequence reaches this point."""
        return self is FaultPoint.AFTER_COMPLETENESS


POINTS: tuple[FaultPoint, ...] = tuple(p for p in FaultPoint if not p.table_only and not p.completeness_only)
"""Every point a folder job reaches, in protocol order (the crash matrix's parameters)."""
TABLE_POINTS: tuple[FaultPoint, ...] = tuple(p for p in FaultPoint if p.table_only)
"""The points only a table publisher's sequence reaches (the table crash matrix adds them)."""


class FaultInjector:
    """Kills the process when it reaches the configured point (and pass number); does nothing otherwise."""

    def __init__(self, point: FaultPoint | None = None, nth: int = 1) -> None:
        self.point = point
        self.nth = nth
        self._passes = 0
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[type[FaultInjector], tuple[object, ...]]:
        """Pickled for shard tasks as its point and pass number (a fresh count there; locks do not pickle); a subclass
        may add its own arguments."""
        return type(self), (self.point, self.nth)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FaultInjector:
        """The injector ONCELOG_CRASH_AT asks for (`point` or `point:n`), or one that never fires."""
        spec = env.get(CRASH_ENV, "").strip()
        if not spec:
            return cls()
        name, _, nth = spec.partition(":")
        try:
            count = int(nth) if nth else 1
        except ValueError as e:
            raise ValueError(f"{CRASH_ENV}={spec!r}: the pass number after ':' must be an integer") from e
        return cls(FaultPoint.parse(name), count)

    def reached(self, point: FaultPoint) -> None:
        """Mark that the protocol reached `point`: exits the process at once when it is the configured one."""
        if point is not self.point:
            return
        with self._lock:
            self._passes += 1
            if self._passes == self.nth:
                self.crash(f"injected crash at {point} (pass {self.nth})")

    def shard_lost(self, detail: str) -> None:
        """A commit shard task died: when this injector killed it (at a shard-side point), the driver dies too, as
        the crash matrix expects of a crash at that point; otherwise it returns and the run fails."""
        if self.point is not None and self.point.in_commit_shard:
            self.crash(f"injected crash at {self.point} (in a commit shard task: {detail[:300]})")

    def crash(self, message: str) -> None:
        """Exit at once, as a kill would, after saying why (the crash matrix's in-process driver dies otherwise)."""
        sys.stdout.flush()
        sys.stderr.write(f"oncelog: {message}\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)


NO_FAULTS = FaultInjector()
