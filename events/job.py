"""Job-run and job-lock transitions (Gobblin's JobState: PENDING → RUNNING → SUCCESSFUL → COMMITTED, or FAILED /
CANCELLED)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from events.keys import key_of
from events.model import Count, Frozen, Name, Parted, RunEvent


class WorkUnitSpec(Frozen):
    """A WorkUnit: one dataset partition to pull from the low to the expected high watermark."""

    work_unit_id: Name
    dataset_urn: Name
    partition: Name
    low_watermark: int
    expected_high_watermark: int
    multi_work_unit_id: Name | None = None
    estimated_records: Count = 0
    properties: dict[str, str] = Field(default_factory=dict)


ENGINE_PROPERTY = "oncelog.task.engine"
"""JobRunStarted's property naming the task engine that ran the run (dataframe or records)."""
REASON_PROPERTY = "oncelog.task.engine.reason"
"""JobRunStarted's property saying why that engine ran it (`task.engine` and what the job needs)."""


class JobRunStarted(RunEvent):
    """A run of a job began (RUNNING), with the job's configuration as Gobblin properties."""

    job_group: str | None = None
    properties: dict[str, str] = Field(default_factory=dict)
    launcher: str = "spark"

    @property
    def key(self) -> str:
        return self.run_key("STARTED")


class WorkUnitsPlanned(RunEvent, Parted):
    """The Source created these WorkUnits for the run (packed into MultiWorkUnits by multi_work_unit_id).

    v2: in parts when the run has many work units."""

    SCHEMA_VERSION: ClassVar[int] = 2
    PARTED_FIELDS: ClassVar[tuple[str, ...]] = ("work_units",)

    work_units: tuple[WorkUnitSpec, ...]

    @property
    def key(self) -> str:
        return self.part_key(self.run_key("WORK_UNITS_PLANNED"))


class JobRunSucceeded(RunEvent):
    """Every task of the run finished (Gobblin's SUCCESSFUL); nothing is published yet."""

    tasks: Count
    records_extracted: Count = 0
    records_written: Count = 0

    @property
    def key(self) -> str:
        return self.run_key("SUCCEEDED")


class JobRunCommitted(RunEvent, Parted):
    """The run's commit sequences finished: its data is published (COMMITTED). v3: in parts when its dataset lists
    are long (the first part commits the run; the others complete its lists)."""

    SCHEMA_VERSION: ClassVar[int] = 3
    PARTED_FIELDS: ClassVar[tuple[str, ...]] = ("datasets_committed", "datasets_abandoned", "datasets_skipped")

    datasets_committed: tuple[str, ...] = ()
    datasets_abandoned: tuple[str, ...] = ()
    datasets_skipped: tuple[str, ...] = ()
    """Datasets the run did not pull because their history was not settled (see DatasetSkipped): v2."""

    @property
    def key(self) -> str:
        return self.part_key(self.run_key("COMMITTED"))


class DatasetSkipped(RunEvent):
    """The run did not pull a dataset whose history is not settled: a sequence of it is still pending after this
    run's recovery, or was abandoned with steps applied. Its range is pulled by a later run, once settled."""

    dataset_urn: Name
    sequence_id: Name
    """The unsettled sequence."""
    reason: str

    @property
    def urn(self) -> str | None:
        return self.dataset_urn

    @property
    def key(self) -> str:
        return self.run_key("SKIPPED", self.dataset_urn)


class JobRunFailed(RunEvent):
    """The run failed; the error says why, failed_tasks which tasks ran out of retries."""

    error: str
    failed_tasks: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.run_key("FAILED")


class JobRunCancelled(RunEvent):
    """The run was cancelled (SIGINT / SIGTERM): nothing of it is published."""

    reason: str

    @property
    def key(self) -> str:
        return self.run_key("CANCELLED")


class JobLockAcquired(RunEvent):
    """The run holds the job's lock; holder names the host and process."""

    holder: str

    @property
    def key(self) -> str:
        return key_of("lock", self.job, self.run_id, "ACQUIRED")


class JobLockReleased(RunEvent):
    """The run gave the job's lock back."""

    @property
    def key(self) -> str:
        return key_of("lock", self.job, self.run_id, "RELEASED")
