"""The event log: the `EventLog` interface (interface.py) and `open_log(url)`, which opens the store its URL's scheme
names. Stores are loaded by name on first use (as pyiceberg's AVAILABLE_CATALOGS), so the interface never imports
them and a store's client library loads only when that store is opened.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Protocol

from events.codec import EventCodec
from events.log.interface import (
    DEFAULT_TOPIC,
    DEFAULT_URL,
    Closing,
    ErrorHandler,
    EventLog,
    LogWriter,
    Offsets,
    Snapshot,
    StoredRecord,
    Subscription,
    TombstoneHandler,
    decode_records,
    int_setting,
    parse_url,
    raise_error,
)

__all__ = [
    "DEFAULT_TOPIC",
    "DEFAULT_URL",
    "Closing",
    "ErrorHandler",
    "EventLog",
    "LogWriter",
    "Offsets",
    "Snapshot",
    "StoredRecord",
    "Subscription",
    "TombstoneHandler",
    "decode_records",
    "int_setting",
    "parse_url",
    "raise_error",
    "STORES",
    "open_log",
]

STORES: dict[str, str] = {"sqlite": "events.log.sqlite.SqliteLog", "kafka": "events.log.kafka.store.KafkaLog"}
"""URL scheme -> the store class that opens it (module.Class), imported when a log of that scheme is opened."""


class StoreClass(Protocol):
    """What a store class offers `open_log`: a constructor from the parsed URL."""

    def from_url(self, url: str, location: str, settings: dict[str, str], codec: EventCodec | None) -> EventLog: ...


def open_log(
    url: str = DEFAULT_URL, settings: Mapping[str, str] | None = None, codec: EventCodec | None = None
) -> EventLog:
    """Open the log a URL names: `sqlite:///path` (embedded, the default) or `kafka://host:port[,host:port]`.

    Query parameters and `settings` (which win) configure it: `topic`, `partitions`, `replication` (Kafka), and for
    Kafka any librdkafka property (`security.protocol`, `sasl.mechanism`, `ssl.ca.location`, ...).
    """
    scheme, location, url_settings = parse_url(url)
    url_settings.update(settings or {})
    return store_class(scheme).from_url(url, location, url_settings, codec)


def store_class(scheme: str) -> StoreClass:
    """The store class of a URL scheme parse_url accepted, imported now."""
    module, _, name = STORES[scheme].rpartition(".")
    store: StoreClass = getattr(importlib.import_module(module), name)
    return store
