"""Where a run's files live: staging, task output and the publish root of each branch; absolute before tasks run.

`JobRoots` are a job's folders as resolved absolute paths, from its config or from the properties a run recorded;
`overlaps` says where two jobs share folders (one job's stale-run cleanup would delete the other's task output).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from events.errors import ConfigError
from events.log import parse_url
from filesystems import urls
from spark_pipeline.jobfile.config import (
    JobConfig,
    branch_sources,
    folder_value,
    split_suffix,
)

RUN_ID = re.compile(r"^\d{8}T\d{9}Z-[0-9a-f]{6}$")
DIRECTORY_KEYS = ("writer.staging.dir", "writer.output.dir", "data.publisher.final.dir", "qualitychecker.row.err.file")


@dataclass(frozen=True)
class RunDirs:
    """One branch's folders for one run (run id '' gives the roots), as locations (paths or URLs)."""

    staging: str
    output: str
    final: str


def run_dirs(config: JobConfig, run_id: str) -> list[RunDirs]:
    """Each branch's staging and task-output folders of the run, and its publish root."""
    found = []
    for branch in config.branches:
        if branch.writer_staging_dir and branch.writer_output_dir and branch.publisher_final_dir:
            found.append(RunDirs(urls.join(branch.writer_staging_dir, run_id),
                                 urls.join(branch.writer_output_dir, run_id), branch.publisher_final_dir))
    return found


def absolute_config(config: JobConfig) -> JobConfig:
    """The config with its folders (local ones resolved, remote ones normalized) and SQLite log path absolute:
    executors may start elsewhere."""
    properties = dict(config.properties)
    for key, value in config.properties.items():
        suffixed = split_suffix(key)
        base = suffixed[0] if suffixed else key
        if base in DIRECTORY_KEYS:
            properties[key] = urls.resolve_folder(folder_value(key, value))
    updates: dict[str, object] = {"properties": properties}
    for field, key in (("writer_staging_dir", "writer.staging.dir"), ("writer_output_dir", "writer.output.dir"),
                       ("publisher_final_dir", "data.publisher.final.dir"),
                       ("row_err_file", "qualitychecker.row.err.file")):
        if getattr(config, field) is not None:
            updates[field] = properties[key]
    scheme, location, _ = parse_url(config.log_url)
    if scheme == "sqlite" and not Path(location).is_absolute():
        query = config.log_url.partition("?")[2]
        updates["log_url"] = f"sqlite:///{Path(location).resolve()}" + (f"?{query}" if query else "")
        properties["oncelog.log.url"] = str(updates["log_url"])
    return config.model_copy(update=updates)


T = TypeVar("T")


class Role(StrEnum):
    """What a job root is for, named by its configuration key."""

    STAGING = "writer.staging.dir"
    OUTPUT = "writer.output.dir"
    PUBLISH = "data.publisher.final.dir"


def resolved_path(value: str) -> str:
    """A folder as compared: a local one absolute with symlinks and `..` resolved, a remote URL normalized."""
    return urls.resolve_folder(value)


def nested_pairs(roots: Sequence[tuple[T, str]]) -> list[tuple[T, T]]:
    """Every (outer, inner) pair of labelled absolute paths where inner equals outer or lies inside it.

    Sorted with a trailing '/', every path inside another sorts after it with only paths inside it in between,
    so a stack of open ancestors finds every pair in O(n log n + pairs).
    """
    order = sorted(range(len(roots)), key=lambda i: (_as_folder(roots[i][1]), i))
    open_folders: list[tuple[str, T]] = []
    pairs: list[tuple[T, T]] = []
    for index in order:
        label, path = roots[index]
        prefix = _as_folder(path)
        while open_folders and not prefix.startswith(open_folders[-1][0]):
            open_folders.pop()
        pairs += [(outer, label) for _, outer in open_folders]
        open_folders.append((prefix, label))
    return pairs


def _as_folder(path: str) -> str:
    """The path with one trailing '/', so that '/a/b' is inside '/a' but '/a-b' and '/ab' are not."""
    return path.rstrip("/") + "/"


@dataclass(frozen=True)
class JobRoots:
    """A job's staging, task-output and publish roots (every branch), as resolved absolute path strings."""

    job: str
    staging: tuple[str, ...]
    output: tuple[str, ...]
    publish: tuple[str, ...]

    @classmethod
    def of(cls, config: JobConfig) -> JobRoots:
        """The roots of a validated job."""
        branches = config.branches
        return cls(config.job_name, _resolved(b.writer_staging_dir for b in branches),
                   _resolved(b.writer_output_dir for b in branches), _resolved(b.publisher_final_dir for b in branches))

    @classmethod
    def from_properties(cls, job: str, properties: Mapping[str, str]) -> JobRoots:
        """The roots a run recorded (JobRunStarted's properties), read without importing the job's constructs."""
        raw = properties.get("fork.branches", "").strip() or "1"
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(f"job {job!r}: recorded 'fork.branches' is {raw!r}, not a number of branches")
        count = int(raw)
        found: dict[Role, list[str]] = {role: [] for role in Role}
        for n in range(count):
            sources = branch_sources(properties, n, count)
            for role in Role:
                if role.value in sources:
                    key, value = sources[role.value]
                    found[role].append(_recorded_folder(job, key, value))
        return cls(job, _resolved(found[Role.STAGING]), _resolved(found[Role.OUTPUT]), _resolved(found[Role.PUBLISH]))

    def roots(self) -> list[tuple[Role, str]]:
        """Every root with its role."""
        return ([(Role.STAGING, p) for p in self.staging] + [(Role.OUTPUT, p) for p in self.output]
                + [(Role.PUBLISH, p) for p in self.publish])


def _resolved(values: Iterable[str | None]) -> tuple[str, ...]:
    """The set folders, resolved, in order, each once."""
    return tuple(dict.fromkeys(resolved_path(v) for v in values if v))


def _recorded_folder(job: str, key: str, value: str) -> str:
    """A recorded folder value; a scheme oncelog cannot serve is a ConfigError naming job and key."""
    try:
        return folder_value(key, value)
    except ValueError as e:
        raise ConfigError(f"job {job!r}: recorded {key!r} {value!r}: {e}") from e


def overlaps(a: JobRoots, b: JobRoots) -> list[str]:
    """One message per root of `a` and root of `b` that are equal or nested: two jobs must not share folders.

    Meant for two different jobs (a job compared with itself overlaps everywhere); pure, so the launcher can check
    the roots other jobs recorded in the log as well as a schedule folder's job files.
    """
    jobs = (a, b)
    labelled = [((side, role, path), path) for side, job in enumerate(jobs) for role, path in job.roots()]
    messages = []
    for (outer_side, outer_role, outer_path), (inner_side, inner_role, inner_path) in nested_pairs(labelled):
        if outer_side == inner_side:
            continue  # a job's own folders are checked when its configuration loads
        outer = f"{outer_role.value!r} of job {jobs[outer_side].job!r}"
        inner = f"{inner_role.value!r} of job {jobs[inner_side].job!r}"
        relation = (f"{outer} and {inner} are both {outer_path}" if inner_path == outer_path
                    else f"{inner} ({inner_path}) is inside {outer} ({outer_path})")
        messages.append(f"{relation}: two jobs must not share folders (one job's cleanup of stale runs would delete "
                        f"the other's files)")
    return messages
