"""The Iceberg table publisher (`data.publisher.type: spark_pipeline.tables.IcebergTablePublisher`).

Per dataset, the sequence: an FsRename per Parquet file its tasks wrote (from the attempt's task-output folder into
the table's `data/` folder under the file's watermark-range name), then one TableCommit of the run's group (the
committer appends the files of all the run's sequences that reach it together, in one snapshot whose summary lists
them: `spark_pipeline.commit.tables`), then the
HighWatermark and DatasetState steps as the folder publisher plans them. pyiceberg itself is loaded only by the
TableCommit step and the table's pre-flight check (spark_pipeline/tables/iceberg.py).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from events.commit import CommitSequencePlanned, TableCommitStep
from filesystems import urls
from projections.views import DatasetView
from spark_pipeline.constructs import DatasetOutput
from spark_pipeline.tables.base import TablePublisher, TableSettings, commit_id, snapshot_summary

TABLE_KEY = "iceberg.table"
CATALOG_URI_KEY = "iceberg.catalog.uri"
CATALOG_NAME_KEY = "iceberg.catalog.name"
DEFAULT_CATALOG_FILE = "iceberg-catalog.db"
"""The SQLite file of the default SQL catalog, in the warehouse (data.publisher.final.dir)."""
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
CATALOG_SCHEMES = ("sqlite:", "postgresql", "http://", "https://", "thrift://")


def _identifier(value: str) -> str:
    if not IDENTIFIER.match(value):
        raise ValueError(f"{value!r} is no table identifier: `namespace.name` (letters, digits, '_'; the namespace "
                         f"may have several levels)")
    return value


def _catalog_uri(value: str) -> str:
    if not value.startswith(CATALOG_SCHEMES):
        raise ValueError(f"{value!r} is no catalog URL oncelog can use: sqlite:///<file> or postgresql://… "
                         f"(pyiceberg's SQL catalog), http(s)://… (a REST catalog), thrift://… (a Hive metastore)")
    return value


class IcebergSettings(TableSettings):
    """The keys the Iceberg publisher reads; the warehouse is the job's data.publisher.final.dir."""

    FORMAT: ClassVar[str] = "Iceberg"
    REMOTE_WAREHOUSES: ClassVar[tuple[str, ...]] = ("hdfs://", "webhdfs://", "s3a://", "s3://")

    table: Annotated[str, AfterValidator(_identifier)] = Field(alias="iceberg.table")
    catalog_uri: Annotated[str, AfterValidator(_catalog_uri)] | None = Field(default=None, alias="iceberg.catalog.uri")
    """None: pyiceberg's SQL catalog on `<warehouse>/iceberg-catalog.db` (a warehouse on local disk only)."""
    catalog_name: str = Field(default="oncelog", min_length=1, alias="iceberg.catalog.name")

    @model_validator(mode="after")
    def _catalog_for_remote_warehouse(self) -> IcebergSettings:
        """A warehouse on HDFS or S3 needs a catalog named: the default SQLite file cannot live there (SQLite writes
        a local file in place), and a catalog file on this machine alone would hide the table from a recovery run
        elsewhere."""
        if self.catalog_uri is None and urls.has_scheme(self.warehouse) and not self.warehouse.startswith("file:"):
            raise PydanticCustomError("catalog_required", (
                f"{CATALOG_URI_KEY} is required for the warehouse {self.warehouse!r} (the default catalog, a SQLite "
                f"file in the warehouse, cannot live on HDFS or S3): set it to a catalog every run and reader of the "
                f"table reaches, e.g. postgresql://…, http(s)://… (a REST catalog), thrift://… (a Hive metastore), "
                f"or sqlite:////<local folder>/catalog.db (this machine only)"))
        return self

    def catalog(self, warehouse: str) -> str:
        """The catalog's URL for a warehouse made absolute."""
        return self.catalog_uri or f"sqlite:///{urls.join(warehouse, DEFAULT_CATALOG_FILE)}"


class IcebergTablePublisher(TablePublisher):
    """Publishes each dataset's Parquet files into one Iceberg table: files moved under the table's data folder,
    then the run's table commit (one snapshot for the datasets that commit together), then the watermarks and the
    dataset state."""

    CONFIG_MODEL = IcebergSettings

    def table_location(self, settings: IcebergSettings, warehouse: str) -> str:
        return urls.join(warehouse, *settings.table.split("."))

    def table_step(self, settings: IcebergSettings, warehouse: str, location: str, sequence: CommitSequencePlanned,
                   output: DatasetOutput, previous: DatasetView | None, group: str, member: int) -> TableCommitStep:
        return TableCommitStep(
            catalog_uri=settings.catalog(warehouse), catalog_name=settings.catalog_name, warehouse=warehouse,
            table=settings.table, location=location,
            commit_id=commit_id(sequence.job, sequence.dataset_urn, sequence.sequence_id),
            summary={**snapshot_summary(sequence, output), **self.partition_summary()},
            group=group, member=member)


def catalog_problem(settings: IcebergSettings, warehouse: str, timeout_s: float) -> str | None:
    """Why the table's catalog cannot be reached, or None; writes nothing. A SQLite catalog's file must be a catalog
    oncelog can open (or not exist yet, in a folder that exists or that the run creates: the warehouse); another
    catalog must answer a listing of its namespaces (pyiceberg loaded for it alone)."""
    uri = settings.catalog(warehouse)
    if uri.startswith("sqlite:"):
        return _sqlite_problem(Path(uri.removeprefix("sqlite:///")), warehouse, timeout_s)
    from spark_pipeline.tables import iceberg

    try:
        iceberg.list_namespaces(settings.catalog_name, uri, warehouse)
    except iceberg.TableError as e:
        return str(e)
    return None


def _sqlite_problem(path: Path, warehouse: str, timeout_s: float) -> str | None:
    """A SQLite catalog file: readable as SQLite if it exists, else its folder exists or lies in the warehouse."""
    if path.exists():
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout_s) as db:
                db.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.Error as e:
            return f"the catalog file {path} cannot be read as SQLite: {e}"
        return None
    folder = path.parent
    if folder.is_dir() or urls.is_within(str(folder), urls.resolve_folder(warehouse)):
        return None
    return f"the catalog file {path} cannot be created: its folder {folder} does not exist"
