"""Partition completeness, planned: each sequence of a time-partitioned job ends with a Completeness step saying
where the dataset's event time stands and which time partitions it completes (docs/completeness.md).

A source partition is published up to the latest event time it has published (known as the start of the latest time
partition it published into: never later than the true maximum), or up to the run's planning time when it was caught
up with its source then. The dataset's horizon is the earliest of its source partitions' minus the allowed lateness;
every open time partition ending at or before it is complete. Records published into a partition that was complete
already are late: published all the same, and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from events.commit import CommitSequencePlanned, CompletenessStep, PartitionBounds
from filesystems import urls
from projections.completeness import Completeness
from projections.views import DatasetView
from spark_pipeline.constructs import DatasetOutput
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobfile.partitions import TimePartitioning, partitioning_of
from spark_pipeline.writers import path_segment

SUCCESS_FILE = "_SUCCESS"
"""Hadoop's marker of a complete output folder."""


def with_completeness(config: JobConfig, run_id: str, planned: Sequence[CommitSequencePlanned],
                      outputs: Sequence[DatasetOutput], states: Mapping[str, DatasetView]
                      ) -> list[CommitSequencePlanned]:
    """The planned sequences, each of a time-partitioned job's datasets ending with its Completeness step (a dataset
    with nothing else to publish gets a sequence of that step alone when it completes a partition)."""
    partitioning = partitioning_of(config.properties)
    if partitioning is None:
        return list(planned)
    by_urn = {p.dataset_urn: p for p in planned}
    extended: dict[str, CommitSequencePlanned] = {}
    for output in outputs:
        sequence = by_urn.get(output.dataset_urn)
        step = completeness_step(config, partitioning, output, states.get(output.dataset_urn))
        if step is None:
            continue
        if sequence is not None:
            extended[output.dataset_urn] = sequence.model_copy(update={"steps": (*sequence.steps, step)})
        elif step.completes:
            extended[output.dataset_urn] = CommitSequencePlanned(job=config.job_name, run_id=run_id,
                                                                 dataset_urn=output.dataset_urn, sequence_id=run_id,
                                                                 steps=(step,))
    kept = [extended.pop(p.dataset_urn, p) for p in planned]
    return kept + [extended[urn] for urn in sorted(extended)]


def completeness_step(config: JobConfig, partitioning: TimePartitioning, output: DatasetOutput,
                      view: DatasetView | None) -> CompletenessStep | None:
    """One dataset's Completeness step for this run's output (None: nothing about its event time changes)."""
    before = (view.completeness if view is not None else None) or Completeness()
    frontiers = dict(before.frontiers)
    written: dict[str, tuple[int, int]] = {}
    for result in output.results:
        for file in result.output_files:
            bounds = partitioning.bounds(file.partition)
            if bounds is None:
                continue
            frontiers[result.partition] = max(bounds[0], frontiers.get(result.partition, bounds[0]))
            if file.branch == 0:
                records, files = written.get(file.partition, (0, 0))
                written[file.partition] = (records + file.records, files + 1)
    sources = set(view.watermarks if view is not None else ()) | {r.partition for r in output.results}
    caught_up = output.caught_up if output.results else frozenset(sources)
    for source in caught_up:
        frontiers[source] = max(output.planned_at_ms, frontiers.get(source, output.planned_at_ms))
    horizon = (min(frontiers[s] for s in sources) - partitioning.lateness_ms
               if sources and all(s in frontiers for s in sources) else None)
    if before.horizon_ms is not None and (horizon is None or horizon < before.horizon_ms):
        horizon = before.horizon_ms
    late = {p: counts for p, counts in written.items() if p in before.completed or _ends_by(partitioning, p,
                                                                                            before.horizon_ms)}
    opened = dict(before.open_partitions)
    for label in written:
        bounds = partitioning.bounds(label)
        if bounds is not None and label not in before.completed:
            opened[label] = bounds[1]
    completes = sorted((label for label, end in opened.items() if horizon is not None and end <= horizon),
                       key=lambda label: (opened[label], label))
    if not written and not completes and frontiers == before.frontiers and horizon == before.horizon_ms:
        return None
    return CompletenessStep(
        frontiers=frontiers, horizon_ms=horizon,
        open_partitions={label: end for label, end in opened.items() if label not in completes},
        completes=tuple(_bounds(config, partitioning, output.dataset_urn, label) for label in completes),
        late_records={p: records for p, (records, _) in sorted(late.items())},
        late_files={p: files for p, (_, files) in sorted(late.items())})


def _ends_by(partitioning: TimePartitioning, label: str, horizon: int | None) -> bool:
    """Whether a partition ends at or before a horizon (None: no horizon yet)."""
    bounds = partitioning.bounds(label)
    return horizon is not None and bounds is not None and bounds[1] <= horizon


def _bounds(config: JobConfig, partitioning: TimePartitioning, urn: str, label: str) -> PartitionBounds:
    """A partition the step completes, with its `_SUCCESS` marker in each branch's folder of it when the job asks."""
    start, end = partitioning.bounds(label) or (0, 0)
    markers: tuple[str, ...] = ()
    if partitioning.success_file:
        segments = [path_segment(urn), *(path_segment(p) for p in label.split("/") if p), SUCCESS_FILE]
        markers = tuple(urls.join(str(branch.publisher_final_dir), *segments) for branch in config.branches
                        if branch.publisher_final_dir is not None)
    return PartitionBounds(partition=label, start_ms=start, end_ms=end, markers=markers)
