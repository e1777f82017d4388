"""The local disk (or any mount with POSIX rename and fsync): rename is atomic, fsync of a folder makes it durable.

A rename is durable once `sync_folders` is given its destination's folder: that syncs the folder and the folder's own
entry in its parent (a folder the rename had to create), so renames into many new folders under one parent cost one
fsync of that parent at the caller's sync, not one each inside rename.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from filesystems.base import CHECKSUM_CHUNK, FileInfo, FileSystem, FolderMove, WritableFile
from filesystems.movers import FolderMover, ProcessMover

SYNC_ALL_ABOVE = 16
"""More folders to sync than this, and one sync() of the file systems is cheaper than an fsync per folder."""


class _LocalFile(WritableFile):
    """A new local file, fsynced at close (its folder entry is made durable by sync_folders, as a rename's is)."""

    def __init__(self, path: str) -> None:
        self.path = path
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "wb")

    def write(self, data: bytes) -> int:
        return self._file.write(data)

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        Path(self.path).unlink(missing_ok=True)


class LocalFileSystem(FileSystem):
    """The local disk."""

    def size(self, path: str) -> int | None:
        try:
            found = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return found.st_size if stat.S_ISREG(found.st_mode) else None

    def open_read(self, path: str, start: int = 0) -> BinaryIO:
        stream = open(path, "rb")
        if start:
            stream.seek(start)
        return stream

    def open_write(self, path: str) -> WritableFile:
        return _LocalFile(path)

    def checksum(self, path: str) -> str:
        """sha256 of the file's content, hex."""
        return _content(path)[1]

    def round_trips(self, path: str) -> bool:
        return False

    def renames_atomically(self, path: str) -> bool:
        return True

    def rename(self, src: str, dst: str) -> None:
        try:
            os.replace(src, dst)  # the common case: the destination's folder exists (one system call)
            return
        except FileNotFoundError:
            if not os.path.lexists(src):
                raise
        created = _missing_ancestors(os.path.dirname(dst))
        for folder in created:
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder)
        os.replace(src, dst)
        # New folders are entries of their parents: without syncing those, a power cut can lose the whole path. The
        # destination folder's own entry is synced by sync_folders (with the folder), where renames batch it.
        self._fsync_each({os.path.dirname(folder) for folder in created[:-1]})

    def is_folder(self, path: str) -> bool:
        return os.path.isdir(path)

    def moves_folders(self, path: str) -> bool:
        return True

    def folder_mover(self, path: str) -> FolderMover:
        return ProcessMover()

    def move_folder(self, move: FolderMove, before_move: Callable[[], None]) -> bool:
        # One pass of plain system calls (a commit moves a folder a dataset): the listing's entries checked against
        # the move's files by the content read once (no stat a file), then the rename, its parents made only if missing.
        if os.path.lexists(move.dst) or not self._holds_exactly(move):
            return False
        before_move()
        created: list[str] = []
        try:
            try:
                os.rename(move.src, move.dst)  # onto a folder made meanwhile: only an empty one is replaced (POSIX)
            except FileNotFoundError:  # a parent of the destination is missing (or the source is gone: fails again)
                created = _missing_ancestors(os.path.dirname(move.dst))
                for folder in created:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(folder)
                os.rename(move.src, move.dst)
        except (FileExistsError, IsADirectoryError, NotADirectoryError):
            return False
        except OSError as e:
            if e.errno != errno.ENOTEMPTY:
                raise
            return False
        # the new folders' own entries; dst's entry in its folder is synced by sync_folders, as a rename's is
        self._fsync_each({os.path.dirname(folder) for folder in created})
        return True

    @staticmethod
    def _holds_exactly(move: FolderMove) -> bool:
        """Whether the move's source folder holds exactly its files (nothing else, no folder), each of its size and
        content."""
        try:
            with os.scandir(move.src) as entries:
                found = [(entry.path, entry.is_file(follow_symlinks=False)) for entry in entries]
        except (FileNotFoundError, NotADirectoryError):
            return False
        if len(found) != len(move.files):
            return False
        for path, is_file in found:
            expected = move.files.get(path)
            if not is_file or expected is None:
                return False
            try:
                if not _holds(path, *expected):
                    return False
            except FileNotFoundError:
                return False
        return True

    def copy(self, src: str, dst: str) -> None:
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)

    def delete(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def sync_folders(self, folders: Iterable[str]) -> None:
        """Make the folders' entries durable, and each folder's own entry in its parent (rename may have made it)."""
        unique = set(folders)
        if len(unique) > SYNC_ALL_ABOVE:
            _sync_file_systems(unique)
            return
        self._fsync_each(unique | {os.path.dirname(folder) for folder in unique})

    @staticmethod
    def _fsync_each(folders: set[str]) -> None:
        """fsync each folder, one after another."""
        for folder in folders:
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def list_folders(self, path: str) -> list[str]:
        try:
            return sorted(entry.name for entry in os.scandir(path) if entry.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list_files(self, path: str) -> list[FileInfo]:
        found: list[FileInfo] = []
        _scan(path, found)
        return sorted(found, key=lambda f: f.path)

    def remove_tree(self, path: str) -> None:
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass


def _scan(folder: str, found: list[FileInfo]) -> None:
    """Add every file below folder (symlinks to files followed, to folders not) to `found`: one stat a file."""
    try:
        entries = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    with entries:
        for entry in entries:
            if entry.is_dir():
                if not entry.is_symlink():
                    _scan(entry.path, found)
                continue
            try:
                info = entry.stat()
            except FileNotFoundError:
                continue  # gone since it was listed, or a dangling link
            if stat.S_ISREG(info.st_mode):
                found.append(FileInfo(entry.path, info.st_size, info.st_mtime_ns))


def _sync_file_systems(folders: set[str]) -> None:
    """Make durable everything written to the file systems holding `folders`: one syncfs(2) each (Linux), where one
    fsync a folder would cost a journal commit each; os.sync() where syncfs is not offered."""
    syncfs = getattr(_LIBC, "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    devices: dict[int, str] = {}
    for folder in folders:
        devices.setdefault(os.stat(folder).st_dev, folder)
    for folder in devices.values():
        fd = os.open(folder, os.O_RDONLY)
        try:
            if syncfs(fd) != 0:
                error = ctypes.get_errno()
                raise OSError(error, os.strerror(error), folder)
        finally:
            os.close(fd)


_LIBC = ctypes.CDLL(None, use_errno=True)


def _holds(path: str, size: int, checksum: str) -> bool:
    """Whether the file at path has exactly this size and SHA-256 (hex): read to its end once, without a stat, and
    given up as soon as it is longer."""
    read, digest = _content(path, size)
    return read == size and digest == checksum


def _content(path: str, most: int | None = None) -> tuple[int, str]:
    """A file's size and SHA-256 (hex), read to its end once with plain system calls (a buffered file object costs
    more than the hashing of a small task-output file, and a commit checks every file it moves); read no further
    once it holds more than `most` bytes (then the size is only known to be larger, and the digest is empty)."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    read = 0
    try:
        while chunk := os.read(fd, CHECKSUM_CHUNK):
            read += len(chunk)
            if most is not None and read > most:
                return read, ""
            digest.update(chunk)
    finally:
        os.close(fd)
    return read, digest.hexdigest()


def _missing_ancestors(folder: str) -> list[str]:
    """The folders on the way to `folder` (itself included) that do not exist yet, outermost first."""
    missing: list[str] = []
    while folder and not os.path.exists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing[::-1]


LOCAL = LocalFileSystem()
"""The local file system: stateless, shared."""
