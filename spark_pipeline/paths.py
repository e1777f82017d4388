"""Where a run's files live: staging, task output and the publish root of each branch; absolute before tasks run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from events.log import parse_url
from spark_pipeline.config import JobConfig, split_suffix

RUN_ID = re.compile(r"^\d{8}T\d{9}Z-[0-9a-f]{6}$")
DIRECTORY_KEYS = ("writer.staging.dir", "writer.output.dir", "data.publisher.final.dir", "qualitychecker.row.err.file")


@dataclass(frozen=True)
class RunDirs:
    """One branch's folders for one run (run id '' gives the roots)."""

    staging: Path
    output: Path
    final: Path


def run_dirs(config: JobConfig, run_id: str) -> list[RunDirs]:
    """Each branch's staging and task-output folders of the run, and its publish root."""
    found = []
    for branch in config.branches:
        if branch.writer_staging_dir and branch.writer_output_dir and branch.publisher_final_dir:
            found.append(RunDirs(Path(branch.writer_staging_dir) / run_id, Path(branch.writer_output_dir) / run_id,
                                 Path(branch.publisher_final_dir)))
    return found


def stale_run_dirs(config: JobConfig, keep: set[str]) -> Iterator[Path]:
    """Run folders in staging and task output that belong to no run in `keep` (crashed runs leave them)."""
    for dirs in run_dirs(config, ""):
        for root in (dirs.staging, dirs.output):
            if root.is_dir():
                yield from (p for p in root.iterdir() if p.is_dir() and RUN_ID.match(p.name) and p.name not in keep)


def absolute_config(config: JobConfig) -> JobConfig:
    """The config with its folders and SQLite log path made absolute: executors may start elsewhere."""
    properties = dict(config.properties)
    for key, value in config.properties.items():
        suffixed = split_suffix(key)
        base = suffixed[0] if suffixed else key
        if base in DIRECTORY_KEYS:
            properties[key] = str(Path(value).resolve())
    updates: dict[str, object] = {"properties": properties}
    for field, key in (("writer_staging_dir", "writer.staging.dir"), ("writer_output_dir", "writer.output.dir"),
                       ("publisher_final_dir", "data.publisher.final.dir"), ("row_err_file", "qualitychecker.row.err.file")):
        if getattr(config, field) is not None:
            updates[field] = properties[key]
    scheme, location, _ = parse_url(config.log_url)
    if scheme == "sqlite" and not Path(location).is_absolute():
        query = config.log_url.partition("?")[2]
        updates["log_url"] = f"sqlite:///{Path(location).resolve()}" + (f"?{query}" if query else "")
        properties["oncelog.log.url"] = str(updates["log_url"])
    return config.model_copy(update=updates)
