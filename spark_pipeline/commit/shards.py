"""Commit shards: a job's datasets split by the hash that places their events, each shard committed by a task of
its own (Gobblin's exactly-once design, its scalability section: each container commits a subset of datasets).

A shard is a set of whole partitions of the events topic (partition mod shards), so a shard task folds only those
partitions' history: its datasets' sequences and states, nothing else. It opens its own writer, named per (job,
shard): the writer of a newer run's shard fences it (Kafka: its transactional id; SQLite: the writer's epoch,
checked in the transaction of every append and before every rename).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from events.errors import FencedError, OncelogError
from events.job import JobRunStarted
from events.keys import partition_for
from events.log import EventLog
from filesystems.base import FileSystem
from projections.state import State
from projections.views import SequenceStatus
from spark_pipeline.commit.faults import FaultPoint
from spark_pipeline.commit.sequence import CommitResult, Committer, Outcome
from spark_pipeline.commit.session import fold_strictly
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.sink import EventSink
from spark_pipeline.completeness import with_completeness
from spark_pipeline.constructs import DataPublisher, DatasetOutput


class ShardLostError(OncelogError):
    """A shard task died (its worker or executor was lost): what it appended stands; its sequences left pending are
    finished by the next run's recovery."""


class ShardFailedError(OncelogError):
    """A shard task stopped on an error (the log could not be written, say): the run fails; the next one recovers."""


class ShardAction(StrEnum):
    """What a shard task does: finish its pending sequences (before extracting), or plan and commit new ones."""

    RECOVER = "recover"
    PUBLISH = "publish"


@dataclass(frozen=True)
class ShardWork:
    """One shard's assignment, shipped to the task that commits it."""

    job: str
    run_id: str
    shard: int
    shards: int
    writer_name: str
    action: ShardAction
    newer_runs_from: int
    """The offset in the job's partition from which another run's JobRunStarted means this run was superseded:
    what the driver had folded of it when it assigned the shard (its own run's start is before it)."""
    outputs: tuple[DatasetOutput, ...] = ()
    """PUBLISH: the run's output of the shard's datasets (the commit policy and skips already applied)."""


@dataclass(frozen=True)
class ShardSummary:
    """What a shard task brings back to the driver: each sequence's outcome, or why the shard stopped."""

    shard: int
    results: tuple[CommitResult, ...] = ()
    error: str | None = None
    fenced: bool = False


def shard_of(dataset_urn: str, partitions: int, shards: int) -> int:
    """The shard of a dataset: that of the partition its events live in."""
    return partition_for(dataset_urn, partitions) % shards


def shard_partitions(shard: int, partitions: int, shards: int) -> frozenset[int]:
    """The partitions whose datasets a shard commits."""
    return frozenset(p for p in range(partitions) if p % shards == shard)


def fold_shard(log: EventLog, partitions: frozenset[int]) -> State:
    """The state of a shard's partitions only, folded strictly to the log's stable end (the others are not read)."""
    log.await_stable()
    end = log.end_offsets()
    state = State.for_planning()
    state.skip_to({p: offset for p, offset in end.items() if p not in partitions})
    fold_strictly(log, state, until=end)
    return state


def newer_run(log: EventLog, work: ShardWork) -> str | None:
    """The run of the job that started after the shard's own run assigned it, if any (read after the shard's writer
    is open: a newer run fences every shard writer once its start is in the log, so a shard task that opened its
    writer later must find that start here)."""
    job_partition = partition_for(work.job, log.partitions)
    end = log.end_offsets()
    start = {p: end[p] for p in end if p != job_partition} | {job_partition: work.newer_runs_from}
    for logged in log.read(start, end):
        event = logged.event
        if isinstance(event, JobRunStarted) and event.job == work.job and event.run_id != work.run_id:
            return event.run_id
    return None


def commit_shard(work: ShardWork, log: EventLog, fs: FileSystem, settings: CommitSettings,
                 publisher: DataPublisher) -> ShardSummary:
    """Recover, or plan and commit, one shard's sequences through the shard's own writer (opened first: it fences
    an earlier run's, then the fold sees everything that one appended). Errors come back in the summary."""
    try:
        with log.writer(work.writer_name) as writer:
            state = fold_shard(log, shard_partitions(work.shard, log.partitions, work.shards))
            newer = newer_run(log, work)
            if newer is not None:
                return ShardSummary(work.shard, error=f"run {newer} of job {work.job} started after run "
                                    f"{work.run_id} assigned this shard: it publishes nothing", fenced=True)
            sink = EventSink(writer, state, pack=settings.batch_records, fresh_s=settings.fence_fresh_s)
            try:
                results = _commit(work, Committer(sink, settings, fs), publisher)
            finally:
                sink.close()
    except FencedError as e:
        return ShardSummary(work.shard, error=str(e), fenced=True)
    except OncelogError as e:
        return ShardSummary(work.shard, error=f"{type(e).__name__}: {e}")
    return ShardSummary(work.shard, tuple(results))


def _commit(work: ShardWork, committer: Committer, publisher: DataPublisher) -> list[CommitResult]:
    """The shard's pending sequences finished, or its datasets' new sequences planned (one batch) and applied."""
    if work.action is ShardAction.RECOVER:
        return committer.recover(work.job)
    return _publish(work, committer, publisher)


def _publish(work: ShardWork, committer: Committer, publisher: DataPublisher) -> list[CommitResult]:
    """Plan the shard's datasets' sequences (one batch, the shard's point of no return) and apply them.

    Spark runs a task again when its executor is lost, even after the task ended: what an earlier attempt planned is
    finished if pending, reported if it ended (completed, or abandoned: never applied again), and nothing is planned
    twice."""
    state, job, run_id = committer.sink.state, work.job, work.run_id
    ended: list[CommitResult] = []
    pending: list[tuple[str, str, str]] = []
    fresh: list[DatasetOutput] = []
    for output in work.outputs:
        key = (job, output.dataset_urn, run_id)
        earlier = state.sequences.get(key)
        if run_id in state.completed.get((job, output.dataset_urn), ()):
            ended.append(CommitResult(*key, Outcome.COMPLETED))
        elif earlier is None:
            fresh.append(output)
        elif earlier.status is SequenceStatus.ABANDONED:
            ended.append(CommitResult(*key, Outcome.ABANDONED, earlier.last_error))
        else:
            pending.append(key)
    states = state.dataset_states(job)
    planned = with_completeness(publisher.config, run_id, publisher.plan(run_id, fresh, states), fresh, states)
    committer.sink.emit(planned)
    committer.settings.faults.reached(FaultPoint.AFTER_PLANNING)
    keys = dict.fromkeys([*pending, *((p.job, p.dataset_urn, p.sequence_id) for p in planned)])  # parts: key once
    return ended + committer.commit_all([state.sequences[key] for key in keys])


def results_of(summaries: list[ShardSummary]) -> list[CommitResult]:
    """Every sequence's outcome; FencedError if a newer run took a shard over, ShardFailedError if one stopped."""
    for summary in summaries:
        if summary.fenced:
            raise FencedError(f"commit shard {summary.shard}", "a newer run's writer of the shard took it over")
    failed = [f"commit shard {s.shard}: {s.error}" for s in summaries if s.error]
    if failed:
        raise ShardFailedError("; ".join(failed) + "; its sequences stay pending: the next run finishes them")
    return [result for summary in summaries for result in summary.results]
