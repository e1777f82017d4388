"""Batched commit records: many datasets' commit events in one record of the log, and back.

A run commits thousands of datasets, each with a plan, a completion and its effects (about six events a dataset).
Written one record each, the records themselves cost more than the work they describe. `pack` turns a batch of
events about to be appended into fewer records: consecutive plans (`CommitSequencePlanned` in one part) into one
`CommitSequencesPlanned`, and consecutive completions (a sequence's `WatermarkAdvanced`s, `DatasetStateCommitted`,
verified `CommitStepApplied`s, `CommitSequenceCompleted` and `DatasetPublished`, in that order) into one
`CommitSequencesCompleted`. `unpack` gives back the very events, each under its own key and id, with the batch's
`emitted_at`: every reader (folds, verify, audit, subscriptions) sees the same events whichever shape was written.

A sequence that completes in the usual shape records its completion directly as a batch of one (`lone_completion`),
without building the events it stands for: `pack` joins it to its neighbours' batch, or appends its events when it
stays alone.

A batch holds sequences of one job and run whose datasets lie in one partition of the log, so each dataset's events
stay totally ordered; within a partition, packing never moves an event past another.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, TypeVar

from pydantic import Field

from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepSpec,
    DatasetStateStep,
    quick_size,
)
from events.dataset import DatasetStateCommitted, WatermarkAdvanced
from events.keys import key_of, partition_for
from events.model import Count, Event, Frozen, Name, SequenceFields
from events.published import DatasetPublished, PublishedFile, WatermarkRange

E = TypeVar("E", bound=Event)

BATCH_BYTES = 128 * 1024
"""The most a batch's entries may weigh (estimated from above): half the codec's limit on a record."""


class SequencePlan(Frozen):
    """One dataset's planned sequence in a batch: a `CommitSequencePlanned` in one part."""

    dataset_urn: Name
    sequence_id: Name
    steps: tuple[CommitStepSpec, ...]


class StepFoundDone(Frozen):
    """A step the completing attempt found done by verify(): a `CommitStepApplied`, outcome `verified`."""

    step_index: Count
    duration_ms: float = 0.0


class StateCommitted(Frozen):
    """A `DatasetStateCommitted`'s payload."""

    watermarks: dict[str, int]
    records_published: Count = 0
    files_published: Count = 0
    properties: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, state: DatasetStateStep | DatasetStateCommitted) -> StateCommitted:
        """The state a planned DatasetState step commits, or a DatasetStateCommitted recorded."""
        return cls.trusted(watermarks=state.watermarks, records_published=state.records_published,
                           files_published=state.files_published, properties=state.properties)


class Published(Frozen):
    """A `DatasetPublished`'s payload (one part)."""

    files: tuple[PublishedFile, ...] = ()
    watermarks: tuple[WatermarkRange, ...] = ()
    files_published: Count = 0
    records_published: Count = 0
    bytes_published: Count = 0


class SequenceEnd(Frozen):
    """One dataset's completed sequence in a batch: its watermark moves, state, steps found done, completion and what
    it published, in the order a sequence records them."""

    dataset_urn: Name
    sequence_id: Name
    advanced: tuple[WatermarkRange, ...] = ()
    """Each `WatermarkAdvanced` (partition, low_watermark, value as high_watermark)."""
    state: StateCommitted | None = None
    found_done: tuple[StepFoundDone, ...] = ()
    duration_ms: float = 0.0
    steps_applied: Count | None = None
    executed: Count = 0
    verified: Count = 0
    step_ms: tuple[float, ...] = ()
    published: Published | None = None


class CommitSequencesPlanned(Event):
    """The plans of many datasets' sequences of one run, in one record (see the module's docstring).

    v2: its plans' steps are CommitSequencePlanned's of version 5 (a TableCommit step may belong to its run's group).
    """

    SCHEMA_VERSION: ClassVar[int] = 2

    sequences: tuple[SequencePlan, ...]
    members: str
    """A digest of the members' keys: with the first member's key, the batch's identity."""

    @property
    def key(self) -> str:
        return _batch_key(self.job, self.sequences, "PLANNED", self.members)

    @property
    def aggregate(self) -> str:
        return _batch_aggregate(self, self.sequences)


