"""What a Python worker holds when a task starts (shipped to the worker by reference: this module imports nothing
of oncelog, so the probe itself loads none of it)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

TASK_MODULE = "spark_pipeline.engines.records.task"


def task_module_loaded(_: Iterable[object]) -> Iterator[bool]:
    """Whether the records engine's task module was in the worker before this task ran."""
    yield TASK_MODULE in sys.modules
