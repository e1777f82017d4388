"""Helpers of the pipeline fault tests: a job file, and the exactly-once checks over what it published."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import fastavro
import yaml

from events.log import open_log
from spark_pipeline.commit.faults import CRASH_ENV
from projections.projector import Projector
from replay.verify import verify
from spark_pipeline.paths import RUN_ID

RECORDS = 200
DATASETS = 2
PARTITIONS = 2


def write_job(base: Path, log_url: str, policy: str = "full", **extra: object) -> Path:
    """A synthetic job writing under `base`; `extra` adds or overrides keys."""
    job = {
        "job.name": "crashy", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.datasets": DATASETS, "source.synthetic.partitions": PARTITIONS,
        "source.synthetic.records.per.run": RECORDS, "dataset.urn": "ds",
        "writer.staging.dir": str(base / "staging"), "writer.output.dir": str(base / "task-output"),
        "data.publisher.final.dir": str(base / "published"), "job.commit.policy": policy,
        "task.maxretries": 1, "task.retry.intervalinsec": 0, "oncelog.log.url": log_url,
        "spark.master": "local[2]", "spark.ui.enabled": "false", **extra,
    }
    path = base / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def run_cli(job: Path, crash_at: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`oncelog run job` in a process of its own (the crash kills it), from the repo root."""
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.run([sys.executable, "-m", "oncelog", "run", str(job), "--json"], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=Path(__file__).parents[2])


def published_records(published: Path) -> Counter[tuple[str, int, int]]:
    """(dataset, partition, offset) of every record in every published file, counted."""
    seen: Counter[tuple[str, int, int]] = Counter()
    for path in sorted(published.rglob("*.avro")):
        with path.open("rb") as f:
            for record in fastavro.reader(f):
                seen[(record["dataset"], record["partition"], record["offset"])] += 1
    return seen


def assert_exactly_once(log_url: str, base: Path, job: str = "crashy") -> dict[tuple[str, str], int]:
    """Every record up to each committed watermark published once, nothing else; verify passes; returns watermarks."""
    with open_log(log_url) as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
        report = verify(log, base / "published")
    assert report.ok, "\n".join(str(v) for v in report.violations)
    assert state.pending_sequences(job) == [], "a commit sequence is left pending"
    seen = published_records(base / "published")
    duplicates = {k: n for k, n in seen.items() if n > 1}
    assert not duplicates, f"published more than once: {sorted(duplicates)[:5]}"
    watermarks = {(urn, p): v for (j, urn), d in state.datasets.items() if j == job for p, v in d.watermarks.items()}
    expected = {(urn, int(p.rsplit(":", 1)[1]), o) for (urn, p), w in watermarks.items() for o in range(w)}
    assert set(seen) == expected, (f"published {len(seen)} records, the watermarks say {len(expected)}; missing "
                                   f"{sorted(expected - set(seen))[:5]}, extra {sorted(set(seen) - expected)[:5]}")
    for folder in ("staging", "task-output"):
        left = [p.name for p in (base / folder).glob("*") if RUN_ID.match(p.name)] if (base / folder).exists() else []
        assert not left, f"{folder} still holds run folders {left}"
    return watermarks
