"""The directory source reading its input from a real HDFS and a real S3-compatible server, end to end.

Each test runs against a local folder (the baseline), then both stores (`remote_folder`): input files are put there
through `filesystems`, the job runs in this process (the launcher's in-process engine), its log is a SQLite file and
its publish folders are local.
Run with `-p tests.hdfs_plugin -p tests.s3_plugin`.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import fastavro
import pytest
import yaml
from pydantic import Field

from events.job import WorkUnitSpec, WorkUnitsPlanned
from events.log import EventLog, open_log
from filesystems.router import FileSystems
from filesystems.settings import FileSystemSettings
from filesystems.urls import join
from projections.projector import Projector
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.constructs import (
    Extractor,
    Record,
    SourceError,
    SourceState,
    WorkUnitState,
)
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher, RunResult
from spark_pipeline.sources.directory import (
    COMPLETE,
    FILE,
    READ_BUFFER,
    SCALE,
    AvroFileExtractor,
    DirectorySettings,
    DirectorySource,
    LinesExtractor,
    complete,
    position,
)

DIRECTORY_SOURCE = "spark_pipeline.sources.directory.DirectorySource"
STOP_MARKER = "test.directory.stop.marker"
STOP_TEXT = "STOP"


@pytest.fixture(params=["local", "hdfs", "s3"])
def remote_folder(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh folder: local (the same behaviour, as a baseline), a URL on the session's HDFS, on its S3 server."""
    if request.param == "local":
        return str(tmp_path / "input")
    return str(request.getfixturevalue(f"{request.param}_folder"))


class RecordingFileSystems(FileSystems):
    """The file systems, noting every `open_read` (location, first byte): to see that a resume is a ranged read."""

    def __init__(self) -> None:
        super().__init__(FileSystemSettings.of({}))
        self.opened: list[tuple[str, int]] = []

    def open_read(self, path: str, start: int = 0) -> BinaryIO:
        self.opened.append((path, start))
        return super().open_read(path, start)


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[EventLog]:
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    log.ensure_topic()
    yield log
    log.close()


def put(location: str, data: bytes) -> None:
    """A complete file at a location (as a producer would publish it: whole, under its visible name)."""
    writer = FileSystems.of({}).open_write(location)
    writer.write(data)
    writer.close()


def avro_bytes(rows: list[dict[str, Any]], schema: dict[str, Any], block: int) -> bytes:
    """An Avro container file's content, with a block every `block` records or so."""
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema), rows, sync_interval=block)
    return buffer.getvalue()


def job_config(tmp_path: Path, log: EventLog, folder: str, **keys: str) -> JobConfig:
    """A directory-source job reading `folder`, writing and publishing under tmp_path (local)."""
    job = {"job.name": "remote-dir", "source.class": DIRECTORY_SOURCE, "source.filebased.data.directory": folder,
           "writer.staging.dir": str(tmp_path / "staging"), "writer.output.dir": str(tmp_path / "task-output"),
           "data.publisher.final.dir": str(tmp_path / "publish"), "oncelog.log.url": log.url,
           "task.maxretries": "0", "task.retry.intervalinsec": "0", **keys}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return load_job_config(path)


def run(config: JobConfig, log: EventLog) -> RunResult:
    """One run, tasks in this process."""
    return JobLauncher(config, engine=InProcessTaskEngine(log.writer), log=log).run()


def published(tmp_path: Path) -> list[dict[str, Any]]:
    """Every record of every published Avro file."""
    records: list[dict[str, Any]] = []
    for path in sorted((tmp_path / "publish").rglob("*.avro")):
        with path.open("rb") as stream:
            records += [r for r in fastavro.reader(stream) if isinstance(r, dict)]
    return records


def planned_units(log: EventLog, run_id: str) -> list[tuple[str, int]]:
    """(partition, low watermark) of each work unit a run planned."""
    return sorted((w.partition, w.low_watermark) for logged in log.read() if logged.event.run_id == run_id
                  and isinstance(logged.event, WorkUnitsPlanned) for w in logged.event.work_units)


def watermarks(log: EventLog) -> dict[str, dict[str, int]]:
    """The committed watermarks of the job's datasets."""
    state, _ = Projector(log).rebuild(use_snapshot=False)
    return {urn: dict(view.watermarks) for urn, view in state.dataset_states("remote-dir").items()}