class CommitSequencesCompleted(Event):
    """The completions of many datasets' sequences of one run, with their effects, in one record."""

    sequences: tuple[SequenceEnd, ...]
    members: str
    """A digest of the members' keys: with the first member's key, the batch's identity."""

    @property
    def key(self) -> str:
        return _batch_key(self.job, self.sequences, "COMPLETED", self.members)

    @property
    def aggregate(self) -> str:
        return _batch_aggregate(self, self.sequences)


BATCH_TYPES = (CommitSequencesPlanned, CommitSequencesCompleted)


def _batch_key(job: str, sequences: Sequence[SequencePlan | SequenceEnd], what: str, members: str) -> str:
    """batch/<job>/<first dataset>/<first sequence>/<what>/<members>: the first member and the digest of all."""
    first = sequences[0] if sequences else None
    return key_of("batch", job, first.dataset_urn if first else "-", first.sequence_id if first else "-", what,
                  members)


def _batch_aggregate(batch: Event, sequences: Sequence[SequencePlan | SequenceEnd]) -> str:
    """The first member's dataset: every member's lies in its partition."""
    return sequences[0].dataset_urn if sequences else batch.job


def lone_completion(sequence: SequenceFields, end: SequenceEnd) -> CommitSequencesCompleted:
    """One sequence's completion as a batch of one (see the module's docstring), for `pack` to place; its `members`
    digest is left empty, as `pack` never appends such a batch as it is."""
    return CommitSequencesCompleted.trusted(job=sequence["job"], run_id=sequence["run_id"], sequences=(end,),
                                            members="")


def stands_for(event: Event) -> int:
    """How many events a record stands for (`len(unpack(event))`), without building them."""
    if isinstance(event, CommitSequencesPlanned):
        return len(event.sequences)
    if isinstance(event, CommitSequencesCompleted):
        return sum([len(end.advanced) + len(end.found_done) + (end.state is not None) + (end.published is not None) + 1
                    for end in event.sequences])
    return 1


def end_keys(job: str, end: SequenceEnd) -> list[str]:
    """The keys of the events a completion stands for (`ended_members`), without building them."""
    prefix = ("commit", job, end.dataset_urn, end.sequence_id)
    keys = [key_of(*prefix, "watermark", moved.partition) for moved in end.advanced]
    if end.state is not None:
        keys.append(key_of(*prefix, "DATASET_STATE"))
    keys += [key_of(*prefix, "step", found.step_index, "APPLIED") for found in end.found_done]
    keys.append(key_of(*prefix, "COMPLETED"))
    if end.published is not None:
        keys.append(key_of(*prefix, "PUBLISHED"))
    return keys


def unpack(event: Event) -> tuple[Event, ...]:
    """The events a record stands for: a batch's members, in order; any other event itself."""
    if isinstance(event, CommitSequencesPlanned):
        return tuple(planned_member(event, plan) for plan in event.sequences)
    if isinstance(event, CommitSequencesCompleted):
        return tuple(member for end in event.sequences for member in ended_members(event, end))
    return (event,)


def planned_member(batch: CommitSequencesPlanned, plan: SequencePlan) -> CommitSequencePlanned:
    """The `CommitSequencePlanned` a plan of a batch stands for."""
    return CommitSequencePlanned.trusted(job=batch.job, run_id=batch.run_id, emitted_at=batch.emitted_at,
                                         dataset_urn=plan.dataset_urn, sequence_id=plan.sequence_id, steps=plan.steps)


