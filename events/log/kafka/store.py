"""The Kafka store: the log in a compacted topic; consumers read with isolation.level=read_committed.

`kafka://host:port[,host:port]?topic=oncelog.events&partitions=6&replication=3&security.protocol=SASL_SSL&...`
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, TopicMetadata

from events.codec import EventCodec
from events.errors import ConfigError, LogNotStableError, LogUnavailableError
from events.log.interface import (
    ErrorHandler,
    EventLog,
    Offsets,
    Snapshot,
    StoredRecord,
    Subscription,
    raise_error,
)
from events.log.kafka.config import (
    DEFAULT_PARTITIONS,
    ClientMonitor,
    KafkaSettings,
    is_transient,
    refresh_leaders,
)
from events.log.kafka.lease import KafkaLeaseStore, locks_topic
from events.log.kafka.readers import ReaderPool
from events.log.kafka.snapshots import KafkaSnapshotStore
from events.log.kafka.writer import KafkaWriter
from events.log.lock import LeaseJobLock

CONSUME_BATCH = 10_000
CONSUME_WAIT_S = 0.02
"""How long a read waits at most for its next record or partition end before it looks at its deadline again. A read
takes what has arrived with consume(batch, 0) and, only when nothing has, waits with poll(), which returns as soon as
one message or end of partition comes: consume() with a timeout returns early only once its batch is full, so it
waited out the whole timeout at the end of every read (20 ms of each fold)."""
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

logger = logging.getLogger(__name__)

STABLE_POLL_S = 0.05
OFFSETS_RETRY_FIRST_S = 0.05
TOPIC_CREATE_PAUSE_S = 0.5
OFFSETS_RETRY_MAX_S = 1.0
"""Bounded backoff between attempts to read end offsets that failed with a transient error."""
WAIT_SLICE_S = 1.0
"""A blocking metadata call waits at most this long at a time, so a refused credential or certificate (which
librdkafka retries forever) is raised within about a second rather than at the end of the read timeout."""
TOPIC_VISIBLE_S = 3.0
"""How long a topic missing from the cluster's metadata may be one just created by another client."""
SAFE_REPLICATION = 3
SAFE_MIN_INSYNC = 2

BOUNDED_READ_SETTINGS: dict[str, Any] = {"fetch.wait.max.ms": 10}
"""Added for reads that stop at the end. librdkafka learns that a partition is at its end only from a fetch the
broker answers empty, which it holds back up to fetch.wait.max.ms (500 ms by default) in case data comes; and a
read often cannot end sooner, on its last record, since a batch's last offset is its transaction marker."""


