"""The interface every file system implements: what writers, commit steps, clean-up and verify need, nothing more.

Every location is a string as `filesystems.urls` writes it (a local absolute path or a URL). Commit steps, clean-up
and the durability of renames call these methods and nothing else; the seeded fault simulation wraps them to fail
any single call. `move` is the one place that knows a store without rename: there it copies, checks the copy's
content, and only then deletes the source.
"""

from __future__ import annotations

import hashlib
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from events.errors import OncelogError
from filesystems import urls
from filesystems.settings import FileSystemSettings

if TYPE_CHECKING:
    from filesystems.movers import FolderMover

CHECKSUM_CHUNK = 1 << 20


class FileSystemError(OncelogError):
    """A file-system call failed or a location cannot be served (names the location and what to check)."""


@dataclass(frozen=True)
class FileInfo:
    """A file found by a listing."""

    path: str
    size: int
    modified_ns: int
    """When the file was last written, in nanoseconds since the epoch (as precise as the store keeps it)."""


@dataclass(frozen=True, slots=True)
class FolderMove:
    """Folder `src` moved whole to `dst`, only if it holds exactly `files` (each path below it: its size and SHA-256)
    and nothing is at `dst` yet: what a rename of each file would check."""

    src: str
    dst: str
    files: Mapping[str, tuple[int, str]]


class WritableFile(ABC):
    """A new file being written: complete at its location once `close()` returns, its content durable (its folder
    entry too on stores that need no `sync_folders`)."""

    @abstractmethod
    def write(self, data: bytes) -> int:
        """Append bytes."""

    @abstractmethod
    def close(self) -> None:
        """Complete the file at its location (replacing what was there), its content durable."""

    @abstractmethod
    def discard(self) -> None:
        """Drop what was written; the location keeps what it held before."""

    def flush(self) -> None:
        """Writers flush; a file becomes durable at close()."""

    def seekable(self) -> bool:
        """Not seekable: Avro writers must not try to append to what is there."""
        return False


class FileSystem(ABC):
    """The operations oncelog performs on files and folders."""

    @property
    def settings(self) -> FileSystemSettings:
        """The Hadoop keys this file system reaches its stores with (what table libraries need to reach the same
        stores); by default none of a job's own: $HADOOP_CONF_DIR's, and AWS's own chain."""
        return FileSystemSettings.of({})

    @abstractmethod
    def size(self, path: str) -> int | None:
        """The file's size in bytes, or None when there is no file there."""

    @abstractmethod
    def open_read(self, path: str, start: int = 0) -> BinaryIO:
        """The file's content from byte `start` on, as a binary stream."""

    @abstractmethod
    def open_write(self, path: str) -> WritableFile:
        """A new file at path (parents created), complete once closed."""

    def round_trips(self, path: str) -> bool:
        """Whether calls on path wait on a network round trip, so that several in flight at once finish sooner (a
        committer applies sequences in parallel); a local call is a short system call, faster one after another."""
        return True

    @abstractmethod
    def renames_atomically(self, path: str) -> bool:
        """Whether the store holding path has an atomic rename (else a move is copy, check, delete)."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move src to dst atomically (replacing dst), creating dst's parent folders; only where renames_atomically."""

    def moves_folders(self, path: str) -> bool:
        """Whether the store holding path moves a whole folder in one atomic rename (`move_folder`)."""
        return False

    def folder_mover(self, path: str) -> FolderMover | None:
        """A mover of its own, started now, for many folder moves under path (the caller closes it): local disk's
        makes them in another process. None: the caller makes them itself, through this file system."""
        return None

    def move_folder(self, move: FolderMove, before_move: Callable[[], None]) -> bool:
        """Move a folder, with all it holds, in one atomic rename, creating the destination's parent folders, if it
        holds exactly the move's files, each with its size and content, and nothing is at the destination; False
        (nothing moved) where not, or where the store cannot (`moves_folders`). `before_move` is called once the
        checks passed, just before the rename (a fence check: it raises to stop it). Durable once `sync_folders` is
        given the destination."""
        return False

    @abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Copy src to dst (replacing dst), within one store."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete a file, if it exists."""

    @abstractmethod
    def sync_folders(self, folders: Iterable[str]) -> None:
        """Make the entries of these folders (renames into or out of them) durable."""

    @abstractmethod
    def list_folders(self, path: str) -> list[str]:
        """The names of the folders directly under path (none when path is not a folder)."""

    @abstractmethod
    def list_files(self, path: str) -> list[FileInfo]:
        """Every file under path, at any depth, sorted by path (none when path is not a folder)."""

    @abstractmethod
    def remove_tree(self, path: str) -> None:
        """Delete a folder and everything under it, if it exists."""

    def checksum(self, path: str) -> str:
        """sha256 of the file's content, hex."""
        digest = hashlib.sha256()
        with self.open_read(path) as f:
            while chunk := f.read(CHECKSUM_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def exists(self, path: str) -> bool:
        return self.size(path) is not None

    def is_folder(self, path: str) -> bool:
        """Whether a folder is at path (on an object store: whether anything lies below it)."""
        return posixpath.basename(path) in self.list_folders(urls.parent(path))

    def holds(self, path: str, size: int, checksum: str) -> bool:
        """Whether path is a file of exactly this size and content."""
        return self.size(path) == size and self.checksum(path) == checksum

    def move(self, src: str, dst: str, size: int, checksum: str) -> None:
        """Move a file known to hold (size, checksum) from src to dst.

        With an atomic rename, one rename. Without (object stores), a copy that is trusted only once dst holds the
        content, then the source's delete: a copy cut short is redone, never taken for a publication.
        """
        if self.renames_atomically(dst):
            self.rename(src, dst)
            return
        if not self.holds(dst, size, checksum):
            self.copy(src, dst)
            if not self.holds(dst, size, checksum):
                raise FileSystemError(f"the copy of {src} to {dst} does not hold the source's content ({size} bytes, "
                                      f"sha256 {checksum[:12]}…); the source is kept and the copy will be redone")
        self.delete(src)
