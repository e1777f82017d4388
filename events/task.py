"""Task and task-attempt transitions: a task runs one WorkUnit or the WorkUnits of one MultiWorkUnit."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from events.model import Count, Frozen, Name, Parted, RunEvent

Attempt = Annotated[int, Field(ge=1)]


class OutputFile(Frozen):
    """A file a task wrote to its task-output folder: what the FsRename step will publish and verify."""

    path: str
    size: Count
    checksum: str
    records: Count = 0
    branch: Count = 0
    folder: str = ""
    """The task-output folder of the attempt that wrote the file (writer.output.dir/<run>/<task>/attempt-<n>): no
    other attempt writes there, and the file's path below it is its published name. "" in logs written before each
    attempt had a folder of its own: the run's task-output folder."""
    partition: str = ""
    """The time partition the file holds (its folder below the dataset's: `hourly/2026/11/26/03`); "" when the job
    has no partitioner, and in logs written before partitioned output."""


class WorkUnitResult(Frozen):
    """What one attempt did for one WorkUnit: the actual high watermark, counts and output files."""

    work_unit_id: Name
    dataset_urn: Name
    partition: Name
    low_watermark: int
    expected_high_watermark: int
    actual_high_watermark: int
    records_extracted: Count = 0
    records_written: Count = 0
    bytes_written: Count = 0
    output_files: tuple[OutputFile, ...] = ()


class TaskEvent(RunEvent):
    """An event of one attempt of one task."""

    task_id: Name
    attempt: Attempt

    def attempt_key(self, transition: str) -> str:
        """run/<job>/<run_id>/task/<task_id>/attempt/<n>/<transition>"""
        return self.run_key("task", self.task_id, "attempt", self.attempt, transition)


class TaskStarted(TaskEvent, Parted):
    """An attempt of a task began on an executor. v2: in parts when its work units are many."""

    SCHEMA_VERSION: ClassVar[int] = 2
    PARTED_FIELDS: ClassVar[tuple[str, ...]] = ("work_unit_ids",)

    work_unit_ids: tuple[str, ...]
    executor: str = ""

    @property
    def key(self) -> str:
        return self.part_key(self.attempt_key("STARTED"))


class TaskSucceeded(TaskEvent, Parted):
    """An attempt finished: its output lies in task-output, with the actual high watermarks reached.

    v2: in parts when its results are many (a MultiWorkUnit of thousands of work units); each part has them in part.
    v3: each output file names its attempt's folder (`OutputFile.folder`: "" in events of v2).
    v4: and its time partition (`OutputFile.partition`: "" in events of v3).
    """

    SCHEMA_VERSION: ClassVar[int] = 4
    PARTED_FIELDS: ClassVar[tuple[str, ...]] = ("results",)

    results: tuple[WorkUnitResult, ...]
    duration_ms: Count = 0

    @property
    def key(self) -> str:
        return self.part_key(self.attempt_key("SUCCEEDED"))


class TaskFailed(TaskEvent, Parted):
    """An attempt failed; results hold what it did get done (used by the `partial` commit policy). v2: in parts.

    v3: what it comes down to — its root cause's first line, the work unit (and dataset) it failed on when known,
    whether a retry could fix it, and the next attempt (0: none) with the pause before it. Events of v2 read with
    these empty: `cause_line` then falls back to the error's first line. v4: each output file names its attempt's
    folder (`OutputFile.folder`: "" in events of v3). v5: and its time partition (`OutputFile.partition`: "" in
    events of v4).
    """

    SCHEMA_VERSION: ClassVar[int] = 5
    PARTED_FIELDS: ClassVar[tuple[str, ...]] = ("results",)

    error: str
    results: tuple[WorkUnitResult, ...] = ()
    duration_ms: Count = 0
    cause: str = ""
    failed_work_unit: str = ""
    failed_dataset: str = ""
    retriable: bool = True
    next_attempt: Count = 0
    retry_delay_s: float = 0.0

    @property
    def cause_line(self) -> str:
        """The root cause's first line (for events of v2, the error's first line)."""
        return self.cause or next((line.strip() for line in self.error.splitlines() if line.strip()), "")

    @property
    def key(self) -> str:
        return self.part_key(self.attempt_key("FAILED"))


class TaskRetried(TaskEvent):
    """A failed attempt will be retried (task.maxretries) after a delay (task.retry.intervalinsec)."""

    next_attempt: Attempt
    delay_s: float = 0.0
    reason: str = ""

    @property
    def key(self) -> str:
        return self.attempt_key("RETRIED")
