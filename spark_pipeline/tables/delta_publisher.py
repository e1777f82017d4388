"""The Delta table publisher (`data.publisher.type: spark_pipeline.tables.delta_publisher.DeltaTablePublisher`).

Per dataset, the sequence: an FsRename per Parquet file its tasks wrote (into the table's `data/` folder under the
file's watermark-range name), then one DeltaCommit (a delta-rs write transaction adding those files, carrying the
dataset's app transaction and the sequence's id and watermark ranges in its commit info), then the HighWatermark and
DatasetState steps. The DatasetState records the app transaction's version, so that the next sequence of the dataset
takes the next one. deltalake itself is loaded only by the DeltaCommit step and the pre-flight check of an existing
table (spark_pipeline/tables/delta.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field

from events.commit import CommitSequencePlanned, DeltaCommitStep
from filesystems import urls
from projections.views import DatasetView
from spark_pipeline.constructs import DatasetOutput
from spark_pipeline.tables.base import TablePublisher, TableSettings, commit_id, snapshot_summary
from spark_pipeline.tables.files import local
from spark_pipeline.tables.storage import TableStorage, is_hdfs, is_s3

TABLE_KEY = "delta.table"
VERSION_PROPERTY = "oncelog.delta.txn-version"
"""The dataset state property holding the version of the dataset's latest app transaction in the table."""
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _name(value: str) -> str:
    if not NAME.match(value):
        raise ValueError(f"{value!r} is no table name: `name` or `folder.name` (letters, digits, '_'; each part a "
                         f"folder under data.publisher.final.dir)")
    return value


class DeltaSettings(TableSettings):
    """The keys the Delta publisher reads; the table lies under the job's data.publisher.final.dir."""

    FORMAT: ClassVar[str] = "Delta"
    REMOTE_WAREHOUSES: ClassVar[tuple[str, ...]] = ("s3a://", "s3://", "hdfs://")
    UNSUPPORTED: ClassVar[str] = (
        "webhdfs:// is not supported (delta-rs's WebHDFS client ignores the URL's port and always calls the "
        "NameNode's default HTTP port, 9870): name the NameNode's RPC address, hdfs://namenode:port/…")

    table: Annotated[str, AfterValidator(_name)] = Field(alias="delta.table")

    def location(self, warehouse: str) -> str:
        """The table's root folder: `<warehouse>/<part>/…/<name>`."""
        return urls.join(warehouse, *self.table.split("."))


class DeltaTablePublisher(TablePublisher):
    """Publishes each dataset's Parquet files into one Delta table: files moved under the table's data folder, then
    one Delta commit per dataset sequence (its app transaction the dataset's), then the watermarks and the state."""

    CONFIG_MODEL = DeltaSettings

    def table_location(self, settings: DeltaSettings, warehouse: str) -> str:
        return settings.location(warehouse)

    def table_step(self, settings: DeltaSettings, warehouse: str, location: str, sequence: CommitSequencePlanned,
                   output: DatasetOutput, previous: DatasetView | None, group: str, member: int) -> DeltaCommitStep:
        return DeltaCommitStep(
            table=settings.table, location=location, app_id=app_id(sequence.job, sequence.dataset_urn),
            version=last_version(previous) + 1,
            commit_id=commit_id(sequence.job, sequence.dataset_urn, sequence.sequence_id),
            metadata={**snapshot_summary(sequence, output), **self.partition_summary()})

    def state_properties(self, previous: DatasetView | None, commits: bool) -> dict[str, str]:
        """The dataset's app transaction version: the next one when the sequence commits, else the last one."""
        version = last_version(previous) + (1 if commits else 0)
        return {VERSION_PROPERTY: str(version)} if version else {}


def app_id(job: str, dataset_urn: str) -> str:
    """The app transaction id of a dataset's commits: one per job and dataset."""
    return f"oncelog/{job}/{dataset_urn}"


def last_version(dataset: DatasetView | None) -> int:
    """The version of the dataset's latest app transaction, as its committed state records it (0: none yet)."""
    recorded = dataset.properties.get(VERSION_PROPERTY, "0") if dataset is not None else "0"
    return int(recorded) if recorded.isdigit() else 0


def location_problem(location: str, storage: TableStorage) -> str | None:
    """Why a Delta table cannot be created or opened at `location`, or None; writes nothing. An existing table must
    open (deltalake loaded for it alone); otherwise, on local disk, the nearest existing folder must be one this
    process may write into; in a bucket or on HDFS, the store must answer."""
    try:
        has_log = storage.exists(urls.join(location, "_delta_log"))
    except OSError as e:
        return f"the table's folder {location} cannot be read: {e}"
    if has_log:
        from spark_pipeline.tables import delta

        problem = delta.open_problem(location, storage)
        return f"the Delta table at {location} cannot be opened: {problem}" if problem else None
    if is_s3(location) or is_hdfs(location):
        return None  # the store answered the look for the log
    root = Path(local(location))
    existing = next((p for p in (root, *root.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return f"the table's folder {root} cannot be created: {existing} is no folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"the table's folder {root} cannot be created: {existing} is not writable"
    return None
