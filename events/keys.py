"""Deterministic identities: transition keys, event ids (uuid5 of the key) and aggregate partitioning."""

from __future__ import annotations

import hashlib
import uuid
import zlib

# Fixed forever: changing it would change every event id already in a log.
EVENT_ID_NAMESPACE = uuid.UUID("6f6e6365-6c6f-4700-8000-6576656e7473")


def segment(value: str) -> str:
    """Escape one key segment so that '/' inside a job name or URN cannot make two keys collide."""
    if "%" in value or "/" in value:
        return value.replace("%", "%25").replace("/", "%2F")
    return value


def key_of(*segments: str | int) -> str:
    """Join segments into a transition key, escaping each one (numbers need none)."""
    joined = "/".join([s if isinstance(s, str) else str(s) for s in segments])
    if "%" not in joined and joined.count("/") == len(segments) - 1:
        return joined  # nothing to escape: the common case, one join instead of a call per segment
    return "/".join([segment(s) if isinstance(s, str) else str(s) for s in segments])


def unsegment(value: str) -> str:
    """The segment as it was before `segment` escaped it."""
    return value.replace("%2F", "/").replace("%25", "%") if "%" in value else value


RUN_KEY_KINDS = ("run", "lock")
"""The first segment of the keys of a run's own events: `run/<job>/<run_id>/…` and `lock/<job>/<run_id>/…`."""


def run_of_key(key: str) -> tuple[str, str] | None:
    """(job, run id) of a run's event key; None for any other key (a dataset's: `commit/…`)."""
    parts = key.split("/", 3)
    if len(parts) < 3 or parts[0] not in RUN_KEY_KINDS:
        return None
    return unsegment(parts[1]), unsegment(parts[2])


def event_id_for(key: str) -> uuid.UUID:
    """The event id of a transition: re-emitting the same transition yields the same id."""
    return uuid.uuid5(EVENT_ID_NAMESPACE, key)


def event_id_bytes(key: bytes) -> bytes:
    """The 16 bytes of uuid5(EVENT_ID_NAMESPACE, key), without building a UUID object (the encode hot path)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + key).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return bytes(digest)


_NAMESPACE_BYTES = EVENT_ID_NAMESPACE.bytes


def partition_for(aggregate: str, partitions: int) -> int:
    """The partition that holds every event of one aggregate (a job name or a dataset URN).

    crc32 rather than hash(): it must be the same in every process and every store.
    """
    return zlib.crc32(aggregate.encode("utf-8")) % partitions
