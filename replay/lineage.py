"""A run's events → OpenLineage run events (START, then COMPLETE, FAIL or ABORT): a pure conversion, no I/O.

Inputs are the run's source datasets — a Kafka topic (namespace `kafka://<first broker>`, as OpenLineage's naming
conventions say) or a source file — each with the watermark range of every partition read (the custom input facet
`oncelog_offsets`). Outputs are the folders the run's completed commit sequences published into, with their files,
records and bytes (`outputStatistics`, and the custom facet `oncelog_files`). The OpenLineage run id is a uuid5 of
the job and oncelog's run id: a backfill sends the same ids again, never a second run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, TypeVar
from urllib.parse import urlsplit

import attr
from openlineage.client.event_v2 import (
    InputDataset,
    Job,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
)
from openlineage.client.facet_v2 import (
    InputDatasetFacet,
    JobFacet,
    OutputDatasetFacet,
    RunFacet,
    error_message_run,
    job_type_job,
    output_statistics_output_dataset,
    processing_engine_run,
)

from events.commit import CommitSequenceCompleted, CommitSequencePlanned
from events.completeness import PartitionCompleted
from events.job import (
    JobRunCancelled,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    WorkUnitSpec,
    WorkUnitsPlanned,
)
from events.keys import key_of
from events.model import Event, SequenceFields
from events.published import DatasetPublished, PublishedFile, published_events
from events.task import TaskFailed, TaskSucceeded, WorkUnitResult

RUN_ID_NAMESPACE = uuid.UUID("6f6e6365-6c6f-4700-8000-6c696e656167")
"""Fixed forever: the OpenLineage run id of an oncelog run is uuid5(this, run/<job>/<run_id>)."""
FACET_SCHEMA = "https://github.com/oncelog/oncelog/blob/main/docs/lineage.md"
"""Where oncelog's custom facets are described (their `_schemaURL`)."""
DEFAULT_NAMESPACE = "oncelog"
DEFAULT_PRODUCER = "https://github.com/oncelog/oncelog"
MAX_LISTED_FILES = 1000
"""The `oncelog_files` facet lists at most this many files per folder (the statistics count them all)."""
E = TypeVar("E", bound=Event)
KAFKA_TOPIC, KAFKA_BROKERS, SOURCE_FILE = "kafka.topic", "kafka.brokers", "source.filebased.file"
"""The work-unit and job properties that name a source (spark_pipeline.sources' keys)."""


@dataclass(frozen=True, slots=True)
class LineageSettings:
    """What every OpenLineage event of an oncelog installation shares: the job namespace and the producer."""

    namespace: str = DEFAULT_NAMESPACE
    producer: str = DEFAULT_PRODUCER
    version: str = "unknown"
    """oncelog's version (the processing engine facet)."""


@attr.define
class OffsetRange:
    """The range of one source partition a run read: from low (inclusive) to the expected and the actual high."""

    partition: str
    lowWatermark: int  # noqa: N815 (OpenLineage's JSON is camelCase)
    expectedHighWatermark: int  # noqa: N815
    actualHighWatermark: int | None = None  # noqa: N815


@attr.define
class OffsetsInputDatasetFacet(InputDatasetFacet):
    """`oncelog_offsets`: the watermark (offset) range of every partition of the input the run read."""

    partitions: list[OffsetRange] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{FACET_SCHEMA}#oncelog_offsets"


@attr.define
class ListedFile:
    """A published file: its final path, bytes and records (None: not recorded)."""

    path: str
    size: int
    records: int | None = None


@attr.define
class FilesOutputDatasetFacet(OutputDatasetFacet):
    """`oncelog_files`: the files the run published into the folder (at most MAX_LISTED_FILES of them)."""

    files: list[ListedFile] = attr.field(factory=list)
    omitted: int = 0

    @staticmethod
    def _get_schema() -> str:
        return f"{FACET_SCHEMA}#oncelog_files"


@attr.define
class OncelogRunFacet(RunFacet):
    """`oncelog_run`: oncelog's own run id and job group, to find the run in `oncelog audit`."""

    runId: str  # noqa: N815
    jobGroup: str | None = None  # noqa: N815
    _additional_skip_redact: ClassVar[list[str]] = ["runId", "jobGroup"]

    @staticmethod
    def _get_schema() -> str:
        return f"{FACET_SCHEMA}#oncelog_run"


