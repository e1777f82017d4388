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
from collections.abc import Callable, Collection
from enum import StrEnum

from events.errors import ConfigError, EventDecodeError
from events.log import ErrorHandler, EventLog, raise_error
from events.model import LoggedEvent
from events.registry import EVENT_TYPES_BY_NAME

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
