"""Example quality policies, row-level and task-level."""

from __future__ import annotations

from spark_pipeline.constructs import Record, RowLevelPolicy, TaskLevelPolicy, TaskStats


class NonNegativeAmount(RowLevelPolicy):
    """A record passes when its amount is not negative."""

    def check(self, record: Record) -> bool:
        return bool(record.get("amount", 0) >= 0)


class WroteEverything(TaskLevelPolicy):
    """A branch passes when it wrote as many records as were extracted (no row was dropped)."""

    def check(self, stats: TaskStats) -> bool:
        return stats.records_written == stats.records_extracted