@attr.define
class CompletedPartition:
    """A time partition of a dataset the run completed: its event times [start, end) in ISO-8601 UTC."""

    dataset: str
    partition: str
    start: str
    end: str


@attr.define
class PartitionsCompletedRunFacet(RunFacet):
    """`oncelog_partitions_completed`: the time partitions the run completed (its PartitionCompleted events)."""

    partitions: list[CompletedPartition] = attr.field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return f"{FACET_SCHEMA}#oncelog_partitions_completed"


def iso_ms(millis: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC."""
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def lineage_run_id(job: str, run_id: str) -> str:
    """The OpenLineage run id (a UUID) of an oncelog run: the same every time it is computed."""
    return str(uuid.uuid5(RUN_ID_NAMESPACE, key_of("run", job, run_id)))


def runs_of(events: Iterable[Event]) -> dict[tuple[str, str], list[Event]]:
    """Events grouped by (job, run id), in log order; a sequence's events belong to the run that planned it."""
    grouped: dict[tuple[str, str], list[Event]] = {}
    for event in events:
        grouped.setdefault((event.job, event.run_id), []).append(event)
    return grouped


def run_lineage(events: Sequence[Event], settings: LineageSettings) -> list[RunEvent]:
    """A run's OpenLineage events: START (if it started) and its end (if it ended), in that order."""
    start = start_event(events, settings)
    end = end_event(events, settings)
    return [e for e in (start, end) if e is not None] if start is not None else []


def start_event(events: Sequence[Event], settings: LineageSettings) -> RunEvent | None:
    """START, at the run's JobRunStarted (None if it has none), with the inputs planned by then."""
    started = first(events, JobRunStarted)
    if started is None:
        return None
    return _event(RunState.START, started, started, events, settings, outputs=[])


def end_event(events: Sequence[Event], settings: LineageSettings) -> RunEvent | None:
    """COMPLETE, FAIL or ABORT at the run's recorded end (None while it has none), with inputs and outputs."""
    started = first(events, JobRunStarted)
    ending = first(events, (JobRunCommitted, JobRunFailed, JobRunCancelled))
    if started is None or ending is None:
        return None
    state = {JobRunCommitted: RunState.COMPLETE, JobRunFailed: RunState.FAIL, JobRunCancelled: RunState.ABORT}
    return _event(state[type(ending)], started, ending, events, settings,
                  outputs=output_datasets(events, settings.producer))


def first(events: Sequence[Event], kind: type[E] | tuple[type[E], ...]) -> E | None:
    """The first event of a kind."""
    return next((e for e in events if isinstance(e, kind)), None)


def _event(state: RunState, started: JobRunStarted, at: Event, events: Sequence[Event], settings: LineageSettings,
           outputs: list[OutputDataset]) -> RunEvent:
    run_facets: dict[str, RunFacet] = {
        "oncelog_run": OncelogRunFacet(runId=started.run_id, jobGroup=started.job_group, producer=settings.producer),
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
            version=settings.version, name="oncelog", producer=settings.producer),
    }
    error = at.error if isinstance(at, JobRunFailed) else at.reason if isinstance(at, JobRunCancelled) else None
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="PYTHON", producer=settings.producer)
    completed = [e for e in events if isinstance(e, PartitionCompleted)]
    if completed:
        run_facets["oncelog_partitions_completed"] = PartitionsCompletedRunFacet(
            partitions=[CompletedPartition(e.dataset_urn, e.partition, iso_ms(e.start_ms), iso_ms(e.end_ms))
                        for e in completed], producer=settings.producer)
    job_facets: dict[str, JobFacet] = {"jobType": job_type_job.JobTypeJobFacet(
        processingType="BATCH", integration="ONCELOG", jobType="JOB", producer=settings.producer)}
    return RunEvent(eventType=state, eventTime=at.emitted_at.isoformat(), producer=settings.producer,
                    run=Run(runId=lineage_run_id(started.job, started.run_id), facets=run_facets),
                    job=Job(namespace=settings.namespace, name=started.job, facets=job_facets),
                    inputs=input_datasets(events, started.properties, settings.producer), outputs=outputs)


