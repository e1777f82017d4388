"""CommitSequence: apply one dataset's planned steps in order, idempotently; the Committer runs many in parallel.

Each step is verified (already done?) or else executed; their effects (watermarks, dataset state) are recorded in
one atomic batch with CommitSequenceCompleted. A step executed now is not recorded one by one (the completion says
it); a step found done (a recovery) gets a CommitStepApplied `verified`. One done before a crash and not recorded is
found done by verify() on recovery. A failure is recorded, with a CommitStepApplied for each step applied before it
(what a rollback must undo); after `max_attempts` failures the sequence is abandoned for its dataset alone, and the
error recorded.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Literal, TypedDict

from events.batch import Published, SequenceEnd, StateCommitted, StepFoundDone, lone_completion, stands_for
from events.commit import (
    STEP_TIMINGS_MAX,
    TABLE_STEPS,
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitStepApplied,
    CommitStepFailed,
    CommitStepRolledBack,
    CommitStepSpec,
    CompletenessStep,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.dataset import DatasetReleased
from events.model import MAX_PART_BYTES, Event
from events.published import WatermarkRange, lists_fit, published_event, published_fields, watermark_range
from filesystems import urls
from filesystems.base import FileSystem, FileSystemError, FolderMove
from filesystems.movers import NOT_TRIED, Moved, MoveOutcome
from projections.projector import fold_gc
from projections.views import SequenceView
from spark_pipeline.commit.ahead import FolderGroup, MovesAhead
from spark_pipeline.commit.faults import FaultPoint
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.sink import MAX_GROUP_EVENTS, EventSink
from spark_pipeline.commit.steps import (
    CommitStepError,
    FsRenameCommitStep,
    SequenceRef,
    UnsafeCommitStepError,
    UnsettledCommitStepError,
    step_for,
)
from spark_pipeline.commit.tables import TableMember, TableOutcome, commit_together, grouped

UNDOABLE = {"HighWatermark": "its watermarks moved", "DatasetState": "its watermarks moved",
            "TableCommit": "its files were committed to the table (a snapshot carries its id)",
            "DeltaCommit": "its files were committed to the table (its app transaction is in the table's log)",
            "Completeness": "its time partitions were recorded complete (never retracted)"}
"""What a step that took effect did, for the refusal to roll back a sequence that applied it."""
PARALLEL_SAMPLE = 64
"""The files whose mean size says whether a local commit's sequences go in parallel (Committer._in_parallel)."""
PARALLEL_MIN_FILE_BYTES = 1 << 20
"""From this mean file size on, a local commit's sequences go in parallel: each file's sha256 (GIL freed) outweighs
a thread's cost (a DataFrame job's 8 files of 12 MB: 35 ms of checks one after another)."""

Effect = Event | HighWatermarkStep | DatasetStateStep
"""What a step applied now took effect as: the events it recorded, or a watermark or state step itself (their events
are built only if the completion cannot be recorded as an entry of a batch: `CommitSequence._effect_events`)."""
Record = Callable[[Sequence[Event]], None]
"""Where a sequence records its events: the sink (at once), or a list the committer appends in one batch."""
Closing = Callable[[list["CommitResult"]], Sequence[Event]]
"""What a commit of many sequences records after them, in their last batch (one transaction fewer), given how each
ended: a run's JobRunCommitted when every one completed."""


class Ending(TypedDict):
    """How a sequence's commit ended, as its CommitSequenceCompleted (or its batch entry) says."""

    duration_ms: float
    steps_applied: int
    executed: int
    verified: int
    step_ms: tuple[float, ...]


class Outcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    """A step failed; the sequence stays pending and the next run (or `oncelog recover`) tries again."""
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class CommitResult:
    """How one sequence's commit ended."""

    job: str
    dataset_urn: str
    sequence_id: str
    outcome: Outcome
    error: str | None = None
    executed: int = 0
    verified: int = 0


