"""pyiceberg's FileIO over oncelog's own file systems: how an Iceberg table on HDFS is read and written without
libhdfs (pyiceberg's own HDFS FileIO is Arrow's `HadoopFileSystem`, which loads `libhdfs.so`).

The catalog loads it by name (`py-io-impl`, TableStorage.iceberg_properties) with the job's Hadoop keys among its
properties (`oncelog.hadoop.<key>`): HDFS is reached over WebHDFS as the job's own files are (filesystems/webhdfs.py).
pyiceberg reads table metadata, manifests and data files through `new_input(...).open()` (a seekable stream) and
writes metadata and manifests through `new_output(...).create()`: nothing here needs more than the FileSystem
interface.
"""

from __future__ import annotations

from types import TracebackType
from typing import cast

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream
from pyiceberg.typedef import EMPTY_DICT, Properties

from filesystems.base import FileSystem, FileSystemError, WritableFile
from filesystems.router import FileSystems
from filesystems.settings import FileSystemSettings
from spark_pipeline.tables.storage import HADOOP_PROPERTY


class FileSystemsIO(FileIO):
    """Table files on any store oncelog's file systems reach, with the Hadoop keys the catalog's properties carry."""

    def __init__(self, properties: Properties = EMPTY_DICT) -> None:
        super().__init__(properties)
        hadoop = {key.removeprefix(HADOOP_PROPERTY): value for key, value in properties.items()
                  if key.startswith(HADOOP_PROPERTY)}
        self.fs: FileSystem = FileSystems(FileSystemSettings.of(hadoop))

    def new_input(self, location: str) -> InputFile:
        return _Input(location, self.fs)

    def new_output(self, location: str) -> OutputFile:
        return _Output(location, self.fs)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        try:
            self.fs.delete(path)
        except FileSystemError as e:
            raise OSError(str(e)) from e


def _size(fs: FileSystem, location: str) -> int:
    """The file's size; a FileNotFoundError when there is none (what pyiceberg expects)."""
    try:
        size = fs.size(location)
    except FileSystemError as e:
        raise OSError(str(e)) from e
    if size is None:
        raise FileNotFoundError(location)
    return size


def _exists(fs: FileSystem, location: str) -> bool:
    try:
        return fs.exists(location)
    except FileSystemError as e:
        raise OSError(str(e)) from e


class _OnStore:
    """What a table file to read and one to write share: its size and existence, asked of the store."""

    fs: FileSystem
    location: str

    def __len__(self) -> int:
        return _size(self.fs, self.location)

    def exists(self) -> bool:
        return _exists(self.fs, self.location)


class _Input(_OnStore, InputFile):
    """A table file to read: a seekable stream of the store's client."""

    def __init__(self, location: str, fs: FileSystem) -> None:
        super().__init__(location)
        self.fs = fs

    def open(self, seekable: bool = True) -> InputStream:
        try:
            return cast(InputStream, self.fs.open_read(self.location))
        except FileSystemError as e:
            if not self.exists():
                raise FileNotFoundError(self.location) from e
            raise OSError(str(e)) from e


class _Output(_OnStore, OutputFile):
    """A table file to write: complete at its location once its stream is closed."""

    def __init__(self, location: str, fs: FileSystem) -> None:
        super().__init__(location)
        self.fs = fs

    def to_input_file(self) -> InputFile:
        return _Input(self.location, self.fs)

    def create(self, overwrite: bool = False) -> OutputStream:
        """A new file; a FileExistsError when one is there and `overwrite` is False (metadata files: the catalog's
        commit, not the file's creation, is what makes a table version current)."""
        if not overwrite and self.exists():
            raise FileExistsError(self.location)
        try:
            return _Stream(self.fs.open_write(self.location))
        except FileSystemError as e:
            raise OSError(str(e)) from e


class _Stream(OutputStream):
    """A WritableFile as pyiceberg's OutputStream: closed, it is complete; left by an error, it is discarded."""

    def __init__(self, file: WritableFile) -> None:
        self.file = file
        self.written = 0
        self.closed = False

    def write(self, b: bytes) -> int:
        try:
            self.file.write(b)
        except FileSystemError as e:
            raise OSError(str(e)) from e
        self.written += len(b)
        return len(b)

    def tell(self) -> int:
        return self.written

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.file.close()
        except FileSystemError as e:
            raise OSError(str(e)) from e

    def __enter__(self) -> OutputStream:
        return self

    def __exit__(self, exctype: type[BaseException] | None, excinst: BaseException | None,
                 exctb: TracebackType | None) -> None:
        if exctype is None:
            self.close()
        elif not self.closed:
            self.closed = True
            self.file.discard()
