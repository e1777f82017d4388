"""A task's events appended in order on a thread of their own, so that an attempt's Spark job starts while its
TaskStarted is being written and the task's writer opened (on Kafka ~30 ms of every task: a producer's first
connection and its transaction).

What a task records stays as it was: in order, each batch whole, nothing after a batch that failed; the task returns
only once every batch is appended (`drain`). A failed append is raised by the next emit or by `drain`; the attempt
that ran meanwhile is never recorded, so nothing of it is published.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from events.log import Closing, LogWriter
from events.model import Event


class AheadEmitter(Closing):
    """Appends batches of events through one writer, opened on the emitter's thread, in the order emitted."""

    def __init__(self, open_writer: Callable[[], LogWriter]) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="task-events")
        self._writer: Future[LogWriter] = self._thread.submit(open_writer)
        self._last: Future[None] | None = None
        self._failure: BaseException | None = None

    def emit(self, events: Sequence[Event]) -> None:
        """Queue `events` after every batch before; first raise the failure of an earlier one, if any."""
        self._raise_failure()
        self._last = self._thread.submit(self._append, list(events))

    def drain(self) -> None:
        """Wait until every queued batch is appended; raise the first failure."""
        if self._last is not None:
            self._last.result()
        self._raise_failure()

    def close(self) -> None:
        """Append what is queued (a failed attempt's TaskFailed, say), then close the writer."""
        self._thread.shutdown(wait=True)
        if self._writer.exception() is None:
            self._writer.result().close()

    def _append(self, events: list[Event]) -> None:
        """On the emitter's thread: append, unless an earlier batch failed (then nothing more is recorded)."""
        if self._failure is not None:
            return
        try:
            self._writer.result().append(events)
        except BaseException as e:
            self._failure = e

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure
