"""`oncelog verify`'s check of the Iceberg tables a log's TableCommit steps committed to, read through pyiceberg.

For each table: every TableCommit of a completed sequence is exactly one snapshot of the table's history carrying its
commit id, in the current snapshot's ancestry (not rolled back), adding exactly the files the sequence published;
every snapshot of ours (its commit id names a job of the log) belongs to a completed or pending sequence; no data file
is added by two snapshots of the current history; no source offset is in two of our snapshots (their
`oncelog.watermarks` ranges never overlap per dataset and partition). pyiceberg is loaded only when the log holds a
TableCommit step.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from events.commit import TABLE_COMMIT_ID, TABLE_WATERMARKS, TableCommitStep
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
    """A snapshot of the table whose summary carries one of our commit ids."""

    snapshot: Snapshot
    commit_id: str

    @property
    def id(self) -> int:
        return self.snapshot.snapshot_id


def check_tables(commits: Sequence[TableCommitPlanned], jobs: set[str]) -> list[TableFinding]:
    """The findings over every table the commits name (one catalog load per table); `jobs`: the log's jobs (a
    snapshot whose commit id names another job is another log's)."""
    by_table: dict[tuple[str, str, str, str], list[TableCommitPlanned]] = defaultdict(list)
    for commit in commits:
        step = commit.step
        by_table[(step.catalog_name, step.catalog_uri, step.warehouse, step.table)].append(commit)
    findings: list[TableFinding] = []
    for (name, uri, warehouse, identifier), planned in by_table.items():
        findings += _check_table(name, uri, warehouse, identifier, planned, jobs)
    return findings


@dataclass(frozen=True)
class _History:
    """What the check reads of a table: our snapshots, the current snapshot's ancestry, the files each of it added."""

    ours: list[_Ours]
    ancestry: set[int]
    added: dict[int, list[str]]


def _check_table(name: str, uri: str, warehouse: str, identifier: str, planned: list[TableCommitPlanned],
                 jobs: set[str]) -> list[TableFinding]:
    where = f"Iceberg table {identifier!r} (catalog {uri})"
    try:
        history = _read(name, uri, warehouse, identifier, jobs)
    except _library_errors() as e:
        return [TableFinding("table-unreadable", f"{where} cannot be read: {type(e).__name__}: {_first_line(e)}")]
    if history is None:
        completed = [c for c in planned if c.status is SequenceStatus.COMPLETED]
        return [TableFinding("table-missing", f"{where} does not exist, yet {len(completed)} sequence(s) committed "
                             f"to it (the first: {completed[0].sequence})", completed[0].at)] if completed else []
    return [*_check_commits(where, planned, history), *_check_unknown(where, planned, history.ours),
            *_check_files_once(where, history.added),
            *_check_offsets_once(where, [o for o in history.ours if o.id in history.ancestry])]


def _read(name: str, uri: str, warehouse: str, identifier: str, jobs: set[str]) -> _History | None:
    """The table's history as the check needs it, or None when the table does not exist."""
    table = _load(name, uri, warehouse, identifier)
    if table is None:
        return None
    ours = [_Ours(s, cid) for s in table.metadata.snapshots
            if (cid := _commit_id(s)) is not None and cid.split("/", 1)[0] in jobs]
    ancestry = {s.snapshot_id for s in _ancestry(table)}
    return _History(ours, ancestry, _added_files(table, ancestry))


def _check_commits(where: str, planned: list[TableCommitPlanned], history: _History) -> Iterator[TableFinding]:
    """Each completed commit is one snapshot in the current history adding its files; an abandoned one made none."""
    by_id: dict[str, list[_Ours]] = defaultdict(list)
    for snapshot in history.ours:
        by_id[snapshot.commit_id].append(snapshot)
    for commit in planned:
        found = by_id.get(commit.step.commit_id, [])
        if commit.status is SequenceStatus.ABANDONED and found:
            yield TableFinding("table-commit-by-abandoned", f"{where}: snapshot {found[0].id} carries the commit id "
                               f"{commit.step.commit_id!r} of {commit.sequence}, which was abandoned: its files are in "
                               f"the table while its watermarks never moved", commit.at)
        if commit.status is not SequenceStatus.COMPLETED:
            continue
        if not found:
            yield TableFinding("table-commit-missing", f"{where} holds no snapshot carrying the commit id "
                               f"{commit.step.commit_id!r} of {commit.sequence}, which completed (the snapshot was "
                               f"expired or removed): its files are not in the table", commit.at)
            continue
        if len(found) > 1:
            yield TableFinding("table-committed-twice", f"{where}: snapshots {[s.id for s in found]} all carry the "
                               f"commit id {commit.step.commit_id!r} of {commit.sequence}", commit.at)
        current = [s for s in found if s.id in history.ancestry]
        if not current:
            yield TableFinding("table-commit-rolled-back", f"{where}: snapshot {found[0].id} of {commit.sequence} "
                               f"(commit id {commit.step.commit_id!r}) is not in the current snapshot's history "
                               f"(rolled back): its files are no longer in the table", commit.at)
        for snapshot in current:
            yield from _check_added(where, commit, snapshot.id, history.added.get(snapshot.id, []))


def _check_added(where: str, commit: TableCommitPlanned, snapshot: int, files: list[str]) -> Iterator[TableFinding]:
    """The snapshot added exactly the files the sequence published."""
    made = {_canonical(f) for f in files}
    expected = {_canonical(f) for f in commit.files}
    for path in sorted(expected - made):
        yield TableFinding("table-file-missing", f"{where}: snapshot {snapshot} of {commit.sequence} did not add "
                           f"{path}, which the sequence published", commit.at)
    for path in sorted(made - expected):
        yield TableFinding("table-file-unplanned", f"{where}: snapshot {snapshot} of {commit.sequence} added {path}, "
                           f"which the sequence did not publish", commit.at)


def _check_unknown(where: str, planned: list[TableCommitPlanned], ours: list[_Ours]) -> Iterator[TableFinding]:
    """Each snapshot carrying a commit id of one of the log's jobs belongs to a sequence the log planned."""
    known = {c.step.commit_id for c in planned}
    for snapshot in ours:
        if snapshot.commit_id not in known:
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


def _check_offsets_once(where: str, ours: list[_Ours]) -> Iterator[TableFinding]:
    """No source offset is in two snapshots of ours: per dataset and partition, their ranges never overlap."""
    ranges: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    for snapshot in ours:
        dataset = snapshot.commit_id.rsplit("/", 1)[0]
        for partition, (low, high) in _watermarks(snapshot.snapshot).items():
            if high > low:
                ranges[(dataset, partition)].append((low, high, snapshot.id))
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


def _load(name: str, uri: str, warehouse: str, identifier: str) -> Table | None:
    """The table, or None when it does not exist, nor its SQLite catalog's file (a check creates none); pyiceberg is
    loaded here, on first use."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    if uri.startswith(SQLITE_PREFIX) and not Path(uri.removeprefix(SQLITE_PREFIX)).exists():
        return None
    try:
        return load_catalog(name, uri=uri, warehouse=warehouse).load_table(identifier)
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


def _watermarks(snapshot: Snapshot) -> dict[str, tuple[int, int]]:
    """The source ranges a snapshot of ours says it holds (none if its summary has none, or unreadable ones)."""
    summary = snapshot.summary
    text = summary.additional_properties.get(TABLE_WATERMARKS) if summary is not None else None
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
