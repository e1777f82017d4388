"""The envelope every event shares, and the two scopes an event can have: a job's run, or a dataset."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, ClassVar, TypedDict

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from events.keys import event_id_for, key_of

Name = Annotated[str, StringConstraints(min_length=1, max_length=1024)]
"""A job name, run id, task id, dataset URN or partition: non-empty."""

Count = Annotated[int, Field(ge=0)]


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC (what every event's emitted_at holds)."""
    return datetime.now(timezone.utc)


class Frozen(BaseModel):
    """An immutable value; unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Event(Frozen):
    """One transition. Its key is its identity: re-emitting it after a crash yields the same key and id."""

    SCHEMA_VERSION: ClassVar[int] = 1

    job: Name
    run_id: Name
    emitted_at: datetime = Field(default_factory=utc_now)

    @classmethod
    def event_type(cls) -> str:
        """The name the log records for this type."""
        return cls.__name__

    @property
    def key(self) -> str:
        """The transition's identity; distinct transitions have distinct keys."""
        raise NotImplementedError

    @property
    def aggregate(self) -> str:
        """The aggregate whose events are totally ordered: the partition is chosen by it."""
        raise NotImplementedError

    @property
    def urn(self) -> str | None:
        """The dataset URN for dataset-scoped events, None otherwise."""
        return None

    @property
    def event_id(self) -> uuid.UUID:
        """uuid5 of the key: the id a downstream consumer deduplicates on."""
        return event_id_for(self.key)


class RunEvent(Event):
    """An event of a job's run (job, lock and task transitions): partitioned by job name."""

    @property
    def aggregate(self) -> str:
        return self.job

    def run_key(self, *rest: str | int) -> str:
        """run/<job>/<run_id>/<rest...>"""
        return key_of("run", self.job, self.run_id, *rest)


class DatasetEvent(Event):
    """An event of one dataset's commit sequence or state: partitioned by dataset URN."""

    dataset_urn: Name
    sequence_id: Name

    @property
    def aggregate(self) -> str:
        return self.dataset_urn

    @property
    def urn(self) -> str | None:
        return self.dataset_urn

    def commit_key(self, *rest: str | int) -> str:
        """commit/<job>/<urn>/<sequence_id>/<rest...>"""
        return key_of("commit", self.job, self.dataset_urn, self.sequence_id, *rest)


class RunFields(TypedDict):
    """The fields naming a run, as keyword arguments of its events."""

    job: str
    run_id: str


class TaskFields(RunFields):
    """The fields naming a task of a run."""

    task_id: str


class SequenceFields(RunFields):
    """The fields naming a commit sequence of a dataset."""

    dataset_urn: str
    sequence_id: str


@dataclass(frozen=True, slots=True)
class Position:
    """Where a record lies in the log."""

    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event as read back from the log, with where it lies and when the log stored it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    event: Event

    @property
    def position(self) -> Position:
        return Position(self.partition, self.offset)
