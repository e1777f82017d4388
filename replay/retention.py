"""`oncelog gc --keep-runs N`: retention by tombstones. It never changes what was published.

Which runs: each job's finished runs older than its newest N finished runs, except a run that planned a
sequence still pending or abandoned (its runs' folders and audit stay until that sequence is settled).

Deleted, for those runs only:
- the run's own transitions: lock, start, work units planned, task attempts and retries, skipped datasets, end
  (every run-scoped event);
- the `CommitStepFailed` events of its completed commit sequences (attempts that failed and were retried).

Kept, always: every other dataset event. A completed sequence keeps its `CommitSequencePlanned` (the files it
published: `verify --publish-dir`), its `CommitStepApplied` and `CommitSequenceCompleted` (every step ran: `verify`),
its `WatermarkAdvanced` (the committed watermarks, and the chain of ranges `verify` checks) and its
`DatasetStateCommitted` (records and files published, summed into the dataset's totals, and its last run). Pending
and abandoned sequences and `DatasetReleased` keep everything. The dataset fold reads only kept events, so after gc
`state` (watermarks, totals, last run, pending and abandoned sequences) and `verify` give the same answers as before.

Every fold honours a tombstone the moment it reads it (`State.apply_tombstone`): after gc, `runs`, `history`, `audit`,
`verify`, `serve` and a second `gc --dry-run` no longer see the deleted runs. A SQLite log also drops the deleted
records at once; Kafka's compaction drops them within the bound the events topic's settings give (docs/log.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from events.codec import Record
from events.commit import CommitStepFailed
from events.errors import ConfigError
from events.job import JobLockAcquired, JobRunStarted
from events.keys import partition_for
from events.log import EventLog
from events.model import DatasetEvent, Event, RunEvent
from projections.projector import Projector
from projections.state import RunKey, State

Progress = Callable[[int], None]
TOMBSTONE_BATCH = 10_000
ANCHORS = (JobRunStarted, JobLockAcquired)
"""The events that open a run in a fold: tombstoned after every other event of their run. Compaction applies a
prefix of the tombstones (by offset) at a time, so whatever it has removed, a run's other events are never left in
the log without its start while their tombstones wait: a fold meets the run's start, the events left, then the
tombstones, and deletes the run at the first one (`State.apply_tombstone`)."""


@dataclass
class GcReport:
    """What gc deleted and kept."""

    runs_deleted: list[RunKey] = field(default_factory=list)
    sequences_kept: list[str] = field(default_factory=list)
    """Commit sequences of the deleted runs: their plans, steps applied, watermarks and states stay."""
    tombstones: int = 0


def runs_to_delete(state: State, keep_runs: int) -> list[RunKey]:
    """(job, run id) of every finished run older than the newest `keep_runs` finished runs of its job, except a run
    whose sequence is pending, or abandoned and not yet released (`recover --release` rolls it back and frees its
    dataset: then its run may go)."""
    blocking = {(d.job, d.dataset_urn, d.blocked_by) for d in state.datasets.values() if d.blocked_by}
    unsettled = {(s.job, s.run_id) for key, s in state.sequences.items() if not s.settled or key in blocking}
    doomed = []
    for job in sorted(state.jobs):
        finished = [r for r in state.runs_of(job) if r.status.finished]
        older = finished[: max(0, len(finished) - keep_runs)]
        doomed += [(job, r.run_id) for r in older if (job, r.run_id) not in unsettled]
    return doomed


def deletable(event: Event, doomed: set[RunKey], state: State) -> bool:
    """Whether gc tombstones this event: a transition of a deleted run, or a failed attempt of a completed sequence."""
    if (event.job, event.run_id) not in doomed:
        return False
    if isinstance(event, RunEvent):
        return True
    return isinstance(event, CommitStepFailed) and event.sequence_id in state.completed.get(
        (event.job, event.dataset_urn), ())


def gc(log: EventLog, keep_runs: int, writer_name: str = "oncelog-gc", progress: Progress | None = None,
       dry_run: bool = False) -> GcReport:
    """Tombstone the transitions of old runs; returns what was deleted. `dry_run` only reports."""
    if keep_runs < 1:
        raise ConfigError(f"--keep-runs {keep_runs}: keep at least 1 run per job")
    state, _ = Projector(log).rebuild(use_snapshot=False)
    doomed = set(runs_to_delete(state, keep_runs))
    report = GcReport(runs_deleted=sorted(doomed))
    keys: dict[bytes, int] = {}
    anchors: dict[bytes, int] = {}
    kept: set[str] = set()
    for count, logged in enumerate(log.read(), start=1):
        event = logged.event
        if deletable(event, doomed, state):
            (anchors if isinstance(event, ANCHORS) else keys)[event.key.encode()] = partition_for(event.aggregate,
                                                                                                  log.partitions)
        elif isinstance(event, DatasetEvent) and (event.job, event.run_id) in doomed:
            kept.add(f"{event.job} / {event.dataset_urn} / {event.sequence_id}")
        if progress is not None and count % 10_000 == 0:
            progress(count)
    keys.update(anchors)  # last: see ANCHORS
    report.sequences_kept = sorted(kept)
    report.tombstones = len(keys)
    if dry_run or not keys:
        return report
    with log.writer(writer_name) as writer:
        items = list(keys.items())
        for start in range(0, len(items), TOMBSTONE_BATCH):
            now_ms = int(time.time() * 1000)
            writer.append_records(Record(p, k, None, now_ms) for k, p in items[start : start + TOMBSTONE_BATCH])
    fresh, _ = Projector(log).rebuild(use_snapshot=False)
    Projector(log).save_snapshot(fresh)
    return report
