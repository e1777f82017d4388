"""The Kafka job lock's claims: the compacted `<topic>.locks` topic, one partition, the job name as the key.

Each job's claims are written by a transactional writer named after the job, so a run that takes the lock fences the
previous holder's heartbeats; a reader takes the last claim of the job's key (compaction keeps only that one).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from events.codec import Record
from events.log.kafka.writer import KafkaWriter
from events.log.lock import Claim, ClaimWriter, LeaseStore

if TYPE_CHECKING:
    from events.log.kafka.store import KafkaLog


def locks_topic(topic: str) -> str:
    """The topic that holds the job locks of an events topic."""
    return f"{topic}.locks"


class KafkaClaimWriter(ClaimWriter):
    """Puts a job's claims through one transactional writer (opening the next one fences it)."""

    def __init__(self, writer: KafkaWriter, job: str) -> None:
        self._writer = writer
        self._key = job.encode()

    def put(self, claim: Claim) -> None:
        self._writer.append_records([Record(0, self._key, claim.to_json().encode(), int(time.time() * 1000))])

    def close(self) -> None:
        self._writer.close()


class KafkaLeaseStore(LeaseStore):
    """The claims of every job of one events topic, in `<topic>.locks`."""

    def __init__(self, log: KafkaLog) -> None:
        self._log = log
        self.topic = locks_topic(log.topic)
        self.where = f"topic {self.topic!r}"

    def latest(self, job: str) -> Claim | None:
        """The job's last claim; None when it has none, or the topic does not exist (a log older than leases)."""
        if not self._log.has_topic(self.topic):
            return None
        key, found = job.encode(), None
        for record in self._log.read_topic(self.topic, 1):
            if record.key == key:
                found = record.value
        return None if found is None else Claim.from_json(found)

    def writer(self, job: str) -> KafkaClaimWriter:
        """The job's claim writer; the topic is created first if it is missing (a log older than leases)."""
        if not self._log.has_topic(self.topic):
            self._log.ensure_locks_topic()
        return KafkaClaimWriter(self._log.writer_for(self.topic, f"lock-{job}", 1), job)