@dataclass
class _Progress:
    """How far a sequence's commit got: kept across a pause at its table step."""

    next_index: int = 0
    started: float = field(default_factory=time.perf_counter)
    effects: list[Effect] = field(default_factory=list)
    """What the steps applied so far took effect as, in order (`Effect`)."""
    applied: list[tuple[int, Literal["executed", "verified"]]] = field(default_factory=list)
    """Each step applied (index, outcome): recorded only if a later step fails (and, for steps found done, with the
    completion), so its events are built only then (`applied_events`)."""
    counts: dict[str, int] = field(default_factory=lambda: {"executed": 0, "verified": 0})
    step_ms: dict[int, float] = field(default_factory=dict)


class CommitSequence:
    """The steps that publish one dataset's output of one run, and the loop that applies them."""

    def __init__(self, view: SequenceView, sink: EventSink, settings: CommitSettings, fs: FileSystem,
                 among_others: bool = False) -> None:
        self.view = view
        self.among_others = among_others
        """Whether other sequences commit in other threads meanwhile (fence checks may then share probes)."""
        self.sink = sink
        self.settings = settings
        self.fs = fs
        self.faults = settings.faults
        self.ref = SequenceRef(view.job, view.run_id, view.dataset_urn, view.sequence_id)
        self.renamed_into: set[str] = set()
        """Folders its renames changed: to be made durable before the renames are recorded."""
        self._progress = _Progress()
        self.waiting_at: int | None = None
        """The table step it paused at (`commit_or_wait`), for the committer to make with others'."""
        self.table_outcome: TableOutcome | None = None
        """That step's outcome, once the committer made it."""
        self._moved: set[int] = set()
        """Renames done by an earlier step's move of their whole folder (`_move_folder`)."""
        self._kept: set[str] = set()
        """Destination folders whose move was tried (made or not): their other renames go one by one."""
        self._roots_checked = False
        """Whether every step passed the roots' checks (`_check_roots`)."""
        self._ahead: tuple[FolderGroup, MoveOutcome] | None = None
        """Its first step's folder move made by another process, and what became of it (`moved_ahead`)."""

    @property
    def dataset_urn(self) -> str:
        return self.view.dataset_urn

    def commit(self, record: Record | None = None) -> CommitResult:
        """Apply every step not yet applied, in order, then record them with the completion in one batch.

        A step done but not yet recorded when the process dies is found done by verify() on recovery. A failure
        is recorded with the steps applied before it; `record` (default: the sink) receives every batch.
        """
        result = self._advance(record or self.record_now, pause=False)
        if result is None:
            raise RuntimeError(f"sequence {self.view.sequence_id} paused though told not to")
        return result

    def commit_or_wait(self, record: Record) -> CommitResult | None:
        """`commit`, but stop at a table step made together with other sequences' (None; `waiting_at` says where):
        the committer makes it for them all, gives this sequence its `table_outcome`, then calls `commit` to go on."""
        return self._advance(record, pause=True)

    def _advance(self, record: Record, pause: bool) -> CommitResult | None:
        """Apply the steps from where the last call stopped (see `commit`, `commit_or_wait`)."""
        progress = self._progress
        fields = self.ref.fields()
        if self.waiting_at is None:
            try:
                self._check_roots()
            except UnsafeCommitStepError as e:
                record([CommitSequenceAbandoned(**fields, attempts=self.view.attempts_failed, error=str(e))])
                return self._result(Outcome.ABANDONED, str(e))
        for index in range(progress.next_index, len(self.view.steps)):
            spec = self.view.steps[index]
            if index in self.view.applied:
                continue
            together = self.table_outcome is not None and isinstance(spec, TABLE_STEPS)
            if pause and not together and grouped(spec):
                progress.next_index = index
                self.waiting_at = index
                return None
            if isinstance(spec, HighWatermarkStep):
                self.faults.reached(FaultPoint.BEFORE_WATERMARK)
            if isinstance(spec, TABLE_STEPS) and not together:
                self.faults.reached(FaultPoint.BEFORE_TABLE_COMMIT)
            step_started = time.perf_counter()
            together_ms = self.table_outcome.ms if together and self.table_outcome is not None else 0.0
            try:
                done, effects = self._apply(index, spec)
            except (OSError, FileSystemError, CommitStepError) as e:
                # never given up once it may have taken effect, or a step that cannot be undone has: a release
                # would have to roll back what it cannot
                abandon = not isinstance(e, UnsettledCommitStepError) and not self._took_effect(progress.applied)
                if abandon and self.view.attempts_failed + 1 >= self.settings.max_attempts:
                    abandon = not self._table_committed()
                error = f"step {index} ({spec.kind}): {e}"
                record([*self._effect_events(), *self._applied_events(), *self._failure(index, error, abandon)])
                return self._result(self._after_failure(abandon), error)
            outcome: Literal["executed", "verified"] = "verified" if done else "executed"
            progress.counts[outcome] += 1
            progress.effects += effects
            progress.step_ms[index] = (time.perf_counter() - step_started) * 1000 + (together_ms if together else 0)
            progress.applied.append((index, outcome))
            if isinstance(spec, FsRenameStep):
                if not done:
                    self.renamed_into.add(urls.parent(spec.dst))
                self.faults.reached(FaultPoint.AFTER_RENAME)
            elif isinstance(spec, HighWatermarkStep):
                self.faults.reached(FaultPoint.AFTER_WATERMARK)
            elif isinstance(spec, TABLE_STEPS) and not together:
                self.faults.reached(FaultPoint.AFTER_TABLE_COMMIT)
            elif isinstance(spec, CompletenessStep):
                self.faults.reached(FaultPoint.AFTER_COMPLETENESS)
        self.faults.reached(FaultPoint.BEFORE_COMPLETION)
        counts = progress.counts
        ending = Ending(duration_ms=(time.perf_counter() - progress.started) * 1000,
                        steps_applied=len(self.view.steps), executed=counts["executed"], verified=counts["verified"],
                        step_ms=step_timings(progress.step_ms, len(self.view.steps)))
        end = self._as_entry(ending) if self.sink.pack else None
        if end is not None:
            record([lone_completion(fields, end)])
        else:
            verified = self._applied_events("verified") if counts["verified"] else []
            record([*self._effect_events(), *verified, CommitSequenceCompleted.trusted(**fields, **ending),
                    published_event(fields, self.view.steps)])  # the sink parts it
        return self._result(Outcome.COMPLETED, executed=counts["executed"], verified=counts["verified"])

    def _as_entry(self, ending: Ending) -> SequenceEnd | None:
        """The completion as an entry of a batch, built without its events, if it has the usual shape: its effects a
        watermark step's each, then at most one state step's, and what it published in one part; else None."""
        advanced: list[WatermarkRange] = []
        state = None
        for effect in self._progress.effects:
            if isinstance(effect, HighWatermarkStep) and state is None:
                advanced.append(watermark_range(effect))
            elif isinstance(effect, DatasetStateStep) and state is None:
                state = StateCommitted.of(effect)
            else:
                return None
        published = published_fields(self.view.steps)
        if not lists_fit(published["files"], published["watermarks"], MAX_PART_BYTES):
            return None
        step_ms = self._progress.step_ms
        found = tuple([StepFoundDone.trusted(step_index=index, duration_ms=step_ms[index])
                       for index, outcome in self._progress.applied if outcome == "verified"])
        return SequenceEnd.trusted(dataset_urn=self.view.dataset_urn, sequence_id=self.view.sequence_id,
                                   advanced=tuple(advanced), state=state, found_done=found,
                                   published=Published.trusted(**published), **ending)

    def _effect_events(self) -> list[Event]:
        """The events of the effects so far, in order (a watermark or state step's built now)."""
        events: list[Event] = []
        for effect in self._progress.effects:
            if isinstance(effect, (HighWatermarkStep, DatasetStateStep)):
                events += step_for(effect, self.ref, self.sink.state, self.fs, self.view.steps).execute()
            else:
                events.append(effect)
        return events

    def _apply(self, index: int, spec: CommitStepSpec) -> tuple[bool, list[Effect]]:
        """Whether step `index` was found done, and its effect: the outcome of a table commit made for many
        (`table_outcome`), else its verify(), then (not done) its execute() (a watermark or state step's effect is
        the step itself: its execute() only builds its events)."""
        if self.table_outcome is not None and isinstance(spec, TABLE_STEPS):
            outcome, self.table_outcome = self.table_outcome, None
            return outcome.result(), []
        if index in self._moved or (isinstance(spec, FsRenameStep) and self._move_folder(index, spec)):
            return False, []
        step = step_for(spec, self.ref, self.sink.state, self.fs, self.view.steps)
        done = step.verify()
        if not done and isinstance(spec, (FsRenameStep, *TABLE_STEPS)):
            # a superseded writer must move or commit nothing (FencedError)
            self.sink.check_fenced(among_others=self.among_others)
        if done:
            return True, []
        return False, [spec] if isinstance(spec, (HighWatermarkStep, DatasetStateStep)) else list(step.execute())

    def first_move(self) -> FolderGroup | None:
        """The folder move its first step would make (`_move_folder`), if that step is a rename whose folder may move
        whole and every step passes the roots' checks (else the sequence is abandoned before any step): another
        process may make it meanwhile (`moved_ahead`)."""
        index = next((i for i in range(len(self.view.steps)) if i not in self.view.applied), None)
        if index is None or not isinstance(spec := self.view.steps[index], FsRenameStep):
            return None
        try:
            self._check_roots()
        except UnsafeCommitStepError:
            return None
        return self._folder_group(index, spec)

    def _check_roots(self) -> None:
        """UnsafeCommitStepError unless every step moves files only where the roots allow (checked once)."""
        if not self._roots_checked:
            for index, spec in enumerate(self.view.steps):
                self.settings.roots.check(index, spec)
            self._roots_checked = True

    def moved_ahead(self, group: FolderGroup, outcome: MoveOutcome) -> None:
        """What became of `group`'s move made by another process (`first_move`): its step takes it as its own."""
        self._ahead = (group, outcome)

    def _move_folder(self, index: int, spec: FsRenameStep) -> bool:
        """Apply this rename, and the sequence's others between the same two folders, by one move of the source folder:
        only where the destination folder does not exist yet and the source folder holds exactly those files, each
        with its recorded content (what each rename checks: the file system's `move_folder`). A first run then makes
        no folder to publish into (on some file systems a new folder costs more than the renames). The others are
        then applied as moved (`_moved`). A move made ahead by another process (`moved_ahead`) is taken as made here:
        one not known to be made or declined is made here (its checks find it done if it was)."""
        destination = urls.parent(spec.dst)
        if destination in self._kept:
            return False
        ahead, self._ahead = (self._ahead if self._ahead is not None and self._ahead[0].index == index else None), None
        group, outcome = ahead if ahead is not None else (self._folder_group(index, spec), NOT_TRIED)
        self._kept.add(destination)  # tried once: whatever the answer, the group's other renames go on their own
        if group is None:
            return False
        if outcome.error is not None:
            raise outcome.error
        if outcome.moved is Moved.UNKNOWN:
            if ahead is not None:
                self.renamed_into.add(destination)  # the other process may have moved it: durable before recorded
            moved = self.fs.move_folder(group.move, self._check_fenced)
        else:
            moved = outcome.moved is Moved.YES
        if moved:
            self._moved |= group.indices
        return moved

    def _folder_group(self, index: int, spec: FsRenameStep) -> FolderGroup | None:
        """The move of this rename's source folder to its destination folder with the sequence's other renames
        between them, if the store moves folders and the files keep their names (`_move_folder`)."""
        source, destination = urls.parent(spec.src), urls.parent(spec.dst)
        if (not self.fs.moves_folders(destination) or spec.src[len(source):] != spec.dst[len(destination):]
                or not self.settings.roots.hold_folders(source, destination)):
            return None
        group = {step.src: (i, step) for i, step in enumerate(self.view.steps)
                 if isinstance(step, FsRenameStep) and i >= index and i not in self.view.applied
                 and urls.parent(step.src) == source and urls.parent(step.dst) == destination
                 and step.src[len(source):] == step.dst[len(destination):]}
        move = FolderMove(source, destination, {src: (step.size, step.checksum) for src, (_, step) in group.items()})
        # anything else in the folder, a file changed, a destination that exists: each file its own rename and checks
        return FolderGroup(index, move, frozenset(i for i, _ in group.values()))

    def _check_fenced(self) -> None:
        """The check before a folder moves: a superseded writer must move nothing (FencedError)."""
        self.sink.check_fenced(among_others=self.among_others)

    def record_now(self, events: Sequence[Event]) -> None:
        """Record events through the sink, once the renames they record are durable."""
        self.fs.sync_folders(self.renamed_into)
        self.sink.emit(events)

    def _applied_events(self, only: Literal["executed", "verified"] | None = None) -> list[Event]:
        """A CommitStepApplied for each step this attempt applied (`only` those of one outcome)."""
        fields, step_ms = self.ref.fields(), self._progress.step_ms
        return [CommitStepApplied.trusted(**fields, step_index=index, outcome=outcome, duration_ms=step_ms[index])
                for index, outcome in self._progress.applied if only is None or outcome == only]

    def _took_effect(self, applied_now: list[tuple[int, Literal["executed", "verified"]]]) -> bool:
        """Whether a step that cannot be rolled back (UNDOABLE: a table commit, completeness, watermarks) is applied,
        before this attempt or by it."""
        indices = set(self.view.applied) | {index for index, _ in applied_now}
        return any(self.view.steps[i].kind in UNDOABLE for i in indices)

    def _table_committed(self) -> bool:
        """Whether a table commit of the sequence took effect though not recorded (made before a crash), or cannot
        tell: asked of the table only when the sequence would be given up."""
        for spec in self.view.steps:
            if isinstance(spec, TABLE_STEPS):
                try:
                    if step_for(spec, self.ref, self.sink.state, self.fs, self.view.steps).verify():
                        return True
                except (OSError, FileSystemError, CommitStepError):
                    return True
        return False

    def _failure(self, index: int, error: str, abandon: bool) -> list[Event]:
        """The events of a failed attempt: the failure, and the abandonment once attempts run out (never for a step
        that may have taken effect: `abandon` False)."""
        attempt = self.view.attempts_failed + 1
        events: list[Event] = [CommitStepFailed(**self.ref.fields(), step_index=index, attempt=attempt, error=error)]
        if abandon and attempt >= self.settings.max_attempts:
            events.append(CommitSequenceAbandoned(**self.ref.fields(), attempts=attempt, error=error))
        return events

    def _after_failure(self, abandon: bool) -> Outcome:
        abandoned = abandon and self.view.attempts_failed + 1 >= self.settings.max_attempts
        return Outcome.ABANDONED if abandoned else Outcome.FAILED

    def _result(self, outcome: Outcome, error: str | None = None, executed: int = 0, verified: int = 0) -> CommitResult:
        return CommitResult(self.view.job, self.view.dataset_urn, self.view.sequence_id, outcome, error, executed,
                            verified)


