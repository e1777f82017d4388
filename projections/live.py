"""The live projector: a faust-streaming app folding the events topic into tables, with HTTP views.

One agent reads the events topic (raw Avro frames, read_committed), folds each event with `live_fold.fold_event`
(State's own dispatch and reducers) and writes what changed to Faust tables backed by compacted changelog topics.
A table entry is written from the partition of the event that changed it, and its key starts with that event's
aggregate, so the changelog partition of a key is the events-topic partition of its aggregate.

Views: `/datasets`, `/datasets/{urn}`, `/runs/{run_id}`, `/commits/pending`; unknown ones answer 404 with JSON.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime
from enum import IntEnum
from typing import Any, NoReturn, cast

import faust
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from faust.exceptions import SameNode
from faust.tables.manager import TableManager
from faust.types import StreamT, TableT
from faust.types.enums import ProcessingGuarantee
from faust.web import Request, Response, View

from events.codec import EventCodec
from events.errors import ConfigError, EventDecodeError, LogUnavailableError
from events.kafka_config import KafkaSettings
from events.kafka_store import KafkaLog
from events.log import parse_url
from events.model import Position
from projections import live_fold
from projections.live_fold import DATASETS, RUNS, SEQUENCES, TABLES, fold_event, key_parts, table_key
from projections.live_settings import LiveSettings
from projections.snapshot_codec import view_from_json, view_to_json
from projections.views import DatasetView, RunView, SequenceView

logger = logging.getLogger(__name__)

MAX_REPLICATION = 3
ONCELOG_SETTINGS = ("topic", "partitions", "replication", "write_timeout_s", "read_timeout_s")

Tables = Mapping[str, TableT[bytes, Any]]


def kafka_settings(url: str) -> KafkaSettings:
    """The Kafka settings of a log URL; ConfigError for a SQLite log or a librdkafka setting faust cannot take."""
    scheme, location, settings = parse_url(url)
    if scheme != "kafka":
        raise ConfigError(
            f"log URL {url!r}: the live projector needs a Kafka log (kafka://host:port?topic=...); "
            f"a {scheme} log has no topic to follow (use `oncelog state` / `oncelog rebuild` for it)"
        )
    unsupported = sorted(name for name in settings if name not in ONCELOG_SETTINGS)
    if unsupported:
        raise ConfigError(
            f"log URL {url!r}: the live projector (faust/aiokafka) does not support the librdkafka "
            f"setting(s) {', '.join(unsupported)}; remove them or run it against a listener that needs none"
        )
    return KafkaSettings.from_url(url, location, settings)


def _topology(kafka: KafkaSettings) -> tuple[int, int]:
    """(partitions of the events topic, replication factor for faust's own topics); creates the topic if missing."""
    log = KafkaLog(kafka)
    try:
        log.ensure_topic()
        partitions = log.partitions
    finally:
        log.close()
    if kafka.replication is not None:
        return partitions, kafka.replication
    admin: AdminClient = kafka.make("admin", AdminClient, {})
    try:
        brokers = len(admin.list_topics(timeout=kafka.read_timeout_s).brokers)
    except KafkaException as e:
        raise LogUnavailableError(f"Kafka at {kafka.bootstrap} does not answer: {e}") from e
    return partitions, max(1, min(MAX_REPLICATION, brokers))


def create_app(settings: LiveSettings) -> faust.App:
    """The faust app of the live projector: tables, the folding agent and the HTTP views."""
    kafka = kafka_settings(settings.log_url)
    if importlib.util.find_spec("cramjam") is None:  # what aiokafka decompresses lz4 with
        raise ConfigError(
            "the events topic is lz4-compressed (oncelog's writer) and aiokafka cannot decompress it: "
            "install aiokafka[lz4] (the cramjam package)"
        )
    partitions, replication = _topology(kafka)
    app = faust.App(
        settings.app_id,
        broker=[f"kafka://{server.strip()}" for server in kafka.bootstrap.split(",")],
        autodiscover=False,
        datadir=str(settings.data_dir),
        store="memory://",
        # exactly_once: faust's aiokafka driver gives consumers isolation.level=read_committed from this setting
        # only (there is no consumer setting for it); table changelog writes go in per-partition transactions
        # committed with the consumed offsets.
        processing_guarantee="exactly_once",
        # faust 0.15 waits for the streams twice when stopping; under exactly_once the first wait ends the
        # transactions and the second then commits into none (IllegalOperation) and the worker hangs on exit.
        stream_wait_empty=False,
        consumer_auto_offset_reset="earliest",
        topic_partitions=partitions,
        topic_replication_factor=replication,
        topic_disable_leader=True,
        producer_partitioner=live_fold.aggregate_partitioner,
        web_bind=settings.host,
        web_host=settings.host,
        web_port=settings.port,
        canonical_url=f"http://{settings.host}:{settings.port}",
    )
    guarantee: object = app.conf.processing_guarantee
    if guarantee is not ProcessingGuarantee.EXACTLY_ONCE:
        raise ConfigError("faust did not take processing_guarantee=exactly_once: consumers would not read_committed")
    tables = {name: app.Table(name, key_type=bytes, partitions=partitions) for name in TABLES}
    events = app.topic(
        kafka.topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw", allow_empty=True
    )
    _add_agent(app, events, tables)
    _add_views(app, tables)
    return app


def _add_agent(app: faust.App, events: faust.TopicT, tables: Tables) -> None:
    """The agent folding every committed event of the events topic into the tables."""
    codec = EventCodec()

    def read(table: str, key: bytes) -> Any:
        return tables[table].get(key)

    @app.agent(events, name="oncelog-fold")
    async def fold(stream: StreamT[bytes]) -> None:
        if not app.consumer.in_transaction:  # it would read aborted batches: stop the worker rather than fold them
            await app.crash(ConfigError("the faust consumer is not in exactly_once mode: it would not read_committed"))
            return
        async for record in stream.events():
            message = record.message
            if record.value is None:
                continue  # a tombstone written by retention
            try:
                event = codec.decode(record.value, message.topic, message.partition, message.offset, record.key)
            except EventDecodeError as e:
                logger.error("skipping a record: %s", e)
                continue
            position = Position(message.partition, message.offset)
            changes, problems = fold_event(event, read, position)
            for problem in problems:
                logger.warning("%s at %s%s: %s", problem.kind, message.topic, problem.where(), problem.message)
            for change in changes:
                if change.value is None:
                    del tables[change.table][change.key]
                else:
                    tables[change.table][change.key] = change.value
            # Hand the changelog writes to the transactional producers before this event is acked: faust's
            # exactly_once commit does not drain its producer buffer, so they could miss the offsets' transaction.
            await app.producer.buffer.flush()


def render(view: Any) -> dict[str, Any]:
    """A view as a JSON object for HTTP: fields by name, states by name, instants in ISO 8601."""
    out: dict[str, Any] = {}
    for field, raw in zip(fields(view), view_to_json(view)):
        value = getattr(view, field.name)
        if isinstance(value, IntEnum):
            out[field.name] = value.name
        elif isinstance(value, datetime):
            out[field.name] = value.isoformat()
        else:
            out[field.name] = raw
    return out


def _datasets_of(entry: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [render(view_from_json(DatasetView, data)) for _, data in sorted((entry or {}).items())]


def _run_doc(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {**render(view_from_json(RunView, entry["run"])), "tasks": dict(entry["tasks"])}


def _not_ready(app: faust.App, view: View) -> Response | None:
    """503 while the tables are being recovered from their changelogs (an empty table would answer 404 wrongly)."""
    if cast(TableManager, app.tables).recovery.completed.is_set() and not app.rebalancing and not app.in_recovery:
        return None
    return view.error(503, "the live tables are being recovered from their changelogs; try again shortly")


async def _elsewhere(app: faust.App, table: TableT[bytes, Any], aggregate: str | None, view: View,
                     request: Request) -> Response | None:
    """503 while recovering, or the answer of the worker owning the aggregate's partition; None: answer here."""
    not_ready = _not_ready(app, view)
    if not_ready is not None or aggregate is None:
        return not_ready
    try:
        return await app.router.route_req(table.name, aggregate, view.web, request)
    except SameNode:
        return None


def _add_views(app: faust.App, tables: Tables) -> None:
    """The HTTP views over the tables (each worker answers for the partitions it holds; keyed views route)."""

    @app.page("/datasets")
    async def datasets(view: View, request: Request) -> Response:
        if (elsewhere := await _elsewhere(app, tables[DATASETS], None, view, request)) is not None:
            return elsewhere
        found = [doc for _, entry in sorted(tables[DATASETS].items()) for doc in _datasets_of(entry)]
        return view.json({"datasets": found})

    @app.page("/datasets/{urn:.+}")
    async def dataset(view: View, request: Request, urn: str) -> Response:
        if (elsewhere := await _elsewhere(app, tables[DATASETS], urn, view, request)) is not None:
            return elsewhere
        job = request.query.get("job")
        found = [d for d in _datasets_of(tables[DATASETS].get(table_key(urn))) if job is None or d["job"] == job]
        if not found:
            return view.error(404, f"no dataset {urn!r}" + (f" of job {job!r}" if job else ""))
        return view.json({"datasets": found})

    @app.page("/runs/{run_id}")
    async def run(view: View, request: Request, run_id: str) -> Response:
        job = request.query.get("job")
        if (elsewhere := await _elsewhere(app, tables[RUNS], job, view, request)) is not None:
            return elsewhere
        if job is not None:
            entry = tables[RUNS].get(table_key(job, run_id))
            found = [] if entry is None else [_run_doc(entry)]
        else:
            found = [_run_doc(e) for k, e in tables[RUNS].items() if key_parts(k)[1] == run_id]
        if not found:
            return view.error(404, f"no run {run_id!r}" + (f" of job {job!r}" if job else ""))
        if len(found) > 1:
            jobs = [doc["job"] for doc in found]
            return view.error(409, f"several jobs have a run {run_id!r}: ask with ?job=", jobs=jobs)
        return view.json(found[0])

    @app.page("/commits/pending")
    async def pending(view: View, request: Request) -> Response:
        if (elsewhere := await _elsewhere(app, tables[SEQUENCES], None, view, request)) is not None:
            return elsewhere
        job = request.query.get("job")
        found = [view_from_json(SequenceView, data) for data in tables[SEQUENCES].values()]
        found = [s for s in found if s.pending and (job is None or s.job == job)]
        found.sort(key=lambda s: (s.planned_at is None, s.planned_at, s.dataset_urn))
        return view.json({"pending": [render(s) for s in found]})


def run_worker(app: faust.App, loglevel: str = "info") -> NoReturn:
    """Run the app's worker in this process until SIGINT/SIGTERM; exits the process when it stops."""
    worker = faust.Worker(app, loglevel=loglevel, redirect_stdouts=False)
    worker.execute_from_commandline()