def test_lines_are_published_once_hidden_and_unmatched_files_skipped_and_a_rewrite_is_only_warned_about(
        remote_folder: str, tmp_path: Path, sqlite: EventLog, caplog: pytest.LogCaptureFixture) -> None:
    files = {"a.log": "a1\na2\r\na3", "b.log": "b1\n", "day=1/c.log": "c1\nc2\n",
             ".hidden.log": "x\n", "_SUCCESS": "", "_temporary/0/t.log": "x\n", "day=1/.part/p.log": "x\n",
             "empty.log": "", "notes.txt": "x\n"}
    for name, text in files.items():
        put(join(remote_folder, name), text.encode())
    config = job_config(tmp_path, sqlite, remote_folder, **{"source.filebased.files.pattern": "*.log",
                                                            "source.filebased.recursive": "true"})
    first = run(config, sqlite)
    assert first.status is RunStatus.COMMITTED, first.error
    assert planned_units(sqlite, first.run_id) == [("a.log", 0), ("b.log", 0), ("day=1/c.log", 0)]
    assert sorted((r["file"], r["line_number"], r["text"]) for r in published(tmp_path)) == [
        ("a.log", 1, "a1"), ("a.log", 2, "a2"), ("a.log", 3, "a3"), ("b.log", 1, "b1"),
        ("day=1/c.log", 1, "c1"), ("day=1/c.log", 2, "c2")]
    assert watermarks(sqlite) == {"remote-dir": {"a.log": complete(9), "b.log": complete(3)},
                                  "remote-dir/day=1": {"day=1/c.log": complete(6)}}

    second = run(config, sqlite)  # nothing new: nothing planned, nothing published
    assert second.status is RunStatus.COMMITTED, second.error
    assert planned_units(sqlite, second.run_id) == [] and len(published(tmp_path)) == 6

    put(join(remote_folder, "a.log"), b"a1\na2\r\na3\na4\n")  # grown after it was read to its end
    put(join(remote_folder, "day=1/d.log"), b"d1\n")
    with caplog.at_level(logging.WARNING):
        third = run(config, sqlite)
    assert third.status is RunStatus.COMMITTED, third.error
    assert "a.log was modified after it was ingested (9 bytes then, 13 now)" in caplog.text
    assert planned_units(sqlite, third.run_id) == [("day=1/d.log", 0)]
    texts = Counter(r["text"] for r in published(tmp_path))
    assert texts == Counter(["a1", "a2", "a3", "b1", "c1", "c2", "d1"])
    assert verify(sqlite, tmp_path / "publish").ok


class StoppingExtractor(LinesExtractor):
    """Fails at the line STOP_TEXT while the local marker file exists: a task that dies in the middle of a file."""

    def read_record(self) -> Record | None:
        record = super().read_record()
        if record is not None and record["text"] == STOP_TEXT and Path(self.state.properties[STOP_MARKER]).exists():
            raise SourceError(f"stopped at line {record['line_number']} of {self.path}")
        return record


class StoppingSettings(DirectorySettings):
    """The directory source's keys, and the marker file that makes its extractors stop."""

    stop_marker: str = Field(alias="test.directory.stop.marker", min_length=1)


class StoppingDirectorySource(DirectorySource):
    """The directory source, whose extractors stop at STOP_TEXT (test construct)."""

    CONFIG_MODEL = StoppingSettings

    def get_extractor(self, state: WorkUnitState) -> Extractor:
        return StoppingExtractor(state, self.file_systems)


