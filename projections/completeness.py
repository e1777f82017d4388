"""Partition completeness as a pure fold: (Completeness, event) -> Completeness, one value per dataset.

The horizon only moves forward, a partition once complete stays complete, and late records only add up; the fold is
called once per event of a sequence not yet completed (the state drops late duplicates before it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from events.completeness import EventTimeAdvanced, PartitionCompleted


@dataclass(frozen=True, slots=True)
class Completeness:
    """A dataset's event time: how far each source partition has been published, its complete horizon (every time
    partition ending at or before it is complete), the partitions published and still open, those completed, and
    the late records published into complete partitions."""

    frontiers: dict[str, int] = field(default_factory=dict)
    horizon_ms: int | None = None
    open_partitions: dict[str, int] = field(default_factory=dict)
    completed: frozenset[str] = frozenset()
    late_records: dict[str, int] = field(default_factory=dict)
    late_files: dict[str, int] = field(default_factory=dict)
    last_sequence_id: str | None = None
    """The last sequence whose EventTimeAdvanced is folded: what the Completeness step's verify() asks."""

    @property
    def late_total(self) -> int:
        return sum(self.late_records.values())


def advance(current: Completeness | None, event: PartitionCompleted | EventTimeAdvanced) -> Completeness:
    """The dataset's completeness after one event."""
    view = current or Completeness()
    if isinstance(event, PartitionCompleted):
        opened = {p: end for p, end in view.open_partitions.items() if p != event.partition}
        return Completeness(view.frontiers, _later(view.horizon_ms, event.horizon_ms), opened,
                            view.completed | {event.partition}, view.late_records, view.late_files,
                            view.last_sequence_id)
    frontiers = dict(view.frontiers)
    for partition, millis in event.frontiers.items():
        frontiers[partition] = max(millis, frontiers.get(partition, millis))
    opened = {p: end for p, end in {**view.open_partitions, **event.open_partitions}.items()
              if p not in view.completed}
    return Completeness(frontiers, _later(view.horizon_ms, event.horizon_ms), opened, view.completed,
                        _added(view.late_records, event.late_records), _added(view.late_files, event.late_files),
                        event.sequence_id)


def _later(a: int | None, b: int | None) -> int | None:
    """The later of two horizons (None: none yet)."""
    if a is None:
        return b
    return a if b is None else max(a, b)


def _added(counts: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """Counts per partition, summed."""
    if not more:
        return counts
    summed = dict(counts)
    for partition, count in more.items():
        summed[partition] = summed.get(partition, 0) + count
    return summed
