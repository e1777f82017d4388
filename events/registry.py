"""Every event type oncelog knows, by the name the log records."""

from __future__ import annotations

from events.batch import CommitSequencesCompleted, CommitSequencesPlanned
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
from events.job import (
    DatasetSkipped,
    JobLockAcquired,
    JobLockReleased,
    JobRunCancelled,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    JobRunSucceeded,
    WorkUnitsPlanned,
)
from events.model import Event
from events.published import DatasetPublished
from events.task import TaskFailed, TaskRetried, TaskStarted, TaskSucceeded

EVENT_TYPES: tuple[type[Event], ...] = (
    JobRunStarted,
    WorkUnitsPlanned,
    JobRunSucceeded,
    JobRunCommitted,
    JobRunFailed,
    JobRunCancelled,
    DatasetSkipped,
    JobLockAcquired,
    JobLockReleased,
    TaskStarted,
    TaskSucceeded,
    TaskFailed,
    TaskRetried,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepFailed,
    CommitStepRolledBack,
    CommitSequenceCompleted,
    CommitSequenceAbandoned,
    WatermarkAdvanced,
    DatasetStateCommitted,
    DatasetReleased,
    DatasetPublished,
    EventTimeAdvanced,
    PartitionCompleted,
    CommitSequencesPlanned,
    CommitSequencesCompleted,
)

EVENT_TYPES_BY_NAME: dict[str, type[Event]] = {t.event_type(): t for t in EVENT_TYPES}
