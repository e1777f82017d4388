"""A commit session: the state of a log, a writer that reads its own writes, and a committer over them.

What a launcher, `oncelog recover` and the tests open to plan and apply commit sequences. Its state is folded
strictly: a run plans only from a history read completely, to the log's stable end, every event understood.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from events.errors import LogNotStableError, OncelogError
from events.log import Closing, EventLog, LogWriter, Offsets
from filesystems.base import FileSystem
from projections.projector import ProjectionStopped, Projector
from projections.state import State
from spark_pipeline.commit.sequence import Committer
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.sink import EventSink

WHAT_TO_DO = (
    "nothing was planned or published. A record of a newer schema version needs a newer oncelog (upgrade, then run "
    "again); a damaged record must be restored from a replica or backup (`oncelog verify` lists every damaged "
    "offset)"
)

FENCE_PARALLELISM = 8
"""Writers fenced at once (a session's shard writers, a dead run's task writers)."""
SERIAL_FENCES = 2
"""Up to this many writers are fenced one after the other: a pool costs more than it saves."""

FenceHolders = Callable[[State], Sequence[str]]
"""Given the state folded up to the log's stable end, the names of writers that may hold it there (an earlier,
dead run's tasks): fencing a Kafka writer aborts its open transaction."""


class IncompleteHistoryError(OncelogError):
    """The log's history could not be read completely: planning from what was read could publish twice or lose."""


@dataclass
class CommitSession(Closing):
    """The pieces that publish: state (caught up), writer, sink, committer."""

    log: EventLog
    state: State
    writer: LogWriter
    sink: EventSink
    committer: Committer

    def catch_up(self) -> int:
        """Fold what others appended since (tasks on executors, say), strictly; returns how many events."""
        with self.sink.state_lock:
            return fold_strictly(self.log, self.state)

    def fence_shards(self) -> None:
        """Once the run's start is in the log: fence every commit shard writer again, then fold what they appended.

        A shard task of an earlier run that opened its writer after the session's first fence (it was still
        starting when its driver died) is fenced now; one that opens it later finds this run's start in the log
        and refuses (shards.commit_shard). Whatever it appended before is folded here, before anything is planned.
        """
        fence_shard_writers(self.log, self.writer.name)
        self.catch_up()

    def close(self) -> None:
        self.sink.close()
        self.writer.close()


def fold_strictly(log: EventLog, state: State, until: Offsets | None = None, wait: bool = True) -> int:
    """Fold the log into `state` up to its stable end (or `until`); any record that cannot be decoded or placed stops
    it with IncompleteHistoryError naming the offset. Returns the events folded. Without `wait`, the fold stops
    where the log is stable now, before transactions still open (log.await_stable)."""
    if wait:
        log.await_stable()
    before = state.problem_count
    try:
        folded = Projector(log, stop_on_error=True).catch_up(state, until)
    except ProjectionStopped as e:
        raise IncompleteHistoryError(f"the fold stopped at {e.error}; {WHAT_TO_DO}") from e
    if state.problem_count > before:
        problem = state.problems[min(before, len(state.problems) - 1)]
        raise IncompleteHistoryError(
            f"the fold could not place the event at {problem.where()} ({problem.kind}: {problem.message}); "
            f"{WHAT_TO_DO}")
    return folded


def strict_state(log: EventLog, holders: FenceHolders | None = None) -> State:
    """The state a run plans and commits from: the log's snapshot (if usable) and the tail, folded strictly (see
    fold_strictly); without a snapshot, only what planning reads is kept (State.for_planning).

    While an open transaction holds the log, the fold stops there and `holders` names the writers to fence (whose
    open transactions that aborts); then the fold waits again. LogNotStableError if none is named."""
    state = Projector(log).load_snapshot() or State.for_planning()
    if state.problem_count:
        state = State.for_planning()  # a snapshot that carries problems is not trusted: fold the whole history
    try:
        fold_strictly(log, state)
    except LogNotStableError:
        if holders is None:
            raise
        fold_strictly(log, state, wait=False)
        names = holders(state)
        if not names:
            raise
        fence_writers(log, names)
        fold_strictly(log, state)
    return state


def shard_writer_name(writer_name: str, shard: int) -> str:
    """The log writer of one commit shard of a job (or run) writer: a newer holder of the name fences this one."""
    return f"{writer_name}.commit-shard-{shard}"


def fence_writers(log: EventLog, names: Sequence[str]) -> None:
    """Open and close a writer under each name: whoever held it can append nothing more, and on Kafka its open
    transaction is aborted. In parallel beyond a few (a Kafka writer takes round trips)."""

    def fence(name: str) -> None:
        log.writer(name).close()

    if len(names) <= SERIAL_FENCES:
        for name in names:
            fence(name)
        return
    with ThreadPoolExecutor(max_workers=min(FENCE_PARALLELISM, len(names)), thread_name_prefix="fence") as pool:
        list(pool.map(fence, names))


def fence_shard_writers(log: EventLog, writer_name: str) -> None:
    """Fence every commit shard writer an earlier run may still hold (a paused or partitioned shard task), whether
    or not this run commits in shards or commits that shard; on Kafka this also ends their open transactions, which
    would otherwise hold the log's stable end. Every possible shard (one per partition at most) is fenced, since
    shard counts and job.commit.on.executors may change between runs."""
    fence_writers(log, [shard_writer_name(writer_name, shard) for shard in range(log.partitions)])


def open_session(log: EventLog, writer_name: str, settings: CommitSettings, fs: FileSystem,
                 holders: FenceHolders | None = None) -> CommitSession:
    """Open the writer (fencing any other holder of the name) while every commit shard writer of the name is fenced
    (on Kafka each is a round trip or two: together, one's time), then fold the log: nothing it missed. A shard
    writer opened meanwhile by a run the writer fences is fenced again once the run's start is recorded
    (CommitSession.fence_shards). `holders`: see strict_state."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-writer") as pool:
        opening = pool.submit(log.writer, writer_name)
        try:
            fence_shard_writers(log, writer_name)
        except BaseException:
            if opening.exception() is None:
                opening.result().close()
            raise
        writer = opening.result()
    try:
        state = strict_state(log, holders)
    except BaseException:
        writer.close()
        raise
    sink = EventSink(writer, state, pack=settings.batch_records, fresh_s=settings.fence_fresh_s)
    return CommitSession(log, state, writer, sink, Committer(sink, settings, fs))
