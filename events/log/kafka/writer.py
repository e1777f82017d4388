"""Atomic batches on Kafka: an idempotent, transactional producer; one transaction per batch.

The transactional id comes from the writer's name, so opening a second writer with the same name (a second
run of the same job) fences the first. Errors take the three branches of confluent-kafka's documented loop:
retriable (try the same call again), abortable (abort, then send the whole batch again) and fatal (the writer
is dead; FencedError when a newer writer took over).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from events.codec import EventCodec, Record
from events.errors import FencedError, LogUnavailableError, LogWriteError
from events.log.interface import LogWriter
from events.log.kafka.config import ClientMonitor, KafkaSettings

FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
ABORTED_BATCH_RETRIES = 3
RETRY_PAUSE_S = 0.2
INIT_SLICE_S = 1.0
"""init_transactions waits at most this long at a time (it may be called again after a timeout), so a refused
credential or certificate, which librdkafka retries forever, is raised within about a second."""
VISIBILITY_WAIT_S = 10.0
"""How long an append waits for its own commit markers (normally milliseconds) before returning anyway."""
VISIBILITY_SLICE_S = 1.0
"""One look at a partition's stable offset waits at most this long, then the leaders are looked up again."""
FOREIGN_HOLD_GRACE_S = 0.25
"""How long an append waits when a transaction older than its batch holds a partition's stable offset: long enough
for the markers of one just committed; one left open (a killed writer) holds it until its timeout, not waited for."""
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
    "compression.type": "lz4",
}
"""The writer's batching and compression (benchmarks give their plain-producer baseline the same)."""

T = TypeVar("T")


class _AbortableError(Exception):
    """The transaction was aborted and the batch can be sent again."""


def transactional_id(topic: str, name: str) -> str:
    """The transactional id of a writer: one per (topic, writer name)."""
    return f"oncelog.{topic}.{name}"