class Committer:
    """Commits sequences, datasets in parallel; shares one sink (one writer, group commits)."""

    def __init__(self, sink: EventSink, settings: CommitSettings, fs: FileSystem,
                 batch_events: int = MAX_GROUP_EVENTS) -> None:
        self.sink = sink
        self.settings = settings
        self.fs = fs
        self.batch_events = batch_events
        """The most events recorded in one batch (a sequence's events are never split, so it may hold more)."""

    def sequence(self, view: SequenceView, among_others: bool = False) -> CommitSequence:
        return CommitSequence(view, self.sink, self.settings, self.fs, among_others)

    def commit_all(self, views: list[SequenceView], done: Callable[[int], None] = lambda _: None,
                   closing: Closing = lambda _: ()) -> list[CommitResult]:
        """Commit every sequence (one dataset each): their steps in parallel, their records in batches of up to
        `batch_events` events as the sequences end, in the order given (each sequence's events in one batch, after
        its renames are durable). The sequences' table steps are made together, one commit per table, when every
        sequence has reached its own (`commit_tables`). Results in the order given; `done` hears how many sequences
        have ended so far; what `closing` makes of the results is recorded after them, in the last batch."""
        if len(views) <= 1:
            alone = [self.sequence(v).commit() for v in views]
            done(len(alone))
            if ending := closing(alone):
                self.sink.emit(ending)
            return alone
        workers = max(1, min(self.settings.parallelism, len(views))) if self._in_parallel(views) else 1
        with fold_gc.paused():  # what a commit allocates forms no cycles: no collections mid-way
            return self._commit_all(views, workers, done, closing)

    def _commit_all(self, views: list[SequenceView], workers: int, done: Callable[[int], None], closing: Closing
                    ) -> list[CommitResult]:
        # Each sequence and its events exist from its commit until they are recorded (a paused one: until it ends):
        # a hundred thousand datasets' sequences are not all held at once.
        sequences: dict[int, CommitSequence] = {}
        batches: dict[int, list[Event]] = {}
        ended = itertools.count(1)
        lock = threading.Lock()

        def sequence_at(index: int) -> CommitSequence:
            sequence = sequences.get(index)
            if sequence is None:
                sequence = sequences[index] = self.sequence(views[index], among_others=workers > 1)
            return sequence

        def commit(index: int, pause: bool) -> CommitResult | None:
            sequence = sequence_at(index)
            record = batches.setdefault(index, []).extend
            result = sequence.commit_or_wait(record) if pause else sequence.commit(record)
            if result is not None:
                with lock:
                    done(next(ended))
            return result

        results: dict[int, CommitResult] = {}
        records = _Records(self)
        with ExitStack() as pools:
            pool = (pools.enter_context(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="commit"))
                    if workers > 1 else None)
            ahead = (pools.enter_context(MovesAhead(self.fs, self.sink, sequence_at, len(views)))
                     if pool is None and self._moves_ahead(len(views)) else None)

            def in_order(indices: Sequence[int], pause: bool) -> Iterator[CommitResult | None]:
                """One worker: the sequences commit in this thread, in order, as that worker would (no thread to
                start); their folder moves made ahead by another process where `ahead`."""
                for index in indices:
                    if ahead is not None and pause:
                        ahead.before(index)
                    yield commit(index, pause)

            def run(indices: Sequence[int], pause: bool) -> list[int]:
                """Commit the sequences at `indices`, recording each as it ends; those paused at a table step."""
                ended_in_order: Iterable[CommitResult | None] = (
                    pool.map(commit, indices, itertools.repeat(pause)) if pool is not None
                    else in_order(indices, pause))
                paused = []
                for index, result in zip(indices, ended_in_order, strict=True):
                    if result is None:
                        paused.append(index)
                        continue
                    results[index] = result
                    records.add(batches.pop(index), sequences.pop(index).renamed_into)
                return paused

            waiting = run(range(len(views)), pause=True)
            if waiting:
                self.commit_tables([sequences[index] for index in waiting])
                run(waiting, pause=False)
            ended_all = [results[index] for index in range(len(views))]
            records.add(list(closing(ended_all)), set())
            records.flush()
        return ended_all

    def commit_tables(self, sequences: list[CommitSequence]) -> None:
        """Make the table steps the sequences wait at, one commit per table, and give each its outcome: their renames
        made durable first (a table must not name a file a crash could lose), the writer found not fenced."""
        folders = set().union(*(sequence.renamed_into for sequence in sequences))
        if folders:
            self.fs.sync_folders(folders)
        for sequence in sequences:
            sequence.renamed_into.clear()
        self.settings.faults.reached(FaultPoint.BEFORE_TABLE_COMMIT)
        self.sink.check_fenced()
        members = [TableMember.of(s.view, s.waiting_at) for s in sequences if s.waiting_at is not None]
        started = time.perf_counter()
        outcomes = commit_together(members, self.fs)
        ms = (time.perf_counter() - started) * 1000
        for sequence, outcome in zip(sequences, outcomes, strict=True):
            sequence.table_outcome = replace(outcome, ms=ms)
        self.settings.faults.reached(FaultPoint.AFTER_TABLE_COMMIT)

    def _moves_ahead(self, sequences: int) -> bool:
        """Whether sequences committed one after another have their folder moves made ahead by another process: enough
        of them to pay for its start, and a fence check that answers for a while (`EventSink.lease`)."""
        return sequences >= self.settings.moves_ahead_min and self.settings.fence_fresh_s > 0

    def _in_parallel(self, views: list[SequenceView]) -> bool:
        """Whether the sequences commit in parallel: where their file calls wait on round trips (asked of the first
        file published), or where their files are large (the first PARALLEL_SAMPLE's mean), each checked by its
        sha256 before it moves and hashing frees the GIL. Small local renames and checks go faster one after another
        under one GIL."""
        renames = list(itertools.islice((s for v in views for s in v.steps if isinstance(s, FsRenameStep)),
                                        PARALLEL_SAMPLE))
        if not renames or self.fs.round_trips(renames[0].dst):
            return True
        return sum(s.size for s in renames) >= PARALLEL_MIN_FILE_BYTES * len(renames)

    def release(self, job: str, dataset_urn: str, reason: str) -> str:
        """Free a dataset blocked by an abandoned sequence: first roll back what that sequence published (each file
        moved back to its source, recorded), then release it, so that the range it held is published once, later.
        Returns the sequence's id."""
        dataset = self.sink.state.datasets.get((job, dataset_urn))
        if dataset is None or dataset.blocked_by is None:
            raise CommitStepError(f"dataset {dataset_urn!r} of job {job!r} is not blocked: nothing to release")
        blocked = self.sink.state.sequences[(job, dataset_urn, dataset.blocked_by)]
        # By then a fenced writer's every check fails: none can publish again what this moves back.
        time.sleep(self.settings.fence_fresh_s)
        self._roll_back(blocked)
        self.sink.emit([DatasetReleased(job=job, run_id=blocked.run_id, dataset_urn=dataset_urn,
                                        sequence_id=blocked.sequence_id, reason=reason)])
        return blocked.sequence_id

    def _roll_back(self, sequence: SequenceView) -> None:
        """Undo what an abandoned sequence published, last step first, each undone rename recorded: the steps recorded
        as applied, and any other rename found done by content (one done just before a crash is not recorded, and
        the verify that would have found it may then have failed until the sequence was abandoned)."""
        ref = SequenceRef(sequence.job, sequence.run_id, sequence.dataset_urn, sequence.sequence_id)
        for index in reversed(range(len(sequence.steps))):
            spec, recorded = sequence.steps[index], index in sequence.applied
            if index in sequence.rolled_back:
                continue
            if isinstance(spec, TABLE_STEPS) and not recorded and step_for(spec, ref, self.sink.state, self.fs,
                                                                                sequence.steps).verify():
                recorded = True  # committed to the table before a crash: its files are the table's now
            if not isinstance(spec, FsRenameStep):
                if recorded:
                    raise CommitStepError(
                        f"sequence {sequence.sequence_id} of {sequence.dataset_urn!r} applied step {index} "
                        f"({spec.kind}) before it was abandoned: {UNDOABLE.get(spec.kind, 'it took effect')}, it "
                        f"cannot be rolled back; run `oncelog verify`")
                continue
            moved = FsRenameCommitStep(spec, self.fs).roll_back(recorded)
            if moved or recorded:
                self.sink.emit([CommitStepRolledBack(**ref.fields(), step_index=index,
                                                     outcome="moved_back" if moved else "already_back")])

    def recover(self, job: str) -> list[CommitResult]:
        """Finish every planned-but-incomplete sequence of a job (what a run does before extracting anything)."""
        return self.commit_all(self.sink.state.pending_sequences(job))


