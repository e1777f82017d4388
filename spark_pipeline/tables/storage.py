"""How the table libraries reach a warehouse's files: local disk, an S3 bucket or HDFS, with the job's Hadoop keys
(the s3a endpoint and credentials, the NameNode's addresses, as `filesystems` takes them). Arrow only: neither
pyiceberg nor deltalake is loaded here.

- Local disk and S3: oncelog reads the data files (size, Parquet footer) through Arrow's file systems; delta-rs gets
  the s3a keys as its storage options, pyiceberg's `PyArrowFileIO` as its `s3.*` catalog properties.
- HDFS: Arrow's and pyiceberg's HDFS clients load `libhdfs.so` (not installed), so oncelog reads the data files
  through its own file systems (WebHDFS), pyiceberg gets a FileIO over them (tables/fileio.py), and delta-rs speaks
  HDFS's RPC itself (hdfs-native: no libhdfs).

The keys are secrets: a commit step's record holds none; the step is given them by the run (or `oncelog recover`)
from the job's file systems, and falls back to $HADOOP_CONF_DIR's and AWS's own configuration chain.
"""

from __future__ import annotations

import functools
import posixpath
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from filesystems.base import FileSystem, FileSystemError
from filesystems.router import FileSystems
from filesystems.s3 import endpoint_of
from filesystems.settings import FileSystemSettings
from filesystems.urls import Scheme, parent, parse
from spark_pipeline.tables.errors import TableError
from spark_pipeline.tables.files import Footer, first_line, local

S3_SCHEMES = (Scheme.S3, Scheme.S3A)
HDFS_SCHEMES = (Scheme.HDFS, Scheme.WEBHDFS)
FILE_IO = "spark_pipeline.tables.fileio.FileSystemsIO"
"""pyiceberg's FileIO for a warehouse on HDFS (`py-io-impl`): oncelog's own file systems."""
HADOOP_PROPERTY = "oncelog.hadoop."
"""The prefix of the catalog properties that hand the job's Hadoop keys to that FileIO."""
LOCAL_FILES = pafs.LocalFileSystem()
"""Arrow's local file system (one for the process: it holds no state)."""
REMOTE_READS = 16
"""How many data files' footers are read at a time from S3 or HDFS (each read is a round trip or two)."""
DEFAULT_REGION = "us-east-1"
"""The region pyiceberg's S3 client signs for when the job names an endpoint but no region (else it asks AWS where
the bucket is, which an S3-compatible server does not answer)."""


@dataclass(frozen=True)
class DataFileInfo:
    """What a table commit records of a data file beside its path: its size and when it was written."""

    size: int
    modified_ms: int


