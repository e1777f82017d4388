"""Projection snapshots on Kafka: a compacted `<topic>.snapshots` topic, each snapshot in chunks under a manifest.

A snapshot can outgrow Kafka's message size limit, so it is cut into chunks; the chunks, the manifest that names
them, and the tombstones of the previous snapshot's chunks go in one transaction: a reader sees the old snapshot
or the new one, never half of either.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import TYPE_CHECKING

from events.codec import Record
from events.log.interface import Snapshot
from events.log.kafka.writer import KafkaWriter

if TYPE_CHECKING:
    from events.log.kafka.store import KafkaLog

CHUNK_BYTES = 512 * 1024


def manifest_key(name: str) -> bytes:
    return f"snapshot/{name}/MANIFEST".encode()


def chunk_key(name: str, snapshot_id: str, index: int) -> bytes:
    return f"snapshot/{name}/{snapshot_id}/chunk/{index}".encode()


class KafkaSnapshotStore:
    """Saves and loads snapshots of one events topic."""

    def __init__(self, log: KafkaLog) -> None:
        self._log = log
        self.topic = f"{log.topic}.snapshots"
        self._writers: dict[str, KafkaWriter] = {}

    def save(self, snapshot: Snapshot) -> None:
        """Store the snapshot and drop the previous one of the same name, atomically."""
        now = int(time.time() * 1000)
        snapshot_id = uuid.uuid4().hex
        data = snapshot.data
        chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        records = [Record(0, chunk_key(snapshot.name, snapshot_id, i), c, now) for i, c in enumerate(chunks)]
        manifest = {
            "id": snapshot_id,
            "chunks": len(chunks),
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "offsets": {str(p): o for p, o in snapshot.offsets.items()},
            "created_ms": snapshot.created_ms,
        }
        records.append(Record(0, manifest_key(snapshot.name), json.dumps(manifest).encode(), now))
        previous = self._read(snapshot.name)[0]
        if previous is not None:
            records.extend(
                Record(0, chunk_key(snapshot.name, previous["id"], i), None, now) for i in range(previous["chunks"])
            )
        self._writer(snapshot.name).append_records(records)

    def load(self, name: str) -> Snapshot | None:
        """The latest complete snapshot of this name, or None (none saved, or its chunks are not all there)."""
        manifest, chunks = self._read(name)
        if manifest is None:
            return None
        try:
            data = b"".join(chunks[i] for i in range(manifest["chunks"]))
        except KeyError:
            return None
        if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
            return None
        offsets = {int(p): int(o) for p, o in manifest["offsets"].items()}
        return Snapshot(name, data, offsets, int(manifest["created_ms"]))

    def _read(self, name: str) -> tuple[dict | None, dict[int, bytes]]:
        """The latest manifest of a snapshot name and the chunks of the snapshot it names."""
        wanted_manifest = manifest_key(name)
        manifest: dict | None = None
        values: dict[bytes, bytes | None] = {}
        for record in self._log.read_topic(self.topic, 1):
            if record.key == wanted_manifest:
                manifest = None if record.value is None else json.loads(record.value)
            elif record.key.startswith(f"snapshot/{name}/".encode()):
                values[record.key] = record.value
        if manifest is None:
            return None, {}
        chunks = {}
        for i in range(manifest["chunks"]):
            value = values.get(chunk_key(name, manifest["id"], i))
            if value is not None:
                chunks[i] = value
        return manifest, chunks

    def _writer(self, name: str) -> KafkaWriter:
        writer = self._writers.get(name)
        if writer is None:
            writer = self._log.writer_for(self.topic, f"snapshot-{name}", 1)
            self._writers[name] = writer
        return writer

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
