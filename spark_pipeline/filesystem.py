"""The file system publishing goes through: one interface, so that every file operation of a commit has one place.

Commit steps, clean-up and the durability of renames call these methods and nothing else; the seeded fault
simulation wraps them to fail any single call. `LocalFileSystem` is the local disk (rename is atomic, fsync makes
a rename durable once its folder is synced).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path

CHECKSUM_CHUNK = 1 << 20
SYNC_ALL_ABOVE = 16
"""More folders to sync than this, and one sync() of the file systems is cheaper than an fsync per folder."""


class FileSystem(ABC):
    """The operations publishing needs; every path is absolute."""

    @abstractmethod
    def size(self, path: str) -> int | None:
        """The file's size in bytes, or None when there is no file there."""

    @abstractmethod
    def checksum(self, path: str) -> str:
        """sha256 of the file's content, hex."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move src to dst atomically (replacing dst), creating dst's parent folders."""

    @abstractmethod
    def sync_folders(self, folders: Iterable[str]) -> None:
        """Make the entries of these folders (renames into or out of them) durable."""

    @abstractmethod
    def list_folders(self, path: str) -> list[str]:
        """The names of the folders directly under path (none when path is not a folder)."""

    @abstractmethod
    def remove_tree(self, path: str) -> None:
        """Delete a folder and everything under it, if it exists."""

    def exists(self, path: str) -> bool:
        return self.size(path) is not None

    def holds(self, path: str, size: int, checksum: str) -> bool:
        """Whether path is a file of exactly this size and content."""
        return self.size(path) == size and self.checksum(path) == checksum


class LocalFileSystem(FileSystem):
    """The local disk (or any mount with POSIX rename and fsync)."""

    def size(self, path: str) -> int | None:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return None
        return stat.st_size if os.path.isfile(path) else None

    def checksum(self, path: str) -> str:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(CHECKSUM_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def rename(self, src: str, dst: str) -> None:
        parent = Path(dst).parent
        created = _missing_ancestors(parent)
        parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        # New folders are entries of their parents: without syncing those, a power cut can lose the whole path.
        self.sync_folders(str(p.parent) for p in created)

    def sync_folders(self, folders: Iterable[str]) -> None:
        unique = set(folders)
        if len(unique) > SYNC_ALL_ABOVE:
            os.sync()
            return
        for folder in unique:
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

    def remove_tree(self, path: str) -> None:
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            pass


def _missing_ancestors(folder: Path) -> list[Path]:
    """The folders on the way to `folder` (itself included) that do not exist yet, outermost first."""
    missing: list[Path] = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    return missing[::-1]


LOCAL = LocalFileSystem()
"""The local file system: stateless, shared."""