@dataclass(frozen=True)
class TableStorage:
    """The Hadoop keys a table library's reads and commits use for a warehouse on S3 or HDFS (none: local disk)."""

    settings: FileSystemSettings = field(default_factory=FileSystemSettings, repr=False)

    @classmethod
    def of(cls, fs: FileSystem) -> TableStorage:
        """The storage of a run's file systems: their job's keys (else $HADOOP_CONF_DIR's and AWS's own)."""
        return cls(fs.settings)

    def delta_options(self, location: str) -> dict[str, str]:
        """delta-rs's storage options for a location: on S3, the endpoint, credentials, region and addressing the
        s3a keys set (any not set: AWS's environment, as delta-rs reads it); on HDFS, the job's `dfs.*` keys (HA
        name services; the rest from $HADOOP_CONF_DIR, as hdfs-native reads it); none for local disk."""
        if is_hdfs(location):
            return {key: value for key, value in self.settings.hadoop.items() if key.startswith("dfs.")}
        if not is_s3(location):
            return {}
        endpoint = endpoint_of(self.settings)
        get = self.settings.get
        options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": get("fs.s3a.access.key"),
                   "AWS_SECRET_ACCESS_KEY": get("fs.s3a.secret.key"), "AWS_SESSION_TOKEN": get("fs.s3a.session.token"),
                   "AWS_REGION": get("fs.s3a.endpoint.region")}
        if endpoint is not None and endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
        if self._path_style(endpoint):
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        return {key: value for key, value in options.items() if value is not None}

    def iceberg_properties(self, warehouse: str) -> dict[str, str]:
        """pyiceberg's catalog properties for a warehouse: on S3, `PyArrowFileIO`'s endpoint, credentials, region
        and addressing from the s3a keys; on HDFS, the FileIO over oncelog's file systems and the job's Hadoop keys
        it needs; none for local disk. Given to the catalog at commit time, never recorded."""
        if is_hdfs(warehouse):
            hdfs = {HADOOP_PROPERTY + key: value for key, value in self.settings.hadoop.items()
                    if not key.startswith("fs.s3a.")}
            return {"py-io-impl": FILE_IO, **hdfs}
        if not is_s3(warehouse):
            return {}
        endpoint = endpoint_of(self.settings)
        get = self.settings.get
        region = get("fs.s3a.endpoint.region") or (DEFAULT_REGION if endpoint is not None else None)
        properties = {"s3.endpoint": endpoint, "s3.access-key-id": get("fs.s3a.access.key"),
                      "s3.secret-access-key": get("fs.s3a.secret.key"), "s3.session-token": get("fs.s3a.session.token"),
                      "s3.region": region,
                      "s3.force-virtual-addressing": "false" if self._path_style(endpoint) else None}
        return {key: value for key, value in properties.items() if value is not None}

    def _path_style(self, endpoint: str | None) -> bool:
        """Whether S3 requests name the bucket in the path: `fs.s3a.path.style.access`, or any endpoint set."""
        return (self.settings.get("fs.s3a.path.style.access") or "").lower() == "true" or endpoint is not None

    def arrow(self, path: str) -> tuple[pafs.FileSystem, str]:
        """Arrow's file system for a data file on local disk or S3, and its path there (`bucket/key` on S3)."""
        if is_hdfs(path):
            raise ValueError(f"{path}: Arrow's HDFS client needs libhdfs.so; read HDFS through TableStorage.parquet")
        if not is_s3(path):
            return LOCAL_FILES, local(path)
        location = parse(path)
        return self._s3, f"{location.authority}/{location.path.lstrip('/')}"

    @functools.cached_property
    def _s3(self) -> pafs.S3FileSystem:
        """One Arrow S3 client per storage, from the s3a keys (AWS's own chain for any not set)."""
        endpoint = endpoint_of(self.settings)
        get = self.settings.get
        scheme = "http" if endpoint is not None and endpoint.startswith("http://") else "https"
        return pafs.S3FileSystem(
            access_key=get("fs.s3a.access.key"), secret_key=get("fs.s3a.secret.key"),
            session_token=get("fs.s3a.session.token"), region=get("fs.s3a.endpoint.region"),
            endpoint_override=endpoint.split("://", 1)[1] if endpoint is not None else None, scheme=scheme,
            force_virtual_addressing=False)

    @functools.cached_property
    def files(self) -> FileSystems:
        """oncelog's file systems with these keys: how HDFS is reached (WebHDFS, no libhdfs)."""
        return FileSystems(self.settings)

    @contextmanager
    def parquet(self, path: str) -> Iterator[pq.ParquetFile]:
        """A data file opened for its Parquet footer and columns (on HDFS, read through oncelog's WebHDFS client);
        an OSError when the store fails."""
        if is_hdfs(path):
            with _hdfs(), self.files.open_read(path) as stream, pq.ParquetFile(stream) as file:
                yield file
            return
        fs, where = self.arrow(path)
        with fs.open_input_file(where) as stream, pq.ParquetFile(stream) as file:
            yield file

    def footer(self, path: str) -> Footer:
        """A data file's size, time and Parquet footer, in one open of the file; an OSError when the store fails (a
        FileNotFoundError when the file is missing)."""
        if is_hdfs(path):
            info = self.info(path)
            with self.parquet(path) as file:
                return Footer(path, info.size, info.modified_ms, file.schema_arrow, file.metadata)
        fs, where = self.arrow(path)
        found = fs.get_file_info(where)
        if found.type != pafs.FileType.File or found.size is None:
            raise FileNotFoundError(f"no file {path}")
        with fs.open_input_file(where) as stream, pq.ParquetFile(stream) as file:
            return Footer(path, found.size, _ms(found), file.schema_arrow, file.metadata)

    def footers(self, paths: Sequence[str], where: str) -> list[Footer]:
        """Each data file's footer (`footer`), in order: on S3 and HDFS several at a time (each read waits on the
        store), on local disk one after the other (faster there); a TableError naming the file `where` could not
        read."""
        def read(path: str) -> Footer:
            try:
                return self.footer(path)
            except (OSError, ValueError, TypeError, pa.ArrowException) as e:
                raise TableError(f"{where}: cannot read the Parquet footer of the data file {path}: "
                                 f"{first_line(e)}") from e

        if len(paths) < 2 or not any(is_s3(path) or is_hdfs(path) for path in paths):
            return [read(path) for path in paths]
        with ThreadPoolExecutor(min(REMOTE_READS, len(paths))) as pool:
            return list(pool.map(read, paths))

    def info(self, path: str) -> DataFileInfo:
        """A data file's size and time; a FileNotFoundError when it is missing. On HDFS the time is now (the file was
        moved into the table just before: as delta-rs stamps the files it writes)."""
        if is_hdfs(path):
            with _hdfs():
                size = self.files.size(path)
            if size is None:
                raise FileNotFoundError(f"no file {path}")
            return DataFileInfo(size, time.time_ns() // 1_000_000)
        fs, where = self.arrow(path)
        found = fs.get_file_info(where)
        if found.type != pafs.FileType.File or found.size is None:
            raise FileNotFoundError(f"no file {path}")
        return DataFileInfo(found.size, _ms(found))

    def exists(self, path: str) -> bool:
        """Whether a file or folder (on S3: any object under the prefix) exists."""
        if is_hdfs(path):
            with _hdfs():
                return self.files.exists(path) or posixpath.basename(path) in self.files.list_folders(parent(path))
        if not is_s3(path):
            return Path(local(path)).exists()
        fs, where = self.arrow(path)
        return bool(fs.get_file_info(where).type != pafs.FileType.NotFound)


class Footers:
    """The data files' footers of one table commit, each read once however often the commit is tried (`of`)."""

    def __init__(self, storage: TableStorage, where: str) -> None:
        self.storage = storage
        self.where = where
        """The table, as a failure to read a file names it."""
        self.read: dict[str, Footer] = {}

    def of(self, paths: Sequence[str]) -> list[Footer]:
        """The files' footers, those not read yet read now (a TableError naming a file that cannot be read)."""
        missing = [path for path in dict.fromkeys(paths) if path not in self.read]
        self.read.update(zip(missing, self.storage.footers(missing, self.where), strict=True))
        return [self.read[path] for path in paths]


def _ms(info: pafs.FileInfo) -> int:
    """When a file was last written, in epoch milliseconds (0: the store does not say)."""
    return info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0


@contextmanager
def _hdfs() -> Iterator[None]:
    """oncelog's HDFS client's failures as the OSError Arrow's clients raise (what table code catches)."""
    try:
        yield
    except FileSystemError as e:
        raise OSError(str(e)) from e


LOCAL_STORAGE = TableStorage()
"""Local disk (and S3 through AWS's own configuration chain alone)."""


S3_PREFIXES = tuple(f"{s.value}://" for s in S3_SCHEMES)
HDFS_PREFIXES = tuple(f"{s.value}://" for s in HDFS_SCHEMES)


def is_s3(location: str) -> bool:
    """Whether a location is in an S3 bucket (`s3a://`, `s3://`)."""
    return location.startswith(S3_PREFIXES)


def is_hdfs(location: str) -> bool:
    """Whether a location is on HDFS (`hdfs://`, `webhdfs://`)."""
    return location.startswith(HDFS_PREFIXES)
