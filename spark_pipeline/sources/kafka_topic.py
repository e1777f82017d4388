"""Kafka topic source (Gobblin's Kafka ingestion case): each topic partition is a dataset, offsets are watermarks.

Dataset URN `<topic>.<partition>` (Gobblin's `PageViewEvent.5`), watermark partition key `<topic>:<partition>`.
A run pulls every whitelisted partition from its committed watermark (else the earliest or latest offset, per
`bootstrap.with.offset`) to its end offset at planning time: with `read_committed` (the default) that is the last
stable offset, so an open transaction is left for a later run. `topic.whitelist` / `topic.blacklist` entries are
regular expressions matched against whole topic names (Gobblin's semantics); a whitelist entry matching no topic
is an error (a typo must not pass for "no data"); internal `__` topics are never pulled.

Watermarks and transactions: offsets of a transactional topic include control records (commit / abort markers)
and the records of aborted transactions, which a `read_committed` consumer never returns. So the watermark after
the last record returned is not always the end of the range: when the extractor knows nothing more lies in range
(it saw the partition end, or a record at or past the planned high) the watermark is the planned high, set as it
returns the last record (and again when it returns None), so a trailing commit marker is not re-read forever.

Empty partitions: a partition whose committed watermark is already at its end gets no work unit (its dataset URN
keeps the state). A partition without a committed watermark always gets one, even empty: it pins where the
partition starts (with `bootstrap.with.offset: latest`, skipping it would let the next run start at a later
"latest" and skip what came in between). So does a partition whose committed watermark fell below the earliest
retained offset: the run starts at the earliest offset, says so in a warning and in the work unit's properties
(`kafka.offsets.lost: <committed>-<earliest>`, the offsets deleted unread), and the watermark's jump shows as a
skipped range in `oncelog verify`. A committed watermark past the partition's end (topic recreated) is an error.

Security: the job's own `kafka.security.protocol`, `kafka.sasl.*` and `kafka.ssl.*` keys, when it sets any, are the
source cluster's (all of them: it may be another cluster than the log's). A job that sets none reads with the log's
security settings (its URL's query, then the job's `oncelog.log.*` keys) when the source brokers share a broker with
the log's URL, and in PLAINTEXT otherwise. librdkafka's log lines and errors go through a `ClientMonitor`; a refused
credential or certificate is a `KafkaSecurityError` naming the listener and the setting.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ClusterMetadata, OffsetSpec
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from events.errors import ConfigError, OncelogError
from events.job import WorkUnitSpec
from events.log import parse_url
from events.log.kafka.config import CLIENT_DEFAULTS, ClientMonitor, is_security_setting
from spark_pipeline.connectors import Connector
from spark_pipeline.constructs import (
    CAUGHT_UP_PROPERTY,
    DataFrameReader,
    Extractor,
    ReadCount,
    Record,
    Schema,
    Source,
    SourceError,
    SourceState,
    UnitKey,
    WorkUnitState,
)
from spark_pipeline.sources.kafka_spark import spark_kafka_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

TOPIC, PARTITION, LOST = "kafka.topic", "kafka.partition", "kafka.offsets.lost"
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "KafkaRecord",
    "namespace": "oncelog.kafka",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": ["null", "long"], "doc": "milliseconds since the epoch (Kafka's timestamp)"},
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"]},
    ],
}
_BROKER = re.compile(r"^[^\s:,]+:\d{1,5}$")
_MISSING = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
WAIT_SLICE_S = 1.0
"""A metadata request waits at most this long at a time (see SourceCluster.list_topics)."""


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


class KafkaSourceSettings(BaseModel):
    """The keys of the Kafka source (Gobblin's names where Gobblin has one)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    brokers: tuple[str, ...] = Field(alias="kafka.brokers", min_length=1)
    whitelist: tuple[str, ...] = Field(alias="topic.whitelist", min_length=1)
    """Regular expressions a topic name must match in full (Gobblin's semantics); each must match a topic."""
    blacklist: tuple[str, ...] = Field(default=(), alias="topic.blacklist")
    security_protocol: Annotated[Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None,
                                 BeforeValidator(_upper)] = Field(default=None, alias="kafka.security.protocol")
    sasl_mechanism: str | None = Field(default=None, alias="kafka.sasl.mechanism")
    sasl_username: str | None = Field(default=None, alias="kafka.sasl.username")
    sasl_password: str | None = Field(default=None, alias="kafka.sasl.password", repr=False)
    ssl_ca_location: str | None = Field(default=None, alias="kafka.ssl.ca.location")
    ssl_certificate_location: str | None = Field(default=None, alias="kafka.ssl.certificate.location")
    ssl_key_location: str | None = Field(default=None, alias="kafka.ssl.key.location")
    ssl_key_password: str | None = Field(default=None, alias="kafka.ssl.key.password", repr=False)
    ssl_endpoint_identification_algorithm: str | None = Field(
        default=None, alias="kafka.ssl.endpoint.identification.algorithm")
    isolation_level: Annotated[Literal["read_committed", "read_uncommitted"], BeforeValidator(_lower)] = Field(
        default="read_committed", alias="kafka.isolation.level")
    bootstrap_with_offset: Annotated[Literal["earliest", "latest"], BeforeValidator(_lower)] = Field(
        default="earliest", alias="bootstrap.with.offset")
    max_records_per_partition: int | None = Field(default=None, ge=1, alias="kafka.max.records.per.partition")
    """A cap on the offsets one run pulls per partition (records plus transaction markers)."""
    fetch_batch_size: int = Field(default=1_000, ge=1, le=1_000_000, alias="kafka.fetch.batch.size")
    timeout_s: float = Field(default=30.0, gt=0, le=3_600, alias="kafka.request.timeout.sec")
    """How long a metadata or offsets request, or a fetch that makes no progress, may take."""

    @field_validator("brokers")
    @classmethod
    def _brokers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [b for b in value if not _BROKER.match(b)]
        if bad:
            raise ValueError(f"brokers must be host:port, not {', '.join(map(repr, bad))}")
        return value

    @field_validator("whitelist", "blacklist")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{pattern!r} is not a regular expression: {e}") from e
        return value

    def own_security(self) -> dict[str, str]:
        """The security settings the job's `kafka.*` keys give, by librdkafka name."""
        named = {"security.protocol": self.security_protocol, "sasl.mechanism": self.sasl_mechanism,
                 "sasl.username": self.sasl_username, "sasl.password": self.sasl_password,
                 "ssl.ca.location": self.ssl_ca_location, "ssl.certificate.location": self.ssl_certificate_location,
                 "ssl.key.location": self.ssl_key_location, "ssl.key.password": self.ssl_key_password,
                 "ssl.endpoint.identification.algorithm": self.ssl_endpoint_identification_algorithm}
        return {k: v for k, v in named.items() if v is not None}

    def security(self, log_url: str, log_settings: Mapping[str, str]) -> dict[str, str]:
        """The source cluster's security settings, by the precedence of the module docstring."""
        own = self.own_security()
        if own:
            return own
        scheme, location, url_settings = parse_url(log_url)
        if scheme != "kafka" or not set(self.brokers) & {b.strip() for b in location.split(",")}:
            return {}
        merged = {**url_settings, **log_settings}
        return {k: v for k, v in merged.items() if is_security_setting(k)}

    def client_config(self, security: Mapping[str, str], monitor: ClientMonitor, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings: the log's client defaults (a new client's first answer in ~15 ms, not ~55), brokers,
        security, the monitor of log lines and errors, then the client's own."""
        config: dict[str, Any] = {**CLIENT_DEFAULTS, "bootstrap.servers": ",".join(self.brokers), "logger": monitor,
                                  "error_cb": monitor.on_error, **security}
        config.update(overrides)
        return config


class SourceCluster:
    """The source's Kafka cluster as its clients reach it: settings, security, and one monitor for them all."""

    def __init__(self, settings: KafkaSourceSettings, log_url: str, log_settings: Mapping[str, str]) -> None:
        self.settings = settings
        self.security = settings.security(log_url, log_settings)
        self.monitor = ClientMonitor(",".join(settings.brokers), self.security,
                                     {"kafka.request.timeout.sec": settings.timeout_s})

    def config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka settings of one client of this cluster."""
        return self.settings.client_config(self.security, self.monitor, **overrides)

    def list_topics(self, client: AdminClient | Consumer, what: str, topic: str | None = None) -> ClusterMetadata:
        """The cluster's metadata, waited for in slices until the timeout so that a refused credential or
        certificate is raised (KafkaSecurityError) within about a second, not retried until the timeout."""
        deadline = time.monotonic() + self.settings.timeout_s
        while True:
            try:
                metadata = client.list_topics(
                    topic=topic, timeout=min(WAIT_SLICE_S, max(deadline - time.monotonic(), 0.1)))
                self.monitor.reachable()
                return metadata
            except KafkaException as e:
                client.poll(0)  # serves error_cb
                self.monitor.check()
                if time.monotonic() >= deadline:
                    raise kafka_failure(e, f"{what} (no answer within {self.settings.timeout_s:.0f}s, setting "
                                           f"kafka.request.timeout.sec; {self.monitor.last_problem or 'no detail'})"
                                        ) from e


def kafka_failure(error: KafkaError | KafkaException | Exception, what: str) -> OncelogError:
    """A confluent-kafka error as ours: ConfigError for a rejected setting, SourceError otherwise."""
    inner = error.args[0] if isinstance(error, KafkaException) and error.args else error
    if isinstance(inner, KafkaError):
        if inner.code() == KafkaError._INVALID_ARG:
            return ConfigError(f"{what}: librdkafka rejected a setting: {inner.str()}")
        return SourceError(f"{what}: {inner.name()}: {inner.str()}")
    return SourceError(f"{what}: {type(error).__name__}: {error}")


def select_topics(metadata: ClusterMetadata, settings: KafkaSourceSettings) -> list[str]:
    """Topics matching a whitelist pattern and no blacklist one (internal `__` topics never); sorted."""
    names = sorted(t for t in metadata.topics if not t.startswith("__"))
    unmatched = [p for p in settings.whitelist if not any(re.fullmatch(p, t) for t in names)]
    if unmatched:
        raise SourceError(f"topic.whitelist: no topic on {','.join(settings.brokers)} matches "
                          f"{', '.join(map(repr, unmatched))} (topics are not auto-created: create them first)")
    return [t for t in names if any(re.fullmatch(p, t) for p in settings.whitelist)
            and not any(re.fullmatch(p, t) for p in settings.blacklist)]


def list_offsets(admin: AdminClient, partitions: list[TopicPartition], specs: Sequence[OffsetSpec],
                 settings: KafkaSourceSettings, monitor: ClientMonitor) -> list[dict[tuple[str, int], int]]:
    """Per spec (earliest, end), one offset per partition, read with the configured isolation level; every spec's
    request sent before any answer is waited for."""
    if not partitions:
        return [{} for _ in specs]
    isolation = (IsolationLevel.READ_COMMITTED if settings.isolation_level == "read_committed"
                 else IsolationLevel.READ_UNCOMMITTED)
    requests = [admin.list_offsets({tp: spec for tp in partitions}, isolation_level=isolation,
                                   request_timeout=settings.timeout_s) for spec in specs]
    found: list[dict[tuple[str, int], int]] = []
    for futures in requests:
        offsets: dict[tuple[str, int], int] = {}
        for tp, future in futures.items():
            try:
                offsets[(tp.topic, tp.partition)] = future.result(timeout=settings.timeout_s).offset
            except (KafkaException, TimeoutError) as e:
                monitor.check()
                raise kafka_failure(e, f"cannot list the offsets of {tp.topic}[{tp.partition}]") from e
        found.append(offsets)
    return found


class KafkaTopicSource(Source, DataFrameReader):
    """`source.class: spark_pipeline.sources.kafka_topic.KafkaTopicSource`: one work unit per topic partition."""

    CONFIG_MODEL = KafkaSourceSettings
    READ_COUNT = ReadCount.OFFSETS

    def read_frame(self, spark: SparkSession, units: Sequence[tuple[int, WorkUnitSpec]], attempt: int) -> DataFrame:
        from spark_pipeline.sources.kafka_frame import OffsetRange, kafka_frame  # PySpark: DataFrame engine only
        ranges = [OffsetRange(i, u.properties[TOPIC], int(u.properties[PARTITION]), u.low_watermark,
                              u.expected_high_watermark) for i, u in units]
        return kafka_frame(spark, self.spark_options(), ranges)

    def spark_options(self) -> dict[str, str]:
        """The options of Spark's Kafka reader for this source: its brokers, isolation level, and security settings
        chosen as the records engine chooses them (the job's `kafka.*` keys, else the log's on shared brokers)."""
        settings: KafkaSourceSettings = self.settings()
        config = self.config
        own = bool(settings.own_security())
        try:
            options = spark_kafka_options(",".join(settings.brokers), settings.security(config.log_url,
                                                                                        config.log_settings))
        except ConfigError as e:
            origin = "its kafka.* keys" if own else "the log's settings (URL, oncelog.log.*)"
            advice = "" if own else ("; or give the source its own kafka.security.protocol, kafka.sasl.* and "
                                     "kafka.ssl.* keys")
            raise ConfigError(f"job {config.job_name!r}, Kafka source security from {origin}: {e}{advice}") from e
        return options | {"kafka.isolation.level": settings.isolation_level}

    def record_schema(self, units: Sequence[WorkUnitSpec]) -> str | None:
        return json.dumps(SCHEMA)

    def connectors(self) -> frozenset[Connector]:
        return frozenset({Connector.KAFKA})

    def unit_key(self) -> UnitKey:
        return UnitKey(("topic", "partition"), lambda unit: (unit.properties[TOPIC], int(unit.properties[PARTITION])))

    def get_work_units(self, state: SourceState) -> list[WorkUnitSpec]:
        settings: KafkaSourceSettings = self.settings()
        where = f"Kafka brokers {','.join(settings.brokers)}"
        cluster = SourceCluster(settings, self.config.log_url, self.config.log_settings)
        try:
            admin = AdminClient(cluster.config())
        except KafkaException as e:
            raise kafka_failure(e, f"cannot read the topics of {where}") from e
        metadata = cluster.list_topics(admin, f"cannot read the topics of {where}")
        partitions: list[TopicPartition] = []
        for topic in select_topics(metadata, settings):
            described = metadata.topics[topic]
            if described.error is not None:
                raise kafka_failure(described.error, f"topic {topic!r} on {where}")
            partitions += [TopicPartition(topic, p) for p in sorted(described.partitions)]
        earliest, ends = list_offsets(admin, partitions, (OffsetSpec.earliest(), OffsetSpec.latest()), settings,
                                      cluster.monitor)
        units = [self._plan(state, settings, tp.topic, tp.partition, earliest[(tp.topic, tp.partition)],
                            ends[(tp.topic, tp.partition)]) for tp in partitions]
        return [u for u in units if u is not None]

    def _plan(self, state: SourceState, settings: KafkaSourceSettings, topic: str, partition: int, earliest: int,
              end: int) -> WorkUnitSpec | None:
        """The work unit of one partition, or None when it is caught up (see the module docstring)."""
        urn, key = f"{topic}.{partition}", f"{topic}:{partition}"
        start = earliest if settings.bootstrap_with_offset == "earliest" else end
        committed = _committed(state, urn, key)
        low = start if committed is None else committed
        properties = {TOPIC: topic, PARTITION: str(partition)}
        if low > end:
            raise SourceError(f"{topic}[{partition}]: the committed watermark {low} is past the partition's end "
                              f"offset {end}: was the topic deleted and recreated, or the log truncated?")
        if low < earliest:
            properties[LOST] = f"{low}-{earliest}"
            log.warning("%s[%d]: offsets %d to %d were deleted (retention) before they were ingested: starting at "
                        "the earliest offset %d", topic, partition, low, earliest - 1, earliest)
            low = earliest
        elif committed is not None and committed == end:
            return None
        high = end if settings.max_records_per_partition is None else min(end, low + settings.max_records_per_partition)
        if high == end:
            properties[CAUGHT_UP_PROPERTY] = "true"
        return WorkUnitSpec(work_unit_id=f"{key}@{low}", dataset_urn=urn, partition=key, low_watermark=low,
                            expected_high_watermark=high, estimated_records=high - low, properties=properties)

    def get_extractor(self, state: WorkUnitState) -> Extractor:
        return KafkaTopicExtractor(state, self.settings())


def _committed(state: SourceState, urn: str, key: str) -> int | None:
    """The partition's committed watermark, or None when no run committed one."""
    dataset = state.dataset_states.get(urn)
    return None if dataset is None else dataset.watermarks.get(key)


class KafkaTopicExtractor(Extractor):
    """Reads one partition from the low watermark up to (not including) the planned high offset."""

    def __init__(self, state: WorkUnitState, settings: KafkaSourceSettings) -> None:
        super().__init__(state)
        unit = state.work_unit
        self.settings = settings
        self.topic = unit.properties[TOPIC]
        self.partition = int(unit.properties[PARTITION])
        self.high = unit.expected_high_watermark
        self._buffer: deque[tuple[int, Record]] = deque()
        self._ended = unit.low_watermark >= self.high
        self._consumer: Consumer | None = None
        self._cluster = SourceCluster(settings, state.config.log_url, state.config.log_settings)

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def get_schema(self) -> Schema:
        return SCHEMA

    def read_record(self) -> Record | None:
        if not self._buffer:
            self._fill()
            if not self._buffer:
                self.next_watermark = max(self.next_watermark, self.high)
                return None
        offset, record = self._buffer.popleft()
        self.next_watermark = offset + 1
        if not self._buffer:
            self._fill()
            if not self._buffer and self._ended:
                self.next_watermark = self.high  # nothing else in range: past any trailing transaction marker
        return record

    def _open(self) -> Consumer:
        """A consumer assigned to the partition at the low watermark, after checking that the partition exists."""
        config = self._cluster.config(**{
            "group.id": f"oncelog.{self.state.config.job_name}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": True, "auto.offset.reset": "error",
            "isolation.level": self.settings.isolation_level, "fetch.wait.max.ms": 100})
        try:
            consumer = Consumer(config)
        except KafkaException as e:
            raise kafka_failure(e, f"cannot read {self.where}") from e
        try:
            topics = self._cluster.list_topics(consumer, f"cannot read {self.where}", self.topic).topics
        except OncelogError:
            consumer.close()
            raise
        described = topics.get(self.topic)
        if described is None or described.error is not None or self.partition not in described.partitions:
            consumer.close()
            raise SourceError(f"{self.where} does not exist on {','.join(self.settings.brokers)} (planned at offsets "
                              f"{self.state.work_unit.low_watermark}-{self.high}: deleted since?)")
        consumer.assign([TopicPartition(self.topic, self.partition, self.state.work_unit.low_watermark)])
        return consumer

    def _fill(self) -> None:
        """Fetch until a record in range is buffered or the end of the range is known."""
        if self._buffer or self._ended:
            return
        if self._consumer is None:
            self._consumer = self._open()
        deadline = time.monotonic() + self.settings.timeout_s
        while not self._buffer and not self._ended:
            try:
                batch = self._consumer.consume(self.settings.fetch_batch_size, timeout=0.1)
            except KafkaException as e:
                raise kafka_failure(e, f"cannot read {self.where} at offset {self.next_watermark}") from e
            if batch:
                deadline = time.monotonic() + self.settings.timeout_s
            else:
                self._cluster.monitor.check()
            self._take(batch)
            if not batch and time.monotonic() > deadline:
                raise SourceError(f"{self.where}: no record nor end of partition within {self.settings.timeout_s}s "
                                  f"at offset {self.next_watermark} (planned high {self.high})")

    def _take(self, batch: list[Message]) -> None:
        """Buffer the records in range as Avro records; a record past the range or the partition's end at or past
        it ends the range."""
        topic, partition, high, buffer = self.topic, self.partition, self.high, self._buffer
        for message in batch:
            error = message.error()
            if error is not None:
                self._take_error(error, message.offset())
                continue
            offset = message.offset()
            if offset is None or offset >= high - 1:
                self._ended = True
                if offset is None or offset >= high:
                    continue
            timestamp_type, timestamp = message.timestamp()
            buffer.append((offset, {"topic": topic, "partition": partition, "offset": offset,
                                    "timestamp": None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp,
                                    "key": message.key(), "value": message.value()}))

    def _take_error(self, error: KafkaError, offset: int | None) -> None:
        """The partition's end at or past the range ends it (below it: a lagging leader, wait); other errors raise."""
        if error.code() == KafkaError._PARTITION_EOF:
            self._ended = self._ended or (offset is not None and offset >= self.high)
        elif error.code() in _MISSING:
            raise SourceError(f"{self.where} does not exist on {','.join(self.settings.brokers)}: {error.str()}")
        elif error.code() in _OUT_OF_RANGE:
            raise SourceError(f"{self.where}: offset {self.next_watermark} is no longer available (deleted by "
                              f"retention?): the next run starts at the earliest offset and records the loss")
        else:
            raise kafka_failure(error, f"cannot read {self.where} at offset {self.next_watermark}")

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

