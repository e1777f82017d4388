"""Delta tables through delta-rs (`deltalake`): the app transaction a sequence committed, and the one write
transaction that adds its files.

Imported only where a table is touched (the DeltaCommit step, the table's pre-flight check, tests): `import oncelog`
and the commands that publish no table never load deltalake. Every library error becomes a `TableError` naming the
table and its location, so a step's failure says where it failed.

Delta's idempotent writes: a commit carries an app transaction (`txn`: app id, version), and a table's snapshot knows
the latest version of each app id. A sequence's commit carries its dataset's app id and the next version: found in
the table, the commit is done; a later version there means another writer commits under that app id (refused).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake import exceptions as delta_errors
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from events.commit import TABLE_COMMIT_ID, DeltaCommitStep
from filesystems import urls
from spark_pipeline.tables import delta_log
from spark_pipeline.tables.base import shared_summary
from spark_pipeline.tables.delta_partitions import DeltaPartitioning, delta_partitioning, partition_values
from spark_pipeline.tables.errors import TableDataError, TableError
from spark_pipeline.tables.files import Footer, files_schema, first_line, local, mismatched
from spark_pipeline.tables.partitioning import PARTITION_SPEC, TablePartitioning
from spark_pipeline.tables.storage import Footers, TableStorage

COMMIT_ID = TABLE_COMMIT_ID
"""The commit info key naming the sequence that made the commit (`job/dataset/sequence`)."""
COMMIT_ATTEMPTS = 5
"""How often a commit is tried when another writer commits to the table in between (beyond delta-rs's own retries)."""
LOG_FOLDER = delta_log.LOG_FOLDER
logger = logging.getLogger(__name__)

LIBRARY_ERRORS: tuple[type[Exception], ...] = (delta_errors.DeltaError, OSError, ValueError, TypeError, KeyError,
                                                pa.ArrowException)
"""What delta-rs and Arrow raise for a table that cannot be reached or cannot take the data."""


@dataclass(frozen=True)
class DeltaRef:
    """Where a Delta table is: its name in the job file, its root folder, and how its files are reached."""

    table: str
    location: str
    storage: TableStorage = field(default_factory=TableStorage, compare=False)

    @classmethod
    def of(cls, step: DeltaCommitStep, storage: TableStorage | None = None) -> DeltaRef:
        return cls(step.table, step.location, storage or TableStorage())

    @property
    def uri(self) -> str:
        """The table's root as delta-rs opens it (a local path, or the s3a:// or hdfs:// URL)."""
        return local(self.location)

    @property
    def options(self) -> dict[str, str]:
        """delta-rs's storage options for the table (S3's endpoint and credentials, HDFS's name services)."""
        return self.storage.delta_options(self.location)

    def describe(self) -> str:
        return f"Delta table {self.table!r} at {self.location}"


_locks_lock = threading.Lock()
_table_locks: dict[str, threading.Lock] = {}


def _lock(ref: DeltaRef) -> threading.Lock:
    """One commit at a time per table in this process (datasets commit in parallel)."""
    with _locks_lock:
        return _table_locks.setdefault(ref.uri, threading.Lock())


def load_table(ref: DeltaRef) -> DeltaTable | None:
    """The table, or None when its location holds no Delta log yet."""
    try:
        if not ref.storage.exists(urls.join(ref.location, LOG_FOLDER)):
            return None
        return DeltaTable(ref.uri, storage_options=ref.options or None)
    except LIBRARY_ERRORS as e:
        raise TableError(f"cannot open {ref.describe()}: {first_line(e)}") from e


def open_problem(location: str, storage: TableStorage) -> str | None:
    """Why the Delta table at `location` cannot be opened, or None (what a pre-flight check asks)."""
    try:
        DeltaTable(local(location), storage_options=storage.delta_options(location) or None)
    except LIBRARY_ERRORS as e:
        return first_line(e)
    return None


def transaction_version(table: DeltaTable, ref: DeltaRef, app_id: str) -> int | None:
    """The latest version of `app_id`'s app transaction in the table (None: it never committed)."""
    try:
        return table.transaction_version(app_id)
    except LIBRARY_ERRORS as e:
        raise TableError(f"cannot read the app transactions of {ref.describe()}: {first_line(e)}") from e


def latest_version(ref: DeltaRef, app_id: str) -> int | None:
    """The latest version of `app_id`'s app transaction in the table (None: it never committed, or no table yet); a
    TableError only when the table's state cannot be read."""
    table = load_table(ref)
    return transaction_version(table, ref, app_id) if table is not None else None


def versions_of(ref: DeltaRef, app_ids: Sequence[str]) -> dict[str, int | None]:
    """The latest version of each app transaction in the table, read once (None: it never committed, or no table)."""
    table = load_table(ref)
    return transaction_versions(table, ref, app_ids) if table is not None else dict.fromkeys(app_ids)


def transaction_versions(table: DeltaTable, ref: DeltaRef, app_ids: Sequence[str]) -> dict[str, int | None]:
    """The latest version of each app transaction in the table (None: it never committed), from one read of its log
    (`delta_log`): delta-rs replays the log for each app id it is asked, N replays for a commit of N datasets. Asked of
    delta-rs one by one for a table whose log that reading does not follow, or when it disagrees with delta-rs on the
    first app id (checked each time: a log laid out otherwise than it expects)."""
    if not app_ids:
        return {}
    try:
        protocol, configuration = table.protocol(), table.metadata().configuration
    except LIBRARY_ERRORS as e:
        raise TableError(f"cannot read the protocol of {ref.describe()}: {first_line(e)}") from e
    if delta_log.readable(protocol.reader_features, configuration):
        found = delta_log.app_transactions(ref.storage, ref.location, table.version())
        versions = {app_id: found.get(app_id) for app_id in app_ids}
        first = app_ids[0]
        theirs = transaction_version(table, ref, first)
        if versions[first] == theirs:
            return versions
        logger.warning("%s: its log read once says app transaction %r is at version %s, delta-rs says %s; asking "
                       "delta-rs for each app id", ref.describe(), first, versions[first], theirs)
    return {app_id: transaction_version(table, ref, app_id) for app_id in app_ids}


def ahead(ref: DeltaRef, app_id: str, found: int, version: int) -> str:
    """Why a table whose app transaction is past the sequence's version refuses it: another writer (or oncelog with
    another log) commits under that app id, and what this sequence should add is unknown."""
    return (f"{ref.describe()}: its app transaction {app_id!r} is at version {found}, past this sequence's {version}: "
            f"another writer (or oncelog with another event log) commits under this app id; nothing was committed")


@dataclass(frozen=True)
class DeltaMember:
    """A sequence's share of a table commit: its dataset's app transaction (id, version), commit id, files, metadata."""

    app_id: str
    version: int
    commit_id: str
    files: tuple[str, ...]
    metadata: Mapping[str, str]


@dataclass(frozen=True)
class GroupOutcome:
    """What a commit of many sequences found: those the table held already, and those it refuses (`ahead`)."""

    found: frozenset[str] = frozenset()
    """The app ids whose transaction the table held at their version before this commit (an earlier attempt's)."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Why, per app id, a member was left out: the table's app transaction is past its version."""


def commit(ref: DeltaRef, files: Sequence[str], app_id: str, version: int, commit_id: str,
           metadata: dict[str, str]) -> None:
    """Add `files` in one write transaction carrying the app transaction (`app_id`, `version`) and `commit_id`
    (`commit_group` of one member); a TableError if the table's app transaction is past `version`."""
    outcome = commit_group(ref, [DeltaMember(app_id, version, commit_id, tuple(files), metadata)])
    if app_id in outcome.refused:
        raise TableError(outcome.refused[app_id])


def commit_group(ref: DeltaRef, members: Sequence[DeltaMember]) -> GroupOutcome:
    """Add the files of `members` (Parquet, under the table's root) to the table in one write transaction carrying
    each one's app transaction, and with their shared metadata in its commit info (a lone member's commit id too); the
    table created with the data's schema by that commit if it does not exist (partitioned as the metadata's
    `oncelog.partition-spec` says: an existing table keeps its partition columns), and the data's new columns added
    to its schema just before. Leaves out the members the table holds already, and refuses those whose app
    transaction it holds at a later version; looks again after another writer's commit came in between: never twice."""
    found: frozenset[str] | None = None
    footers = Footers(ref.storage, ref.describe())
    with _lock(ref):
        for _ in range(COMMIT_ATTEMPTS):
            table = load_table(ref)
            app_ids = [m.app_id for m in members]
            versions = transaction_versions(table, ref, app_ids) if table is not None else dict.fromkeys(app_ids)
            refused = {m.app_id: ahead(ref, m.app_id, seen, m.version) for m in members
                       if (seen := versions[m.app_id]) is not None and seen > m.version}
            held = frozenset(m.app_id for m in members if versions[m.app_id] == m.version)
            found = held if found is None else found
            todo = [m for m in members if m.app_id not in held and m.app_id not in refused]
            if not todo:
                return GroupOutcome(found, refused)
            if _commit_once(ref, table, todo, footers):
                _check_committed(ref, todo)
                return GroupOutcome(found, refused)
    raise TableError(f"{ref.describe()}: {COMMIT_ATTEMPTS} commits of {_label(members)} lost to other writers' "
                     f"commits")


def _commit_once(ref: DeltaRef, table: DeltaTable | None, members: Sequence[DeltaMember], footers: Footers) -> bool:
    """One write transaction adding the members' files (the table created by it if `table` is None); False when
    another writer's commit (or creation) came in between. Each file's footer is read once (`footers`)."""
    files = footers.of([path for member in members for path in member.files])
    metadata = _shared(members)
    properties = CommitProperties(custom_metadata=metadata,
                                  app_transactions=[Transaction(m.app_id, m.version) for m in members])
    spec = metadata.get(PARTITION_SPEC)
    schema = files_schema(files)
    partitioning = delta_partitioning(TablePartitioning.decode(spec), schema, ref.describe()) if spec else None
    try:
        if table is None:
            _create(ref, schema, partitioning, files, properties)
        else:
            _append(ref, table, schema, partitioning, files, properties, _label(members))
    except delta_errors.CommitFailedError:
        return False
    except LIBRARY_ERRORS as e:
        if table is None and load_table(ref) is not None:
            return False  # another writer created the table in between
        raise TableError(f"{ref.describe()} cannot take the data of {len(files)} file(s) (the first "
                         f"{files[0].path}): {first_line(e)}; nothing was committed") from e
    return True


def _check_committed(ref: DeltaRef, members: Sequence[DeltaMember]) -> None:
    """The table holds the app transactions of the commit that just returned, as it said: asked of its first member
    alone, since one Delta commit holds all its actions or none (each read of an app transaction replays the table's
    log: one per member would cost a run of N datasets N replays)."""
    table = load_table(ref)
    first = members[0]
    if table is None or transaction_version(table, ref, first.app_id) != first.version:
        raise TableError(f"{ref.describe()}: the commit of {_label(members)} returned, yet the table holds no app "
                         f"transaction {first.app_id!r} at version {first.version}")


def _shared(members: Sequence[DeltaMember]) -> dict[str, str]:
    """The commit info's custom metadata: what the members share (`shared_summary`; a lone member's all), and a lone
    member's commit id."""
    metadata = shared_summary([member.metadata for member in members])
    return {**metadata, COMMIT_ID: members[0].commit_id} if len(members) == 1 else metadata


def _label(members: Sequence[DeltaMember]) -> str:
    """The members, as a message names them."""
    return members[0].commit_id if len(members) == 1 else f"{len(members)} sequences (the first {members[0].commit_id})"


def _create(ref: DeltaRef, schema: pa.Schema, partitioning: DeltaPartitioning | None, files: Sequence[Footer],
            properties: CommitProperties) -> None:
    """The table created by the commit adding `files`, with the data's schema and, if the job partitions by time, the
    partition column (not in the files: each add action carries its file's value)."""
    columns = [partitioning.name] if partitioning is not None else []
    table_schema = schema.append(partitioning.field) if partitioning is not None else schema
    actions = [_add_action(ref, footer, partitioning, columns) for footer in files]
    create_table_with_add_actions(ref.uri, _delta_schema(ref, table_schema), actions, mode="error",
                                  partition_by=columns or None, storage_options=ref.options or None,
                                  commit_properties=properties)


def _append(ref: DeltaRef, table: DeltaTable, schema: pa.Schema, partitioning: DeltaPartitioning | None,
            files: Sequence[Footer], properties: CommitProperties, commit_id: str) -> None:
    """The files added to an existing table (each in its partition, if the table has a partition column), after the
    data's new columns (a commit of their own: delta-rs's add-actions commit keeps the table's schema)."""
    columns = pa.schema(table.schema().to_arrow())
    wrong = mismatched(columns, schema)
    if wrong:
        raise TableDataError(f"{ref.describe()} cannot take the data (the first file {files[0].path}): "
                         f"{'; '.join(wrong)}; nothing was committed")
    partition_columns = list(table.metadata().partition_columns)
    actions = [_add_action(ref, footer, partitioning, partition_columns) for footer in files]
    new = [field for field in schema if columns.get_field_index(field.name) < 0]
    if new:
        added = _delta_schema(ref, pa.schema([field.with_nullable(True) for field in new])).fields
        table.alter.add_columns(added, commit_properties=CommitProperties(
            custom_metadata={"oncelog.columns-added-for": commit_id}))
    changes: list[AddAction | RemoveAction] = [*actions]
    table.create_write_transaction(changes, "append", table.schema(), partition_by=partition_columns or None,
                                   commit_properties=properties)


def _delta_schema(ref: DeltaRef, schema: pa.Schema) -> Schema:
    """The data's schema as Delta's (a column Delta has no type for is refused, naming it)."""
    try:
        return Schema.from_arrow(schema)
    except LIBRARY_ERRORS as e:
        raise TableError(f"{ref.describe()} cannot take the data's columns "
                         f"({', '.join(f'{f.name}: {f.type}' for f in schema)}): {first_line(e)}") from e


def _add_action(ref: DeltaRef, footer: Footer, partitioning: DeltaPartitioning | None, columns: Sequence[str]
                ) -> AddAction:
    """The add action of a data file under the table's root, from its footer: its relative path, partition values (for
    a table partitioned by `columns`), size, time and record count."""
    try:
        relative = urls.relative_to(footer.path, ref.location)
    except ValueError as e:
        raise TableError(f"{ref.describe()}: the data file {footer.path} lies outside the table's folder") from e
    stats: dict[str, Any] = {"numRecords": footer.rows}
    values = partition_values(partitioning, columns, footer, ref.storage, ref.describe())
    return AddAction(relative, footer.size, values, footer.modified_ms, True, json.dumps(stats))