class KafkaWriter(LogWriter):
    """Appends each batch in one Kafka transaction; readers with read_committed see all of it or none."""

    def __init__(self, name: str, codec: EventCodec, partitions: int, settings: KafkaSettings, topic: str,
                 monitor: ClientMonitor, admin: AdminClient) -> None:
        """`admin`: the log's admin client, which asks the stable offsets of each batch (one of the writer's own
        would wait for its first connection, ~12 ms, on its first batch)."""
        super().__init__(name, codec, partitions)
        self.topic = topic
        self._timeout = settings.write_timeout_s
        self._dead: Exception | None = None
        self._monitor = monitor
        self._producer: Producer = settings.make(
            "producer",
            Producer,
            {
                "transactional.id": transactional_id(topic, name),
                "enable.idempotence": True,
                "acks": "all",
                **PRODUCER_TUNING,
                "transaction.timeout.ms": int(self._timeout * 1000),
                "allow.auto.create.topics": False,  # _connect asks for the topic's metadata: never create it
            },
            monitor,
        )
        self._visibility = admin
        self._first_offsets: dict[int, int] = {}
        self._last_offsets: dict[int, int] = {}
        self._held: dict[int, int] = {}
        """Per partition, the stable offset at which another writer's transaction was last found holding it."""
        self._connect()
        self._call("init_transactions", lambda: self._producer.init_transactions(INIT_SLICE_S))

    def _connect(self) -> None:
        """Have the broker connections up before init_transactions: librdkafka asks for the producer id as soon as
        one is, but when none is yet it asks again on a fixed 500 ms timer (six shard writers fenced in parallel:
        0.52 s against 0.08 s). The first metadata may come over the bootstrap connection, so it is asked twice.
        Best effort: an unreachable cluster is waited for, and reported, by init_transactions."""
        try:
            for _ in range(2):
                self._producer.list_topics(self.topic, timeout=INIT_SLICE_S)
        except KafkaException:
            return

    def append_records(self, records: Iterable[Record]) -> int:
        if self._dead is not None:
            raise LogWriteError(f"writer {self.name!r} can no longer append: {self._dead}") from self._dead
        sent: list[Record] = []
        source: Iterator[Record] = iter(records)
        for attempt in range(1, ABORTED_BATCH_RETRIES + 1):
            try:
                self._transaction(source, sent)
                return len(sent)
            except _AbortableError as e:
                if attempt == ABORTED_BATCH_RETRIES:
                    raise LogWriteError(
                        f"writer {self.name!r}: the batch of {len(sent)} records was aborted {attempt} times, "
                        f"nothing of it is visible; last error: {e}"
                    ) from e
                # Send the whole batch again: what the aborted transaction took, then what it had not reached.
                source, sent = iter([*sent, *source]), []
                time.sleep(RETRY_PAUSE_S)
        raise AssertionError("unreachable")

    def _transaction(self, records: Iterable[Record], sent: list[Record]) -> None:
        """One transaction: begin, produce every record, commit. Any failure aborts it."""
        producer = self._producer
        self._first_offsets, self._last_offsets = {}, {}
        self._call("begin_transaction", producer.begin_transaction)
        try:
            self._produce_all(records, sent)
            self._call("commit_transaction", lambda: producer.commit_transaction(self._timeout))
            self._await_visible(self._first_offsets, self._last_offsets)
        except BaseException:
            # Whatever failed (Kafka, or the caller's iterable mid-batch): nothing of the batch may become visible.
            # A dead (fenced or fatally failed) producer cannot abort; the broker aborts its transaction for it.
            if self._dead is None:
                self._abort()
            raise

    def _produce_all(self, records: Iterable[Record], sent: list[Record]) -> None:
        """Produce the batch; only each partition's first and last records ask for a delivery report.

        Their offsets are all `_await_visible` needs (a partition's records get increasing offsets in the order
        they are produced), and a Python callback for every record costs about as much as producing it. So each
        partition's latest record is held back until the next one for that partition comes, or the batch ends.
        """
        held: dict[int, Record] = {}
        reported: set[int] = set()
        for record in records:
            sent.append(record)
            previous = held.get(record.partition)
            if previous is not None:
                first = record.partition not in reported
                reported.add(record.partition)
                self._produce(previous, self._delivered if first else None)
            held[record.partition] = record
        for record in held.values():
            self._produce(record, self._delivered)

    def _produce(self, record: Record, on_delivery: Callable[[KafkaError | None, Message], None] | None) -> None:
        """Produce one record, waiting for room in the producer's queue when it is full."""
        while True:
            try:
                self._producer.produce(
                    self.topic,
                    record.value,
                    record.key,
                    partition=record.partition,
                    timestamp=record.timestamp_ms,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as e:
                self._classify(e, "produce")

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        """Record where a partition's first and last records of the batch landed (errors surface in
        commit_transaction)."""
        partition, offset = message.partition(), message.offset()
        if error is None and partition is not None and offset is not None:
            self._first_offsets[partition] = min(self._first_offsets.get(partition, offset), offset)
            self._last_offsets[partition] = max(self._last_offsets.get(partition, offset), offset)

    def _await_visible(self, first_offsets: dict[int, int], last_offsets: dict[int, int]) -> None:
        """Wait until the commit markers of the batch just committed are written (read-your-writes).

        commit_transaction returns before the broker has written them, and until it has, a read_committed reader's
        end (the partition's last stable offset, LSO) stops short of the batch. While our transaction is open on a
        partition the LSO is at most its first offset there; so an LSO past that offset says it is decided. An LSO
        below it is held by an older transaction of another writer: the markers of one just committed come within
        milliseconds, but one left open (a killed writer) holds it until the broker aborts it, and waiting for it
        would stall every append: readers see that in `EventLog.await_stable`, not here. Bounded either way: the
        batch is committed. Each look asks every pending partition's LSO in one ListOffsets request per leader (a
        round trip a partition cost 2-3 ms each on loopback; the leaders are looked up afresh each time).
        """
        start = time.monotonic()
        pending = {p: first_offsets.get(p, offset) for p, offset in last_offsets.items()}
        while pending and time.monotonic() - start < VISIBILITY_WAIT_S:
            for partition, stable in self._stable_offsets(self._visibility, pending).items():
                first = pending[partition]
                if stable > first or self._held_by_another(partition, stable, first, time.monotonic() - start):
                    del pending[partition]
            if pending:
                time.sleep(0.005)

    def _stable_offsets(self, admin: AdminClient, partitions: Iterable[int]) -> dict[int, int]:
        """The last stable offset of each partition that answered within VISIBILITY_SLICE_S (one that did not, its
        leader perhaps gone, is asked again on the next look)."""
        asked = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in partitions}
        try:
            futures = admin.list_offsets(asked, isolation_level=IsolationLevel.READ_COMMITTED,
                                         request_timeout=VISIBILITY_SLICE_S)
        except KafkaException:
            return {}
        stable: dict[int, int] = {}
        for tp, future in futures.items():
            try:
                stable[tp.partition] = future.result().offset
            except KafkaException:
                continue
        return stable

    def _held_by_another(self, partition: int, stable: int, first: int, waited_s: float) -> bool:
        """Whether a transaction of another writer, older than our batch, holds the partition's stable offset and
        stays open (past a short grace, or still the one found holding it before): then it is not waited for."""
        if stable >= first:
            return False
        if self._held.get(partition) == stable or waited_s >= FOREIGN_HOLD_GRACE_S:
            self._held[partition] = stable
            return True
        return False

    def check_fenced(self) -> None:
        """A probe transaction, aborted: the coordinator refuses its AddPartitionsToTxn (FencedError) once a newer
        writer with this name has started. Nothing becomes visible (an aborted tombstone); costs a few round trips
        (~ms), so callers share one probe among the checks waiting together (the commit's event sink does)."""
        if self._dead is not None:
            raise self._dead if isinstance(self._dead, FencedError) else LogWriteError(
                f"writer {self.name!r} can no longer append: {self._dead}")
        self._call("begin_transaction", self._producer.begin_transaction)
        try:
            self._produce(Record(0, f"oncelog-fence-probe/{self.name}".encode(), None, int(time.time() * 1000)), None)
            try:
                self._producer.flush(self._timeout)  # delivery needs the partition added to the transaction: the check
            except KafkaException as e:  # flush raises a fatal error (fenced) itself
                self._classify(e, "check_fenced")
        except _AbortableError as e:
            raise LogWriteError(f"writer {self.name!r}: the fence check could not be made: {e}") from e
        finally:
            if self._dead is None:
                self._abort()

    def _abort(self) -> None:
        """Abort the open transaction; if that fails, the producer's transaction state is unknown: the writer dies."""
        try:
            self._call("abort_transaction", lambda: self._producer.abort_transaction(self._timeout), aborting=True)
        except LogWriteError as e:
            if self._dead is None:
                self._dead = e
            raise

    def _serve_callbacks(self) -> None:
        """Serve error_cb, so a refused credential or certificate surfaces in the monitor. A fenced or fatal producer
        raises its error from poll as well: that error is the one being handled already, so it is not raised twice."""
        try:
            self._producer.poll(0)
        except KafkaException:
            return

    def _call(self, what: str, operation: Callable[[], T], aborting: bool = False) -> T:
        """Run a transactional call: retriable errors retried until the write timeout, the rest classified."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                result = operation()
                self._monitor.reachable()
                return result
            except KafkaException as e:
                error = e.args[0]
                self._serve_callbacks()
                self._monitor.check()
                if error.retriable() and not error.fatal() and time.monotonic() < deadline:
                    time.sleep(RETRY_PAUSE_S)
                    continue
                if aborting and error.txn_requires_abort():
                    raise LogWriteError(f"writer {self.name!r}: abort_transaction failed: {error.str()}") from e
                self._classify(e, what)

    def _classify(self, e: KafkaException, what: str) -> None:
        """Raise the error that fits: abortable (retry the batch), fenced, fatal, or unavailable."""
        error: KafkaError = e.args[0]
        if error.code() in FENCED_CODES:
            self._dead = FencedError(self.name, error.str())
            raise self._dead from e
        if error.fatal():
            self._dead = LogWriteError(f"writer {self.name!r}: fatal Kafka error in {what}: {error.str()}")
            raise self._dead from e
        if error.txn_requires_abort():
            raise _AbortableError(f"{what}: {error.str()}") from e
        if error.retriable():
            outcome = (
                "the batch may or may not have been committed (re-appending the same events is harmless)"
                if what == "commit_transaction"
                else "nothing of the batch is visible"
            )
            unanswered = LogUnavailableError if what == "init_transactions" else LogWriteError
            problem = self._monitor.last_problem or error.str()
            raise unanswered(
                f"writer {self.name!r}: Kafka at {self._monitor.bootstrap} did not answer {what} on topic "
                f"{self.topic!r} within {self._timeout:.0f}s (setting write_timeout_s): {problem}; {outcome}"
            ) from e
        raise LogWriteError(f"writer {self.name!r}: {what} failed: {error.str()}") from e

    def close(self) -> None:
        self._producer.flush(5)
