"""A run's OpenLineage events, sent as it goes: START once its work units are planned, its end once it has ended.

Both are made from the run's own events, read back from the log (from where the log ended when the run began), by
the pure conversion in replay.lineage. Lineage never fails a run: an endpoint that cannot be reached is said once
(a warning in the run's summary and in Python logging), and what follows is still tried.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from openlineage.client.event_v2 import RunEvent

from events.errors import EventDecodeError, OncelogError
from events.log import EventLog, Offsets
from events.model import Event
from projections.views import Phase
from replay.lineage import end_event, start_event
from replay.lineage_client import LineageClient, LineageError
from spark_pipeline.progress import RunObserver

log = logging.getLogger(__name__)
START_PHASE = Phase.TASKS
"""The phase at whose beginning START is sent: the run's work units are planned (its inputs are known)."""


def ignore(error: EventDecodeError) -> None:
    """Records of other runs that cannot be read are no concern of lineage (the run's own fold is strict)."""


class RunLineage:
    """Sends one run's START and end events through a client (None: lineage is off)."""

    def __init__(self, client: LineageClient | None, job: str, run_id: str) -> None:
        self.client = client
        self.job = job
        self.run_id = run_id
        self.warnings: list[str] = []
        self._log: EventLog | None = None
        self._start: Offsets = {}
        self._started_sent = False

    def observing(self, inner: RunObserver) -> RunObserver:
        """An observer telling `inner` everything, and sending START when the run reaches START_PHASE."""
        return inner if self.client is None else LineageObserver(inner, self)

    @contextmanager
    def following(self, log: EventLog) -> Iterator[list[str]]:
        """Around a run: remembers where the log ends before it, sends its end after it; yields the warnings
        (filled in when the block is left)."""
        if self.client is None:
            yield self.warnings
            return
        self._log, self._start = log, log.end_offsets()
        try:
            yield self.warnings
        finally:
            self.send_end()
            self.client.close()
            self._log = None

    def send_start(self) -> None:
        """Send START, once."""
        if self._started_sent or self._log is None or self.client is None:
            return
        events = self.run_events()
        event = start_event(events, self.client.settings) if events is not None else None
        if event is not None:
            self._started_sent = True
            self._send(self.client, event)

    def send_end(self) -> None:
        """Send the end (START first, if it was not sent yet), if the run recorded one."""
        self.send_start()
        if self._log is None or self.client is None:
            return
        events = self.run_events()
        event = end_event(events, self.client.settings) if events is not None else None
        if event is not None:
            self._send(self.client, event)

    def run_events(self) -> list[Event] | None:
        """The run's events appended since it began; None (and a warning) if the log cannot be read now."""
        assert self._log is not None, "only while following a run"
        try:
            return [logged.event for logged in self._log.read(self._start, on_error=ignore)
                    if logged.event.run_id == self.run_id and logged.event.job == self.job]
        except OncelogError as e:
            self._warn(f"the run's events could not be read back for OpenLineage: {e}")
            return None

    def _send(self, client: LineageClient, event: RunEvent) -> None:
        """Send one event; a failure is a warning, never an error."""
        try:
            client.send(event)
        except LineageError as e:
            self._warn(str(e))

    def _warn(self, problem: str) -> None:
        """The first problem becomes the run's warning; later ones are only logged (debug)."""
        if self.warnings:
            log.debug("%s", problem)
            return
        message = f"{problem}; the run goes on without the lineage events it cannot send (this is said once)"
        self.warnings.append(message)
        log.warning("%s", message)


@dataclass(frozen=True)
class LineageObserver:
    """A RunObserver passing everything on to `inner`, and sending START at START_PHASE."""

    inner: RunObserver
    lineage: RunLineage

    def phase(self, phase: Phase, total: int | None = None) -> None:
        if phase is START_PHASE:
            self.lineage.send_start()
        self.inner.phase(phase, total)

    def tasks_done(self, done: int, records: int) -> None:
        self.inner.tasks_done(done, records)

    def datasets_done(self, done: int) -> None:
        self.inner.datasets_done(done)
