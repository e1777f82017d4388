"""Bounded events: the codec refuses an event over MAX_EVENT_BYTES (naming it), the events of a run of 10,000 work
units all stay under it once in parts, and the versions written before parts existed stay readable."""

from __future__ import annotations

import io
import json
import zlib
from collections import Counter
from functools import cache
from pathlib import Path

import fastavro
import pytest
import yaml

from events.avro_schema import SCHEMA_DIR, envelope_schema, schema_path
from events.codec import (
    CHECKSUM_SIZE,
    EPOCH,
    FRAME_MAGIC,
    MAX_EVENT_BYTES,
    MICROSECOND,
    EventCodec,
)
from events.commit import CommitSequencePlanned, FsRenameStep
from events.errors import LogWriteError
from events.job import JobRunCommitted, WorkUnitSpec, WorkUnitsPlanned
from events.keys import event_id_bytes
from events.log import open_log
from events.model import Event, Parted, RunFields, TaskFields
from events.task import (
    OutputFile,
    TaskFailed,
    TaskStarted,
    TaskSucceeded,
    WorkUnitResult,
)
from projections.projector import Projector
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher

WORK_UNITS = 10_000
RUN: RunFields = {"job": "orders", "run_id": "20261123T120000000Z-abcdef"}


@cache
def specs() -> tuple[WorkUnitSpec, ...]:
    return tuple(WorkUnitSpec(work_unit_id=f"orders.topic-{i:05d}:0", dataset_urn=f"orders.topic-{i:05d}",
                              partition=f"orders.topic-{i:05d}:0", low_watermark=i, expected_high_watermark=i + 10,
                              multi_work_unit_id="task-0", properties={"topic": f"orders.topic-{i:05d}"})
                 for i in range(WORK_UNITS))


@cache
def results() -> tuple[WorkUnitResult, ...]:
    return tuple(WorkUnitResult(work_unit_id=s.work_unit_id, dataset_urn=s.dataset_urn, partition=s.partition,
                                low_watermark=s.low_watermark, expected_high_watermark=s.expected_high_watermark,
                                actual_high_watermark=s.expected_high_watermark, records_written=10,
                                output_files=(OutputFile(path=f"/lake/task-output/{RUN['run_id']}/{s.dataset_urn}/"
                                                         f"part-0.avro", size=1234, checksum="f" * 64),))
                 for s in specs())


def events_of_a_big_run() -> list[Event]:
    """The events that grow with a run's work units, files and datasets: one task runs all 10,000 work units."""
    task: TaskFields = {**RUN, "task_id": "task-0"}
    steps = tuple(FsRenameStep(src=f"/lake/task-output/{i:06d}.avro", dst=f"/lake/final/{i:06d}.avro", size=1,
                               checksum="f" * 64) for i in range(WORK_UNITS))
    return [
        WorkUnitsPlanned(**RUN, work_units=specs()),
        TaskStarted(**task, attempt=1, work_unit_ids=tuple(s.work_unit_id for s in specs())),
        TaskSucceeded(**task, attempt=1, results=results()),
        TaskFailed(**task, attempt=1, error="boom", results=results()),
        CommitSequencePlanned(**RUN, dataset_urn="orders", sequence_id=RUN["run_id"], steps=steps),
        JobRunCommitted(**RUN, datasets_committed=tuple(s.dataset_urn for s in specs())),
    ]


@pytest.mark.parametrize("event", events_of_a_big_run(), ids=lambda e: type(e).__name__)
def test_an_event_of_a_10000_work_unit_run_goes_in_parts_each_under_the_limit(event: Event) -> None:
    codec = EventCodec()
    parts = event.in_parts()
    assert len(parts) > 1 and len({p.key for p in parts}) == len(parts)
    sizes = [len(codec.to_record(p, partitions=4).value or b"") for p in parts]
    assert max(sizes) < MAX_EVENT_BYTES // 2, "well under the limit"
    first = parts[0]
    assert isinstance(first, Parted)
    for name in first.PARTED_FIELDS:  # nothing lost, nothing repeated, in order
        assert tuple(x for p in parts for x in getattr(p, name)) == getattr(event, name)


