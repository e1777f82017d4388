"""How a job commits: the settings that travel together from the job file to every committer."""

from __future__ import annotations

from dataclasses import dataclass

from spark_pipeline.commit.steps import PublishRoots

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_PARALLELISM = 32


@dataclass(frozen=True)
class CommitSettings:
    """Where steps may move files, how often a sequence may fail before it is abandoned, how many commit at once."""

    roots: PublishRoots
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    parallelism: int = DEFAULT_PARALLELISM
