"""Helpers of the pipeline fault tests: a job file, and the exactly-once checks over what it published."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO, cast

import fastavro
import yaml

from events.log import open_log
from filesystems import urls
from filesystems.router import FileSystems
from projections.projector import Projector
from replay.verify import verify
from spark_pipeline.commit.faults import CRASH_ENV
from spark_pipeline.jobfile.paths import RUN_ID

RECORDS = 200
DATASETS = 2
PARTITIONS = 2


def write_job(base: Path, log_url: str, policy: str = "full", root: str | None = None, **extra: object) -> Path:
    """A synthetic job file in `base` writing under `root` (default: `base`; or an hdfs:// or s3a:// folder);
    `extra` adds or overrides keys."""
    folders = root or str(base)
    job = {
        "job.name": "crashy", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.datasets": DATASETS, "source.synthetic.partitions": PARTITIONS,
        "source.synthetic.records.per.run": RECORDS, "dataset.urn": "ds",
        "writer.staging.dir": urls.join(folders, "staging"), "writer.output.dir": urls.join(folders, "task-output"),
        "data.publisher.final.dir": urls.join(folders, "published"), "job.commit.policy": policy,
        "task.maxretries": 1, "task.retry.intervalinsec": 0, "oncelog.log.url": log_url,
        "spark.master": "local[2]", "spark.ui.enabled": "false", **extra,
    }
    path = base / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def run_cli(job: Path, crash_at: str | None = None, timeout: float = 300, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """`oncelog run job` in a process of its own (the crash kills it), from the repo root; `env` adds variables."""
    env = {**{k: v for k, v in os.environ.items() if k != CRASH_ENV}, **(env or {})}
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.run([sys.executable, "-m", "oncelog", "run", str(job), "--json"], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=Path(__file__).parents[2])


def published_records(published: str | Path) -> Counter[tuple[str, int, int]]:
    """(dataset, partition, offset) of every record in every published file (local, HDFS or S3), counted."""
    fs = FileSystems.of({})
    seen: Counter[tuple[str, int, int]] = Counter()
    for file in fs.list_files(str(published)):
        if file.path.endswith(".avro"):
            with fs.open_read(file.path) as stream:
                seen.update(records_in(stream, file.path))
    return seen


def avro_records(folder: Path) -> list[dict[str, Any]]:
    """Every record of every Avro file under `folder`, in file order."""
    records = []
    for path in sorted(folder.rglob("*.avro")):
        with path.open("rb") as stream:
            records += [cast(dict[str, Any], r) for r in fastavro.reader(stream)]
    return records


def published_records_of(path: Path) -> Counter[tuple[str, int, int]]:
    """(dataset, partition, offset) of every record in one local Avro file; a ValueError if it is no whole one."""
    with path.open("rb") as stream:
        return records_in(stream, str(path))


def records_in(stream: BinaryIO, name: str) -> Counter[tuple[str, int, int]]:
    """(dataset, partition, offset) of every record of an Avro stream; a ValueError if it is no whole Avro file."""
    seen: Counter[tuple[str, int, int]] = Counter()
    try:
        for raw in fastavro.reader(stream):
            record = cast(dict[str, Any], raw)
            seen[(record["dataset"], record["partition"], record["offset"])] += 1
    except (EOFError, StopIteration) as e:
        raise ValueError(f"{name} ends before its last block") from e
    return seen


def assert_exactly_once(log_url: str, base: Path, job: str = "crashy", root: str | None = None
                        ) -> dict[tuple[str, str], int]:
    """Every record up to each committed watermark published once, nothing else; verify passes; returns watermarks.

    The job's folders are under `root` (default: `base`), as `write_job` put them."""
    folders = root or str(base)
    with open_log(log_url) as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
        report = verify(log, urls.join(folders, "published"))
    assert report.ok, "\n".join(str(v) for v in report.violations)
    assert state.pending_sequences(job) == [], "a commit sequence is left pending"
    seen = published_records(urls.join(folders, "published"))
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert not duplicates, f"published more than once: {sorted(duplicates)[:5]}"
    watermarks = {(urn, p): v for (j, urn), d in state.datasets.items() if j == job for p, v in d.watermarks.items()}
    expected = {(urn, int(p.rsplit(":", 1)[1]), o) for (urn, p), w in watermarks.items() for o in range(w)}
    assert set(seen) == expected, (f"published {len(seen)} records, the watermarks say {len(expected)}; missing "
                                   f"{sorted(expected - set(seen))[:5]}, extra {sorted(set(seen) - expected)[:5]}")
    fs = FileSystems.of({})
    for folder in ("staging", "task-output"):
        left = [name for name in fs.list_folders(urls.join(folders, folder)) if RUN_ID.match(name)]
        assert not left, f"{folder} still holds run folders {left}"
    return watermarks