def test_the_codec_refuses_an_event_over_the_limit_naming_its_type_and_key() -> None:
    event = WorkUnitsPlanned(**RUN, work_units=specs())
    with pytest.raises(LogWriteError, match=rf"WorkUnitsPlanned '{event.key}' encodes to [\d,]+ bytes, over the limit "
                                            r"of 262,144 \(events.codec.MAX_EVENT_BYTES\)"):
        EventCodec().encode_value(event)


def encode_as_version(event: Event, version: int) -> bytes:
    """The record an older oncelog wrote for `event`: its frame names `version`, its body that version's schema."""
    payload = json.loads(schema_path(SCHEMA_DIR, event.event_type(), version).read_text())
    schema = fastavro.parse_schema(envelope_schema(payload))
    name = event.event_type().encode("ascii")
    out = io.BytesIO()
    out.write(bytes([FRAME_MAGIC, len(name)]) + name + version.to_bytes(2, "big"))
    key = event.key.encode()
    datum = json.loads(event.model_dump_json())
    datum |= {"event_id": event_id_bytes(key), "dataset_urn": event.urn,
              "emitted_at_us": (event.emitted_at - EPOCH) // MICROSECOND}
    fastavro.schemaless_writer(out, schema, datum)
    value = out.getvalue()
    return value + zlib.crc32(value, zlib.crc32(key)).to_bytes(CHECKSUM_SIZE, "little")


@pytest.mark.parametrize(("event", "version"), [
    (WorkUnitsPlanned(**RUN, work_units=specs()[:3]), 1),
    (TaskStarted(**RUN, task_id="t", attempt=1, work_unit_ids=("a", "b")), 1),
    (TaskSucceeded(**RUN, task_id="t", attempt=1, results=results()[:3], duration_ms=5), 1),
    (TaskFailed(**RUN, task_id="t", attempt=2, error="x", results=results()[:1]), 1),
    (CommitSequencePlanned(**RUN, dataset_urn="d", sequence_id="s",
                           steps=(FsRenameStep(src="/a", dst="/b", size=1, checksum="c"),)), 1),
    (JobRunCommitted(**RUN, datasets_committed=("a", "b")), 1),
    (JobRunCommitted(**RUN, datasets_committed=("a",), datasets_skipped=("b",)), 2),
], ids=lambda v: v if isinstance(v, int) else type(v).__name__)
def test_versions_written_before_parts_stay_readable_as_one_whole_event(event: Event, version: int) -> None:
    assert type(event).SCHEMA_VERSION > version
    value = encode_as_version(event, version)
    read = EventCodec().decode(value, "t", 0, 0, event.key.encode())
    assert read == event and isinstance(read, Parted) and (read.part, read.parts) == (0, 1)


def test_a_job_of_10000_work_units_appends_no_event_over_the_limit(tmp_path: Path) -> None:
    """10 datasets of 1,000 partitions: before parts its WorkUnitsPlanned (650 KB), TaskStarted and TaskSucceeded
    grew with the work units and the codec refused the run. In-process tasks, empty work units."""
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    log.ensure_topic()
    job = {"job.name": "wide", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
           "source.synthetic.datasets": 10, "source.synthetic.partitions": WORK_UNITS // 10,
           "source.synthetic.records.per.run": 0, "dataset.urn": "ds", "task.maxretries": 0,
           "writer.staging.dir": str(tmp_path / "staging"), "writer.output.dir": str(tmp_path / "task-output"),
           "data.publisher.final.dir": str(tmp_path / "published"), "oncelog.log.url": log.url}
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(job))
    with log:
        result = JobLauncher(load_job_config(tmp_path / "wide.yaml"), engine=InProcessTaskEngine(log.writer),
                             log=log).run()
        assert result.status is RunStatus.COMMITTED, result.error
        codec = EventCodec()
        sizes = Counter[str]()
        for logged in log.read():
            size = len(codec.encode_value(logged.event))
            sizes[logged.event.event_type()] = max(sizes[logged.event.event_type()], size)
        state, _ = Projector(log).rebuild(use_snapshot=False)
        report = verify(log)
    assert report.ok, report.violations[:3]
    assert max(sizes.values()) < MAX_EVENT_BYTES // 2, sizes
    run = state.runs[("wide", result.run_id)]
    assert run.complete and run.work_units == WORK_UNITS and len(run.datasets_committed) == 10
