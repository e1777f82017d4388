"""Quality policies' verdicts, decided once for both engines (Gobblin's QualityChecker semantics).

Row level: a failing MANDATORY policy drops the record, a failing ERR_FILE one diverts it to the error file (once
per failing ERR_FILE policy), a failing OPTIONAL one lets it through, counted as flagged.
Task level: a failing MANDATORY policy fails the branch's work unit (TaskQualityError: its output is not committed),
a failing OPTIONAL one is logged as a warning naming the policy and the work unit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from events.errors import OncelogError
from spark_pipeline.constructs import Record, RowLevelPolicy, TaskLevelPolicy, TaskStats
from spark_pipeline.jobfile.config import PolicyType

log = logging.getLogger(__name__)


class TaskQualityError(OncelogError):
    """A MANDATORY task-level policy failed: the branch's output must not be committed."""


@dataclass(frozen=True)
class RowVerdict:
    """What the row policies made of one record."""

    keep: bool
    diverted: int
    """How many ERR_FILE policies divert it (the error file gets one copy per such policy)."""
    flagged: int
    """How many OPTIONAL policies it failed."""

    @property
    def rejected(self) -> bool:
        """Whether the record counts as rejected (dropped or diverted) for task-level policies."""
        return not self.keep


KEPT = RowVerdict(True, 0, 0)


def judge_row(policies: Sequence[RowLevelPolicy], record: Record) -> RowVerdict:
    """Every row policy's check of `record`, combined."""
    keep, diverted, flagged = True, 0, 0
    for policy in policies:
        if policy.check(record):
            continue
        if policy.policy_type is PolicyType.OPTIONAL:
            flagged += 1
            continue
        diverted += policy.policy_type is PolicyType.ERR_FILE
        keep = False
    return RowVerdict(keep, diverted, flagged) if (diverted or flagged or not keep) else KEPT


def check_task(policies: Sequence[TaskLevelPolicy], stats: TaskStats) -> None:
    """Every task-level policy's check of one branch's output for one work unit: a TaskQualityError names the first
    failing MANDATORY policy; a failing OPTIONAL policy is logged."""
    unit = stats.work_unit.work_unit_id
    for policy in policies:
        if policy.check(stats):
            continue
        name = type(policy).__name__
        if policy.policy_type is PolicyType.MANDATORY:
            raise TaskQualityError(f"task-level policy {name} failed for branch {stats.branch} of work unit {unit}")
        log.warning("OPTIONAL task-level policy %s failed for branch %d of work unit %s", name, stats.branch, unit)
