"""`oncelog verify`: the invariants of exactly-once publishing, checked over the whole history of a log.

- every planned sequence is completed, abandoned or pending — and only a completed one has all its steps applied;
  an abandoned one keeps no file published (its applied renames were rolled back); a pending one was not followed
  by a later sequence of its dataset (its end is gone: found by the fold every command uses, `State.ends_missing`);
- a run recorded committed (`JobRunCommitted`) planned no sequence that is not completed, but those it lists abandoned;
- every watermark move and every dataset state committed is the one its sequence planned (same partition, low
  watermark and value; same watermarks and counts): a damaged or forged transition is named by its offset;
- a completed sequence moved every watermark it planned, and committed the state it planned;
- watermarks never go backwards per partition, and each advance starts where the committed watermark stood (no
  range lost, none published twice); a pending sequence still starts where the committed watermark stands. The
  committed watermark is the state's own fold's (`oncelog state`, planning): verify and `state` never tell two;
- no source range is published twice;
- every published file belongs to a completed sequence (and, given the publish directory, every file in it does);
- given the publish directory, every file published under it is there with the size its sequence recorded, and with a
  content check (`ContentCheck`) the SHA-256 it recorded too (`replay.content`);
- any event key identifies one payload, forever: a record's key is its event's key, and two records with one key
  hold the same event (their emitted_at aside);
- every record decodes, and every run or sequence event belongs to a run or sequence that exists;
- every Iceberg table a TableCommit step names holds exactly one snapshot per completed table commit, in its current
  history, adding the sequence's files; no snapshot of ours without its sequence, no data file added twice, no source
  offset in two snapshots (`replay.tables`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from events.batch import BATCH_TYPES, unpack
from events.codec import EventCodec
from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    CommitStepRolledBack,
    CompletenessStep,
    DatasetStateStep,
    DeltaCommitStep,
    FsRenameStep,
    HighWatermarkStep,
    TableCommitStep,
)
from events.completeness import PartitionCompleted
from events.dataset import DatasetStateCommitted, WatermarkAdvanced
from events.errors import EventDecodeError
from events.job import JobRunCommitted
from events.log import EventLog, StoredRecord
from events.model import Event, LoggedEvent, Position
from filesystems import urls
from filesystems.base import FileSystem
from filesystems.router import FileSystems
from projections.state import State, missing_end
from replay.content import UNSHOWN, ContentCheck, ContentProgress, FilesChecked, PublishedFile, check_files
from replay.tables import CatalogProperties, SequenceStatus, TableCommitPlanned, check_tables, no_properties

Progress = Callable[[int], None]
E = TypeVar("E", WatermarkAdvanced, DatasetStateCommitted)


@dataclass(frozen=True)
class Violation:
    """A broken invariant, and where in the log it shows."""

    kind: str
    message: str
    position: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" + (f" (at {self.position})" if self.position else "")


@dataclass(frozen=True, slots=True)
class _Found(Generic[E]):
    """A state transition as read from the log, and where it lies."""

    event: E
    where: str


@dataclass(frozen=True, slots=True)
class _Mark:
    """A committed watermark as the state's fold (`oncelog state`, planning) holds it, and the event that set it."""

    value: int
    low: int
    """Where the range published by that event started (the watermark before it)."""
    sequence_id: str
    where: str


@dataclass
class _Sequence:
    planned: CommitSequencePlanned
    at: str
    applied: set[int] = field(default_factory=set)
    rolled_back: set[int] = field(default_factory=set)
    """Applied steps of the abandoned sequence undone by `recover --release`."""
    completed: bool = False
    abandoned: bool = False
    advances: dict[str, _Found[WatermarkAdvanced]] = field(default_factory=dict)
    """The sequence's WatermarkAdvanced, by partition (the first read: a repeat is a no-op)."""
    state: _Found[DatasetStateCommitted] | None = None
    parts_folded: int = 1
    """Parts of a plan in parts read so far (in order): `planned` holds the steps of all of them."""

    def add_part(self, part: CommitSequencePlanned) -> None:
        """The next part of a plan in parts adds its steps (a repeat, or a part of another plan, changes nothing)."""
        if self.parts_folded == part.part < part.parts == self.planned.parts and not self.applied:
            self.planned = self.planned.model_copy(update={"steps": (*self.planned.steps, *part.steps)})
            self.parts_folded += 1

    def describe(self) -> str:
        return f"sequence {self.planned.sequence_id!r} of {self.planned.dataset_urn!r} ({self.planned.job})"


