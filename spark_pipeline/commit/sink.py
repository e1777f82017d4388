"""The event sink: appends events through one writer and folds them into a state, so the writer reads its own writes.

Concurrent emits (datasets committing in parallel) share one transaction: a group commit. Each emit is still
atomic on its own (its events are all in, or none), and returns only once its events are committed. Fence checks
(before each rename) join the same queue: an append that succeeds after a check was asked answers it, so checks
waiting together cost one probe of the writer at most; and a probe or append that found the writer not fenced
answers the checks of the next few milliseconds (`FENCE_FRESH_S`), so datasets committed one after another do not
cost a probe each either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from events.batch import pack
from events.log import LogWriter
from events.model import Event
from projections.state import State
from spark_pipeline.jobfile.config import DEFAULT_FENCE_FRESH_MS

MAX_GROUP_EVENTS = 20_000
CHECK_GATHER_S = 0.001
"""How long a fence check waits for others to share its probe (sequences commit in parallel, each checking before
its rename: one probe per check would cost a store round trip per dataset)."""
CHECK_GATHER_MAX = 64
"""Checks that, waiting together, are probed at once without waiting longer."""
FRESH_USES_MAX = 1024
"""The most checks a probe answers after it ended (within `fresh_s`)."""
FENCE_FRESH_S = DEFAULT_FENCE_FRESH_MS / 1000
"""How long after it began a probe (or append) that found the writer not fenced answers later checks. A rename already
past its check can finish after a newer writer took over anyway (the newer run's recovery verifies what it moved by
size and checksum), so a check answered 200 ms early allows nothing new; a writer paused longer (SIGSTOP, a long GC)
probes again before its next rename."""


@dataclass
class _Request:
    events: Sequence[Event]
    gather: bool = False
    """A fence check asked among other committing threads: it may wait a moment for theirs, to share a probe."""
    done: Future[None] = field(default_factory=Future)


class EventSink:
    """Appends event batches atomically, folding each into `state` once it is committed.

    No thread of its own: the first emitter to find none committing leads, committing groups of what is queued until
    its own request is in; the others wait for their outcome (or to lead next)."""

    def __init__(self, writer: LogWriter, state: State, pack: bool = True, fresh_s: float = FENCE_FRESH_S) -> None:
        self.writer = writer
        self.fresh_s = fresh_s
        """How long a probe or append that found the writer not fenced answers later checks."""
        self.pack = pack
        """Whether runs of commit events are appended as batched records (events.batch.pack)."""
        self.state = state
        self.state_lock = threading.Lock()
        self._queue: list[_Request] = []
        self._cv = threading.Condition()
        self._closed = False
        self._leading = False
        self._fresh_since: float | None = None
        """When the last probe or append that found the writer not fenced began (time.monotonic)."""
        self._fresh_uses = 0

    def emit(self, events: Sequence[Event]) -> None:
        """Append `events` as one atomic batch (possibly sharing a transaction with concurrent emits)."""
        if events:
            self._submit(_Request([part for event in events for part in event.in_parts()]))

    def _submit(self, request: _Request) -> None:
        """Queue a request and wait for its outcome, committing the queue's groups meanwhile if no one else does."""
        with self._cv:
            if self._closed:
                raise RuntimeError("the event sink is closed")
            self._queue.append(request)
            self._cv.notify_all()  # a leader gathering fence checks hears of this one
            while self._leading and not request.done.done():
                self._cv.wait()
            lead = not request.done.done()
            if lead:
                self._leading = True
        if lead:
            try:
                self._lead(request)
            finally:
                with self._cv:
                    self._leading = False
                    self._cv.notify_all()
        request.done.result()

    def _lead(self, own: _Request) -> None:
        """Commit groups from the head of the queue until `own` is committed (it is queued, and no one else takes)."""
        while not own.done.done():
            with self._cv:
                self._gather_checks()
                group = self._take_group()
            self._commit(group)
            with self._cv:
                self._cv.notify_all()  # the group's other members have their outcome

    def _gather_checks(self) -> None:
        """When only fence checks wait, give the other committing threads a moment to queue theirs (each is answered
        by a probe that begins after it was asked, so they can share one); an append ends the wait at once."""
        deadline = time.monotonic() + CHECK_GATHER_S
        while (not self._closed and len(self._queue) < CHECK_GATHER_MAX
               and any(request.gather for request in self._queue)
               and not any(request.events for request in self._queue)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._cv.wait(remaining)

    def _take_group(self) -> list[_Request]:
        group: list[_Request] = []
        size = 0
        while self._queue and (not group or size + len(self._queue[0].events) <= MAX_GROUP_EVENTS):
            request = self._queue.pop(0)
            group.append(request)
            size += len(request.events)
        return group

    def check_fenced(self, among_others: bool = False) -> None:
        """Return once the writer was found not fenced after this call began, or at most `fresh_s` before it by a
        probe that has answered fewer than FRESH_USES_MAX checks (FencedError if it was fenced). `among_others`:
        other threads are committing too, so the check may wait a moment to share their probe (alone, it would only
        wait)."""
        with self._cv:
            since = self._fresh_since
            if (since is not None and time.monotonic() - since <= self.fresh_s
                    and self._fresh_uses < FRESH_USES_MAX):
                self._fresh_uses += 1
                return
        self._submit(_Request((), gather=among_others))

    def lease(self, uses: int) -> float:
        """`uses` fence checks answered at once, for moves made elsewhere (another process): the time
        (`time.monotonic`) until which they may be made. A probe is made first unless the last one answers them all
        for half its window still (so that the moves have time to be made; FencedError if the writer was fenced)."""
        if not 0 < uses <= FRESH_USES_MAX:
            raise ValueError(f"a lease answers 1 to {FRESH_USES_MAX} checks, not {uses}")
        for probed in (False, True):
            with self._cv:
                since = self._fresh_since
                if (since is not None and time.monotonic() - since <= self.fresh_s / 2
                        and self._fresh_uses + uses <= FRESH_USES_MAX):
                    self._fresh_uses += uses
                    return since + self.fresh_s
            if not probed:
                self._submit(_Request(()))
        return time.monotonic() - 1.0  # fresh_s is too short for a probe to answer anything after it: nothing moves

    def _commit(self, group: list[_Request]) -> None:
        events = [event for request in group for event in request.events]
        records = pack(events, self.writer.partitions) if self.pack else events
        started = time.monotonic()
        try:
            if records:
                self.writer.append(records)
            else:
                self.writer.check_fenced()
        except BaseException as e:  # every member sees the failure (whether its events are in is unknown)
            self._fresh(None)
            for request in group:
                request.done.set_exception(e)
            return
        try:
            with self.state_lock:  # what a reader of the log will fold: a batch's members carry its emitted_at
                for record in records:
                    self.state.apply_event(record)
        except BaseException as e:  # committed, but not folded: no member may go on from this state
            for request in group:
                request.done.set_exception(e)
            return
        self._fresh(started)
        for request in group:
            request.done.set_result(None)

    def _fresh(self, since: float | None) -> None:
        """Note when the last probe or append that passed began (None: the last one failed)."""
        with self._cv:
            self._fresh_since, self._fresh_uses = since, 0

    def close(self) -> None:
        """Let the emits under way finish, then refuse new ones; the writer stays open (its owner closes it)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            while self._leading or self._queue:
                self._cv.wait()