COMPACTION_CONFIGS: dict[str, str] = {
    "max.compaction.lag.ms": str(60 * 60 * 1000),
    "segment.ms": str(60 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.5",
    "delete.retention.ms": str(24 * 60 * 60 * 1000),
}
"""When compaction removes what `oncelog gc` tombstoned (docs/log.md): a record is eligible for compaction at most an
hour after it is written (max.compaction.lag.ms, which also rolls the active segment on the next append after an
hour; segment.ms the same), whatever the dirty ratio; the tombstones themselves stay a day longer
(delete.retention.ms), so that a reader in the middle of the log still sees them. The folds honour a tombstone the
moment they read it: compaction only frees the disk."""



def topic_configs(replication: int) -> dict[str, str]:
    """The explicit configs of the events topic (and its snapshots and locks): compacted, durable, compacted within
    a bounded time."""
    return {
        "cleanup.policy": "compact",
        "min.insync.replicas": str(min(SAFE_MIN_INSYNC, replication)),
        "message.timestamp.type": "CreateTime",
        "unclean.leader.election.enable": "false",
        **COMPACTION_CONFIGS,
    }


def _fix(topic: str, setting: str) -> str:
    """The command that sets a topic config as oncelog needs it."""
    return (
        f"kafka-configs.sh --bootstrap-server HOST:PORT --alter --entity-type topics --entity-name {topic} "
        f"--add-config {setting}"
    )


def refuse_lossy_policy(topic: str, configs: Mapping[str, str]) -> None:
    """A ConfigError naming the setting and its fix when the topic's retention deletes history (`cleanup.policy`
    other than exactly `compact`): a fold of it would miss what retention removed."""
    policy = configs.get("cleanup.policy", "")
    if policy != "compact":
        raise ConfigError(
            f"topic {topic!r} has cleanup.policy={policy}: an oncelog topic must be compacted and nothing else, or "
            f"retention deletes history and watermarks fall back; fix: {_fix(topic, 'cleanup.policy=compact')}"
        )


def check_topic_configs(topic: str, replication: int, configs: Mapping[str, str] | None) -> str | None:
    """Refuse a topic that loses history (ConfigError naming the setting); a warning when it is not fully durable.

    History is lost for sure by retention (`cleanup.policy` other than exactly `compact`). With 3 or more replicas,
    acknowledged events are lost when one broker fails if `min.insync.replicas` < 2 or an out-of-sync replica may
    become leader (`unclean.leader.election.enable=true`): refused too. Fewer replicas (a development broker) only
    warn. `configs` is None when they could not be described (ACLs): then only a warning says so.
    """
    if configs is None:
        return f"topic {topic!r}: its configs could not be described (ACLs?), so its durability was not checked"
    refuse_lossy_policy(topic, configs)
    min_insync = int(configs.get("min.insync.replicas", "1"))
    unclean = configs.get("unclean.leader.election.enable", "false").lower() == "true"
    if replication < SAFE_REPLICATION:
        return (
            f"topic {topic!r} has replication factor {replication} (min.insync.replicas={min_insync}): losing "
            f"one broker's disk loses acknowledged events; fine for development, not for production (use "
            f"replication >= {SAFE_REPLICATION} with min.insync.replicas >= {SAFE_MIN_INSYNC})"
        )
    if min_insync < SAFE_MIN_INSYNC:
        raise ConfigError(
            f"topic {topic!r} has min.insync.replicas={min_insync} with replication factor {replication}: an event "
            f"acknowledged by one broker alone is lost when that broker fails; "
            f"fix: {_fix(topic, f'min.insync.replicas={SAFE_MIN_INSYNC}')}"
        )
    if unclean:
        raise ConfigError(
            f"topic {topic!r} has unclean.leader.election.enable=true: an out-of-sync replica may become leader and "
            f"drop acknowledged events; fix: {_fix(topic, 'unclean.leader.election.enable=false')}"
        )
    return None


def compaction_warning(topic: str, configs: Mapping[str, str] | None, bootstrap: str) -> str | None:
    """The warning for an existing topic whose compaction settings differ from COMPACTION_CONFIGS (a topic made
    before them keeps its own: what `gc` deletes then stays on disk for as long as they say), with the exact command
    that sets them; None when they are as docs/log.md says (or could not be described)."""
    if configs is None:
        return None
    differ = {key: want for key, want in COMPACTION_CONFIGS.items() if configs.get(key) != want}
    if not differ:
        return None
    found = ", ".join(f"{key}={configs.get(key, '?')} (oncelog sets {want})" for key, want in differ.items())
    setting = ",".join(f"{key}={want}" for key, want in differ.items())
    return (f"topic {topic!r} keeps compaction settings other than oncelog's ({found}): what `oncelog gc` deletes "
            f"may stay on disk longer than docs/log.md says; set them with: {_fix(topic, setting)}"
            .replace("HOST:PORT", bootstrap))


class TopicAbsentError(Exception):
    """The topic whose end offsets were asked for does not exist (read as empty: a log nothing was written to)."""


def check_partitions(topic: str, metadata: TopicMetadata, partitions: int) -> None:
    """A ConfigError when an existing topic does not have the partitions the log's settings ask for."""
    if len(metadata.partitions) != partitions:
        raise ConfigError(
            f"topic {topic!r} has {len(metadata.partitions)} partitions, not the {partitions} asked for "
            f"(setting 'partitions'); an existing log's partitioning cannot change"
        )


class KafkaLog(EventLog):
    """A log kept in a Kafka topic (compacted), with snapshots in `<topic>.snapshots`."""

    def __init__(self, settings: KafkaSettings, codec: EventCodec | None = None) -> None:
        super().__init__(codec)
        self.settings = settings
        self.topic = settings.topic
        self.url = settings.url
        self.monitor: ClientMonitor = settings.monitor()
        """Watches every client of this log: their log lines, outages, refused credentials or certificates."""
        self._admin: AdminClient = settings.make("admin", AdminClient, {}, self.monitor)
        self._partitions: int | None = None
        self._meta_consumer: Consumer | None = None
        self._readers = ReaderPool(self.consumer)
        """The consumers of bounded reads and stable-end checks, reused between them."""
        self._snapshots = KafkaSnapshotStore(self)
        self._leases = KafkaLeaseStore(self)
        self._durability_checked = False
        self._history_checked = False
        self._durability: str | None = None
        self._warned: set[str] = set()
        """The warnings this log already logged: a run asks for its durability more than once."""
        self._created: set[str] = set()
        """Topics this log created: until the metadata of every broker shows them, they may be reported missing."""
        self._present: set[str] = set()
        """Topics this log created or found (ensure_topic): has_topic need not ask again (a run asks three times)."""

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
        """Create the events and snapshot topics with explicit configs, or check the existing ones: a topic that
        loses history is a ConfigError; a merely development-grade one sets `durability_warning` (logged once).
        Existing topics are described in one metadata request and their configs in one more (a run's setup waited
        on six round trips for this)."""
        wanted = ((self.topic, self.settings.partitions or DEFAULT_PARTITIONS, self.settings.partitions is not None),
                  (self._snapshots.topic, 1, False), (self._leases.topic, 1, False))
        metadata = self._list_topics(self.topic)
        warnings: dict[str, str | None] = {}
        existing: dict[str, TopicMetadata] = {}
        for topic, partitions, asked in wanted:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None:
                warnings[topic] = self._ensure(topic, partitions, asked)
                continue
            if asked:
                check_partitions(topic, found, partitions)
            existing[topic] = found
        configs = self._topics_configs(list(existing))
        for topic, found in existing.items():
            warnings[topic] = self._check(topic, found, configs[topic])
        self._present.update(topic for topic, _, _ in wanted)
        if configs.get(self.topic) is not None:  # its cleanup.policy checked just now: the first read need not ask
            self._history_checked = True
        self._partitions = None
        self._set_durability(warnings[self.topic])

    @property
    def durability_warning(self) -> str | None:
        """Why the events topic may lose acknowledged events (fewer than 3 replicas, say); None when durable."""
        if not self._durability_checked:
            found = self._describe(self.topic)
            self._set_durability(None if found is None else self._check(self.topic, found,
                                                                        self._topics_configs([self.topic])[self.topic]))
        return self._durability

    def _set_durability(self, warning: str | None) -> None:
        """Keep the events topic's durability warning; log it once per process (a run opens its log more than
        once: the CLI, the launcher, each commit shard's task)."""
        self._warn_once(warning)
        self._durability, self._durability_checked = warning, True

    def _warn_once(self, warning: str | None) -> None:
        """Log a warning about the log's topics, once per log object."""
        if warning is not None and warning not in self._warned:
            self._warned.add(warning)
            logger.warning("%s", warning)

    def _ensure(self, topic: str, partitions: int, partitions_asked: bool) -> str | None:
        """Create a topic, or check an existing one; returns its durability warning."""
        existing = self._describe(topic)
        if existing is None:
            replication = self.settings.replication or min(SAFE_REPLICATION, self._broker_count())
            configs = topic_configs(replication)
            if self._create(NewTopic(topic, partitions, replication, config=configs)):
                self._created.add(topic)
                return check_topic_configs(topic, replication, configs)
            existing = self._describe_when_visible(topic)
        if partitions_asked:
            check_partitions(topic, existing, partitions)
        return self._check(topic, existing, self._topics_configs([topic])[topic])

    def _create(self, new: NewTopic) -> bool:
        """Create a topic: True when this call created it, False when it already existed. A transient error (the
        request's broker handle dropped as the client learns the cluster, a controller moving) is retried until the
        write timeout, after checking that the lost attempt did not create the topic after all."""
        deadline = time.monotonic() + self.settings.write_timeout_s
        while True:
            try:
                self._admin.create_topics([new])[new.topic].result(timeout=30)
                return True
            except KafkaException as e:
                error = e.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    return False
                if not is_transient(error) or time.monotonic() >= deadline:
                    raise LogUnavailableError(
                        f"cannot create topic {new.topic!r} on {self.settings.bootstrap}: {error.str()}") from e
                logger.info("creating topic %r failed transiently (%s); retrying", new.topic, error.str())
                time.sleep(TOPIC_CREATE_PAUSE_S)
                if self._describe(new.topic) is not None:
                    return False

    def _check(self, topic: str, metadata: TopicMetadata, configs: dict[str, str] | None) -> str | None:
        """check_topic_configs on an existing topic: its configs as described (None: describing them was denied),
        its smallest replica count; its compaction settings other than oncelog's are warned about (once)."""
        replication = min((len(p.replicas) for p in metadata.partitions.values()), default=0)
        warning = check_topic_configs(topic, replication, configs)
        self._warn_once(compaction_warning(topic, configs, self.settings.bootstrap))
        return warning

    def topic_role(self, topic: str) -> str:
        """A topic as the user knows it: the log topic they gave, or what an internal topic is for."""
        if topic == self.topic:
            return f"log topic {topic!r}"
        if topic == f"{self.topic}.snapshots":
            return f"the snapshots of log topic {self.topic!r}"
        if topic == locks_topic(self.topic):
            return f"the job locks of log topic {self.topic!r}"
        return f"topic {topic!r}"

    def _list_topics(self, topic: str) -> Any:
        """The cluster's metadata (all topics), waited for in slices until the read timeout; LogUnavailableError
        naming the brokers and the topic when it does not come, KafkaSecurityError at once when refused."""
        deadline = time.monotonic() + self.settings.read_timeout_s
        while True:
            try:
                # All topics, not list_topics(topic=...): asking for one topic auto-creates it on brokers that allow it.
                metadata = self._admin.list_topics(timeout=min(WAIT_SLICE_S, max(deadline - time.monotonic(), 0.1)))
                self.monitor.reachable()
                return metadata
            except KafkaException as e:
                self._admin.poll(0)  # serves error_cb: a refused credential surfaces here
                self.monitor.check()
                if time.monotonic() >= deadline:
                    raise self.monitor.unreachable(
                        f"describing {self.topic_role(topic)}", self.settings.read_timeout_s, "read_timeout_s",
                        str(e.args[0].str() if e.args else e)) from e

    def _describe(self, topic: str) -> TopicMetadata | None:
        """The topic's metadata (partitions and their replicas); None when it does not exist."""
        metadata = self._list_topics(topic)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return None
        return found

    def _absent(self, topic: str) -> bool:
        """Whether the topic does not exist: the cluster's metadata lacks it for TOPIC_VISIBLE_S (a topic another
        client has just created reaches the metadata a moment later)."""
        deadline = time.monotonic() + TOPIC_VISIBLE_S
        while self._describe(topic) is None:
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.2)
        return False

    def _describe_when_visible(self, topic: str) -> TopicMetadata:
        """The metadata of a topic the broker says exists: new topics reach the metadata a moment later."""
        deadline = time.monotonic() + self.settings.read_timeout_s
        while (found := self._describe(topic)) is None:
            if time.monotonic() >= deadline:
                raise LogUnavailableError(f"topic {topic!r} on {self.settings.bootstrap}: exists, yet its metadata "
                                          f"did not show it within {self.settings.read_timeout_s} s")
            time.sleep(0.1)
        return found

    def ensure_locks_topic(self) -> None:
        """Create the job locks' topic if it is missing (as `ensure_topic` does with the others)."""
        self._ensure(self._leases.topic, 1, False)

    def has_topic(self, topic: str) -> bool:
        """Whether the topic exists on the cluster: one this log created or found, else as its metadata says now."""
        return topic in self._present or self._describe(topic) is not None

    def _describe_partitions(self, topic: str) -> int | None:
        found = self._describe(topic)
        return None if found is None else len(found.partitions)

    def _broker_count(self) -> int:
        return max(1, len(self._list_topics(self.topic).brokers))

    def _topics_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str] | None]:
        """Each topic's effective configs (its own, else the broker's defaults), in one request; None for a topic
        whose describing is denied (ACLs may deny it)."""
        resources = {topic: ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in topics}
        futures = self._admin.describe_configs(list(resources.values())) if resources else {}
        found: dict[str, dict[str, str] | None] = {}
        for topic, resource in resources.items():
            try:
                configs = futures[resource].result(timeout=30)
            except KafkaException:
                found[topic] = None
                continue
            found[topic] = {name: str(entry.value) for name, entry in configs.items() if entry.value is not None}
        return found

    def job_lock(self, job: str) -> LeaseJobLock:
        """A lease in `<topic>.locks`, renewed by a heartbeat: a second run is refused while the holder is alive."""
        return LeaseJobLock(job, self._leases)

    def writer(self, name: str) -> KafkaWriter:
        return self.writer_for(self.topic, name, self.partitions)

    def writer_for(self, topic: str, name: str, partitions: int) -> KafkaWriter:
        """A transactional writer on any topic of this cluster (the snapshot store writes its own topic)."""
        return KafkaWriter(name, self.codec, partitions, self.settings, topic, self.monitor, self._admin)

    def consumer(self, overrides: Mapping[str, Any]) -> Consumer:
        """A consumer with this log's settings, read_committed."""
        config = {"group.id": f"oncelog-reader-{uuid.uuid4()}", **READER_SETTINGS, **overrides}
        return self.settings.make("consumer", Consumer, config, self.monitor)

    def read_records(
        self, start: Mapping[int, int] | None = None, until: Mapping[int, int] | None = None, follow: bool = False
    ) -> Iterator[StoredRecord]:
        self._refuse_lossy_history()
        return self.read_topic(self.topic, self.partitions, start, until, follow)

    def _refuse_lossy_history(self) -> None:
        """Before the first read of the events topic: refuse one whose retention deletes history (a fold of it would
        be wrong, and `state` would answer from it silently); once per log object."""
        if self._history_checked:
            return
        if self._describe(self.topic) is not None and (
                configs := self._topics_configs([self.topic])[self.topic]) is not None:
            refuse_lossy_policy(self.topic, configs)
        self._history_checked = True

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
        with self._readers.borrowed(topic, {} if follow else BOUNDED_READ_SETTINGS) as consumer:
            consumer.assign([TopicPartition(topic, p, first[p]) for p in sorted(active)])
            yield from self._consume(consumer, topic, active, until, follow)

    def _consume(
        self, consumer: Consumer, topic: str, active: set[int], until: Mapping[int, int] | None, follow: bool
    ) -> Iterator[StoredRecord]:
        # Where each partition's reading stops (exclusive): looked up once per message, so no None check there.
        limit = {p: NO_LIMIT if until is None else until[p] for p in active}
        idle_since = time.monotonic()
        while active:
            messages = self._arrived(consumer)
            if not messages:
                self.monitor.check()
                if not follow and time.monotonic() - idle_since > self.settings.read_timeout_s:
                    raise self.monitor.unreachable(
                        f"reading {self.topic_role(topic)} (no progress; partitions left {sorted(active)})",
                        self.settings.read_timeout_s, "read_timeout_s", "no records nor end of partition")
                continue
            idle_since = time.monotonic()
            self.monitor.reachable()
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
    def _arrived(consumer: Consumer) -> list[Message]:
        """The messages that have arrived; when none has, the next one as soon as it comes (or none after
        CONSUME_WAIT_S)."""
        messages: list[Message] = consumer.consume(CONSUME_BATCH, 0)
        if messages:
            return messages
        first = consumer.poll(CONSUME_WAIT_S)
        return [] if first is None else [first]

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
            raise LogUnavailableError(f"reading {self.topic_role(message.topic() or self.topic)} from "
                                      f"{self.settings.bootstrap}: {self.settings.scrub(error.str())}")
        # Anything else (a broker going away, a leader moving) librdkafka retries by itself.

    def end_offsets(self) -> Offsets:
        return self.end_offsets_of(self.topic, self.partitions)

    def await_stable(self, timeout_s: float = 10.0) -> None:
        """Wait until every transaction holding records written before the call is decided: each partition's last
        stable offset reaches its high watermark at the call. LogNotStableError names the partitions that did not.

        A writer that has just fenced another must see everything the fenced one committed; commit markers are
        written after commit_transaction returns, and until they are, the last stable offset stops short. A
        transaction begun after the call does not count: a busy log is stable in this sense.
        """
        deadline = time.monotonic() + timeout_s
        with self._readers.borrowed(self.topic, {"isolation.level": "read_uncommitted"}) as uncommitted:
            target = self._offsets(uncommitted, self.topic, self.partitions)
            while True:
                stable = self.end_offsets()
                short = [p for p, high in target.items() if stable[p] < high]
                if not short:
                    return
                if time.monotonic() >= deadline:
                    high_now = self._offsets(uncommitted, self.topic, self.partitions)
                    raise LogNotStableError(self.topic, {p: (stable[p], high_now[p]) for p in short}, timeout_s)
                time.sleep(STABLE_POLL_S)

    def end_offsets_of(self, topic: str, partitions: int) -> Offsets:
        """The last stable offset of each partition (what a read_committed reader can reach)."""
        return self._offsets(self._metadata_consumer(), topic, partitions)

    def _offsets(self, consumer: Consumer, topic: str, partitions: int) -> Offsets:
        """Each partition's end as `consumer` sees it (its isolation level decides: stable offset or high watermark).

        Transient errors (a topic just created, a leader moving) are retried with a bounded backoff until the read
        timeout; then LogUnavailableError names the partition. A topic that does not exist ends at 0 everywhere: a
        log not created yet reads as one without history.
        """
        deadline = time.monotonic() + self.settings.read_timeout_s
        try:
            return {p: self._end_of(consumer, TopicPartition(topic, p), deadline) for p in range(partitions)}
        except TopicAbsentError:
            return dict.fromkeys(range(partitions), 0)  # not created yet (a fresh log): it holds no history

    def _end_of(self, consumer: Consumer, partition: TopicPartition, deadline: float) -> int:
        pause = OFFSETS_RETRY_FIRST_S
        while True:
            remaining = deadline - time.monotonic()
            try:
                _, high = consumer.get_watermark_offsets(
                    partition, timeout=min(WAIT_SLICE_S, max(remaining, 0.1)), cached=False
                )
                self.monitor.reachable()
                return int(high)
            except KafkaException as e:
                error: KafkaError = e.args[0]
                consumer.poll(0)  # serves error_cb (never assigned: returns no record)
                self.monitor.check()
                where = f"{self.topic_role(partition.topic)}, partition {partition.partition}"
                if not is_transient(error):
                    raise LogUnavailableError(
                        f"cannot read the end offset of {where} on {self.settings.bootstrap}: "
                        f"{self.settings.scrub(error.str())}"
                    ) from e
                if deadline - time.monotonic() <= 0:
                    raise self.monitor.unreachable(
                        f"reading the end offset of {where}", self.settings.read_timeout_s, "read_timeout_s",
                        error.str()
                    ) from e
                if error.code() in (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    just_created = partition.topic in self._created
                    if not just_created and self._absent(partition.topic):  # a topic that is not there
                        raise TopicAbsentError(partition.topic) from e
                refresh_leaders(consumer, partition.topic, min(WAIT_SLICE_S, max(deadline - time.monotonic(), 0.1)))
                time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
                pause = min(2 * pause, OFFSETS_RETRY_MAX_S)

    def offsets_for_time(self, timestamp_ms: int) -> Offsets:
        answered = self._offsets_at(self._metadata_consumer(), timestamp_ms)
        end = self.end_offsets()
        return {tp.partition: (tp.offset if tp.offset >= 0 else end[tp.partition]) for tp in answered}

    def _offsets_at(self, consumer: Consumer, timestamp_ms: int) -> list[TopicPartition]:
        """The first offset at or after the time in each partition, asked in short slices until the read timeout,
        the partitions' leaders looked up again between tries (a leader that died is asked no more)."""
        wanted = [TopicPartition(self.topic, p, timestamp_ms) for p in range(self.partitions)]
        deadline = time.monotonic() + self.settings.read_timeout_s
        while True:
            try:
                answered: list[TopicPartition] = consumer.offsets_for_times(
                    wanted, timeout=min(WAIT_SLICE_S, max(deadline - time.monotonic(), 0.1)))
                self.monitor.reachable()
                return answered
            except KafkaException as e:
                error: KafkaError = e.args[0]
                consumer.poll(0)  # serves error_cb (never assigned: returns no record)
                self.monitor.check()
                doing = f"looking up offsets by time in {self.topic_role(self.topic)}"
                if not is_transient(error):
                    raise LogUnavailableError(f"cannot finish {doing} on {self.settings.bootstrap}: "
                                              f"{self.settings.scrub(error.str())}") from e
                if deadline - time.monotonic() <= 0:
                    raise self.monitor.unreachable(doing, self.settings.read_timeout_s, "read_timeout_s",
                                                   error.str()) from e
                refresh_leaders(consumer, self.topic, min(WAIT_SLICE_S, max(deadline - time.monotonic(), 0.1)))

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
        self._readers.close()
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
        messages = self._consumer.consume(max_records, timeout)
        if not messages:
            self._log.monitor.check()  # a refused credential or certificate, which librdkafka retries forever
        for m in messages:
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
