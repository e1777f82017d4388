"""A commit session: the state of a log, a writer that reads its own writes, and a committer over them.

What a launcher, `oncelog recover` and the tests open to plan and apply commit sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.log import Closing, EventLog, LogWriter
from spark_pipeline.commit.sequence import DEFAULT_MAX_ATTEMPTS, DEFAULT_PARALLELISM, Committer
from spark_pipeline.commit.steps import PublishRoots
from spark_pipeline.commit.faults import NO_FAULTS, FaultInjector
from projections.projector import Projector
from spark_pipeline.commit.sink import EventSink
from projections.state import State


@dataclass
class CommitSession(Closing):
    """The pieces that publish: state (caught up), writer, sink, committer."""

    log: EventLog
    state: State
    writer: LogWriter
    sink: EventSink
    committer: Committer

    def catch_up(self) -> int:
        """Fold what others appended since (tasks on executors, say); returns how many events."""
        with self.sink.state_lock:
            return Projector(self.log).catch_up(self.state)

    def close(self) -> None:
        self.sink.close()
        self.writer.close()


def open_session(
    log: EventLog,
    writer_name: str,
    roots: PublishRoots,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    parallelism: int = DEFAULT_PARALLELISM,
    faults: FaultInjector = NO_FAULTS,
) -> CommitSession:
    """Open the writer first (fencing any other holder of the name), then fold the log: nothing it missed."""
    writer = log.writer(writer_name)
    log.await_stable()  # what a fenced writer committed just before must be in the fold
    state, _ = Projector(log).rebuild()
    sink = EventSink(writer, state)
    committer = Committer(sink, roots, max_attempts, parallelism, faults)
    return CommitSession(log, state, writer, sink, committer)
