"""`oncelog gc --keep-runs N`: retention by tombstones — the transitions of each job's older runs are deleted.

Never deleted: the transitions of the newest N finished runs of each job, of any run not finished, of a pending
or abandoned sequence, and of the sequence that holds a dataset's latest state. Kafka's compaction then drops
the tombstoned records (a SQLite log drops them at once); `oncelog verify` still passes afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from events.codec import Record
from events.errors import ConfigError
from events.keys import partition_for
from events.log import EventLog
from events.model import DatasetEvent, RunEvent
from projections.projector import Projector
from projections.state import State

Progress = Callable[[int], None]
TOMBSTONE_BATCH = 10_000


@dataclass
class GcReport:
    """What gc deleted and kept."""

    runs_deleted: list[tuple[str, str]] = field(default_factory=list)
    sequences_kept: list[str] = field(default_factory=list)
    tombstones: int = 0


def runs_to_delete(state: State, keep_runs: int) -> list[tuple[str, str]]:
    """(job, run id) of every finished run older than the newest `keep_runs` finished runs of its job."""
    doomed = []
    for job in sorted(state.jobs):
        finished = [r for r in state.runs_of(job) if r.status.finished]
        doomed += [(job, r.run_id) for r in finished[: max(0, len(finished) - keep_runs)]]
    return doomed


def protected_sequences(state: State) -> set[tuple[str, str, str]]:
    """Sequences whose transitions stay: pending or abandoned ones, and each dataset's latest state."""
    kept = {key for key in state.sequences}
    kept |= {(job, urn, view.last_sequence_id) for (job, urn), view in state.datasets.items()
             if view.last_sequence_id is not None}
    return kept


def gc(log: EventLog, keep_runs: int, writer_name: str = "oncelog-gc", progress: Progress | None = None,
       dry_run: bool = False) -> GcReport:
    """Tombstone the transitions of old runs; returns what was deleted. `dry_run` only reports."""
    if keep_runs < 1:
        raise ConfigError(f"--keep-runs {keep_runs}: keep at least 1 run per job")
    state, _ = Projector(log).rebuild(use_snapshot=False)
    doomed = set(runs_to_delete(state, keep_runs))
    protected = protected_sequences(state)
    report = GcReport(runs_deleted=sorted(doomed))
    keys: dict[bytes, int] = {}
    kept: set[str] = set()
    for count, logged in enumerate(log.read(), start=1):
        event = logged.event
        if (event.job, event.run_id) not in doomed:
            continue
        if isinstance(event, DatasetEvent) and (event.job, event.dataset_urn, event.sequence_id) in protected:
            kept.add(f"{event.job} / {event.dataset_urn} / {event.sequence_id}")
            continue
        if isinstance(event, (RunEvent, DatasetEvent)):
            keys[event.key.encode()] = partition_for(event.aggregate, log.partitions)
        if progress is not None and count % 10_000 == 0:
            progress(count)
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
