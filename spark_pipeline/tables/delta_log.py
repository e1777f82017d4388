"""Every app transaction of a Delta table in one read of its log: what a commit of many datasets asks before it is
made. Arrow only: deltalake is not loaded here.

delta-rs answers one app id at a time (`DeltaTable.transaction_version`), replaying the table's log for each: a commit
of N datasets would replay it N times. This reads the log once, as the Delta protocol lays it out (local disk, S3 and
HDFS alike, through the table's storage):

- `_delta_log/<version>.json`: a commit, one action a line; a `txn` action sets its app id's version;
- `_delta_log/<version>.checkpoint.parquet` (or its parts, `<version>.checkpoint.<part>.<parts>.parquet`): the table's
  state at that version, one `txn` row per app id.

The state at `version` is the latest complete checkpoint at or before it, then each later commit up to `version` in
order (a later `txn` of an app id replaces the earlier). A table whose protocol has features this reading does not
follow (V2 checkpoints, whose state may lie in sidecar files; app transactions expired after
`delta.setTransactionRetentionDuration`) is not read here (`readable`): the caller asks delta-rs instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from filesystems import urls
from filesystems.base import FileSystemError
from spark_pipeline.tables.errors import TableError
from spark_pipeline.tables.files import first_line
from spark_pipeline.tables.storage import TableStorage

LOG_FOLDER = "_delta_log"
COMMIT = re.compile(r"(\d{20})\.json")
CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")
"""A classic checkpoint's file: one file, or one part of several (part, parts)."""
UNFOLLOWED_FEATURES = frozenset({"v2Checkpoint"})
"""Reader features whose log this reading does not follow."""
RETENTION = "delta.setTransactionRetentionDuration"
"""The table property after which readers drop an app transaction (delta-rs does): not followed here."""


def readable(reader_features: Iterable[str] | None, configuration: Mapping[str, str]) -> bool:
    """Whether the app transactions of a table with these reader features and properties are read here."""
    return not UNFOLLOWED_FEATURES & set(reader_features or ()) and RETENTION not in configuration


@dataclass
class _Log:
    """The log's files by version: commits, and each checkpoint's parts found (part number → path)."""

    commits: dict[int, str] = field(default_factory=dict)
    checkpoints: dict[int, dict[int, str]] = field(default_factory=dict)
    parts: dict[int, int] = field(default_factory=dict)
    """How many parts each checkpoint has."""

    def checkpoint(self, version: int) -> tuple[int, list[str]] | None:
        """The latest complete checkpoint at or before `version`: its version and files (in part order)."""
        for at in sorted((v for v in self.checkpoints if v <= version), reverse=True):
            found = self.checkpoints[at]
            if len(found) == self.parts[at]:
                return at, [found[part] for part in sorted(found)]
        return None


def app_transactions(storage: TableStorage, location: str, version: int) -> dict[str, int]:
    """The latest version of every app id's transaction in the Delta table at `location`, as of table version
    `version`; a TableError when the log cannot be read or lacks a commit the state needs."""
    log = urls.join(location, LOG_FOLDER)
    try:
        files = _listing(storage, log)
        start = files.checkpoint(version)
        found = _checkpoint_transactions(storage, start[1]) if start is not None else {}
        for at in range(start[0] + 1 if start is not None else 0, version + 1):
            path = files.commits.get(at)
            if path is None:
                raise TableError(f"the Delta log {log} lacks the commit {at} (version {version}; "
                                 f"{'checkpoint ' + str(start[0]) if start is not None else 'no checkpoint'})")
            found.update(_commit_transactions(storage, path))
    except (OSError, ValueError, KeyError, TypeError, FileSystemError, pa.ArrowException) as e:
        raise TableError(f"cannot read the app transactions in the Delta log {log}: {first_line(e)}") from e
    return found


def _listing(storage: TableStorage, log: str) -> _Log:
    """The log folder's commits and checkpoint parts (other files, and those in its subfolders, left out)."""
    files = _Log()
    for info in storage.files.list_files(log):
        folder, _, name = info.path.rstrip("/").rpartition("/")
        if not folder.endswith("/" + LOG_FOLDER):
            continue  # a file in a subfolder (`_sidecars`, `_staged_commits`)
        if (commit := COMMIT.fullmatch(name)) is not None:
            files.commits[int(commit.group(1))] = info.path
        elif (checkpoint := CHECKPOINT.fullmatch(name)) is not None:
            at = int(checkpoint.group(1))
            part, parts = (int(checkpoint.group(2)), int(checkpoint.group(3))) if checkpoint.group(2) else (1, 1)
            files.checkpoints.setdefault(at, {})[part] = info.path
            files.parts[at] = parts
    return files


def _checkpoint_transactions(storage: TableStorage, parts: list[str]) -> dict[str, int]:
    """The app transactions a checkpoint holds (its `txn` column: one row per app id)."""
    found: dict[str, int] = {}
    for path in parts:
        with storage.parquet(path) as file:
            if "txn" not in file.schema_arrow.names:
                continue  # a checkpoint of a table with no app transaction may leave the column out
            for txn in file.read(columns=["txn"]).column(0).to_pylist():
                if txn is not None:
                    found[str(txn["appId"])] = int(txn["version"])
    return found


def _commit_transactions(storage: TableStorage, path: str) -> dict[str, int]:
    """The app transactions a commit sets, in its order (one action a line)."""
    found: dict[str, int] = {}
    with storage.files.open_read(path) as stream:
        content = stream.read()
    for line in content.splitlines():
        if b'"txn"' not in line:
            continue  # most lines are add actions: parsed only when they may be a txn
        action = json.loads(line)
        txn = action.get("txn") if isinstance(action, dict) else None
        if txn is not None:
            found[str(txn["appId"])] = int(txn["version"])
    return found
