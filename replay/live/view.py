"""The live view: one `State` kept current from the log by one fold thread, and whether it is current yet.

A fold thread starts from the latest snapshot (state + the offsets it covers), reads the tail through the project's
own `EventLog` reader (confluent-kafka batch reads, read_committed, the log URL's security settings included) up to
the end offsets seen at start — catching up — and then follows: every `poll_s` it reads up to the new end offsets.
The HTTP views (`server.py`) read the same `State` (the batch projector's, with its reducers) under a lock the fold
takes per chunk; until the fold has reached the end offsets seen at start, `require_current` refuses them.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from http import HTTPStatus
from itertools import islice
from typing import Any

from events.errors import EventDecodeError, OncelogError
from events.log import EventLog, Snapshot, StoredRecord
from events.model import Position
from projections.projector import Projector, fold_gc
from projections.snapshot_codec import encode_state
from projections.state import State
from projections.timefmt import when
from replay.live.documents import ViewError
from replay.live.settings import LiveSettings

logger = logging.getLogger(__name__)

FOLD_CHUNK = 2_000
"""Records folded per hold of the lock: views wait at most one chunk's fold (~40 ms)."""

Offsets = dict[int, int]


class Phase(StrEnum):
    """Where the view is: loading its snapshot, folding to the end seen at start, current, or stopped by an error."""

    STARTING = "starting"
    CATCHING_UP = "catching-up"
    OK = "ok"
    FAILED = "failed"


@dataclass(frozen=True)
class CatchUp:
    """How the view caught up: events folded to the end seen at start, in how long, from a snapshot or not."""

    events: int
    seconds: float
    cpu_seconds: float
    """This process's CPU time meanwhile (librdkafka's threads included): steadier than wall-clock on a busy host."""
    from_snapshot: bool

    @property
    def events_per_second(self) -> float:
        """Events folded per wall-clock second of the catch-up (0.0 if no time was measured)."""
        return self.events / self.seconds if self.seconds > 0 else 0.0


