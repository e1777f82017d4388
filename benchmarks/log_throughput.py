"""Log throughput: append and read+decode events/s of each store, beside a raw confluent-kafka baseline.

    python -m benchmarks.log_throughput [--quick] [--events N] [--batch N] [--repeats R] [--stores kafka,sqlite]

Events are a realistic mix, built before any timing: per dataset of a run, one `TaskSucceeded` (a WorkUnitResult
with an OutputFile), one `CommitSequencePlanned` (FsRename, HighWatermark, DatasetState steps), three
`CommitStepApplied` and one `WatermarkAdvanced`. Stores append them in atomic batches through one writer (encoding
included: that is their append path) and read them all back decoded.

The raw baseline produces the SAME pre-encoded (key, value, partition) records with a plain idempotent producer (no
transaction) and consumes them with a plain consumer, on a topic made the same way (same configs, same partitions),
with the same librdkafka batching, compression and fetch settings as oncelog's clients: the ratios measure what
oncelog adds (codec, transactions, read_committed, records). Store and raw repeats alternate, so that the load of a
shared machine weighs on both alike, after an untimed warm-up of the broker. The codec alone (`codec_*`) is
measured too: the ceiling of every store, with its lean path beside the validated one in the same run, repeats
alternating: `codec_build` (the events built from their fields unvalidated, as the commit builds its own:
`Frozen.trusted`) beside `codec_build_validated` (`Event(...)`); `codec_view` (a reader's two fields, run and time,
from the record's envelope, its payload neither decoded nor built: `EventCodec.view`) beside `codec_decode` (every
event decoded and built, every record decoded: `EventCodec(memo=False)`, the path before the decoded memo);
`codec_decode_first` (the default codec reading records for the first time: what the memo costs a first read)
and `codec_decode_again` (the default codec reading records it decoded before: a window of 2,000 read over and
over) beside `codec_decode_again_unremembered` (the same reads with every record decoded); `codec_encode` (the
writers generated from the event models) beside `codec_encode_general` (datum dicts, then the schema's compiled
writer: the path before them). Per event type (`typed_events`, and the commit's batch records, per dataset):
`codec_<type>_encode` beside `_encode_general`, `_decode`, its `_read` and `_validate` apart, and `_view`.
`codec_*_us`: wall µs per event at the median repeat. Each figure is events/s at the median repeat (`*_eps`) and this
process's CPU µs per event (`*_cpu_us`, steadier when the machine is loaded; the broker's CPU is not in it).
The Kafka broker is `$KAFKA_BOOTSTRAP`, or a local one started for the run. Last line of stdout: the JSON figures.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from benchmarks.common import (
    Timing,
    emit_result,
    freeze_fixtures,
    kafka_bootstrap,
    measure,
    note,
    time_once,
)
from events.batch import (
    CommitSequencesCompleted,
    CommitSequencesPlanned,
    Published,
    SequenceEnd,
    SequencePlan,
    StateCommitted,
)
from events.codec import EventCodec, Record
from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from events.dataset import DatasetStateCommitted, WatermarkAdvanced
from events.log import EventLog, LogWriter, open_log
from events.log.kafka.store import (
    BOUNDED_READ_SETTINGS,
    CONSUME_BATCH,
    CONSUME_WAIT_S,
    READER_SETTINGS,
    KafkaLog,
)
from events.log.kafka.writer import PRODUCER_TUNING
from events.log.sqlite import SqliteLog
from events.model import Event, RunFields, SequenceFields
from events.published import PublishedFile, WatermarkRange
from events.task import OutputFile, TaskStarted, TaskSucceeded, WorkUnitResult

PARTITIONS = 3
STORES = ("kafka", "sqlite")
WARM_UP_BATCHES = 5
KAFKA_FIGURES = ("raw_produce", "kafka_append", "raw_consume", "kafka_read")
CODEC_SAMPLE = 50_000
"""The codec's rates are measured on this many events (the mix repeats every six): they do not vary with count."""
REREAD_WINDOW = 2_000
"""`codec_decode_again` reads the first this many records over and over (a log read again, as a catch-up after each
run of a simulation reads it): fewer than the decoded memo keeps (events.codec.DECODED_MEMO_SIZE)."""
TYPE_SAMPLE = 10_000
"""Events of each type the per-type codec figures (`codec_<type>_*_us`) are measured on."""
BATCH_ENTRIES = 100
"""Datasets in each batch event (`CommitSequencesPlanned`, `CommitSequencesCompleted`) of the per-type figures; a
batch type's figures are per dataset, TYPE_SAMPLE datasets in all."""
T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
TARGETS = {"kafka_append_ratio": 0.5, "kafka_read_ratio": 0.5, "sqlite_append_eps": 50_000, "sqlite_read_eps": 100_000}


