"""Downstream subscriptions: follow the log's events as a named consumer group, resuming after a restart.

Delivery is at least once: the handler sees every event, and after a crash may see again the events since the
group's last commit; each event carries its event id (uuid5 of its key) to deduplicate on.

What a consumer registers the new data from is `DatasetPublished` (events.published): emitted with each
`CommitSequenceCompleted`, in the same atomic batch, it lists the published files (final paths, sizes, checksums,
records) and the watermark range of each partition, in parts when they are many (`part` of `parts`).
A record that cannot be decoded (damaged, or of a newer schema) goes to `on_error`: `OnError.STOP` stops there
(nothing after it is committed, so a restart meets it again), `OnError.SKIP` reports it and goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from enum import StrEnum

from events.commit import CommitSequenceAbandoned, CommitSequenceCompleted, CommitSequencePlanned
from events.completeness import CompletenessEventKind, EventTimeAdvanced, PartitionCompleted
from events.dataset import WatermarkAdvanced
from events.errors import ConfigError, EventDecodeError
from events.job import JobRunCancelled, JobRunCommitted, JobRunFailed, JobRunStarted, WorkUnitsPlanned
from events.log import ErrorHandler, EventLog, decode_records, raise_error
from events.model import Event, LoggedEvent
from events.published import DatasetPublished
from events.registry import EVENT_TYPES_BY_NAME
from events.task import TaskFailed, TaskSucceeded

Handler = Callable[[LoggedEvent], None]


class OnError(StrEnum):
    """What a subscriber does at a record it cannot decode."""

    SKIP = "skip"
    """Report it (to `report`) and go on."""
    STOP = "stop"
    """Stop there with its EventDecodeError; the group's commit stays before it."""


def error_handler(policy: OnError, report: Callable[[EventDecodeError], None]) -> ErrorHandler:
    """The ErrorHandler for `follow` that a policy names; `report` hears each skipped record."""
    return raise_error if policy is OnError.STOP else report


def check_types(types: Collection[str]) -> frozenset[str]:
    """The event type names to deliver; an unknown name is an error listing the known ones."""
    unknown = sorted(set(types) - set(EVENT_TYPES_BY_NAME))
    if unknown:
        raise ConfigError(f"unknown event type(s) {unknown}; known: {', '.join(sorted(EVENT_TYPES_BY_NAME))}")
    return frozenset(types)


def follow(
    log: EventLog,
    group: str,
    handler: Handler,
    types: Collection[str] = (),
    stop: threading.Event | None = None,
    max_events: int | None = None,
    idle_timeout_s: float | None = None,
    on_error: ErrorHandler = raise_error,
) -> int:
    """Deliver events to `handler` as consumer group `group`; commits after each handled batch.

    Runs until `stop` is set, `max_events` were delivered, or nothing arrived for `idle_timeout_s`.
    Returns how many events were delivered. A handler that raises stops it without committing that batch; so does
    an `on_error` that raises, once every event before the record it was given has been delivered.
    """
    wanted = check_types(types)
    delivered = 0
    idle_since = time.monotonic()
    unreadable: list[EventDecodeError] = []
    with log.subscribe(group, on_error=unreadable.append) as subscription:
        while not (stop is not None and stop.is_set()):
            limit = 1000 if max_events is None else min(1000, max_events - delivered)
            batch = subscription.poll(timeout=0.5, max_records=limit)
            if not batch and not unreadable:
                if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                    break
                continue
            idle_since = time.monotonic()
            for logged in batch:
                hand_over_errors(unreadable, on_error, before=logged)
                if not wanted or logged.event.event_type() in wanted:
                    handler(logged)
                    delivered += 1
            hand_over_errors(unreadable, on_error, before=None)
            subscription.commit()
            if max_events is not None and delivered >= max_events:
                break
    return delivered


def hand_over_errors(errors: list[EventDecodeError], on_error: ErrorHandler, before: LoggedEvent | None) -> None:
    """Give on_error the undecodable records that lie before `before` in its partition (None: all), in log order,
    so that an on_error stopping at one was preceded by every event before it in its partition, and by none after."""
    due = [e for e in errors if before is None or (e.partition == before.partition and e.offset < before.offset)]
    for error in due:
        errors.remove(error)
        on_error(error)


