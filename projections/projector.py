"""The projector: folds a log into a `State`, from the latest snapshot (state + the offsets it covers) or the start.

A rebuild costs the tail since the snapshot, not the whole history. A record that cannot be decoded is reported
with its position and skipped (or, with stop_on_error, stops the fold); what was folded before it stays.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from events.codec import EventView
from events.errors import EventDecodeError, OncelogError
from events.log import EventLog, Snapshot
from events.model import Position
from projections.snapshot_codec import SnapshotFormatError, decode_state, encode_state
from projections.state import DETAIL_RUNS, NOT_FOLDED, State

DEFAULT_SNAPSHOT = "state"
PROGRESS_EVERY = 10_000
FOLD_YOUNG_COLLECTION_EVERY = 100_000
"""While folding, the young generation is collected after this many allocations, not CPython's 700 (see fold_gc)."""

NOT_FOLDED_NAMES = frozenset(t.event_type().encode("ascii") for t in NOT_FOLDED)
"""The names of the event types whose records the fold only views (`EventCodec.decode_unless`)."""

Progress = Callable[[int], None]
"""Called with the number of events folded so far, every PROGRESS_EVERY events and at the end."""


class ProjectionStopped(OncelogError):
    """The fold stopped at a record it could not use (stop_on_error); the state holds everything before it."""

    def __init__(self, state: State, error: EventDecodeError) -> None:
        self.state = state
        self.error = error
        super().__init__(f"the fold stopped: {error}")


@dataclass(frozen=True)
class FoldReport:
    """What a fold did: how many events, how long, and whether it started from a snapshot."""

    events: int
    seconds: float
    from_snapshot: bool
    snapshot_offsets: dict[int, int] | None

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


class Projector:
    """Builds and keeps up the state of one log."""

    def __init__(
        self,
        log: EventLog,
        snapshot_name: str = DEFAULT_SNAPSHOT,
        stop_on_error: bool = False,
        detail_runs: int = DETAIL_RUNS,
    ) -> None:
        self.log = log
        self.snapshot_name = snapshot_name
        self.stop_on_error = stop_on_error
        self.detail_runs = detail_runs

    def load_snapshot(self, until: Mapping[int, int] | None = None) -> State | None:
        """The latest snapshot's state, if there is one this code reads (and, with until, none past it)."""
        snapshot = self.log.load_snapshot(self.snapshot_name)
        if snapshot is None:
            return None
        if until is not None and any(o > until.get(p, 0) for p, o in snapshot.offsets.items()):
            return None
        try:
            state = decode_state(snapshot.data)
        except SnapshotFormatError:
            return None
        return state if state.detail_runs == self.detail_runs else None

    def rebuild(
        self, use_snapshot: bool = True, until: Mapping[int, int] | None = None, progress: Progress | None = None
    ) -> tuple[State, FoldReport]:
        """The state from the snapshot (when asked and usable) plus the tail, or from the start."""
        started = time.perf_counter()
        state = self.load_snapshot(until) if use_snapshot else None
        from_snapshot = state is not None
        snapshot_offsets = dict(state.offsets) if state is not None else None
        if state is None:
            state = State(detail_runs=self.detail_runs)
        folded = self.catch_up(state, until, progress)
        return state, FoldReport(folded, time.perf_counter() - started, from_snapshot, snapshot_offsets)

    def catch_up(self, state: State, until: Mapping[int, int] | None = None, progress: Progress | None = None) -> int:
        """Fold everything after the state's offsets (up to until); returns how many events were folded.
        DamagedHistoryError if a commit sequence's end is gone from what was folded (`State.check_ends`).

        Records are decoded and folded here, as `EventLog.read` would hand them over (tombstones skipped, a bad
        record to the error handling) but without a `LoggedEvent` for each: the record says where the event lies.
        """
        decode, apply_at = self.log.codec.decode_unless, state.apply_at
        folded = 0
        with fold_gc():
            for record in self.log.read_records(start=state.offsets, until=until):
                if record.value is None:
                    state.apply_tombstone(record.key, record)  # a deletion by `oncelog gc`, honoured at once
                    continue
                try:
                    event = decode(record.value, record.topic, record.partition, record.offset, record.key,
                                   NOT_FOLDED_NAMES)
                except EventDecodeError as error:
                    self._undecodable(state, error)
                    continue
                if isinstance(event, EventView):  # a type the fold does nothing with: checked, not built
                    state.skip_to({record.partition: record.offset + 1})
                else:
                    apply_at(event, record)
                folded += 1
                if progress is not None and folded % PROGRESS_EVERY == 0:
                    progress(folded)
        if progress is not None:
            progress(folded)
        state.check_ends()  # a sequence's lost end shows only once the fold is over (a later plan of its dataset)
        return folded

    def _undecodable(self, state: State, error: EventDecodeError) -> None:
        """Stop at a record that cannot be decoded (stop_on_error), or report it and fold on past it."""
        if self.stop_on_error:
            raise ProjectionStopped(state, error)
        state.report(Position(error.partition, error.offset), "undecodable", str(error))
        state.skip_to({error.partition: error.offset + 1})

    def save_snapshot(self, state: State) -> Snapshot:
        """Store the state as this log's latest snapshot."""
        snapshot = Snapshot(self.snapshot_name, encode_state(state), dict(state.offsets), int(time.time() * 1000))
        self.log.save_snapshot(snapshot)
        return snapshot


class _SpacedCollections:
    """Young collections spaced out while any fold (or a job's run: its plans and commits, kept in its state as a fold
    keeps its views) runs, and none at all while a commit runs (`paused`); CPython's own settings back when the last
    one ends.

    What a fold allocates is either freed by reference counting within a few events (records, decoded events, the
    views a newer one replaces) or kept in the state, and none of it forms cycles: collections find nothing to
    free. With CPython's thresholds, a 1M-event replay ran ~3,000 young, ~270 middle and 25 full collections (the
    full ones walking the whole state): 3.5 s of its 21 s of CPU; with young collections every 100k allocations,
    2 collections, 0.14 s. Cycles are still collected, only later. The thresholds are process-wide, hence the count
    of folds running (threads may fold at once).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._saved = gc.get_threshold()
        self._pausing = 0
        self._was_enabled = gc.isenabled()

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._running == 0:
                self._saved = gc.get_threshold()
                gc.set_threshold(FOLD_YOUNG_COLLECTION_EVERY, *self._saved[1:])
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    gc.set_threshold(*self._saved)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No collections at all while a commit runs: young ones too cost it ~6 % (1.25 of 21 s at 100,000 datasets,
        each one walking the views and records just made, all kept or freed by reference counting). Whatever cycles
        it leaves are collected once the last pause ends; collections come back as they were."""
        with self._lock:
            if self._pausing == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._pausing += 1
        try:
            yield
        finally:
            with self._lock:
                self._pausing -= 1
                if self._pausing == 0 and self._was_enabled:
                    gc.enable()


fold_gc = _SpacedCollections()