def dataset_events(i: int) -> list[Event]:
    """The six events one dataset of one run leaves in the log: task done, plan, three steps, watermark."""
    job, run_id, urn = f"ingest-job-{i % 8}", f"run-{i:08d}", f"kafka.events.topic_{i % 50}"
    at = T0 + timedelta(milliseconds=10 * i)
    src, dst = f"/data/task-output/{run_id}/{urn}/part-00000.avro", f"/data/job-output/{urn}/{run_id}-00000.avro"
    checksum, partition = f"{i:064x}", f"{urn}:{i % 4}"
    result = WorkUnitResult(
        work_unit_id=f"wu-{i}", dataset_urn=urn, partition=partition, low_watermark=1000 * i,
        expected_high_watermark=1000 * i + 1000, actual_high_watermark=1000 * i + 998, records_extracted=998,
        records_written=998, bytes_written=65_536,
        output_files=(OutputFile(path=src, size=65_536, checksum=checksum, records=998),),
    )
    steps = (
        FsRenameStep(src=src, dst=dst, size=65_536, checksum=checksum),
        HighWatermarkStep(partition=partition, low_watermark=1000 * i, value=1000 * i + 998),
        DatasetStateStep(watermarks={partition: 1000 * i + 998}, records_published=998, files_published=1),
    )
    scope: RunFields = {"job": job, "run_id": run_id}
    dataset: SequenceFields = {**scope, "dataset_urn": urn, "sequence_id": run_id}
    return [
        TaskSucceeded(**scope, task_id=f"task-{i}", attempt=1, results=(result,), duration_ms=1234, emitted_at=at),
        CommitSequencePlanned(**dataset, steps=steps, emitted_at=at),
        *(
            CommitStepApplied(**dataset, step_index=s, outcome="executed", duration_ms=1.5 + s, emitted_at=at)
            for s in range(3)
        ),
        WatermarkAdvanced(**dataset, partition=partition, low_watermark=1000 * i, value=1000 * i + 998, emitted_at=at),
    ]


def typed_events(i: int) -> list[Event]:
    """One event of each type oncelog writes and reads back by the thousand, for dataset `i` of a run: the mix's
    four, and the task's start, the sequence's completion and the dataset's state."""
    task, planned, applied, _, _, advanced = dataset_events(i)
    assert isinstance(planned, CommitSequencePlanned) and isinstance(advanced, WatermarkAdvanced)
    sequence: SequenceFields = {"job": planned.job, "run_id": planned.run_id, "dataset_urn": planned.dataset_urn,
                                "sequence_id": planned.sequence_id}
    at = planned.emitted_at
    return [
        TaskStarted(job=task.job, run_id=task.run_id, task_id=f"task-{i}", attempt=1, work_unit_ids=(f"wu-{i}",),
                    executor="driver", emitted_at=at),
        task, planned, applied, advanced,
        DatasetStateCommitted(**sequence, watermarks={advanced.partition: advanced.value}, records_published=998,
                              files_published=1, emitted_at=at),
        CommitSequenceCompleted(**sequence, emitted_at=at),
    ]


