"""The Kafka store: the log in a compacted topic; consumers read with isolation.level=read_committed.

`kafka://host:port[,host:port]?topic=oncelog.events&partitions=6&replication=3&security.protocol=SASL_SSL&...`
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from events.codec import EventCodec
from events.errors import ConfigError, LogUnavailableError
from events.kafka_config import DEFAULT_PARTITIONS, KafkaSettings
from events.kafka_snapshots import KafkaSnapshotStore
from events.kafka_writer import KafkaWriter
from events.log import ErrorHandler, EventLog, Offsets, Snapshot, StoredRecord, Subscription, raise_error

CONSUME_BATCH = 10_000
CONSUME_WAIT_S = 0.02
"""How long one consume() call waits for a full batch. librdkafka returns early only once the batch is full, so
this is paid on every call that ends a read (the partition-EOF events that end it do not fill a batch): keep it
short. While messages flow the batch fills first; when none come, the read simply calls again."""
NO_LIMIT = 2**63
"""Past any Kafka offset: the reading limit of a partition read without `until`."""
READER_SETTINGS: dict[str, Any] = {
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    "queued.min.messages": 200_000,
    "fetch.max.bytes": 64 * 1024 * 1024,
}

BOUNDED_READ_SETTINGS: dict[str, Any] = {"fetch.wait.max.ms": 10}
"""Added for reads that stop at the end. librdkafka learns that a partition is at its end only from a fetch the
broker answers empty, which it holds back up to fetch.wait.max.ms (500 ms by default) in case data comes; and a
read often cannot end sooner, on its last record, since a batch's last offset is its transaction marker."""


def topic_configs(replication: int) -> dict[str, str]:
    """The explicit configs of the events topic: compacted, durable."""
    return {
        "cleanup.policy": "compact",
        "min.insync.replicas": str(min(2, replication)),
        "message.timestamp.type": "CreateTime",
        "unclean.leader.election.enable": "false",
    }