def ended_members(batch: CommitSequencesCompleted, end: SequenceEnd) -> Iterable[Event]:
    """The events a completion of a batch stands for, in the order its sequence recorded them."""
    fields = {"job": batch.job, "run_id": batch.run_id, "emitted_at": batch.emitted_at,
              "dataset_urn": end.dataset_urn, "sequence_id": end.sequence_id}
    for moved in end.advanced:
        yield WatermarkAdvanced.trusted(**fields, partition=moved.partition, low_watermark=moved.low_watermark,
                                        value=moved.high_watermark)
    if end.state is not None:
        yield DatasetStateCommitted.trusted(**fields, **vars(end.state))
    for found in end.found_done:
        yield CommitStepApplied.trusted(**fields, step_index=found.step_index, outcome="verified",
                                        duration_ms=found.duration_ms)
    yield CommitSequenceCompleted.trusted(**fields, duration_ms=end.duration_ms, steps_applied=end.steps_applied,
                                          executed=end.executed, verified=end.verified, step_ms=end.step_ms)
    if end.published is not None:
        yield DatasetPublished.trusted(**fields, **vars(end.published))


def pack(events: Sequence[Event], partitions: int, budget: int = BATCH_BYTES) -> list[Event]:
    """`events` (already in parts) as records: runs of plans and of completions packed into batches per partition of
    the log, everything else as it is. unpack() of the result gives back `events` (emitted_at aside), each
    partition's in the same order."""
    packer = _Packer(partitions, budget)
    index = 0
    while index < len(events):
        index = packer.take(events, index)
    return packer.close_all()


@dataclass
class _Open:
    """A batch being filled: its kind, run, entries and the events they stand for."""

    kind: type[Event]
    job: str
    run_id: str
    emitted_at: datetime
    entries: list[SequencePlan | SequenceEnd] = field(default_factory=list)
    originals: list[Event] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    size: int = 0


class _Packer:
    """Fills one open batch per partition; an event it cannot pack closes its partition's batch first."""

    def __init__(self, partitions: int, budget: int) -> None:
        self.partitions = partitions
        self.budget = budget
        self.open: dict[int, _Open] = {}
        self.out: list[Event] = []

    def take(self, events: Sequence[Event], index: int) -> int:
        """Place the event at `index` (and the rest of its completion); the index of the next event."""
        event = events[index]
        if isinstance(event, CommitSequencePlanned) and event.parts == 1:
            plan = SequencePlan.trusted(dataset_urn=event.dataset_urn, sequence_id=event.sequence_id,
                                        steps=event.steps)
            self._add(CommitSequencesPlanned, event, plan, [event], [event.key])
            return index + 1
        if isinstance(event, CommitSequencesCompleted) and len(event.sequences) == 1:
            end = event.sequences[0]
            self._add(CommitSequencesCompleted, event, end, [event], end_keys(event.job, end))
            return index + 1
        ended = _completion(events, index)
        if ended is not None:
            entry, members = ended
            self._add(CommitSequencesCompleted, members[-1], entry, members, [member.key for member in members])
            return index + len(members)
        partition = partition_for(event.aggregate, self.partitions)
        self._close(partition)
        self.out.append(event)
        return index + 1

    def _add(self, kind: type[Event], event: Event, entry: SequencePlan | SequenceEnd, originals: list[Event],
             keys: list[str]) -> None:
        """Add an entry to its partition's batch: `originals` the records it comes from (appended as they are, unpacked,
        if it stays alone), `keys` those of the events it stands for."""
        partition = partition_for(event.aggregate, self.partitions)
        size = entry_size(entry)
        batch = self.open.get(partition)
        if batch is not None and (batch.kind is not kind or batch.job != event.job or batch.run_id != event.run_id
                                  or batch.size + size > self.budget):
            self._close(partition)
            batch = None
        if batch is None:
            batch = self.open[partition] = _Open(kind, event.job, event.run_id, originals[0].emitted_at)
        batch.entries.append(entry)
        batch.originals += originals
        batch.keys += keys
        batch.size += size

    def _close(self, partition: int) -> None:
        batch = self.open.pop(partition, None)
        if batch is None:
            return
        if len(batch.entries) == 1:  # one sequence: its own records, as without batches
            self.out += [record for original in batch.originals for record in unpack(original)]
            return
        digest = hashlib.sha256("\n".join(batch.keys).encode("utf-8")).hexdigest()[:16]
        self.out.append(batch.kind.trusted(job=batch.job, run_id=batch.run_id, emitted_at=batch.emitted_at,
                                           sequences=tuple(batch.entries), members=digest))

    def close_all(self) -> list[Event]:
        for partition in sorted(self.open):
            self._close(partition)
        return self.out


