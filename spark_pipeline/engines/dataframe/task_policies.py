"""Task-level quality policies on the DataFrame engine: each work unit's counts, judged after Spark wrote the
attempt and before its files move to the task output, with the records engine's semantics (task_flow.py): a failing
MANDATORY policy fails the attempt (TaskQualityError, the attempt's output dropped), a failing OPTIONAL one is
logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from events.job import WorkUnitSpec
from spark_pipeline.constructs import TaskLevelPolicy, TaskStats
from spark_pipeline.engines.records.flow import TaskQualityError, make_construct
from spark_pipeline.jobfile.config import JobConfig, PolicyType

POLICIES_KEY = "qualitychecker.task.policies"
log = logging.getLogger(__name__)


def check_units(config: JobConfig, units: Sequence[WorkUnitSpec], extracted: Sequence[int], written: Sequence[int],
                rejected: Sequence[int]) -> None:
    """Judge every work unit's counts by the job's task-level policies (branch 0: the DataFrame engine has no
    forks); a TaskQualityError names the first MANDATORY policy that fails."""
    branch = config.branch(0)
    policies = [make_construct(config, POLICIES_KEY, p.class_path, TaskLevelPolicy, p.type, branch.index)
                for p in branch.task_policies]
    for index, unit in enumerate(units):
        stats = TaskStats(unit, branch.index, extracted[index], written[index], rejected[index], ())
        for policy in policies:
            if policy.check(stats):
                continue
            if policy.policy_type is PolicyType.MANDATORY:
                raise TaskQualityError(f"task-level policy {type(policy).__name__} failed for branch {branch.index} "
                                       f"of work unit {unit.work_unit_id}")
            log.info("OPTIONAL task-level policy %s failed for work unit %s", type(policy).__name__,
                     unit.work_unit_id)