class KafkaLog(EventLog):
    """A log kept in a Kafka topic (compacted), with snapshots in `<topic>.snapshots`."""

    def __init__(self, settings: KafkaSettings, codec: EventCodec | None = None) -> None:
        super().__init__(codec)
        self.settings = settings
        self.topic = settings.topic
        self.url = settings.url
        self._admin: AdminClient = settings.make("admin", AdminClient, {})
        self._partitions: int | None = None
        self._meta_consumer: Consumer | None = None
        self._snapshots = KafkaSnapshotStore(self)

    @classmethod
    def from_url(cls, url: str, location: str, settings: dict[str, str], codec: EventCodec | None) -> KafkaLog:
        """Open the log a kafka:// URL names."""
        return cls(KafkaSettings.from_url(url, location, settings), codec)

    @property
    def partitions(self) -> int:
        if self._partitions is None:
            found = self._describe_partitions(self.topic)
            self._partitions = found if found is not None else self.settings.partitions or DEFAULT_PARTITIONS
        return self._partitions

    def ensure_topic(self) -> None:
        self._ensure(self.topic, self.settings.partitions or DEFAULT_PARTITIONS, self.settings.partitions is not None)
        self._ensure(self._snapshots.topic, 1, False)
        self._partitions = None

    def _ensure(self, topic: str, partitions: int, partitions_asked: bool) -> None:
        existing = self._describe_partitions(topic)
        if existing is None:
            replication = self.settings.replication or min(3, self._broker_count())
            future = self._admin.create_topics(
                [NewTopic(topic, partitions, replication, config=topic_configs(replication))]
            )[topic]
            try:
                future.result(timeout=30)
                return
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise LogUnavailableError(f"cannot create topic {topic!r} on {self.settings.bootstrap}: {e}") from e
            existing = self._describe_partitions(topic)
        if partitions_asked and existing != partitions:
            raise ConfigError(
                f"topic {topic!r} has {existing} partitions, not the {partitions} asked for (setting 'partitions'); "
                f"an existing log's partitioning cannot change"
            )
        policy = self._topic_config(topic, "cleanup.policy")
        if policy is not None and "compact" not in policy:
            raise ConfigError(
                f"topic {topic!r} has cleanup.policy={policy}: an oncelog topic must be compacted "
                f"(kafka-configs --alter --add-config cleanup.policy=compact), or it loses history"
            )

    def _describe_partitions(self, topic: str) -> int | None:
        try:
            # All topics, not list_topics(topic=...): asking for one topic auto-creates it on brokers that allow it.
            metadata = self._admin.list_topics(timeout=self.settings.read_timeout_s)
        except KafkaException as e:
            raise LogUnavailableError(f"Kafka at {self.settings.bootstrap} does not answer: {e}") from e
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return None
        return len(found.partitions)

    def _broker_count(self) -> int:
        return max(1, len(self._admin.list_topics(timeout=self.settings.read_timeout_s).brokers))

    def _topic_config(self, topic: str, name: str) -> str | None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            configs = self._admin.describe_configs([resource])[resource].result(timeout=30)
        except KafkaException:
            return None  # describing configs may be denied by ACLs; the check is best-effort then
        entry = configs.get(name)
        return None if entry is None else str(entry.value)

    def writer(self, name: str) -> KafkaWriter:
        return self.writer_for(self.topic, name, self.partitions)

    def writer_for(self, topic: str, name: str, partitions: int) -> KafkaWriter:
        """A transactional writer on any topic of this cluster (the snapshot store writes its own topic)."""
        return KafkaWriter(name, self.codec, partitions, self.settings, topic)

    def consumer(self, overrides: Mapping[str, Any]) -> Consumer:
        """A consumer with this log's settings, read_committed."""
        config = {"group.id": f"oncelog-reader-{uuid.uuid4()}", **READER_SETTINGS, **overrides}
        return self.settings.make("consumer", Consumer, config)

    def read_records(
        self, start: Mapping[int, int] | None = None, until: Mapping[int, int] | None = None, follow: bool = False
    ) -> Iterator[StoredRecord]:
        return self.read_topic(self.topic, self.partitions, start, until, follow)

    def read_topic(
        self,
        topic: str,
        partitions: int,
        start: Mapping[int, int] | None = None,
        until: Mapping[int, int] | None = None,
        follow: bool = False,
    ) -> Iterator[StoredRecord]:
        """Records of any topic of this cluster, from start to until (or forever when follow)."""
        if until is None and not follow:
            until = self.end_offsets_of(topic, partitions)
        first = {p: (start or {}).get(p, 0) for p in range(partitions)}
        active = {p for p in range(partitions) if until is None or first[p] < until.get(p, 0)}
        if not active:
            return
        consumer = self.consumer({} if follow else BOUNDED_READ_SETTINGS)
        try:
            consumer.assign([TopicPartition(topic, p, first[p]) for p in sorted(active)])
            yield from self._consume(consumer, topic, active, until, follow)
        finally:
            consumer.close()

    def _consume(
        self, consumer: Consumer, topic: str, active: set[int], until: Mapping[int, int] | None, follow: bool
    ) -> Iterator[StoredRecord]:
        # Where each partition's reading stops (exclusive): looked up once per message, so no None check there.
        limit = {p: NO_LIMIT if until is None else until[p] for p in active}
        idle_since = time.monotonic()
        while active:
            messages = consumer.consume(CONSUME_BATCH, CONSUME_WAIT_S)
            if not messages:
                if not follow and time.monotonic() - idle_since > self.settings.read_timeout_s:
                    raise LogUnavailableError(
                        f"reading {topic!r} from {self.settings.bootstrap}: no progress for "
                        f"{self.settings.read_timeout_s:.0f}s (setting read_timeout_s); partitions left {sorted(active)}"
                    )
                continue
            idle_since = time.monotonic()
            for m in messages:
                if m.error() is not None:
                    self._consumer_error(m, active, follow)
                    continue
                partition, offset = m.partition(), m.offset()
                assert partition is not None and offset is not None, "a fetched record always has both"
                if offset >= limit[partition]:
                    self._finish(consumer, topic, partition, active)
                    continue
                yield StoredRecord(topic, partition, offset, m.timestamp()[1], m.key() or b"", m.value())
                if offset + 1 >= limit[partition]:
                    self._finish(consumer, topic, partition, active)

    @staticmethod
    def _finish(consumer: Consumer, topic: str, partition: int, active: set[int]) -> None:
        if partition in active:
            active.discard(partition)
            consumer.pause([TopicPartition(topic, partition)])

    def _consumer_error(self, message: Message, active: set[int], follow: bool) -> None:
        error = message.error()
        if error is None:
            return
        if error.code() == KafkaError._PARTITION_EOF:
            if not follow:
                active.discard(message.partition())
            return
        if error.fatal() or error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            raise LogUnavailableError(f"reading {self.topic!r} from {self.settings.bootstrap}: {error.str()}")
        # Anything else (a broker going away, a leader moving) librdkafka retries by itself.

    def end_offsets(self) -> Offsets:
        return self.end_offsets_of(self.topic, self.partitions)

    def await_stable(self, timeout_s: float = 10.0) -> bool:
        """Wait until no transaction is open on the topic (each last stable offset reached its high watermark).

        A writer that has just fenced another must see everything the fenced one committed; commit markers are
        written after commit_transaction returns, and until they are, the last stable offset stops short.
        """
        deadline = time.monotonic() + timeout_s
        uncommitted = self.consumer({"isolation.level": "read_uncommitted"})
        try:
            while True:
                stable = self.end_offsets()
                high = self._offsets(uncommitted, self.topic, self.partitions)
                if stable == high:
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
        finally:
            uncommitted.close()

    def end_offsets_of(self, topic: str, partitions: int) -> Offsets:
        """The last stable offset of each partition (what a read_committed reader can reach)."""
        return self._offsets(self._metadata_consumer(), topic, partitions)

    def _offsets(self, consumer: Consumer, topic: str, partitions: int) -> Offsets:
        """Each partition's end as `consumer` sees it (its isolation level decides: stable offset or high watermark)."""
        found: Offsets = {}
        for p in range(partitions):
            try:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=self.settings.read_timeout_s, cached=False
                )
            except KafkaException as e:
                raise LogUnavailableError(f"cannot read the end offsets of {topic!r}[{p}]: {e}") from e
            found[p] = int(high)
        return found

    def offsets_for_time(self, timestamp_ms: int) -> Offsets:
        consumer = self._metadata_consumer()
        wanted = [TopicPartition(self.topic, p, timestamp_ms) for p in range(self.partitions)]
        try:
            answered = consumer.offsets_for_times(wanted, timeout=self.settings.read_timeout_s)
        except KafkaException as e:
            raise LogUnavailableError(f"cannot look up offsets by time in {self.topic!r}: {e}") from e
        end = self.end_offsets()
        return {tp.partition: (tp.offset if tp.offset >= 0 else end[tp.partition]) for tp in answered}

    def _metadata_consumer(self) -> Consumer:
        if self._meta_consumer is None:
            self._meta_consumer = self.consumer({})
        return self._meta_consumer

    def subscribe(self, group: str, on_error: ErrorHandler = raise_error) -> KafkaSubscription:
        return KafkaSubscription(group, self, on_error)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshots.save(snapshot)

    def load_snapshot(self, name: str) -> Snapshot | None:
        return self._snapshots.load(name)

    def close(self) -> None:
        super().close()
        self._snapshots.close()
        if self._meta_consumer is not None:
            self._meta_consumer.close()
            self._meta_consumer = None