def _completion(events: Sequence[Event], index: int) -> tuple[SequenceEnd, list[Event]] | None:
    """The completion that starts at `index` as an entry and its events, if it has the shape a sequence records
    (WatermarkAdvanced*, DatasetStateCommitted?, verified CommitStepApplied*, CommitSequenceCompleted, DatasetPublished
    in one part?) and every event is of one sequence; else None."""
    first = events[index]
    if not isinstance(first, (WatermarkAdvanced, DatasetStateCommitted, CommitStepApplied, CommitSequenceCompleted)):
        return None
    identity = _identity(first)
    members: list[Event] = []

    def take(kind: type[E]) -> E | None:
        """The next event, if it is of `kind` and of the same sequence (then it is a member)."""
        position = index + len(members)
        candidate = events[position] if position < len(events) else None
        if not isinstance(candidate, kind) or type(candidate) is not kind or _identity(candidate) != identity:
            return None
        members.append(candidate)
        return candidate

    advanced = []
    while (moved := take(WatermarkAdvanced)) is not None:
        advanced.append(WatermarkRange.trusted(partition=moved.partition, low_watermark=moved.low_watermark,
                                               high_watermark=moved.value))
    committed = take(DatasetStateCommitted)
    state = None if committed is None else StateCommitted.of(committed)
    found = []
    while (applied := take(CommitStepApplied)) is not None:
        if applied.outcome != "verified":
            return None
        found.append(StepFoundDone.trusted(step_index=applied.step_index, duration_ms=applied.duration_ms))
    completed = take(CommitSequenceCompleted)
    if completed is None:
        return None
    whole = take(DatasetPublished)
    published = None
    if whole is not None:
        if whole.parts > 1:
            members.pop()  # a DatasetPublished in parts stays as it is, after the batch
        else:
            published = Published.trusted(files=whole.files, watermarks=whole.watermarks,
                                          files_published=whole.files_published,
                                          records_published=whole.records_published,
                                          bytes_published=whole.bytes_published)
    entry = SequenceEnd.trusted(
        dataset_urn=completed.dataset_urn, sequence_id=completed.sequence_id, advanced=tuple(advanced), state=state,
        found_done=tuple(found), duration_ms=completed.duration_ms, steps_applied=completed.steps_applied,
        executed=completed.executed, verified=completed.verified, step_ms=completed.step_ms, published=published)
    return entry, members


def entry_size(entry: SequencePlan | SequenceEnd) -> int:
    """approx_size of an entry, bounded from above, its bulk (steps, published files) added up field by field."""
    size = len(entry.dataset_urn) + len(entry.sequence_id) + 8
    if isinstance(entry, SequencePlan):
        return size + sum([quick_size(step) for step in entry.steps])
    size += 120 + sum(len(moved.partition) + 32 for moved in entry.advanced)
    size += _state_size(entry.state) + 12 * (len(entry.found_done) + len(entry.step_ms))
    if entry.published is not None:
        size += 64 + sum(len(f.path) + len(f.checksum) + len(f.partition) + 40 for f in entry.published.files)
        size += sum(len(w.partition) + 32 for w in entry.published.watermarks)
    return size


def _state_size(state: StateCommitted | None) -> int:
    """`approx_size` of an entry's state, added up as that walk would: its watermarks a name and a number each, its
    properties two texts each, three numbers, the record."""
    if state is None:
        return 10
    return (25 + sum([len(partition) + 12 for partition in state.watermarks])
            + sum([len(name) + len(value) + 4 for name, value in state.properties.items()]))


def _identity(event: Event) -> tuple[str, str, str | None, str | None]:
    return (event.job, event.run_id, getattr(event, "dataset_urn", None), getattr(event, "sequence_id", None))

