"""Reducers of the CommitStepStore (commit sequences) and of each dataset's committed state."""

from __future__ import annotations

from events.batch import CommitSequencesCompleted, SequenceEnd
from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    CommitStepRolledBack,
)
from events.completeness import EventTimeAdvanced, PartitionCompleted
from events.dataset import DatasetReleased, DatasetStateCommitted, WatermarkAdvanced
from events.model import DatasetEvent
from projections.completeness import advance
from projections.views import DatasetView, SequenceStatus, SequenceView, evolve


def reduce_sequence(view: SequenceView | None, event: DatasetEvent) -> SequenceView | None:
    """The next state of a commit sequence; once completed or abandoned, nothing changes it."""
    if isinstance(event, CommitSequencePlanned):
        if event.parts > 1:
            return _plan_part(view, event)
        if view is None:
            return SequenceView(
                event.job, event.dataset_urn, event.sequence_id, event.run_id, SequenceStatus.PLANNED,
                steps=event.steps, planned_at=event.emitted_at,
            )
        if not view.plan_complete:
            return view
        extends = event.steps[: len(view.steps)] == view.steps and len(event.steps) > len(view.steps)
        if view.pending and not view.applied and extends:  # CommitStepStore.put added a step
            return evolve(view, steps=event.steps)
        return view
    if isinstance(event, CommitStepRolledBack):
        if view is None or view.status != SequenceStatus.ABANDONED or event.step_index not in view.applied:
            return view
        return evolve(view, rolled_back=view.rolled_back | {event.step_index})
    if view is None or not view.pending:
        return view
    match event:
        case CommitStepApplied():
            return evolve(view, applied=view.applied | {event.step_index})
        case CommitStepFailed() if (event.step_index, event.attempt) not in view.failures:
            return evolve(view, failures=view.failures | {(event.step_index, event.attempt)}, last_error=event.error)
        case CommitSequenceCompleted():
            return evolve(view, status=SequenceStatus.COMPLETED, ended_at=event.emitted_at)
        case CommitSequenceAbandoned():
            return evolve(view, status=SequenceStatus.ABANDONED, ended_at=event.emitted_at, last_error=event.error)
    return view


def _plan_part(view: SequenceView | None, event: CommitSequencePlanned) -> SequenceView | None:
    """A part of a plan in parts: the first opens the sequence, each next one (in order, once) adds its steps."""
    if view is None:
        if event.part > 0:
            return None  # a later part without the first: nothing to add it to
        return SequenceView(
            event.job, event.dataset_urn, event.sequence_id, event.run_id, SequenceStatus.PLANNED,
            steps=event.steps, planned_at=event.emitted_at, plan_parts=event.parts, plan_parts_folded=1,
        )
    if not (view.pending and 0 < view.plan_parts_folded == event.part < event.parts == view.plan_parts):
        return view
    return evolve(view, steps=(*view.steps, *event.steps), plan_parts_folded=event.part + 1)


def reduce_dataset(view: DatasetView | None, event: DatasetEvent, sequence: SequenceView | None) -> DatasetView:
    """The next committed state of a dataset; `sequence` is the event's sequence before the event.

    Events of a sequence that is already over (a late duplicate) change nothing; watermarks never go backwards.
    """
    view = view or DatasetView(event.job, event.dataset_urn)
    if isinstance(event, DatasetReleased):
        released = view.blocked_by == event.sequence_id
        return evolve(view, blocked_by=None, blocked_error=None) if released else view
    if sequence is not None and not sequence.pending:
        return view
    match event:
        case WatermarkAdvanced():
            if view.watermarks.get(event.partition, event.value - 1) >= event.value:
                return view
            return evolve(view, watermarks={**view.watermarks, event.partition: event.value})
        case DatasetStateCommitted() if view.last_sequence_id != event.sequence_id:
            merged = dict(view.watermarks)
            for partition, value in event.watermarks.items():
                merged[partition] = max(value, merged.get(partition, value))
            return evolve(
                view,
                watermarks=merged,
                last_sequence_id=event.sequence_id,
                last_run_id=event.run_id,
                committed_at=event.emitted_at,
                records_published=view.records_published + event.records_published,
                files_published=view.files_published + event.files_published,
                properties=event.properties,
            )
        case CommitSequenceAbandoned():
            return evolve(view, blocked_by=event.sequence_id, blocked_error=event.error)
        case PartitionCompleted() | EventTimeAdvanced():
            return evolve(view, completeness=advance(view.completeness, event))
    return view


def committed(view: DatasetView | None, batch: CommitSequencesCompleted, end: SequenceEnd) -> DatasetView:
    """A dataset's committed state after a completion of a batch whose sequence is pending: what `reduce_dataset`
    makes of its `WatermarkAdvanced`s and `DatasetStateCommitted` one after another, in one copy of the view."""
    view = view or DatasetView(batch.job, end.dataset_urn)
    watermarks = view.watermarks
    for moved in end.advanced:
        if watermarks.get(moved.partition, moved.high_watermark - 1) < moved.high_watermark:
            if watermarks is view.watermarks:
                watermarks = dict(watermarks)
            watermarks[moved.partition] = moved.high_watermark
    state = end.state
    if state is None or view.last_sequence_id == end.sequence_id:
        return view if watermarks is view.watermarks else evolve(view, watermarks=watermarks)
    merged = dict(watermarks) if watermarks is view.watermarks else watermarks  # copied once, not again
    for partition, value in state.watermarks.items():
        merged[partition] = max(value, merged.get(partition, value))
    return evolve(view, watermarks=merged, last_sequence_id=end.sequence_id, last_run_id=batch.run_id,
                  committed_at=batch.emitted_at, records_published=view.records_published + state.records_published,
                  files_published=view.files_published + state.files_published, properties=state.properties)