class LiveView:
    """The state of one log, folded by one thread and read by the HTTP views under `lock`."""

    def __init__(self, log: EventLog, settings: LiveSettings) -> None:
        self.log = log
        self.settings = settings
        self.projector = Projector(log)
        self.lock = threading.Lock()
        self.state = State(detail_runs=self.projector.detail_runs)
        self.phase = Phase.STARTING
        self.error: str | None = None
        self.target: Offsets = {}
        """The end offsets the current read goes to (at start: the end the view must reach to be current)."""
        self.read_from: Offsets = {}
        """Where the next read starts: past the folded records and past the transaction markers of ended reads."""
        self.folded = 0
        self.since_snapshot = 0
        self.last_event_ms: int | None = None
        self.catch_up_report: CatchUp | None = None
        self.from_snapshot = False
        self._started = time.perf_counter()
        self._started_cpu = time.process_time()

    def begin(self) -> None:
        """Note the end offsets to reach, then load the latest snapshot (unless told not to): catching up starts."""
        self._started, self._started_cpu = time.perf_counter(), time.process_time()
        target = self.log.end_offsets()
        with self.lock:
            self.target = target
        state = self.projector.load_snapshot() if self.settings.use_snapshot else None
        with self.lock:
            if state is not None:
                self.state, self.from_snapshot = state, True
            self.read_from = dict(self.state.offsets)
            self.phase = Phase.CATCHING_UP
        logger.info("catching up from %s: %d events to fold", "a snapshot" if state else "the start", self.lag())

    def catch_up(self, stop: threading.Event) -> CatchUp:
        """Fold up to the end offsets noted by `begin`; the view is then current and its views answer 200."""
        events = self.fold_to(self.target, stop)
        report = CatchUp(events, time.perf_counter() - self._started, time.process_time() - self._started_cpu,
                         self.from_snapshot)
        if stop.is_set():
            return report
        with self.lock:
            self.catch_up_report, self.phase = report, Phase.OK
        logger.info("caught up: %d events folded in %.1fs (%.0f events/s)", events, report.seconds,
                    report.events_per_second)
        return report

    def follow(self, stop: threading.Event) -> None:
        """Every poll_s, fold what was committed since; save a snapshot every snapshot_every events, and at the end."""
        self.save_snapshot_if_due()
        while not stop.wait(self.settings.poll_s):
            self.fold_to(self.log.end_offsets(), stop)
            self.save_snapshot_if_due()
        self.save_snapshot_if_due(stopping=True)

    def run(self, stop: threading.Event) -> None:
        """The fold thread: begin, catch up, follow until stopped; an error marks the view failed and stops it all."""
        try:
            self.begin()
            self.catch_up(stop)
            self.follow(stop)
        except Exception as e:  # a thread boundary: any failure must stop the server, never leave stale answers
            if isinstance(e, OncelogError):  # ours names the place (a missing record, a refused topic): no trace
                logger.error("the live view stopped folding: %s", e)
            else:
                logger.exception("the live view stopped folding: %s", e)
            with self.lock:
                self.phase, self.error = Phase.FAILED, str(e)
            stop.set()

    def fold_to(self, target: Offsets, stop: threading.Event) -> int:
        """Fold the committed records from `read_from` up to `target`, a chunk per hold of the lock."""
        start = self.read_from
        with self.lock:
            self.target = target
        if all(start.get(p, 0) >= end for p, end in target.items()):
            return 0  # nothing new: no consumer is opened
        folded = 0
        records = self.log.read_records(start=start, until=target)
        with fold_gc():
            try:
                while not stop.is_set() and (chunk := list(islice(records, FOLD_CHUNK))):
                    with self.lock:
                        folded += self._fold(chunk)
            finally:
                close = getattr(records, "close", None)
                if close is not None:
                    close()
        if not stop.is_set():
            with self.lock:
                self.state.check_ends()  # as every fold does: a sequence whose end is gone stops the view
                offsets = self.state.offsets
                self.read_from = {p: max(offsets.get(p, 0), start.get(p, 0), end) for p, end in target.items()}
        return folded

    def _fold(self, records: list[StoredRecord]) -> int:
        """Decode and fold records (lock held); an undecodable one is logged, reported in the state and skipped."""
        state, decode = self.state, self.log.codec.decode
        listed, folded = len(state.problems), 0
        for record in records:
            if record.value is None:
                state.apply_tombstone(record.key, record)  # a deletion by retention, honoured at once
                continue
            try:
                event = decode(record.value, record.topic, record.partition, record.offset, record.key)
            except EventDecodeError as error:
                logger.error("skipping a record: %s", error)
                state.report(Position(error.partition, error.offset), "undecodable", str(error))
                state.skip_to({error.partition: error.offset + 1})
                continue
            state.apply_at(event, record)
            folded += 1
        if records:
            self.last_event_ms = records[-1].timestamp_ms
        for problem in state.problems[listed:]:  # the first MAX_PROBLEMS are kept (and logged); all are counted
            if problem.kind != "undecodable":
                logger.warning("%s at %s: %s", problem.kind, problem.where(), problem.message)
        self.folded += folded
        self.since_snapshot += folded
        return folded

    def save_snapshot_if_due(self, stopping: bool = False) -> None:
        """Save the state as the log's latest snapshot once snapshot_every events were folded since the last (when
        stopping: if any was), so that a restart folds only what came after."""
        every = self.settings.snapshot_every
        if every <= 0 or self.since_snapshot < (1 if stopping else every):
            return
        with self.lock:
            snapshot = Snapshot(self.projector.snapshot_name, encode_state(self.state), dict(self.state.offsets),
                                int(time.time() * 1000))
            self.since_snapshot = 0
        self.log.save_snapshot(snapshot)
        logger.info("saved a snapshot at offsets %s (%d bytes)", snapshot.offsets, len(snapshot.data))

    def lag(self) -> int:
        """Offsets between the fold and the end it reads to, summed over partitions (transaction markers count)."""
        offsets, start = self.state.offsets, self.read_from
        return sum(max(0, end - max(offsets.get(p, 0), start.get(p, 0))) for p, end in self.target.items())

    def health(self) -> dict[str, Any]:
        """Phase, lag, last event time and where the fold stands (lock held)."""
        report = self.catch_up_report
        last = None if self.last_event_ms is None else datetime.fromtimestamp(self.last_event_ms / 1000, UTC)
        return {
            "status": self.phase.value, "lag": self.lag(), "last_event_at": when(last),
            "events_folded": self.folded, "problem_count": self.state.problem_count, "error": self.error,
            "offsets": {str(p): o for p, o in sorted(self.state.offsets.items())},
            "end_offsets": {str(p): o for p, o in sorted(self.target.items())},
            "catch_up": None if report is None else {
                "events": report.events, "seconds": round(report.seconds, 3),
                "cpu_seconds": round(report.cpu_seconds, 3),
                "events_per_second": round(report.events_per_second), "from_snapshot": report.from_snapshot,
            },
        }

    def require_current(self) -> None:
        """ViewError 503 (with the lag) unless the view has caught up: partial state is never an answer."""
        if self.phase is Phase.OK:
            return
        if self.phase is Phase.FAILED:
            raise ViewError(HTTPStatus.SERVICE_UNAVAILABLE, f"the live view stopped folding: {self.error}")
        raise ViewError(HTTPStatus.SERVICE_UNAVAILABLE,
                        f"{self.phase.value}: {self.lag()} offsets behind the end of the log seen at start; "
                        "answers would be partial, try again shortly")
