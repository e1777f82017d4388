"""Planning a run: the Source's work units (blocked datasets left out, failed ones retried by policy), packed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from events.job import WorkUnitSpec
from projections.views import WorkUnitStatus
from spark_pipeline.constructs import MultiWorkUnit, Source, SourceState
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobfile.plugins import make_construct


def retried_work_units(config: JobConfig, state: SourceState, planned: list[WorkUnitSpec]) -> list[WorkUnitSpec]:
    """The previous run's failed work units that the new plan does not cover (workunit.retry.policy)."""
    if not config.retries_failed_work_units:
        return []
    covered = {(w.dataset_urn, w.partition) for w in planned}
    retried = []
    for previous in state.previous_work_units:
        spec = previous.spec
        if previous.status is WorkUnitStatus.FAILED and (spec.dataset_urn, spec.partition) not in covered:
            low = state.watermark(spec.dataset_urn, spec.partition, spec.low_watermark)
            retried.append(spec.model_copy(update={"low_watermark": low, "multi_work_unit_id": None}))
    return retried


def source_work_units(config: JobConfig, state: SourceState) -> list[WorkUnitSpec]:
    """The work units the Source plans from `state`, blocked datasets left out, failed ones retried by policy."""
    source = make_construct(config, "source.class", config.source_class, Source)
    planned = [w for w in source.get_work_units(state) if w.dataset_urn not in state.blocked_datasets]
    planned += [w for w in retried_work_units(config, state, planned) if w.dataset_urn not in state.blocked_datasets]
    ids = [w.work_unit_id for w in planned]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{config.source_class} planned work units with the same id: ids must be unique in a run")
    return planned


def pack_work_units(config: JobConfig, planned: list[WorkUnitSpec],
                    slots: Callable[[], int]) -> tuple[list[WorkUnitSpec], list[MultiWorkUnit]]:
    """The work units with their task ids, and the tasks that run them (at most `slots()` tasks; asked only when
    there is work, since knowing the slots may start Spark). The tasks hold the very units returned: one copy of
    each unit for the run, not two."""
    if not planned:
        return [], []
    source = make_construct(config, "source.class", config.source_class, Source)
    packed = source.pack(planned, slots())
    by_task = {w.work_unit_id: m.multi_work_unit_id for m in packed for w in m.work_units}
    work_units = [w.model_copy(update={"multi_work_unit_id": by_task[w.work_unit_id]}) for w in planned]
    by_id = {w.work_unit_id: w for w in work_units}
    return work_units, [replace(m, work_units=tuple(by_id[w.work_unit_id] for w in m.work_units)) for m in packed]


def plan_work_units(config: JobConfig, state: SourceState,
                    slots: Callable[[], int]) -> tuple[list[WorkUnitSpec], list[MultiWorkUnit]]:
    """The run's work units and the tasks that run them (at most `slots()` tasks): what `run` and `--explain` plan."""
    return pack_work_units(config, source_work_units(config, state), slots)