class KafkaSubscription(Subscription):
    """A member of a Kafka consumer group on the events topic; commits are synchronous."""

    def __init__(self, group: str, log: KafkaLog, on_error: ErrorHandler) -> None:
        super().__init__(group, log.codec, on_error)
        self._log = log
        self._consumer = log.consumer(
            {"group.id": group, "enable.partition.eof": False, "enable.auto.offset.store": True}
        )
        self._consumer.subscribe([log.topic])

    def poll_records(self, timeout: float, max_records: int) -> list[StoredRecord]:
        topic = self._log.topic
        found = []
        for m in self._consumer.consume(max_records, timeout):
            error = m.error()
            if error is not None:
                if error.fatal() or error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                    raise LogUnavailableError(f"group {self.group!r} reading {topic!r}: {error.str()}")
                continue
            partition, offset = m.partition(), m.offset()
            assert partition is not None and offset is not None, "a fetched record always has both"
            found.append(StoredRecord(topic, partition, offset, m.timestamp()[1], m.key() or b"", m.value()))
        return found

    def commit(self) -> None:
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:  # nothing consumed since the last commit
                raise LogUnavailableError(f"group {self.group!r}: cannot commit offsets: {e}") from e

    def committed(self) -> Offsets:
        wanted = [TopicPartition(self._log.topic, p) for p in range(self._log.partitions)]
        try:
            answered = self._consumer.committed(wanted, timeout=self._log.settings.read_timeout_s)
        except KafkaException as e:
            raise LogUnavailableError(f"group {self.group!r}: cannot read committed offsets: {e}") from e
        return {tp.partition: tp.offset for tp in answered if tp.offset >= 0}

    def close(self) -> None:
        self._consumer.close()
