"""Downstream subscriptions: follow the log's events as a named consumer group, resuming after a restart.

Delivery is at least once: the handler sees every event, and after a crash may see again the events since the
group's last commit; each event carries its event id (uuid5 of its key) to deduplicate on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection

from events.errors import ConfigError
from events.log import EventLog, raise_error, ErrorHandler
from events.model import LoggedEvent
from events.registry import EVENT_TYPES_BY_NAME

Handler = Callable[[LoggedEvent], None]


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
    Returns how many events were delivered. A handler that raises stops it without committing that batch.
    """
    wanted = check_types(types)
    delivered = 0
    idle_since = time.monotonic()
    with log.subscribe(group, on_error=on_error) as subscription:
        while not (stop is not None and stop.is_set()):
            limit = 1000 if max_events is None else min(1000, max_events - delivered)
            batch = subscription.poll(timeout=0.5, max_records=limit)
            if not batch:
                if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                    break
                continue
            idle_since = time.monotonic()
            for logged in batch:
                if not wanted or logged.event.event_type() in wanted:
                    handler(logged)
                    delivered += 1
            subscription.commit()
            if max_events is not None and delivered >= max_events:
                break
    return delivered