@dataclass(frozen=True, slots=True)
class _KeyReuse:
    """A key read again with other bytes than the first time: a violation unless only emitted_at differs."""

    key: bytes
    where: str
    content: str


@dataclass
class VerifyReport:
    """What verify found: violations (any makes it fail), pending sequences (not a violation), counts."""

    events: int = 0
    violations: list[Violation] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    sequences: int = 0
    published_files: int = 0
    files: FilesChecked | None = None
    """What the check of the files under the publish directory covered (None: no publish directory given)."""

    @property
    def ok(self) -> bool:
        return not self.violations


def content_of(event: Event) -> str:
    """What an event says, apart from when it was emitted: two records of one key must say the same."""
    return event.model_dump_json(exclude={"emitted_at"})


def where_of(topic: str, position: Position) -> str:
    """topic[partition]@offset, as every violation names a record."""
    return f"{topic}[{position.partition}]@{position.offset}"


class _Checker:
    """Folds the log once, keeping what the invariants need."""

    def __init__(self, codec: EventCodec) -> None:
        self.codec = codec
        self.state = State()
        self.sequences: dict[tuple[str, str, str], _Sequence] = {}
        self.marks: dict[tuple[str, str, str], _Mark] = {}
        """Per (job, dataset, partition): the committed watermark, read from the state's own fold, so that verify
        and `state` never tell two watermarks (a WatermarkAdvanced, or a DatasetStateCommitted, sets it)."""
        self.seen_advances: set[str] = set()
        self.completions: dict[tuple[str, str, str], tuple[str, str]] = {}
        """Per (job, dataset, time partition): the sequence whose PartitionCompleted completed it, and where."""
        self.identities: dict[int, int] = {}
        """Per key (its hash): the hash of the value first stored under it. Small: one entry per key of the log."""
        self.reused: list[_KeyReuse] = []
        self.committed_runs: dict[tuple[str, str], tuple[set[str], str]] = {}
        """Per (job, run) recorded committed: the datasets its JobRunCommitted lists abandoned, and where it lies."""
        self.report = VerifyReport()

    def on_error(self, error: EventDecodeError) -> None:
        self.state.report(Position(error.partition, error.offset), "undecodable", str(error))

    def read(self, record: StoredRecord) -> None:
        """Check and fold one stored record (a tombstone forgets its key: compaction drops what came before)."""
        key_hash = hash(record.key)
        if record.value is None:
            self.identities.pop(key_hash, None)
            self.state.apply_tombstone(record.key, record)
            return
        try:
            event = self.codec.decode(record.value, record.topic, record.partition, record.offset, record.key)
        except EventDecodeError as e:
            self.on_error(e)
            return
        logged = LoggedEvent(record.topic, record.partition, record.offset, record.timestamp_ms, event)
        self.check_key(record, key_hash, logged)
        self.fold(logged)

    def check_key(self, record: StoredRecord, key_hash: int, logged: LoggedEvent) -> None:
        """The record's key is its event's key; a key read before with other bytes is kept for a closer look (a
        hash collision of two keys only costs that look)."""
        event = logged.event
        key = event.key
        if record.key != key.encode():
            self.violate("key-mismatch", f"the record's key {record.key.decode(errors='replace')!r} is not the key "
                         f"{key!r} of the {event.event_type()} it holds", where_of(logged.topic, logged.position))
        value_hash = hash(record.value)
        if self.identities.setdefault(key_hash, value_hash) != value_hash:
            self.reused.append(_KeyReuse(record.key, where_of(logged.topic, logged.position), content_of(event)))

    def fold(self, logged: LoggedEvent) -> None:
        if isinstance(logged.event, BATCH_TYPES):
            for index, member in enumerate(unpack(logged.event)):
                self.fold(dataclasses.replace(logged, event=member, member=index))
            return
        self.report.events += 1
        event = logged.event
        if isinstance(event, (WatermarkAdvanced, DatasetStateCommitted)):
            self._fold_committed(logged, event)
        else:
            self.state.apply(logged)
        if isinstance(event, PartitionCompleted):
            self._fold_completed(logged, event)
        if isinstance(event, JobRunCommitted):
            abandoned, _ = self.committed_runs.setdefault((event.job, event.run_id),
                                                          (set(), where_of(logged.topic, logged.position)))
            abandoned.update(event.datasets_abandoned)
        if not isinstance(event, (CommitSequencePlanned, CommitStepApplied, CommitStepRolledBack,
                                  CommitSequenceCompleted, CommitSequenceAbandoned, WatermarkAdvanced,
                                  DatasetStateCommitted)):
            return
        where = where_of(logged.topic, logged.position)
        if isinstance(event, CommitSequencePlanned):
            key = (event.job, event.dataset_urn, event.sequence_id)
            known = self.sequences.get(key)
            if known is None:
                if event.part == 0:
                    self.sequences[key] = _Sequence(event, where)
            elif event.parts > 1:
                known.add_part(event)
            elif not known.applied and len(event.steps) > len(known.planned.steps):
                known.planned = event  # CommitStepStore.put added a step
            return
        sequence = self.sequences.get((event.job, event.dataset_urn, event.sequence_id))
        if sequence is None:
            return  # reported by the fold as an unknown sequence
        if isinstance(event, CommitStepApplied):
            if event.step_index >= len(sequence.planned.steps):
                self.violate("step-out-of-range", f"step {event.step_index} applied, but {sequence.describe()} has "
                             f"{len(sequence.planned.steps)}", where)
            sequence.applied.add(event.step_index)
        elif isinstance(event, CommitSequenceCompleted):
            sequence.completed = True
            planned = len(sequence.planned.steps)
            if event.steps_applied is not None:  # v2: the completion says every step is done
                if event.steps_applied != planned:
                    self.violate("completed-early", f"{sequence.describe()} completed with {event.steps_applied} "
                                 f"steps applied of the {planned} planned", where)
                sequence.applied |= set(range(min(event.steps_applied, planned)))
                return
            missing = set(range(planned)) - sequence.applied
            if missing:
                self.violate("completed-early", f"{sequence.describe()} completed with steps {sorted(missing)} never "
                             f"applied", where)
        elif isinstance(event, CommitSequenceAbandoned):
            sequence.abandoned = True
        elif isinstance(event, CommitStepRolledBack):
            if sequence.abandoned and event.step_index in sequence.applied:
                sequence.rolled_back.add(event.step_index)
        elif isinstance(event, DatasetStateCommitted):
            if sequence.state is None:
                sequence.state = _Found(event, where)
        elif event.key not in self.seen_advances:
            self.seen_advances.add(event.key)
            sequence.advances.setdefault(event.partition, _Found(event, where))

    def _fold_completed(self, logged: LoggedEvent, event: PartitionCompleted) -> None:
        """A time partition is completed by one sequence only: another sequence completing it again is a violation."""
        where = where_of(logged.topic, logged.position)
        first = self.completions.setdefault((event.job, event.dataset_urn, event.partition), (event.sequence_id, where))
        if first[0] != event.sequence_id:
            self.violate("partition-completed-twice", f"time partition {event.partition} of {event.dataset_urn!r} "
                         f"(job {event.job!r}) completed by sequence {first[0]} at {first[1]} and again by sequence "
                         f"{event.sequence_id}", where)

    def _fold_committed(self, logged: LoggedEvent, event: WatermarkAdvanced | DatasetStateCommitted) -> None:
        """Fold a committed-state event through the state, a watermark move checked against the watermark the
        state held before it; keep where each watermark the state now holds was set."""
        dataset = (event.job, event.dataset_urn)
        before = self.state.datasets.get(dataset)
        where = where_of(logged.topic, logged.position)
        if isinstance(event, WatermarkAdvanced) and event.key not in self.seen_advances:
            mark = self.marks.get((event.job, event.dataset_urn, event.partition))
            if mark is not None:
                self._check_move(event, mark, where)
        self.state.apply(logged)
        after = self.state.datasets.get(dataset)
        if after is None or after is before:
            return
        old = before.watermarks if before is not None else {}
        for partition, value in after.watermarks.items():
            if old.get(partition) != value:
                low = event.low_watermark if isinstance(event, WatermarkAdvanced) else old.get(partition, value)
                self.marks[(event.job, event.dataset_urn, partition)] = _Mark(value, low, event.sequence_id, where)

    def _check_move(self, move: WatermarkAdvanced, mark: _Mark, where: str) -> None:
        """A move starts where the committed watermark stands: never backwards, no range twice, none skipped."""
        which = f"{move.dataset_urn} {move.partition} ({move.job}): {move.key} of sequence {move.sequence_id!r}"
        if move.value < mark.value:
            self.violate("watermark-backwards", f"{which} moves it from {mark.value} back to {move.value}", where)
        elif move.low_watermark < mark.value:
            self.violate("published-twice", f"{which} publishes [{move.low_watermark}, {move.value}), which overlaps "
                         f"[{mark.low}, {mark.value}) published by sequence {mark.sequence_id!r} at {mark.where}",
                         where)
        elif move.low_watermark > mark.value:
            self.violate("range-skipped", f"{which} starts at {move.low_watermark}, but the watermark stood at "
                         f"{mark.value} (set at {mark.where}): [{mark.value}, {move.low_watermark}) was never "
                         f"published", where)

    def _check_parts(self) -> None:
        """Every event appended in parts has all of them (they go in one atomic batch: a missing one is damage)."""
        for sequence in self.sequences.values():
            if sequence.parts_folded < sequence.planned.parts:
                self.violate("incomplete-plan", f"{sequence.describe()} has {sequence.parts_folded} of the "
                             f"{sequence.planned.parts} parts of its plan", sequence.at)
        for run in self.state.runs.values():
            if not run.complete:
                self.violate("incomplete-parts", f"run {run.run_id} of {run.job}: its WorkUnitsPlanned or "
                             f"JobRunCommitted lacks parts")
        for tasks in self.state.tasks.values():
            for task in tasks.values():
                for attempt in task.attempts:
                    if not attempt.complete:
                        self.violate("incomplete-parts", f"attempt {attempt.attempt} of task {task.task_id} of run "
                                     f"{task.run_id} ({task.job}): its TaskStarted or its ending lacks parts")

    def violate(self, kind: str, message: str, position: str = "") -> None:
        self.report.violations.append(Violation(kind, message, position))

    def finish(self, log: EventLog, publish_dir: str | None, fs: FileSystem, content: ContentCheck | None = None,
               content_progress: ContentProgress = UNSHOWN, tables: CatalogProperties = no_properties
               ) -> VerifyReport:
        for problem in self.state.problems:
            self.violate(problem.kind, problem.message, problem.where())
        if self.state.problem_count > len(self.state.problems):
            self.violate("more-problems", f"{self.state.problem_count - len(self.state.problems)} more not listed")
        self._check_parts()
        self._check_reused_keys(log)
        self._check_sequences()
        self._check_committed_runs()
        self._check_ends()
        for sequence in self.sequences.values():
            self._check_against_plan(sequence)
        self._check_pending_plans()
        published = self._published_files()
        self._check_tables(tables)
        if publish_dir is not None:
            self._check_publish_dir(publish_dir, published, fs, content, content_progress)
        self.report.sequences = len(self.sequences)
        self.report.published_files = len(published)
        return self.report

    def _check_reused_keys(self, log: EventLog) -> None:
        """Read again the first record of each key seen with other bytes: only its emitted_at may differ."""
        if not self.reused:
            return
        suspects = {r.key for r in self.reused}
        firsts: dict[bytes, tuple[str, str]] = {}
        for record in log.read_records():
            if record.key not in suspects or record.key in firsts or record.value is None:
                continue
            try:
                event = self.codec.decode(record.value, record.topic, record.partition, record.offset, record.key)
            except EventDecodeError:
                continue  # reported when it was first read
            firsts[record.key] = (where_of(record.topic, Position(record.partition, record.offset)), content_of(event))
            if len(firsts) == len(suspects):
                break
        for reuse in self.reused:
            at, first = firsts.get(reuse.key, ("", reuse.content))
            if first != reuse.content:
                self.violate("key-reused", f"key {reuse.key.decode(errors='replace')!r} holds another payload than "
                             f"the record first stored under it at {at}: first {first}, now {reuse.content}",
                             reuse.where)

    def _check_ends(self) -> None:
        """A sequence whose end is gone from the log, as every fold finds it (`State.ends_missing`: `run`, `state`,
        `serve` and `rebuild` refuse such a log), named where its plan lies."""
        for lost in self.state.ends_missing():
            found = self.sequences.get((lost.job, lost.dataset_urn, lost.sequence_id))
            self.violate("sequence-end-missing", missing_end(lost), found.at if found is not None else "")

    def _check_sequences(self) -> None:
        for (job, urn, sequence_id), s in self.sequences.items():
            if s.completed and s.abandoned:
                self.violate("completed-and-abandoned", f"sequence {sequence_id!r} of {urn!r} ({job}) is both", s.at)
            elif not s.completed and not s.abandoned:
                self.report.pending.append(f"{job} / {urn} / {sequence_id}")
            if s.abandoned and not s.completed:
                renamed = [i for i, step in enumerate(s.planned.steps)
                           if isinstance(step, FsRenameStep) and i in s.applied - s.rolled_back]
                if renamed:
                    self.violate("published-by-abandoned", f"sequence {sequence_id!r} of {urn!r} ({job}) was "
                                 f"abandoned after publishing the files of steps {renamed}, never rolled back", s.at)

    def _check_committed_runs(self) -> None:
        """A run recorded committed planned no sequence that did not complete (but those it lists abandoned): a run
        is committed only once every sequence it planned has."""
        for s in self.sequences.values():
            run = self.committed_runs.get((s.planned.job, s.planned.run_id))
            if run is None or s.completed or s.planned.dataset_urn in run[0]:
                continue
            self.violate("committed-run-unsettled", f"run {s.planned.run_id!r} of job {s.planned.job!r} is recorded "
                         f"committed (at {run[1]}), but {s.describe()}, which it planned, is "
                         f"{_status(s).value}", s.at)

    def _check_against_plan(self, s: _Sequence) -> None:
        """Each watermark move and state commit of a sequence is the one it planned; a completed one made them all."""
        planned = {step.partition: step for step in s.planned.steps if isinstance(step, HighWatermarkStep)}
        for partition, found in s.advances.items():
            move, step = found.event, planned.get(partition)
            if step is None:
                self.violate("watermark-unplanned", f"{move.key} moves {partition} from {move.low_watermark} to "
                             f"{move.value}, but {s.describe()} planned no HighWatermark step for {partition}",
                             found.where)
            elif (move.low_watermark, move.value) != (step.low_watermark, step.value):
                self.violate("watermark-differs-from-plan", f"{move.key} moves {partition} from {move.low_watermark} "
                             f"to {move.value}, but {s.describe()} planned {step.low_watermark} to {step.value} "
                             f"(plan at {s.at})", found.where)
        states = [step for step in s.planned.steps if isinstance(step, DatasetStateStep)]
        if s.state is not None:
            self._check_state(s, s.state, states)
        if not s.completed:
            return
        for partition, step in planned.items():
            if partition not in s.advances and step.value != step.low_watermark:
                self.violate("watermark-not-advanced", f"{s.describe()} completed, but no WatermarkAdvanced moved "
                             f"{partition} from {step.low_watermark} to {step.value} as planned", s.at)
        if states and s.state is None:
            self.violate("state-not-committed", f"{s.describe()} completed, but no DatasetStateCommitted recorded the "
                         f"state it planned", s.at)

    def _check_state(self, s: _Sequence, found: _Found[DatasetStateCommitted], states: list[DatasetStateStep]) -> None:
        committed = found.event
        said = _facts(committed)
        if not states:
            self.violate("state-unplanned", f"{committed.key} commits {_describe(said)}, but {s.describe()} planned "
                         f"no DatasetState step", found.where)
            return
        plans = [_facts(step) for step in states]
        if said not in plans:
            self.violate("state-differs-from-plan", f"{committed.key} commits {_describe(said)}, but {s.describe()} "
                         f"planned {' or '.join(_describe(p) for p in plans)} (plan at {s.at})", found.where)

    def _check_pending_plans(self) -> None:
        """A pending sequence's watermark steps not yet applied start where the committed watermark stands now."""
        for (job, urn, _), s in self.sequences.items():
            if s.completed or s.abandoned:
                continue
            for step in s.planned.steps:
                if not isinstance(step, HighWatermarkStep) or step.partition in s.advances:
                    continue
                mark = self.marks.get((job, urn, step.partition))
                if mark is not None and mark.value != step.low_watermark:
                    standing = mark.value
                    effect = "publish twice" if step.low_watermark < standing else "never publish"
                    low, high = sorted((step.low_watermark, standing))
                    self.violate("stale-plan", f"{s.describe()} plans {step.partition} from {step.low_watermark} to "
                                 f"{step.value}, but the committed watermark stands at {standing} (set at "
                                 f"{mark.where}): completing it would {effect} [{low}, {high})", s.at)

    def _published_files(self) -> dict[str, PublishedFile]:
        """Destination → what the completed sequence that published it recorded; a destination published twice is a
        violation."""
        published: dict[str, PublishedFile] = {}
        owners: dict[str, str] = {}
        for (job, urn, sequence_id), s in self.sequences.items():
            if not s.completed:
                continue
            for step in s.planned.steps:
                if isinstance(step, FsRenameStep):
                    owner = f"{job} / {urn} / {sequence_id}"
                    if step.dst in owners:
                        self.violate("file-published-twice", f"{step.dst} by {owners[step.dst]} and by {owner}")
                    owners[step.dst] = owner
                    published[step.dst] = PublishedFile(step.dst, step.size, step.checksum, s.describe(), s.at)
        return published

    def _check_tables(self, properties: CatalogProperties) -> None:
        """The Iceberg tables the log's TableCommit steps name hold each completed commit once (`replay.tables`)."""
        commits = [TableCommitPlanned(step, s.describe(), s.at, _status(s),
                                      tuple(f.dst for f in s.planned.steps if isinstance(f, FsRenameStep)))
                   for s in self.sequences.values() for step in s.planned.steps if isinstance(step, TableCommitStep)]
        if not commits:
            return
        for finding in check_tables(commits, {job for job, _, _ in self.sequences}, properties):
            self.violate(finding.kind, finding.message, finding.position)

    def _markers(self) -> dict[str, bool]:
        """The `_SUCCESS` markers of the time partitions sequences complete: whether their sequence completed (a
        pending one's may be there already, or not yet)."""
        return {marker: s.completed for s in self.sequences.values() if not (s.abandoned and s.rolled_back)
                for step in s.planned.steps if isinstance(step, CompletenessStep)
                for bounds in step.completes for marker in bounds.markers}

    def _moving(self) -> set[str]:
        """Destinations of sequences not settled yet: a file there belongs to a publication still under way."""
        return {step.dst for s in self.sequences.values() if not s.completed and not (s.abandoned and s.rolled_back)
                for step in s.planned.steps if isinstance(step, FsRenameStep)}

    def _table_metadata(self) -> set[str]:
        """The tables' own files the log's table steps name (no sequence's, never orphans): an Iceberg table's
        `metadata/` folder and its SQLite catalog file (with SQLite's journal files), a Delta table's `_delta_log/`."""
        found: set[str] = set()
        for s in self.sequences.values():
            for step in s.planned.steps:
                if isinstance(step, TableCommitStep):
                    found.add(urls.join(step.location, ICEBERG_METADATA))
                    if step.catalog_uri.startswith(SQLITE_URL):
                        catalog = step.catalog_uri.removeprefix(SQLITE_URL)
                        found.update(catalog + suffix for suffix in SQLITE_FILES)
                elif isinstance(step, DeltaCommitStep):
                    found.add(urls.join(step.location, DELTA_LOG))
        return found

    def _check_publish_dir(self, publish_dir: str, published: dict[str, PublishedFile], fs: FileSystem,
                           content: ContentCheck | None, content_progress: ContentProgress) -> None:
        """Every file under the folder was published by a completed sequence (or is being published), and every
        file a completed sequence published there is still there, of its recorded size (and content, if asked)."""
        root = urls.resolve_folder(publish_dir)
        on_disk = {_canonical(f.path): f for f in fs.list_files(root)}
        known = {_canonical(p): f for p, f in published.items()}
        moving = {_canonical(p) for p in self._moving()}
        markers = self._markers()
        for marker, completed in sorted(markers.items()):
            if completed and urls.is_within(marker, root) and _canonical(marker) not in on_disk:
                self.violate("success-marker-missing", f"{marker}: the _SUCCESS marker of a time partition recorded "
                             f"complete is not there")
        tables = [_canonical(folder) for folder in self._table_metadata()]
        orphans = on_disk.keys() - known.keys() - moving - {_canonical(m) for m in markers}
        for orphan in sorted(o for o in orphans if not any(urls.is_within(o, folder) for folder in tables)):
            self.violate("orphaned-file", f"{orphan} is in the publish directory but no completed sequence "
                         f"published it")
        expected = [PublishedFile(path, f.size, f.checksum, f.sequence, f.at) for path, f in known.items()
                    if urls.is_within(path, root)]
        findings, self.report.files = check_files(expected, on_disk, fs, content, content_progress)
        for finding in findings:
            self.violate(finding.problem.value, finding.message, finding.position)