COMMIT_EVENTS = ("JobRunStarted", "DatasetPublished", CompletenessEventKind.PARTITION_COMPLETED.value,
                 "CommitSequenceAbandoned", "JobRunCommitted", "JobRunFailed", "JobRunCancelled")
"""What `oncelog follow` shows by default: runs starting and ending, each dataset published (or abandoned), and each
time partition completed."""
FOLLOW_POLL_S = 0.5


def first_line(text: str) -> str:
    """The first non-empty line of a message (an error's cause, without its trace)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def event_summary(event: Event) -> str:
    """What an event says, in a few words with its paths and counts ("" for an event with nothing to add)."""
    match event:
        case DatasetPublished():
            where = event.files[0].path if event.files else ""
            more = f" (+{len(event.files) - 1} more)" if len(event.files) > 1 else ""
            part = f" part {event.part + 1}/{event.parts}" if event.parts > 1 else ""
            hours = [p for p in event.by_partition if p]
            spread = f" in {len(hours):,} time partition(s)" if hours else ""
            return (f"{event.dataset_urn}: {event.files_published:,} file(s), {event.records_published:,} records, "
                    f"{event.bytes_published:,} bytes{part}{spread}" + (f" → {where}{more}" if where else ""))
        case CommitSequenceCompleted() | CommitSequencePlanned():
            return f"{event.dataset_urn} sequence {event.sequence_id}"
        case PartitionCompleted():
            markers = f", {len(event.markers)} _SUCCESS marker(s)" if event.markers else ""
            return f"{event.dataset_urn}: time partition {event.partition} complete{markers}"
        case EventTimeAdvanced():
            late = sum(event.late_records.values())
            return (f"{event.dataset_urn}: {len(event.open_partitions):,} time partition(s) open"
                    + (f", {late:,} late record(s)" if late else ""))
        case CommitSequenceAbandoned():
            return f"{event.dataset_urn} after {event.attempts} attempt(s): {first_line(event.error)}"
        case JobRunStarted():
            return f"{event.job} run {event.run_id}"
        case WorkUnitsPlanned():
            return f"{len(event.work_units):,} work unit(s)"
        case JobRunCommitted():
            return (f"{len(event.datasets_committed):,} dataset(s) published"
                    + (f", {len(event.datasets_abandoned):,} abandoned" if event.datasets_abandoned else "")
                    + (f", {len(event.datasets_skipped):,} skipped" if event.datasets_skipped else ""))
        case JobRunFailed():
            return first_line(event.error)
        case JobRunCancelled():
            return first_line(event.reason)
        case TaskSucceeded():
            return (f"attempt {event.attempt}: {sum(r.records_written for r in event.results):,} records written "
                    f"in {len(event.results)} work unit(s)")
        case TaskFailed():
            return f"attempt {event.attempt}: {first_line(event.error)}"
        case WatermarkAdvanced():
            return f"{event.partition}: {event.low_watermark} → {event.value}"
    return ""


def watch(log: EventLog, handler: Handler, types: Collection[str] = (), start: Mapping[int, int] | None = None,
          stop: threading.Event | None = None, max_events: int | None = None, idle_timeout_s: float | None = None,
          on_error: ErrorHandler = raise_error, poll_s: float = FOLLOW_POLL_S) -> int:
    """Deliver the events committed from `start` (default: the end of the log now) as they come, like `tail -f`:
    no consumer group, nothing committed (`follow` is the resumable subscriber). Stops as `follow` does."""
    wanted = check_types(types)
    position = dict(log.end_offsets() if start is None else start)
    delivered, idle_since = 0, time.monotonic()
    while not (stop is not None and stop.is_set()):
        end = log.end_offsets()
        if any(end.get(p, 0) > position.get(p, 0) for p in end):
            for logged in decode_records(log.codec, log.read_records(start=position, until=end), on_error):
                if not wanted or logged.event.event_type() in wanted:
                    handler(logged)
                    delivered += 1
                    if max_events is not None and delivered >= max_events:
                        return delivered
            position, idle_since = {**position, **end}, time.monotonic()
        elif idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
            break
        time.sleep(poll_s)
    return delivered
