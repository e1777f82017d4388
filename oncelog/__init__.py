"""oncelog's Python API: exactly-once ingestion jobs whose whole state is a fold over an event log.

    import oncelog

    with oncelog.open_log("sqlite:///.oncelog/events.db") as log:
        print(oncelog.verify(log).ok, oncelog.rebuild(log).pending_sequences())

- The log: `open_log(url)` → `EventLog` (`sqlite:///path` or `kafka://host:port`), `DEFAULT_URL`.
- Jobs: `run_job(job_file or JobConfig)` → `RunResult`; `recover(job)`; `load_job_config`, `load_job_dir`,
  `JobConfig`, `JobLauncher` (for observers, faults, cancellation), `RunStatus`; moving Gobblin jobs over:
  `load_job` (with its notes), `migration_report`, `migration_reports`.
- State: `rebuild(log)` → `State`; `state_as_of(log, until)` (time travel); `Projector` (snapshots, catch-up).
- Checks: `verify(log)` → `VerifyReport`; `audit(log, run_id)` → `AuditTimeline`.
- Downstream: `follow(log, group, handler, types=…, on_error=OnError.SKIP)` delivers events as a resumable consumer
  group; `LoggedEvent` is what the handler receives; `DatasetPublished` names a dataset's new files (sizes, records)
  and watermark ranges, for registering them without another lookup.
- Job locks: `HolderStatus`, whether a lock's recorded holder is alive.
- Errors: every public exception (all `OncelogError`), also in `oncelog.errors`.

Each name is imported on first use, so `import oncelog` costs nothing until one is needed (PySpark only for jobs).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from events.log import DEFAULT_URL, EventLog, open_log
    from events.log.lock import HolderStatus
    from events.model import LoggedEvent
    from events.published import DatasetPublished
    from oncelog.errors import *  # noqa: F403 (the errors, for type checkers)
    from oncelog.folds import rebuild
    from oncelog.jobs import recover, run_job
    from projections.projector import Projector
    from projections.state import State
    from projections.views import RunStatus
    from replay.audit import AuditTimeline, audit
    from replay.subscriptions import OnError, follow
    from replay.time_travel import state_as_of
    from replay.verify import VerifyReport, verify
    from spark_pipeline.jobfile.config import JobConfig
    from spark_pipeline.jobs import (
        load_job,
        load_job_config,
        load_job_dir,
        migration_report,
        migration_reports,
    )
    from spark_pipeline.launcher import JobLauncher, RunResult

_API: dict[str, str] = {
    "open_log": "events.log",
    "DEFAULT_URL": "events.log",
    "EventLog": "events.log",
    "LoggedEvent": "events.model",
    "HolderStatus": "events.log.lock",
    "run_job": "oncelog.jobs",
    "recover": "oncelog.jobs",
    "load_job_config": "spark_pipeline.jobs",
    "load_job_dir": "spark_pipeline.jobs",
    "load_job": "spark_pipeline.jobs",
    "migration_report": "spark_pipeline.jobs",
    "migration_reports": "spark_pipeline.jobs",
    "JobConfig": "spark_pipeline.jobfile.config",
    "JobLauncher": "spark_pipeline.launcher",
    "RunResult": "spark_pipeline.launcher",
    "RunStatus": "projections.views",
    "rebuild": "oncelog.folds",
    "state_as_of": "replay.time_travel",
    "State": "projections.state",
    "Projector": "projections.projector",
    "verify": "replay.verify",
    "VerifyReport": "replay.verify",
    "audit": "replay.audit",
    "AuditTimeline": "replay.audit",
    "follow": "replay.subscriptions",
    "OnError": "replay.subscriptions",
    "DatasetPublished": "events.published",
}
"""Public name -> the module that defines it (imported on first use)."""

_ERRORS: tuple[str, ...] = (
    "OncelogError", "ConfigError", "JobConfigError", "LogUnavailableError", "LogWriteError", "FencedError",
    "LogNotStableError", "EventDecodeError", "UnknownEventTypeError", "CorruptEventError", "SnapshotFormatError",
    "ProjectionStopped", "IncompleteHistoryError", "JobLockedError", "RunCancelled", "SourceError", "TaskQualityError",
    "CommitStepError", "UnsafeCommitStepError", "TableError", "TableDataError", "FileSystemError", "RunNotFoundError",
    "JobNotFoundError",
    "KafkaProvisioningError", "HdfsProvisioningError", "S3ProvisioningError", "SparkClusterError",
    "SparkConnectorError",
    "EventTooLargeError", "EventEncodeError", "KafkaSecurityError", "DamagedHistoryError", "ShardLostError",
    "ShardFailedError", "LineageError", "MissingRecordsError", "TasksAborted", "UnsettledCommitStepError",
)
"""The names of `oncelog.errors` (imported from there on first use, like the rest)."""

_EXPORTS: dict[str, str] = {**_API, **{name: "oncelog.errors" for name in _ERRORS}}

__all__ = [*_API, *_ERRORS]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (and kept)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'oncelog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, for completion."""
    return sorted({*globals(), *__all__})
