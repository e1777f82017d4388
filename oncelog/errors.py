"""Every public exception of oncelog, in one place; each is an `OncelogError`, so one `except` catches them all.

- OncelogError: base of every error oncelog raises on purpose.
- ConfigError: a configuration value (URL, key, setting) is missing or invalid; the message names it.
- JobConfigError: a job file is invalid; `problems` lists every problem with its file, line and key.
- LogUnavailableError: the event log (SQLite file or Kafka cluster) cannot be reached or used.
- LogWriteError: an atomic batch could not be appended; nothing of it is visible to readers.
- EventTooLargeError: an event encodes to more than the log takes; nothing of its batch is appended.
- EventEncodeError: an event's fields do not fit its schema (a bug of the code that built it); nothing of its batch is
  appended.
- KafkaSecurityError: Kafka refused our credentials, or we refused its certificate; names listener and setting.
- FencedError: a newer writer of the same name (a newer run of the job) took over; this one can append nothing.
- LogNotStableError: another writer's transaction stays open, so the log's stable end stays short of its end.
- EventDecodeError: a record of the log could not be decoded into an event; names where it lies.
- UnknownEventTypeError: a record names an event type or schema version this oncelog does not know.
- CorruptEventError: a record's bytes differ from what was written (its checksum does not match).
- MissingRecordsError: records are gone from the log that nothing of oncelog deleted; names the offsets.
- SnapshotFormatError: a snapshot's bytes are not a snapshot this oncelog can read.
- ProjectionStopped: a fold with stop_on_error met a record it could not use.
- DamagedHistoryError: the log lacks part of an event appended in parts (one atomic batch), or the end of a commit
  sequence its dataset planned past: it was damaged.
- IncompleteHistoryError: the history could not be read completely, so the run refuses to plan from it.
- JobLockedError: another run of the job holds its lock.
- RunCancelled: the run was cancelled (SIGINT / SIGTERM) before anything was published.
- TasksAborted: Spark aborted the run's tasks (a task's process lost); the run fails, nothing is published.
- SourceError: a source cannot read what it planned (missing topic, partition or file, lost offsets).
- TableError: an Iceberg table cannot be reached, read or appended to (names the table, its catalog, the column).
  - TableDataError: the table refuses the data itself (a column it cannot take); a run's commit is then split to find
    whose files.
- TaskQualityError: a MANDATORY task-level quality policy failed; the branch's output is not committed.
- CommitStepError: a commit step cannot be done; its sequence records the failure and retries later.
- UnsafeCommitStepError: a commit step would touch a path outside the job's roots; refused before anything moves.
- UnsettledCommitStepError: a commit step failed without telling whether it took effect (a table commit whose table
  could not be read); its sequence stays pending, never abandoned.
- ShardLostError: a commit shard's task died (worker or executor lost); what it appended stands.
- ShardFailedError: a commit shard's task stopped on an error; the run fails and the next one recovers.
- LineageError: an OpenLineage event could not be sent.
- FileSystemError: a file-system call failed or a location cannot be served.
- RunNotFoundError: no run with that id in the log (or several jobs have one and no job was named).
- JobNotFoundError: the state has no run of that job.
- KafkaProvisioningError, HdfsProvisioningError, S3ProvisioningError, SparkClusterError: a local development server
  (`oncelog kafka|hdfs|s3 up`, the local Spark cluster) could not be provisioned, started or stopped.
- SparkConnectorError: Spark's Kafka/Avro connector jars are missing, damaged or could not be fetched; names the jar
  and `oncelog spark jars`.

RunCancelled and TasksAborted (beside the launcher and the engine, which import PySpark) and LineageError (beside the
OpenLineage client) are loaded on first use, so that importing this module stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from events.codec import EventEncodeError, EventTooLargeError
from events.errors import (
    ConfigError,
    CorruptEventError,
    EventDecodeError,
    FencedError,
    KafkaSecurityError,
    LogNotStableError,
    LogUnavailableError,
    LogWriteError,
    MissingRecordsError,
    OncelogError,
    UnknownEventTypeError,
)
from events.log.lock import JobLockedError
from filesystems.base import FileSystemError
from localservers.errors import (
    HdfsProvisioningError,
    KafkaProvisioningError,
    S3ProvisioningError,
    SparkClusterError,
)
from projections.projector import ProjectionStopped
from projections.snapshot_codec import SnapshotFormatError
from projections.state import DamagedHistoryError
from replay.audit import RunNotFoundError
from replay.history_html import JobNotFoundError
from spark_pipeline.commit.session import IncompleteHistoryError
from spark_pipeline.commit.shards import ShardFailedError, ShardLostError
from spark_pipeline.commit.steps import CommitStepError, UnsafeCommitStepError, UnsettledCommitStepError
from spark_pipeline.connectors import SparkConnectorError
from spark_pipeline.constructs import SourceError
from spark_pipeline.engines.policies import TaskQualityError
from spark_pipeline.jobfile.config import JobConfigError
from spark_pipeline.tables.errors import TableDataError, TableError

if TYPE_CHECKING:
    from replay.lineage_client import LineageError
    from spark_pipeline.engines.spark import TasksAborted
    from spark_pipeline.launcher import RunCancelled

__all__ = [
    "CommitStepError",
    "ConfigError",
    "CorruptEventError",
    "DamagedHistoryError",
    "EventDecodeError",
    "EventEncodeError",
    "EventTooLargeError",
    "FencedError",
    "FileSystemError",
    "HdfsProvisioningError",
    "IncompleteHistoryError",
    "JobConfigError",
    "JobLockedError",
    "JobNotFoundError",
    "LineageError",
    "KafkaProvisioningError",
    "KafkaSecurityError",
    "LogNotStableError",
    "MissingRecordsError",
    "LogUnavailableError",
    "LogWriteError",
    "OncelogError",
    "ProjectionStopped",
    "RunCancelled",
    "RunNotFoundError",
    "S3ProvisioningError",
    "ShardFailedError",
    "ShardLostError",
    "SnapshotFormatError",
    "SourceError",
    "SparkClusterError",
    "SparkConnectorError",
    "TableDataError",
    "TableError",
    "TaskQualityError",
    "TasksAborted",
    "UnknownEventTypeError",
    "UnsafeCommitStepError",
    "UnsettledCommitStepError",
]

_HEAVY: dict[str, str] = {"RunCancelled": "spark_pipeline.launcher", "TasksAborted": "spark_pipeline.engines.spark",
                          "LineageError": "replay.lineage_client"}
"""Errors whose defining module imports PySpark or OpenLineage: name -> that module."""


def __getattr__(name: str) -> type[OncelogError]:
    """An error of `_HEAVY`, imported on first use."""
    module = _HEAVY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    error: type[OncelogError] = getattr(importlib.import_module(module), name)
    globals()[name] = error
    return error
