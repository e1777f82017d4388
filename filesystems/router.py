"""The file system for any location: each call goes to the backend of its scheme and authority.

`FileSystems` is itself a `FileSystem`, so commit steps, writers and clean-up take one object whatever stores a
job spans; backends are made on first use and kept (one per HDFS cluster, one S3 client for all buckets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import BinaryIO

from filesystems.base import FileInfo, FileSystem, FileSystemError, FolderMove, WritableFile
from filesystems.local import LOCAL
from filesystems.movers import FolderMover
from filesystems.s3 import S3FileSystem, client_for
from filesystems.settings import FileSystemSettings
from filesystems.urls import Scheme, parse
from filesystems.webhdfs import HdfsFileSystem, http_address


class FileSystems(FileSystem):
    """Every file system a job's locations name, chosen per call by URL."""

    def __init__(self, settings: FileSystemSettings) -> None:
        self._settings = settings
        self._backends: dict[str, FileSystem] = {}

    @property
    def settings(self) -> FileSystemSettings:
        """The job's Hadoop keys over $HADOOP_CONF_DIR's."""
        return self._settings

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> FileSystems:
        """The file systems of a job (its Hadoop keys over $HADOOP_CONF_DIR's)."""
        return cls(FileSystemSettings.of(properties))

    def backend(self, path: str) -> FileSystem:
        """The backend serving a location."""
        if path.startswith("/"):
            return LOCAL  # an absolute local path (no scheme starts with '/'): the common case, without parsing it
        try:
            location = parse(path)
        except ValueError as e:
            raise FileSystemError(f"{path!r}: {e}") from e
        if location.scheme is Scheme.FILE:
            return LOCAL
        key = "s3" if location.scheme in (Scheme.S3, Scheme.S3A) else f"hdfs:{http_address(location, self.settings)}"
        if key not in self._backends:
            self._backends[key] = (S3FileSystem(client_for(self.settings)) if key == "s3"
                                   else HdfsFileSystem(http_address(location, self.settings),
                                                       self.settings.get("hadoop.user.name")))
        return self._backends[key]

    def _pair(self, src: str, dst: str) -> FileSystem:
        """The one backend of two locations (moves and copies never cross stores)."""
        backend, other = self.backend(src), self.backend(dst)
        if backend is LOCAL and other is LOCAL:
            return LOCAL
        if other is not backend or parse(src).root != parse(dst).root:
            raise FileSystemError(f"{src} and {dst} lie on different file systems: oncelog moves files within one")
        return backend

    def size(self, path: str) -> int | None:
        return self.backend(path).size(path)

    def checksum(self, path: str) -> str:
        return self.backend(path).checksum(path)

    def holds(self, path: str, size: int, checksum: str) -> bool:
        return self.backend(path).holds(path, size, checksum)

    def open_read(self, path: str, start: int = 0) -> BinaryIO:
        return self.backend(path).open_read(path, start)

    def open_write(self, path: str) -> WritableFile:
        return self.backend(path).open_write(path)

    def round_trips(self, path: str) -> bool:
        return self.backend(path).round_trips(path)

    def renames_atomically(self, path: str) -> bool:
        return self.backend(path).renames_atomically(path)

    def rename(self, src: str, dst: str) -> None:
        self._pair(src, dst).rename(src, dst)

    def is_folder(self, path: str) -> bool:
        return self.backend(path).is_folder(path)

    def moves_folders(self, path: str) -> bool:
        return self.backend(path).moves_folders(path)

    def folder_mover(self, path: str) -> FolderMover | None:
        return self.backend(path).folder_mover(path)

    def move_folder(self, move: FolderMove, before_move: Callable[[], None]) -> bool:
        return self._pair(move.src, move.dst).move_folder(move, before_move)

    def copy(self, src: str, dst: str) -> None:
        self._pair(src, dst).copy(src, dst)

    def delete(self, path: str) -> None:
        self.backend(path).delete(path)

    def sync_folders(self, folders: Iterable[str]) -> None:
        by_backend: dict[int, tuple[FileSystem, list[str]]] = {}
        for folder in folders:
            backend = self.backend(folder)
            by_backend.setdefault(id(backend), (backend, []))[1].append(folder)
        for backend, group in by_backend.values():
            backend.sync_folders(group)

    def list_folders(self, path: str) -> list[str]:
        return self.backend(path).list_folders(path)

    def list_files(self, path: str) -> list[FileInfo]:
        return self.backend(path).list_files(path)

    def remove_tree(self, path: str) -> None:
        self.backend(path).remove_tree(path)
