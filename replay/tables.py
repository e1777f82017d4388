"""`oncelog verify`'s check of the Iceberg tables a log's TableCommit steps committed to, read through pyiceberg.

For each table: every TableCommit of a completed sequence is in exactly one snapshot of the table's history (the one
carrying its commit id, or its group's that lists its number), in the current snapshot's ancestry (not rolled back);
each snapshot of ours adds exactly the files its sequences published; every snapshot of ours (its commit id names a job
of the log) belongs to completed or pending sequences; no data file is added by two snapshots of the current history;
no source offset is in two of our snapshots (the ranges their sequences' plans publish never overlap per dataset and
partition). pyiceberg is loaded only when the log holds a
TableCommit step.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from events.commit import (
    TABLE_COMMIT_ID,
    TABLE_GROUP,
    TABLE_MEMBERS,
    TABLE_WATERMARKS,
    TableCommitStep,
    decode_members,
)
from filesystems import urls

SQLITE_PREFIX = "sqlite:///"
"""The URL prefix of a SQL catalog on a SQLite file (its path follows)."""

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot


class SequenceStatus(StrEnum):
    """Where a sequence that planned a table commit stands."""

    COMPLETED = "completed"
    PENDING = "pending"
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class TableCommitPlanned:
    """A TableCommit step as the log records it: its sequence, how that sequence ended, the files it adds."""

    step: TableCommitStep
    sequence: str
    """The sequence, as a finding names it."""
    at: str
    """Where its plan lies in the log."""
    status: SequenceStatus
    files: tuple[str, ...]


@dataclass(frozen=True)
class TableFinding:
    """A broken invariant of a table: its kind (as verify's violations), what, where in the log."""

    kind: str
    message: str
    position: str = ""


@dataclass(frozen=True)
class _Ours:
    """A snapshot of the table whose summary carries one of our commit ids: the commits it makes (`commit_key`)."""

    snapshot: Snapshot
    commit_id: str
    keys: frozenset[str]

    @property
    def id(self) -> int:
        return self.snapshot.snapshot_id


def commit_key(step: TableCommitStep) -> str:
    """What names a TableCommit in the table: its commit id, or its group and number there (`job/run#7`)."""
    return step.commit_id if step.group is None or step.member is None else f"{step.group}#{step.member}"


def snapshot_keys(snapshot: Snapshot) -> frozenset[str]:
    """The commits a snapshot makes (`commit_key`): its group's members it lists, or the one its commit id names (none:
    not ours)."""
    properties = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    group = properties.get(TABLE_GROUP)
    if group is None:
        commit_id = properties.get(TABLE_COMMIT_ID)
        return frozenset({commit_id}) if commit_id else frozenset()
    try:
        return frozenset(f"{group}#{number}" for number in decode_members(properties.get(TABLE_MEMBERS, "")))
    except ValueError:
        return frozenset()


CatalogProperties = Callable[[str], Mapping[str, str]]
"""A warehouse's catalog properties beside its URL: how pyiceberg reaches the table's files on S3 or HDFS (the store's
endpoint and keys, a FileIO), from the caller's file-system settings (`TableStorage.iceberg_properties`)."""


def no_properties(warehouse: str) -> Mapping[str, str]:
    """Local warehouses need none (and S3 through AWS's own configuration chain)."""
    return {}


def check_tables(commits: Sequence[TableCommitPlanned], jobs: set[str],
                 properties: CatalogProperties = no_properties) -> list[TableFinding]:
    """The findings over every table the commits name (one catalog load per table); `jobs`: the log's jobs (a
    snapshot whose commit id names another job is another log's); `properties`: each warehouse's catalog
    properties."""
    by_table: dict[tuple[str, str, str, str], list[TableCommitPlanned]] = defaultdict(list)
    for commit in commits:
        step = commit.step
        by_table[(step.catalog_name, step.catalog_uri, step.warehouse, step.table)].append(commit)
    findings: list[TableFinding] = []
    for (name, uri, warehouse, identifier), planned in by_table.items():
        findings += _check_table(name, uri, warehouse, identifier, planned, jobs, properties(warehouse))
    return findings


@dataclass(frozen=True)
class _History:
    """What the check reads of a table: our snapshots, the current snapshot's ancestry, the files each of it added."""

    ours: list[_Ours]
    ancestry: set[int]
    added: dict[int, list[str]]


def _check_table(name: str, uri: str, warehouse: str, identifier: str, planned: list[TableCommitPlanned],
                 jobs: set[str], properties: Mapping[str, str]) -> list[TableFinding]:
    where = f"Iceberg table {identifier!r} (catalog {uri})"
    try:
        history = _read(name, uri, warehouse, identifier, jobs, properties)
    except _library_errors() as e:
        return [TableFinding("table-unreadable", f"{where} cannot be read: {type(e).__name__}: {_first_line(e)}")]
    if history is None:
        completed = [c for c in planned if c.status is SequenceStatus.COMPLETED]
        return [TableFinding("table-missing", f"{where} does not exist, yet {len(completed)} sequence(s) committed "
                             f"to it (the first: {completed[0].sequence})", completed[0].at)] if completed else []
    current = [o for o in history.ours if o.id in history.ancestry]
    return [*_check_commits(where, planned, history), *_check_added(where, planned, current, history.added),
            *_check_unknown(where, planned, history.ours), *_check_files_once(where, history.added),
            *_check_offsets_once(where, planned, current)]


def _read(name: str, uri: str, warehouse: str, identifier: str, jobs: set[str], properties: Mapping[str, str]
          ) -> _History | None:
    """The table's history as the check needs it, or None when the table does not exist."""
    table = _load(name, uri, warehouse, identifier, properties)
    if table is None:
        return None
    ours = [_Ours(s, cid, snapshot_keys(s)) for s in table.metadata.snapshots
            if (cid := _commit_id(s)) is not None and cid.split("/", 1)[0] in jobs]
    ancestry = {s.snapshot_id for s in _ancestry(table)}
    return _History(ours, ancestry, _added_files(table, ancestry))


def _check_commits(where: str, planned: list[TableCommitPlanned], history: _History) -> Iterator[TableFinding]:
    """Each completed commit is in one snapshot of the current history; an abandoned one is in none."""
    by_key: dict[str, list[_Ours]] = defaultdict(list)
    for snapshot in history.ours:
        for key in snapshot.keys:
            by_key[key].append(snapshot)
    for commit in planned:
        key = commit_key(commit.step)
        found = by_key.get(key, [])
        if commit.status is SequenceStatus.ABANDONED and found:
            yield TableFinding("table-commit-by-abandoned", f"{where}: snapshot {found[0].id} commits {key!r} of "
                               f"{commit.sequence}, which was abandoned: its files are in the table while its "
                               f"watermarks never moved", commit.at)
        if commit.status is not SequenceStatus.COMPLETED:
            continue
        if not found:
            yield TableFinding("table-commit-missing", f"{where} holds no snapshot committing {key!r} of "
                               f"{commit.sequence}, which completed (the snapshot was expired or removed): its files "
                               f"are not in the table", commit.at)
            continue
        if len(found) > 1:
            yield TableFinding("table-committed-twice", f"{where}: snapshots {[s.id for s in found]} all commit "
                               f"{key!r} of {commit.sequence}", commit.at)
        if not any(s.id in history.ancestry for s in found):
            yield TableFinding("table-commit-rolled-back", f"{where}: snapshot {found[0].id} of {commit.sequence} "
                               f"(committing {key!r}) is not in the current snapshot's history (rolled back): its "
                               f"files are no longer in the table", commit.at)


def _check_added(where: str, planned: list[TableCommitPlanned], current: list[_Ours], added: dict[int, list[str]]
                 ) -> Iterator[TableFinding]:
    """Each snapshot of ours in the current history added exactly the files its commits' sequences published."""
    by_key = {commit_key(commit.step): commit for commit in planned}
    for snapshot in current:
        commits = [by_key[key] for key in sorted(snapshot.keys) if key in by_key]
        if not commits:
            continue
        expected = {_canonical(f): commit for commit in commits for f in commit.files}
        made = {_canonical(f) for f in added.get(snapshot.id, [])}
        for path in sorted(set(expected) - made):
            commit = expected[path]
            yield TableFinding("table-file-missing", f"{where}: snapshot {snapshot.id} of {commit.sequence} did not "
                               f"add {path}, which the sequence published", commit.at)
        for path in sorted(made - set(expected)):
            yield TableFinding("table-file-unplanned", f"{where}: snapshot {snapshot.id} of {commits[0].sequence} "
                               f"added {path}, which none of its sequences published", commits[0].at)


def _check_unknown(where: str, planned: list[TableCommitPlanned], ours: list[_Ours]) -> Iterator[TableFinding]:
    """Each snapshot carrying a commit id of one of the log's jobs belongs to a sequence the log planned."""
    known = {commit_key(c.step) for c in planned}
    for snapshot in ours:
        if not snapshot.keys or not snapshot.keys <= known:
            yield TableFinding("table-snapshot-unknown", f"{where}: snapshot {snapshot.id} carries the commit id "
                               f"{snapshot.commit_id!r}, which no sequence of the log planned")


def _check_files_once(where: str, added: dict[int, list[str]]) -> Iterator[TableFinding]:
    """No data file is added by two snapshots of the current history (nor twice by one)."""
    adders: dict[str, list[int]] = defaultdict(list)
    for snapshot, files in added.items():
        for path in files:
            adders[_canonical(path)].append(snapshot)
    for path, snapshots in sorted(adders.items()):
        if len(snapshots) > 1:
            yield TableFinding("table-file-twice", f"{where}: data file {path} is added by snapshots "
                               f"{sorted(snapshots)}: its records are in the table twice")


def _check_offsets_once(where: str, planned: list[TableCommitPlanned], current: list[_Ours]
                        ) -> Iterator[TableFinding]:
    """No source offset is in two snapshots of ours: per dataset and partition, the ranges their commits' plans
    publish never overlap."""
    by_key = {commit_key(commit.step): commit for commit in planned}
    ranges: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    for snapshot in current:
        for key in snapshot.keys:
            commit = by_key.get(key)
            if commit is None:
                continue
            for partition, (low, high) in _watermarks(commit.step).items():
                if high > low:
                    ranges[(commit.step.summary.get("oncelog.dataset", key), partition)].append((low, high,
                                                                                                 snapshot.id))
    for (dataset, partition), spans in sorted(ranges.items()):
        spans.sort()
        for (low, high, first), (next_low, next_high, second) in zip(spans, spans[1:]):
            if next_low < high:
                yield TableFinding("table-offset-twice", f"{where}: offsets [{next_low}, {min(high, next_high)}) of "
                                   f"{partition} ({dataset}) are in snapshot {first} ([{low}, {high})) and in snapshot "
                                   f"{second} ([{next_low}, {next_high}))")


def _library_errors() -> tuple[type[Exception], ...]:
    """What pyiceberg, SQLAlchemy and Arrow raise for a catalog that cannot be reached or a table that cannot be read
    (they share no base class)."""
    import pyarrow as pa
    import sqlalchemy.exc
    from pyiceberg import exceptions as iceberg_errors

    return (ValueError, TypeError, KeyError, OSError, pa.ArrowException, sqlalchemy.exc.SQLAlchemyError,
            iceberg_errors.ResolveError, iceberg_errors.RESTError, iceberg_errors.NotInstalledError,
            iceberg_errors.ValidationError)


def _load(name: str, uri: str, warehouse: str, identifier: str, properties: Mapping[str, str]) -> Table | None:
    """The table, or None when it does not exist, nor its SQLite catalog's file (a check creates none); pyiceberg is
    loaded here, on first use."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    if uri.startswith(SQLITE_PREFIX) and not Path(uri.removeprefix(SQLITE_PREFIX)).exists():
        return None
    try:
        return load_catalog(name, **{**properties, "uri": uri, "warehouse": warehouse}).load_table(identifier)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _ancestry(table: Table) -> list[Snapshot]:
    from pyiceberg.table.snapshots import ancestors_of

    return list(ancestors_of(table.current_snapshot(), table.metadata))


def _added_files(table: Table, history: set[int]) -> dict[int, list[str]]:
    """The data files each snapshot of the current history added (read from the manifests it wrote)."""
    from pyiceberg.manifest import ManifestEntryStatus

    added: dict[int, list[str]] = {}
    for snapshot in table.metadata.snapshots:
        if snapshot.snapshot_id not in history:
            continue
        files: list[str] = []
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id == snapshot.snapshot_id:
                files += [entry.data_file.file_path for entry in manifest.fetch_manifest_entry(table.io)
                          if entry.status == ManifestEntryStatus.ADDED]
        added[snapshot.snapshot_id] = files
    return added


def _commit_id(snapshot: Snapshot) -> str | None:
    summary = snapshot.summary
    return summary.additional_properties.get(TABLE_COMMIT_ID) if summary is not None else None


def _watermarks(step: TableCommitStep) -> dict[str, tuple[int, int]]:
    """The source ranges a TableCommit's plan says it publishes (none if it says none, or unreadable ones)."""
    text = step.summary.get(TABLE_WATERMARKS)
    if not text:
        return {}
    try:
        return {str(p): (int(r[0]), int(r[1])) for p, r in json.loads(text).items()}
    except (ValueError, TypeError, IndexError, AttributeError):
        return {}


def _canonical(path: str) -> str:
    """A data file's location as compared (a local path and its file:// URL are one)."""
    return urls.normalize(path.removeprefix("file://") if path.startswith("file:///") else path)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""