def input_datasets(events: Sequence[Event], properties: dict[str, str], producer: str) -> list[InputDataset]:
    """The sources the run's work units read, each with the range of every partition (actual high once known)."""
    planned = first(events, WorkUnitsPlanned)
    if planned is None:
        return []
    actual = {r.work_unit_id: r.actual_high_watermark for r in task_results(events)}
    ranges: dict[tuple[str, str], list[OffsetRange]] = {}
    for spec in planned.work_units:
        ranges.setdefault(source_of(spec, properties), []).append(OffsetRange(
            spec.partition, spec.low_watermark, spec.expected_high_watermark, actual.get(spec.work_unit_id)))
    return [InputDataset(namespace=namespace, name=name, inputFacets={
        "oncelog_offsets": OffsetsInputDatasetFacet(partitions=partitions, producer=producer)})
        for (namespace, name), partitions in sorted(ranges.items())]


def source_of(spec: WorkUnitSpec, properties: dict[str, str]) -> tuple[str, str]:
    """The OpenLineage (namespace, name) of what a work unit reads: a Kafka topic, a file, else the dataset URN."""
    if KAFKA_TOPIC in spec.properties:
        broker = properties.get(KAFKA_BROKERS, "unknown:9092").split(",")[0].strip()
        return f"kafka://{broker}", spec.properties[KAFKA_TOPIC]
    if SOURCE_FILE in spec.properties:
        return location(spec.properties[SOURCE_FILE])
    return DEFAULT_NAMESPACE, spec.dataset_urn


def location(path: str) -> tuple[str, str]:
    """A file or folder as OpenLineage names it: `file` + path, `hdfs://host:port` + path, `s3://bucket` + key."""
    parts = urlsplit(path)
    if parts.scheme in ("", "file"):
        return "file", parts.path
    if parts.scheme in ("s3", "s3a", "s3n"):
        return f"s3://{parts.netloc}", parts.path.lstrip("/")
    return f"{parts.scheme}://{parts.netloc}", parts.path


def task_results(events: Sequence[Event]) -> list[WorkUnitResult]:
    """Each work unit's result from its last recorded attempt (a retry's result replaces the one before)."""
    latest: dict[str, WorkUnitResult] = {}
    for event in events:
        if isinstance(event, (TaskSucceeded, TaskFailed)):
            latest.update((r.work_unit_id, r) for r in event.results)
    return list(latest.values())


def published_files(events: Sequence[Event]) -> list[PublishedFile]:
    """The files of the run's completed sequences: from their DatasetPublished events, or else from their plans
    (records known from plan version 2 on)."""
    completed = {(e.dataset_urn, e.sequence_id) for e in events if isinstance(e, CommitSequenceCompleted)}
    announced = [e for e in events if isinstance(e, DatasetPublished) and (e.dataset_urn, e.sequence_id) in completed]
    files = [f for e in announced for f in e.files]
    done = {(e.dataset_urn, e.sequence_id) for e in announced}
    plans: dict[tuple[str, str], CommitSequencePlanned] = {}
    for event in events:
        if isinstance(event, CommitSequencePlanned) and (event.dataset_urn, event.sequence_id) in completed - done:
            plans[(event.dataset_urn, event.sequence_id)] = event  # a later plan extends the one before
    for plan in plans.values():
        fields: SequenceFields = {"job": plan.job, "run_id": plan.run_id, "dataset_urn": plan.dataset_urn,
                                  "sequence_id": plan.sequence_id}
        files += [f for part in published_events(fields, plan.steps) for f in part.files]
    return files


def output_datasets(events: Sequence[Event], producer: str) -> list[OutputDataset]:
    """One output per folder the run published into, with its files, records and bytes."""
    folders: dict[tuple[str, str], list[PublishedFile]] = {}
    for f in published_files(events):
        namespace, path = location(f.path)
        folders.setdefault((namespace, path.rsplit("/", 1)[0] if "/" in path else ""), []).append(f)
    outputs = []
    for (namespace, name), files in sorted(folders.items()):
        counts = [f.records for f in files]
        statistics = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=None if None in counts else sum(c or 0 for c in counts), size=sum(f.size for f in files),
            fileCount=len(files), producer=producer)
        listed = FilesOutputDatasetFacet(
            files=[ListedFile(f.path, f.size, f.records) for f in files[:MAX_LISTED_FILES]],
            omitted=max(0, len(files) - MAX_LISTED_FILES), producer=producer)
        outputs.append(OutputDataset(namespace=namespace, name=name,
                                     outputFacets={"outputStatistics": statistics, "oncelog_files": listed}))
    return outputs