def batch_events(count: int) -> list[Event]:
    """The plans and completions of `count` datasets of one run (`dataset_events`), recorded as a commit records them:
    in batches of BATCH_ENTRIES."""
    plans, ends = [], []
    for i in range(count):
        _, planned, _, _, _, advanced = dataset_events(i)
        assert isinstance(planned, CommitSequencePlanned) and isinstance(advanced, WatermarkAdvanced)
        rename, _, state = planned.steps
        assert isinstance(rename, FsRenameStep) and isinstance(state, DatasetStateStep)
        moved = WatermarkRange(partition=advanced.partition, low_watermark=advanced.low_watermark,
                               high_watermark=advanced.value)
        plans.append(SequencePlan(dataset_urn=planned.dataset_urn, sequence_id=planned.sequence_id,
                                  steps=planned.steps))
        ends.append(SequenceEnd(
            dataset_urn=planned.dataset_urn, sequence_id=planned.sequence_id, advanced=(moved,),
            state=StateCommitted.of(state), duration_ms=8.5, executed=3, step_ms=(1.5, 2.5, 3.5),
            published=Published(files=(PublishedFile(path=rename.dst, size=rename.size, checksum=rename.checksum,
                                                     records=998),),
                                watermarks=(moved,), files_published=1, records_published=998,
                                bytes_published=rename.size)))
    scope: RunFields = {"job": "ingest-job-0", "run_id": "run-00000000"}
    cut = range(0, count, BATCH_ENTRIES)
    return [
        *(CommitSequencesPlanned(**scope, sequences=tuple(plans[i:i + BATCH_ENTRIES]), members=f"{i:016x}",
                                 emitted_at=T0) for i in cut),
        *(CommitSequencesCompleted(**scope, sequences=tuple(ends[i:i + BATCH_ENTRIES]), members=f"{i:016x}",
                                   emitted_at=T0) for i in cut)]


def build_events(count: int) -> list[Event]:
    """`count` distinct events in the realistic mix (whole datasets, the last one cut short)."""
    events: list[Event] = []
    i = 0
    while len(events) < count:
        events.extend(dataset_events(i))
        i += 1
    return events[:count]


def batches(events: list[Event], size: int) -> list[list[Event]]:
    """The events cut into atomic batches of `size`."""
    return [events[i : i + size] for i in range(0, len(events), size)]


def append_all(writer: LogWriter, batched: list[list[Event]]) -> None:
    """Append every batch through one writer."""
    for batch in batched:
        writer.append(batch)


def read_all(log: EventLog, count: int) -> None:
    """Read every event back, decoded (and dropped, as a fold does); check that all of them came."""
    seen = sum(1 for _ in log.read())
    if seen != count:
        raise RuntimeError(f"read {seen} events from {log.url}, expected {count}")


