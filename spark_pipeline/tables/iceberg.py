"""Iceberg tables through pyiceberg: the catalog, the snapshot a sequence made, and the one append that makes it.

Imported only where a table is touched (the TableCommit step, the table's pre-flight check, tests): `import oncelog`
and the commands that publish no table never load pyiceberg. Every library error becomes a `TableError` naming the
table (and the catalog), so a step's failure says where it failed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import sqlalchemy.exc
from pyiceberg import exceptions as iceberg_errors
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)

from events.commit import (
    TABLE_COMMIT_ID,
    TABLE_GROUP,
    TABLE_MEMBERS,
    TableCommitStep,
    decode_members,
    encode_members,
)
from spark_pipeline.tables.base import shared_summary
from spark_pipeline.tables.errors import TableDataError, TableError
from spark_pipeline.tables.files import Footer, files_schema, mismatched
from spark_pipeline.tables.iceberg_stats import DataFiles
from spark_pipeline.tables.partitioning import PARTITION_SPEC, Period, TablePartitioning, column_type
from spark_pipeline.tables.storage import Footers, TableStorage

COMMIT_ATTEMPTS = 5
"""How often an append is tried when another writer commits to the table in between (optimistic concurrency)."""
CATALOG_OPEN_ATTEMPTS = 5
"""How often a SQL catalog is opened while other processes create its tables (each try may lose one table's race)."""
SQLITE_PREFIX = "sqlite:///"
"""The URL prefix of a SQL catalog on a SQLite file (its path follows)."""
CREATED_PROPERTIES = {"commit.retry.num-retries": "0"}
"""The properties of a table oncelog creates. pyiceberg retries a commit that lost a race on its own (4 times by
default, after 100 ms and more), rebuilding the snapshot without asking whether the table already holds ours: oncelog's
append does its retries itself, each after looking for its snapshot by commit id."""

LIBRARY_ERRORS: tuple[type[Exception], ...] = (
    ValueError, TypeError, KeyError, OSError, pa.ArrowException, sqlalchemy.exc.SQLAlchemyError,
    iceberg_errors.NoSuchTableError, iceberg_errors.NoSuchNamespaceError, iceberg_errors.ValidationError,
    iceberg_errors.ResolveError, iceberg_errors.RESTError, iceberg_errors.NotInstalledError,
    iceberg_errors.ValidationException, iceberg_errors.CommitFailedException,
)
"""What pyiceberg, SQLAlchemy and Arrow raise for a catalog that cannot be reached or a table that cannot take the
data (pyiceberg's errors share no base class)."""


@dataclass(frozen=True)
class TableRef:
    """Where a table is: its catalog (name, URL, warehouse), identifier and location (if oncelog creates it), and how
    its files are reached (the job's keys for a warehouse on S3 or HDFS: never recorded)."""

    catalog_name: str
    catalog_uri: str
    warehouse: str
    table: str
    location: str
    storage: TableStorage = field(default_factory=TableStorage, compare=False, repr=False)

    @classmethod
    def of(cls, step: TableCommitStep, storage: TableStorage | None = None) -> TableRef:
        return cls(step.catalog_name, step.catalog_uri, step.warehouse, step.table, step.location,
                   storage or TableStorage())

    @property
    def namespace(self) -> str:
        return self.table.rpartition(".")[0]

    def describe(self) -> str:
        return f"Iceberg table {self.table!r} (catalog {self.catalog_uri})"


_catalog_lock = threading.Lock()
_table_locks: dict[TableRef, threading.Lock] = {}


@functools.lru_cache(maxsize=16)
def _catalog(name: str, uri: str, warehouse: str, properties: tuple[tuple[str, str], ...] = ()) -> Catalog:
    """The catalog, with `properties` (how the warehouse's files are reached: TableStorage.iceberg_properties). A SQL
    catalog creates its tables on first use: when another process (a commit shard) does so at the same moment,
    pyiceberg's create fails ("table … already exists"), and the catalog opened again finds them."""
    for _ in range(CATALOG_OPEN_ATTEMPTS - 1):
        try:
            return load_catalog(name, uri=uri, warehouse=warehouse, **dict(properties))
        except sqlalchemy.exc.OperationalError as e:
            if "already exists" not in str(e):
                raise
    return load_catalog(name, uri=uri, warehouse=warehouse, **dict(properties))


def _properties(storage: TableStorage, warehouse: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(storage.iceberg_properties(warehouse).items()))


def catalog_of(ref: TableRef) -> Catalog:
    """The table's catalog, opened once per process and storage (its tables created on first use, for the SQL
    catalog)."""
    try:
        with _catalog_lock:
            return _catalog(ref.catalog_name, ref.catalog_uri, ref.warehouse, _properties(ref.storage, ref.warehouse))
    except LIBRARY_ERRORS as e:
        raise TableError(f"cannot open the catalog {ref.catalog_uri} of {ref.describe()}: {_first_line(e)}") from e


def list_namespaces(name: str, uri: str, warehouse: str) -> list[str]:
    """The catalog's namespaces (what a pre-flight check asks, to see the catalog answer: no table file is read)."""
    try:
        return [".".join(n) for n in _catalog(name, uri, warehouse).list_namespaces()]
    except LIBRARY_ERRORS as e:
        raise TableError(f"the catalog {uri} does not answer: {_first_line(e)}") from e


def load_table(ref: TableRef) -> Table | None:
    """The table, or None when it does not exist yet (nor its SQLite catalog's file: a read creates none)."""
    if ref.catalog_uri.startswith(SQLITE_PREFIX) and not Path(ref.catalog_uri.removeprefix(SQLITE_PREFIX)).exists():
        return None
    try:
        return catalog_of(ref).load_table(ref.table)
    except (iceberg_errors.NoSuchTableError, iceberg_errors.NoSuchNamespaceError):
        return None
    except LIBRARY_ERRORS as e:
        raise TableError(f"cannot load {ref.describe()}: {_first_line(e)}") from e


def snapshot_of(table: Table, commit_id: str) -> Snapshot | None:
    """The snapshot in the table's history whose summary names `commit_id` (what a TableCommit step made)."""
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is not None and summary.additional_properties.get(TABLE_COMMIT_ID) == commit_id:
            return snapshot
    return None


def committed(ref: TableRef, commit_id: str) -> bool:
    """Whether the table holds the snapshot of `commit_id` (a table not yet created holds none)."""
    table = load_table(ref)
    return table is not None and snapshot_of(table, commit_id) is not None


@dataclass(frozen=True)
class GroupMember:
    """A sequence's share of its run's table commit: its number in the group, the files it adds, its summary."""

    number: int
    files: tuple[str, ...]
    summary: Mapping[str, str]


def members_in(snapshot: Snapshot, group: str) -> frozenset[int]:
    """The numbers of `group`'s sequences a snapshot commits (none: another group's, or no group's)."""
    summary = snapshot.summary
    properties = summary.additional_properties if summary is not None else {}
    if properties.get(TABLE_GROUP) != group:
        return frozenset()
    return decode_members(properties.get(TABLE_MEMBERS, ""))


def group_members(table: Table, group: str) -> frozenset[int]:
    """The numbers of `group`'s sequences the table's history commits, in any of its snapshots."""
    return frozenset().union(*(members_in(snapshot, group) for snapshot in table.metadata.snapshots))


def committed_members(ref: TableRef, group: str) -> frozenset[int]:
    """The numbers of `group`'s sequences the table holds (none when the table does not exist yet)."""
    table = load_table(ref)
    return group_members(table, group) if table is not None else frozenset()


def append_group(ref: TableRef, group: str, members: Sequence[GroupMember]) -> frozenset[int]:
    """Append the files of `members` in one snapshot whose summary names `group` and lists them (`oncelog.members`),
    leaving out any the table's history already holds (an earlier attempt's commit whose answer was lost). Returns the
    numbers of those found there; the table is created, and its schema evolved, as `append` does. Never commits a member
    twice: the history is read again after another writer's commit came in between."""
    if not members:
        return frozenset()
    spec = members[0].summary.get(PARTITION_SPEC)
    partitioning = TablePartitioning.decode(spec) if spec else None
    wanted = {member.number for member in members}
    found: frozenset[int] | None = None
    footers = Footers(ref.storage, ref.describe())
    with _table_locks.setdefault(ref, threading.Lock()):
        for _ in range(COMMIT_ATTEMPTS):
            table = load_table(ref) or _create(ref, footers.of(members[0].files), partitioning)
            held = group_members(table, group)
            found = held & wanted if found is None else found
            todo = [member for member in members if member.number not in held]
            if not todo:
                return found
            try:
                _append_once(ref, table, footers.of([f for member in todo for f in member.files]),
                             group_summary(group, todo))
            except iceberg_errors.CommitFailedException:
                continue  # another writer's snapshot came in between: look again, then try on top of it
            made = load_table(ref)
            if made is None or not {member.number for member in todo} <= group_members(made, group):
                raise TableError(f"{ref.describe()}: the append of {len(todo)} sequence(s) of {group} returned, yet no "
                                 f"snapshot lists them")
            return found
    raise TableError(f"{ref.describe()}: {COMMIT_ATTEMPTS} appends of {group} lost to other writers' commits")


def group_summary(group: str, members: Sequence[GroupMember]) -> dict[str, str]:
    """The snapshot summary of a group's commit: what its members share (`shared_summary`), the group, and the
    members it commits (`oncelog.members`, also in its commit id)."""
    numbers = encode_members(member.number for member in members)
    return {**shared_summary([member.summary for member in members]), TABLE_GROUP: group, TABLE_MEMBERS: numbers,
            TABLE_COMMIT_ID: f"{group}#{numbers}"}


def append(ref: TableRef, files: Sequence[str], commit_id: str, summary: dict[str, str]) -> Snapshot:
    """Append `files` (Parquet) to the table in one snapshot carrying `commit_id` and `summary`, the table created
    from the first file's schema if it does not exist and its schema evolved by the files' new columns in the same
    commit. Looks for the snapshot first, and again after another writer's commit came in between: never twice. A
    table it creates is partitioned as `summary`'s `oncelog.partition-spec` says (an existing table keeps its spec)."""
    spec = summary.get(PARTITION_SPEC)
    partitioning = TablePartitioning.decode(spec) if spec else None
    footers = Footers(ref.storage, ref.describe())
    with _table_locks.setdefault(ref, threading.Lock()):
        for _ in range(COMMIT_ATTEMPTS):
            table = load_table(ref) or _create(ref, footers.of(files), partitioning)
            if (done := snapshot_of(table, commit_id)) is not None:
                return done
            try:
                _append_once(ref, table, footers.of(files), {**summary, TABLE_COMMIT_ID: commit_id})
            except iceberg_errors.CommitFailedException:
                continue  # another writer's snapshot came in between: look again, then try on top of it
            made = load_table(ref)
            found = snapshot_of(made, commit_id) if made is not None else None
            if found is None:
                raise TableError(f"{ref.describe()}: the append of {commit_id} returned, yet no snapshot carries it")
            return found
    raise TableError(f"{ref.describe()}: {COMMIT_ATTEMPTS} appends of {commit_id} lost to other writers' commits")


def _append_once(ref: TableRef, table: Table, files: Sequence[Footer], properties: dict[str, str]) -> None:
    """One transaction: the schema evolved by the files' new columns, then the files added, as one table commit."""
    schema = files_schema(files)
    mismatched = _mismatched(table, schema)
    first = files[0].path
    if mismatched:
        raise TableDataError(f"{ref.describe()} cannot take the data of {len(files)} file(s) (the first {first}): "
                             f"{'; '.join(mismatched)}; nothing was committed")
    try:
        with table.transaction() as transaction:
            if not _has_all(table, schema):
                with transaction.update_schema() as update:
                    update.union_by_name(schema)
            _add_files(transaction, files, properties)
    except iceberg_errors.CommitFailedException:
        raise
    except LIBRARY_ERRORS as e:
        raise TableError(f"{ref.describe()} cannot take the data of {len(files)} file(s) (the first {first}): "
                         f"{_first_line(e)}") from e


def _add_files(transaction: Transaction, files: Sequence[Footer], properties: dict[str, str]) -> None:
    """pyiceberg's `Transaction.add_files`, its data files made from the footers read already (`data_files`) rather
    than each footer read again: the same checks (no path twice, none the table holds), the same name mapping set on a
    table without one, the same snapshot (a fast append, or a merge append if the table's properties say so)."""
    paths = [footer.path for footer in files]
    if len(paths) != len(set(paths)):
        raise ValueError("File paths must be unique")
    referenced = transaction._find_referenced_data_files(paths)
    if referenced:
        raise ValueError(f"Cannot add files that are already referenced by table, files: {', '.join(referenced)}")
    if transaction.table_metadata.name_mapping() is None:
        mapping = transaction.table_metadata.schema().name_mapping.model_dump_json()
        transaction.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
    with transaction._append_snapshot_producer(properties) as append_files:
        for data_file in data_files(transaction.table_metadata, files):
            append_files.append_data_file(data_file)


def data_files(metadata: TableMetadata, files: Sequence[Footer]) -> list[DataFile]:
    """The table's data file entries of Parquet files, from their footers (`iceberg_stats`)."""
    return DataFiles(metadata).of(files)


def _mismatched(table: Table, schema: pa.Schema) -> list[str]:
    """The data's columns whose type the table's column of that name cannot take (integers widen, floats too)."""
    return mismatched(schema_to_pyarrow(table.schema()), schema)


def _has_all(table: Table, schema: pa.Schema) -> bool:
    """Whether every column of the data is a column of the table."""
    return all(_field(table, name) for name in schema.names)


def _field(table: Table, name: str) -> bool:
    try:
        table.schema().find_field(name, case_sensitive=True)
    except ValueError:
        return False
    return True


def _create(ref: TableRef, files: Sequence[Footer], partitioning: TablePartitioning | None) -> Table:
    """The table, created at its location with the data's schema and the partition spec `partitioning` makes of it
    (and its namespace, if missing), in one catalog commit; another writer's table of that name, if it came first."""
    schema = files_schema(files)
    transform = _transform(ref, partitioning, schema) if partitioning is not None else None
    catalog = catalog_of(ref)
    try:
        if ref.namespace:
            catalog.create_namespace_if_not_exists(ref.namespace)
        creation = catalog.create_table_transaction(ref.table, schema=schema, location=ref.location,
                                                    properties=CREATED_PROPERTIES)
        if partitioning is not None and transform is not None:
            with creation.update_spec() as update:
                update.add_field(partitioning.column, transform, partitioning.field_name())
        return creation.commit_transaction()
    except CREATE_ERRORS as e:
        if (made := load_table(ref)) is not None:
            return made  # another writer created it in between
        raise TableError(f"cannot create {ref.describe()} at {ref.location}: {_first_line(e)}") from e


def _transform(ref: TableRef, partitioning: TablePartitioning, schema: pa.Schema) -> Transform[Any, Any] | None:
    """The Iceberg transform of the partition column for its type in the data: a time transform of a date or
    timestamp, `truncate` of an epoch time (hours and days only); None (unpartitioned) for any other type."""
    kind = column_type(schema, partitioning.column, ref.describe())
    period = partitioning.period
    if pa.types.is_timestamp(kind) or (pa.types.is_date(kind) and period is not Period.HOUR):
        return TIME_TRANSFORMS[period]
    if pa.types.is_date(kind):
        return DayTransform()  # an hour lies within its day
    if pa.types.is_integer(kind):
        width = partitioning.truncate_width()
        return TruncateTransform(width) if width is not None else None
    return None


CREATE_ERRORS: tuple[type[Exception], ...] = (iceberg_errors.TableAlreadyExistsError, *LIBRARY_ERRORS)
"""What a creation raises, beside the library's errors, when another writer created the table first."""
TIME_TRANSFORMS: dict[Period, Transform[Any, Any]] = {Period.HOUR: HourTransform(), Period.DAY: DayTransform(),
                                                      Period.MONTH: MonthTransform(), Period.YEAR: YearTransform()}


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
