"""Fault injection for the crash matrix: kill the process at a named point of the publish protocol.

`ONCELOG_CRASH_AT=after-rename:2` kills the driver with os._exit the second time it passes `after-rename`.
The injector is built once from the environment by whoever starts the work, and passed down explicitly.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping

CRASH_ENV = "ONCELOG_CRASH_AT"
CRASH_EXIT_CODE = 137

POINTS = (
    "after-task-output",
    "after-planning",
    "after-rename",
    "before-watermark",
    "after-watermark",
    "before-completion",
    "during-cleanup",
)
"""Every point of the publish protocol the crash matrix kills the driver at."""


class FaultInjector:
    """Kills the process when it reaches the configured point (and pass number); does nothing otherwise."""

    def __init__(self, point: str | None = None, nth: int = 1) -> None:
        if point is not None and point not in POINTS:
            raise ValueError(f"{CRASH_ENV}: unknown crash point {point!r}; known: {', '.join(POINTS)}")
        self.point = point
        self.nth = nth
        self._passes = 0
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FaultInjector:
        """The injector ONCELOG_CRASH_AT asks for (`point` or `point:n`), or one that never fires."""
        spec = env.get(CRASH_ENV, "").strip()
        if not spec:
            return cls()
        point, _, nth = spec.partition(":")
        try:
            count = int(nth) if nth else 1
        except ValueError as e:
            raise ValueError(f"{CRASH_ENV}={spec!r}: the pass number after ':' must be an integer") from e
        return cls(point, count)

    def reached(self, point: str) -> None:
        """Mark that the protocol reached `point`: exits the process at once when it is the configured one."""
        if point != self.point:
            return
        with self._lock:
            self._passes += 1
            if self._passes == self.nth:
                sys.stdout.flush()
                sys.stderr.write(f"oncelog: injected crash at {point} (pass {self.nth})\n")
                sys.stderr.flush()
                os._exit(CRASH_EXIT_CODE)


NO_FAULTS = FaultInjector()