ICEBERG_METADATA = "metadata"
"""An Iceberg table's folder of metadata files (its `metadata.json` versions, manifest lists and manifests)."""
DELTA_LOG = "_delta_log"
SQLITE_URL = "sqlite:///"
SQLITE_FILES = ("", "-journal", "-wal", "-shm")
"""A SQLite database's file and the files SQLite keeps beside it while it writes."""


def _status(sequence: _Sequence) -> SequenceStatus:
    if sequence.completed:
        return SequenceStatus.COMPLETED
    return SequenceStatus.ABANDONED if sequence.abandoned else SequenceStatus.PENDING


def _canonical(location: str) -> str:
    """A file location as compared: local paths with symlinks resolved, URLs normalized."""
    return urls.resolve_folder(location)


StateFacts = tuple[dict[str, int], int, int, dict[str, str]]


def _facts(state: DatasetStateCommitted | DatasetStateStep) -> StateFacts:
    """What a committed or planned dataset state says: watermarks, records and files published, properties."""
    return state.watermarks, state.records_published, state.files_published, state.properties


def _describe(facts: StateFacts) -> str:
    """A dataset state as a violation names it."""
    watermarks, records, files, properties = facts
    marks = ", ".join(f"{p}={v}" for p, v in sorted(watermarks.items()))
    extra = f", properties {dict(sorted(properties.items()))}" if properties else ""
    return f"watermarks {{{marks}}}, {records} records, {files} files{extra}"


def verify(log: EventLog, publish_dir: str | Path | None = None, progress: Progress | None = None,
           fs: FileSystem | None = None, content: ContentCheck | None = None,
           content_progress: ContentProgress = UNSHOWN, tables: CatalogProperties = no_properties) -> VerifyReport:
    """Check every invariant over the whole history of the log; given the publish directory, the files under it (their
    sizes, and with `content` their SHA-256); `tables`: how the Iceberg tables' warehouses are reached (none: local
    disk)."""
    checker = _Checker(log.codec)
    for count, record in enumerate(log.read_records(), start=1):
        checker.read(record)
        if progress is not None and count % 10_000 == 0:
            progress(count)
    folder = str(publish_dir) if publish_dir is not None else None
    return checker.finish(log, folder, fs or FileSystems.of({}), content, content_progress, tables)