def bench_codec(events: list[Event], records: list[Record], repeats: int) -> dict[str, Timing]:
    """The codec alone, with no store: what no store's append or read can go faster than (rates per event); its
    lean path beside the validated one, repeats alternating."""
    codec, unremembering, general = EventCodec(), EventCodec(memo=False), EventCodec(generated=False)
    fields = [(type(e), dict(e)) for e in events]
    again = records[:REREAD_WINDOW] * -(-len(records) // REREAD_WINDOW)

    def build(_: None) -> None:
        for cls, given in fields:
            cls.trusted(**given)

    def build_validated(_: None) -> None:
        for cls, given in fields:
            cls(**given)

    def encode(through: EventCodec, _: None) -> None:
        for event in events:
            through.to_record(event, PARTITIONS)

    def decode(_: None) -> None:
        for r in records:
            unremembering.decode(r.value or b"", "bench", r.partition, 0, r.key)

    def decode_first(_: None) -> None:
        codec.registry.decoded.clear()
        for offset, r in enumerate(records):  # each record read for the first time: none kept, none found
            codec.decode(r.value or b"", "bench", r.partition, offset, r.key)

    def decode_again(cached: EventCodec, _: None) -> None:
        cached.registry.decoded.clear()  # the offsets decode_first read are forgotten: this log is the window
        for i, r in enumerate(again[:len(records)]):  # the window's records, at their offsets again and again
            cached.decode(r.value or b"", "bench", r.partition, i % REREAD_WINDOW, r.key)

    def view(_: None) -> None:
        last_event_of_run: dict[str, datetime] = {}  # a fold of two fields
        for r in records:
            view = codec.view(r.value or b"", "bench", r.partition, 0, r.key)
            last_event_of_run[view.run_id] = view.emitted_at

    runs: dict[str, Callable[[None], None]] = {
        "codec_build": build, "codec_build_validated": build_validated, "codec_encode": partial(encode, codec),
        "codec_encode_general": partial(encode, general), "codec_decode": decode,
        "codec_decode_first": decode_first, "codec_decode_again_unremembered": partial(decode_again, unremembering),
        "codec_decode_again": partial(decode_again, codec), "codec_view": view}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(time_once(partial(run, None)))
    return {name: Timing.of(values) for name, values in samples.items()}


def bench_types(count: int, repeats: int) -> dict[str, Timing]:
    """Per event type (`typed_events`, and `count` datasets' `batch_events`), `count` events each: encode
    (`to_record`, and `encode_general`: the same through the general path, the baseline of the writers generated from
    the models), decode (built and validated, memo off), and decode split into its parts: `read` (frame, checksum,
    fastavro's reader: the fields as a dict) and `validate` (pydantic-core building the event from them); `view`
    (the envelope alone). Repeats alternate."""
    codec, unremembering, general = EventCodec(), EventCodec(memo=False), EventCodec(generated=False)
    by_type: dict[str, list[Event]] = {}
    for event in [e for i in range(count) for e in typed_events(i)] + batch_events(count):
        by_type.setdefault(event.event_type(), []).append(event)
    runs: dict[str, Callable[[], None]] = {}
    for name, events in by_type.items():
        records = [codec.to_record(e, PARTITIONS) for e in events]
        schemas = unremembering._read(records[0].value or b"", "bench", 0, 0, records[0].key)[0]
        read = [unremembering._read(r.value or b"", "bench", 0, 0, r.key)[1] for r in records]
        runs[f"codec_{name}_encode"] = partial(_encode_all, codec, events)
        runs[f"codec_{name}_encode_general"] = partial(_encode_all, general, events)
        runs[f"codec_{name}_decode"] = partial(_decode_all, unremembering.decode, records)
        runs[f"codec_{name}_read"] = partial(_decode_all, unremembering._read, records)
        runs[f"codec_{name}_validate"] = partial(_validate_all, schemas.validate, read)
        runs[f"codec_{name}_view"] = partial(_decode_all, codec.view, records)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(time_once(run))
    return {name: Timing.of(values) for name, values in samples.items()}


def _encode_all(codec: EventCodec, events: list[Event]) -> None:
    for event in events:
        codec.to_record(event, PARTITIONS)


def _decode_all(decode: Callable[[bytes, str, int, int, bytes], object], records: list[Record]) -> None:
    for r in records:
        decode(r.value or b"", "bench", r.partition, 0, r.key)


def _validate_all(validate: Callable[[dict[str, Any]], Event], fields: list[dict[str, Any]]) -> None:
    for given in fields:
        validate(given)  # validation reads the dict, it does not change it


def bench_sqlite(work_dir: Path, events: list[Event], batch: int, repeats: int) -> dict[str, Timing]:
    """SQLite: append into a fresh file per repeat, then read+decode the last one."""
    batched, opened = batches(events, batch), list[SqliteLog]()

    def fresh() -> LogWriter:
        log = SqliteLog(work_dir / f"events-{uuid.uuid4().hex}.db", partitions=PARTITIONS)
        log.ensure_topic()
        opened.append(log)
        return log.writer("bench")

    try:
        append = measure(lambda writer: append_all(writer, batched), repeats, fresh)
        read = measure(lambda log: read_all(log, len(events)), repeats, lambda: opened[-1])
    finally:
        for log in opened:
            log.close()  # closes each log's writer too
    return {"sqlite_append": append, "sqlite_read": read}


def new_kafka_log(bootstrap: str, topics: list[str]) -> KafkaLog:
    """A Kafka log on a new topic (created as oncelog creates its topic); the topic is recorded for clean-up."""
    topic = f"oncelog.bench.{uuid.uuid4().hex[:12]}"
    log = open_log(f"kafka://{bootstrap}?topic={topic}&partitions={PARTITIONS}")
    if not isinstance(log, KafkaLog):
        raise TypeError(f"expected a KafkaLog, got {type(log).__name__}")
    log.ensure_topic()
    topics += [topic, f"{topic}.snapshots"]
    return log


def raw_producer(bootstrap: str, topic: str) -> Producer:
    """A plain idempotent producer, connected and holding its producer id (as a store writer is once created)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER_TUNING})
    producer.produce(f"{topic}.snapshots", b"warm-up")
    if producer.flush(30) != 0:
        raise RuntimeError(f"raw producer: no answer from {bootstrap}")
    return producer


def raw_produce(producer: Producer, topic: str, records: list[Record]) -> None:
    """Produce pre-encoded records (no transaction, no delivery callback) and wait until all are delivered."""
    produce, poll = producer.produce, producer.poll
    for r in records:
        while True:
            try:
                produce(topic, r.value, r.key, partition=r.partition, timestamp=r.timestamp_ms)
                break
            except BufferError:
                poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError(f"raw producer: messages left undelivered in {topic}")


def raw_consume(bootstrap: str, topic: str, count: int) -> None:
    """Consume a topic to its end with a plain consumer (consume() in batches), touching each key and value."""
    settings = {**READER_SETTINGS, **BOUNDED_READ_SETTINGS}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}", **settings})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    active, seen = set(range(PARTITIONS)), 0
    try:
        while active:
            for m in consumer.consume(CONSUME_BATCH, CONSUME_WAIT_S):
                error = m.error()
                if error is None:
                    m.key(), m.value()
                    seen += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    active.discard(m.partition())
                else:
                    raise RuntimeError(f"raw consumer: {error.str()}")
    finally:
        consumer.close()
    if seen != count:
        raise RuntimeError(f"raw consumer read {seen} records from {topic}, expected {count}")


def bench_kafka(
    bootstrap: str, events: list[Event], records: list[Record], batch: int, repeats: int, topics: list[str]
) -> dict[str, Timing]:
    """Raw and store, alternating: produce vs transactional append (a fresh topic each), then consume vs read."""
    batched, opened = batches(events, batch), list[KafkaLog]()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in KAFKA_FIGURES}
    warm_up(bootstrap, batched[:WARM_UP_BATCHES], topics)
    try:
        for _ in range(repeats):
            raw_log = new_kafka_log(bootstrap, topics)
            raw_log.close()
            producer = raw_producer(bootstrap, raw_log.topic)
            samples["raw_produce"].append(time_once(partial(raw_produce, producer, raw_log.topic, records)))
            log = new_kafka_log(bootstrap, topics)
            opened.append(log)
            with log.writer("bench") as writer:  # init_transactions: before the clock starts
                samples["kafka_append"].append(time_once(partial(append_all, writer, batched)))
        for _ in range(repeats):
            samples["raw_consume"].append(time_once(partial(raw_consume, bootstrap, raw_log.topic, len(records))))
            samples["kafka_read"].append(time_once(partial(read_all, opened[-1], len(events))))
    finally:
        for log in opened:
            log.close()
    return {name: Timing.of(values) for name, values in samples.items()}


def warm_up(bootstrap: str, batched: list[list[Event]], topics: list[str]) -> None:
    """Append and read a few batches, untimed: a broker just started runs slowly until the JVM has compiled it."""
    with new_kafka_log(bootstrap, topics) as log, log.writer("warm-up") as writer:
        append_all(writer, batched)
        read_all(log, sum(len(b) for b in batched))


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Remove the benchmark's topics (a shared broker given by KAFKA_BOOTSTRAP must not fill up)."""
    if topics:
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until every deletion is answered
        for future in admin.delete_topics(topics).values():
            try:
                future.result(30)
            except Exception as e:  # best effort: a leftover topic is no reason to fail the run
                note(f"could not delete a benchmark topic: {e}")


def run_kafka(events: list[Event], records: list[Record], batch: int, repeats: int) -> dict[str, Timing]:
    """The Kafka measurements, against `$KAFKA_BOOTSTRAP` or a broker started for them."""
    topics: list[str] = []
    with kafka_bootstrap() as bootstrap:
        note(f"kafka at {bootstrap}: store and raw baseline")
        try:
            return bench_kafka(bootstrap, events, records, batch, repeats, topics)
        finally:
            delete_topics(bootstrap, topics)
            note("kafka done")


def figures_of(timings: dict[str, Timing], counts: dict[str, int], batch: int, repeats: int) -> dict[str, Any]:
    """The JSON figures: events/s at the median of the repeats, CPU µs per event, ratios to raw, targets met.

    `counts`: how many events each measurement handled.
    """
    figures: dict[str, Any] = {
        "events": max(counts.values()), "batch": batch, "repeats": repeats, "partitions": PARTITIONS
    }
    for name, timing in timings.items():
        figures[f"{name}_eps"] = round(timing.rate(counts[name]))
    for name, timing in timings.items():  # steadier than events/s on a loaded machine (the broker's CPU not counted)
        figures[f"{name}_cpu_us"] = round(timing.cpu_us(counts[name]), 2)
    for name, timing in timings.items():
        if name.startswith("codec_"):
            figures[f"{name}_us"] = round(timing.median / counts[name] * 1e6, 2)
    if "kafka_append" in timings:
        figures["kafka_append_ratio"] = round(figures["kafka_append_eps"] / figures["raw_produce_eps"], 3)
        figures["kafka_read_ratio"] = round(figures["kafka_read_eps"] / figures["raw_consume_eps"], 3)
    for name, target in TARGETS.items():
        if name in figures:
            figures[f"{name.rsplit('_', 1)[0]}_target_met"] = figures[name] >= target
    return figures


def main(argv: list[str] | None = None) -> None:
    """Build the events, time the codec, each store and the raw baseline; print the table and the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.log_throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k events (under a minute, broker start included)")
    parser.add_argument("--events", type=int, help="how many events (default: 100k with --quick, else 1M)")
    parser.add_argument("--batch", type=int, default=10_000, help="events per atomic batch (default 10k)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per figure; the median is reported")
    parser.add_argument("--stores", default=",".join(STORES),
                        help="the stores to measure besides the codec, comma-separated (default: kafka,sqlite)")
    args = parser.parse_args(argv)
    if min(args.events or 1, args.batch, args.repeats) < 1:
        parser.error("--events, --batch and --repeats must be at least 1")
    stores = {s.strip() for s in args.stores.split(",") if s.strip()}
    if not stores <= set(STORES):
        parser.error(f"--stores: unknown store(s) {', '.join(sorted(stores - set(STORES)))} (known: kafka, sqlite)")
    count = args.events or (100_000 if args.quick else 1_000_000)
    note(f"building {count:,} events")
    events = build_events(count)
    codec = EventCodec()
    records = [codec.to_record(e, PARTITIONS) for e in events]
    freeze_fixtures()
    sample = min(count, CODEC_SAMPLE)
    note(f"codec, on the first {sample:,} events")
    timings = bench_codec(events[:sample], records[:sample], args.repeats)
    counts = {name: sample for name in timings}
    note(f"codec per event type, {TYPE_SAMPLE:,} events of each")
    typed = bench_types(TYPE_SAMPLE, args.repeats)
    timings |= typed
    counts |= {name: TYPE_SAMPLE for name in typed}
    if "kafka" in stores:
        timings |= run_kafka(events, records, args.batch, args.repeats)
    if "sqlite" in stores:
        with tempfile.TemporaryDirectory(prefix="oncelog-bench-sqlite-") as work_dir:
            note("sqlite store")
            timings |= bench_sqlite(Path(work_dir), events, args.batch, args.repeats)
    counts = {name: counts.get(name, count) for name in timings}
    for name, timing in timings.items():
        note(f"{name:22} events/s per repeat: {timing.spread(counts[name])}")
    emit_result(figures_of(timings, counts, args.batch, args.repeats), title=f"log throughput, {count:,} events")


if __name__ == "__main__":
    main()