def test_a_file_partly_read_by_a_failed_task_is_resumed_from_its_watermark(remote_folder: str, tmp_path: Path,
                                                                          sqlite: EventLog) -> None:
    lines = ["one", "two", STOP_TEXT, "four", "five"]
    put(join(remote_folder, "f.log"), "".join(f"{t}\n" for t in lines).encode())
    marker = tmp_path / "stop"
    marker.touch()
    config = job_config(tmp_path, sqlite, remote_folder, **{
        "source.class": f"{__name__}.StoppingDirectorySource", "job.commit.policy": "partial",
        STOP_MARKER: str(marker)})
    first = run(config, sqlite)
    assert [r["text"] for r in published(tmp_path)] == ["one", "two"], first.error
    assert watermarks(sqlite) == {"remote-dir": {"f.log": position(8)}}  # after "two\n": byte 8

    marker.unlink()  # the cause is gone: the next run reads on from byte 8
    second = run(config, sqlite)
    assert second.status is RunStatus.COMMITTED, second.error
    assert planned_units(sqlite, second.run_id) == [("f.log", position(8))]
    assert sorted((r["line_number"], r["text"]) for r in published(tmp_path)) == list(enumerate(lines, start=1))
    assert watermarks(sqlite) == {"remote-dir": {"f.log": complete(23)}}
    third = run(config, sqlite)
    assert planned_units(sqlite, third.run_id) == [] and len(published(tmp_path)) == len(lines)


def test_avro_files_header_only_ones_waited_for_and_a_mid_block_resume_is_a_ranged_read(
        remote_folder: str, tmp_path: Path, sqlite: EventLog) -> None:
    schema = {"type": "record", "name": "R",
              "fields": [{"name": "i", "type": "long"}, {"name": "pad", "type": "string"}]}
    rows = [{"i": i, "pad": "x" * 100} for i in range(30_000)]  # ~3 MB: larger than the source's read buffer
    content = avro_bytes(rows, schema, block=16_000)
    put(join(remote_folder, "a.avro"), content)
    put(join(remote_folder, "header-only.avro"), avro_bytes([], schema, block=16_000))
    config = job_config(tmp_path, sqlite, remote_folder, **{"source.filebased.format": "avro",
                                                            "source.filebased.max.files.per.run": "1"})
    first = run(config, sqlite)
    assert first.status is RunStatus.COMMITTED, first.error
    assert planned_units(sqlite, first.run_id) == [("a.avro", 0)]
    assert sorted(r["i"] for r in published(tmp_path)) == list(range(30_000))
    second = run(config, sqlite)
    assert planned_units(sqlite, second.run_id) == [] and len(published(tmp_path)) == 30_000

    # A resume inside a block beyond the first two read buffers (as a partial commit records): read from that block.
    (unit,) = DirectorySource(config).get_work_units(SourceState(config, "plan-only", {}))
    marks = [mark for _, mark in extract(unit, config, RecordingFileSystems())]
    assert len(marks) == 30_000 and marks[-1] == complete(len(content))
    inside = next(i for i in range(25_000, 30_000) if 0 < marks[i] % SCALE < COMPLETE)
    assert marks[inside] // SCALE > 2 * READ_BUFFER
    fs = RecordingFileSystems()
    rest = extract(unit.model_copy(update={"low_watermark": marks[inside]}), config, fs)
    assert [r["i"] for r, _ in rest] == list(range(inside + 1, 30_000))
    assert fs.opened == [(unit.properties[FILE], 0), (unit.properties[FILE], marks[inside] // SCALE)], \
        "the header from the start, then the records from the watermark's block"


def extract(unit: WorkUnitSpec, config: JobConfig, fs: FileSystems) -> list[tuple[dict[str, Any], int]]:
    """Every record of an Avro work unit read through `fs`, with the watermark after each."""
    extractor = AvroFileExtractor(WorkUnitState(unit, config, "plan-only", "task-00000", 1), fs)
    out = []
    try:
        while (record := extractor.read_record()) is not None:
            out.append((record, extractor.next_watermark))
    finally:
        extractor.close()
    return out


def test_a_missing_data_directory_is_an_error_naming_the_key(remote_folder: str, tmp_path: Path,
                                                             sqlite: EventLog) -> None:
    missing = join(remote_folder, f"no-{uuid.uuid4().hex[:8]}")
    put(join(remote_folder, "a-file"), b"x\n")
    for root in (missing, join(remote_folder, "a-file")):
        config = job_config(tmp_path, sqlite, root)
        source = DirectorySource(config)
        with pytest.raises(SourceError, match=r"source\.filebased\.data\.directory: .* is not a directory"):
            source.get_work_units(SourceState(config, "plan-only", {}))
    assert json.dumps(watermarks(sqlite)) == "{}"