class _Records:
    """The ended sequences' events, appended in batches of up to the committer's `batch_events`, each batch after the
    renames it records are durable (one call: the local file system syncs each folder, or each file system holding
    many at once)."""

    def __init__(self, committer: Committer) -> None:
        self.committer = committer
        self.events: list[Event] = []
        self.standing_for = 0
        """How many events `events` stand for (a completion recorded as an entry stands for several)."""
        self.folders: set[str] = set()

    def add(self, events: list[Event], folders: set[str]) -> None:
        """One sequence's events, never split from each other."""
        count = sum([stands_for(event) for event in events])
        if self.events and self.standing_for + count > self.committer.batch_events:
            self.flush()
        self.events += events
        self.standing_for += count
        self.folders |= folders

    def flush(self) -> None:
        if self.folders:
            self.committer.fs.sync_folders(self.folders)
        if self.events:
            self.committer.sink.emit(self.events)
        self.events, self.standing_for, self.folders = [], 0, set()


def step_timings(step_ms: dict[int, float], steps: int) -> tuple[float, ...]:
    """Each step's milliseconds by plan index, for the completion event (none for a plan too long to carry them)."""
    if steps > STEP_TIMINGS_MAX:
        return ()
    return tuple(round(step_ms.get(index, 0.0), 3) for index in range(steps))
