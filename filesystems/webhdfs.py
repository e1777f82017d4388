"""HDFS through WebHDFS (fsspec's client): rename is atomic and durable once the NameNode answers.

`hdfs://namenode:rpc-port/path` is served over the NameNode's HTTP address: `dfs.namenode.http-address` when set
(job file or $HADOOP_CONF_DIR), else the same host on port 9870 (Hadoop 3's default). `webhdfs://host:http-port`
names the HTTP address itself. The user is $HADOOP_USER_NAME, else the login name (simple authentication).
"""

from __future__ import annotations

import getpass
import hashlib
import os
from collections.abc import Callable, Iterable
from typing import BinaryIO, TypeVar, cast
from urllib.parse import quote

import requests
import requests.adapters
from fsspec.implementations.webhdfs import WebHDFS

from filesystems.base import (
    CHECKSUM_CHUNK,
    FileInfo,
    FileSystem,
    FileSystemError,
    WritableFile,
)
from filesystems.settings import FileSystemSettings
from filesystems.urls import Location, Scheme, parse

DEFAULT_HTTP_PORT = 9870
POOL_CONNECTIONS = 64
T = TypeVar("T")


def http_address(location: Location, settings: FileSystemSettings) -> str:
    """The NameNode's WebHDFS host:port for a location."""
    if location.scheme is Scheme.WEBHDFS:
        return location.authority
    configured = settings.get("dfs.namenode.http-address")
    if configured and not configured.startswith("0.0.0.0"):
        return configured
    host = location.authority.partition(":")[0]
    return f"{host}:{configured.rpartition(':')[2] if configured else DEFAULT_HTTP_PORT}"


class _HdfsFile(WritableFile):
    """A file streamed to HDFS; complete (and replicated as the cluster is configured) once closed."""

    def __init__(self, fs: HdfsFileSystem, path: str) -> None:
        self._fs = fs
        self.path = path
        self._file = fs.call(path, "create", lambda: fs.client.open(parse(path).path, "wb", autocommit=True))

    def write(self, data: bytes) -> int:
        return int(self._fs.call(self.path, "write", lambda: self._file.write(data)))

    def close(self) -> None:
        self._fs.call(self.path, "close", self._file.close)

    def discard(self) -> None:
        try:
            self._file.close()
        finally:
            self._fs.delete(self.path)


class HdfsFileSystem(FileSystem):
    """One HDFS cluster, reached at its NameNode's HTTP address."""

    def __init__(self, address: str, user: str | None = None) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self.user = user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        try:
            self.client = WebHDFS(host, int(port), user=self.user, skip_instance_cache=True)
        except ValueError as e:
            raise FileSystemError(f"HDFS NameNode HTTP address {address!r} is not host:port") from e
        # As many pooled connections as commit threads, and no ~/.netrc or proxy lookup on every request.
        adapter = requests.adapters.HTTPAdapter(pool_connections=POOL_CONNECTIONS, pool_maxsize=POOL_CONNECTIONS)
        self.client.session.mount("http://", adapter)
        self.client.session.mount("https://", adapter)
        self.client.session.trust_env = False

    def call(self, path: str, action: str, do: Callable[[], T]) -> T:
        """Run a client call, mapping its failures to a FileSystemError naming the action, location and NameNode."""
        try:
            return do()
        except FileNotFoundError:
            raise
        except requests.ConnectionError as e:
            raise FileSystemError(f"HDFS {action} of {path} failed: no NameNode answers WebHDFS at "
                                  f"http://{self.address} (set dfs.namenode.http-address in the job or in "
                                  f"$HADOOP_CONF_DIR/hdfs-site.xml): {e}") from e
        except (OSError, RuntimeError, ValueError, requests.RequestException) as e:
            raise FileSystemError(f"HDFS {action} of {path} failed (NameNode http://{self.address}, user "
                                  f"{self.user!r}): {type(e).__name__}: {e}") from e

    def _info(self, path: str) -> dict[str, object] | None:
        try:
            return self.call(path, "status", lambda: self.client.info(parse(path).path))
        except FileNotFoundError:
            return None

    def size(self, path: str) -> int | None:
        info = self._info(path)
        return int(str(info["size"])) if info is not None and info["type"] == "file" else None

    def checksum(self, path: str) -> str:
        """sha256 of the content, streamed by one OPEN (fsspec's open would ask for the file's status first)."""
        url = self.client.url + quote(parse(path).path, safe="/=")
        params = {**self.client.pars, "op": "OPEN"}
        answer = self.call(path, "read", lambda: self.client.session.get(url, params=params, stream=True))
        with answer:
            if answer.status_code == 404:
                raise FileSystemError(f"HDFS file {path} does not exist")
            self.call(path, "read", answer.raise_for_status)
            digest = hashlib.sha256()
            for chunk in answer.iter_content(CHECKSUM_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def open_read(self, path: str, start: int = 0) -> BinaryIO:
        try:
            stream = self.call(path, "open", lambda: self.client.open(parse(path).path, "rb"))
        except FileNotFoundError as e:
            raise FileSystemError(f"HDFS file {path} does not exist") from e
        if start:
            stream.seek(start)
        return cast(BinaryIO, stream)

    def open_write(self, path: str) -> WritableFile:
        return _HdfsFile(self, path)

    def renames_atomically(self, path: str) -> bool:
        return True

    def rename(self, src: str, dst: str) -> None:
        source, target = parse(src).path, parse(dst).path
        self.call(dst, "mkdirs", lambda: self.client.makedirs(os.path.dirname(target), exist_ok=True))
        answer = self.call(src, "rename", lambda: self.client._call("RENAME", method="put", path=source,
                                                                      destination=target, renameoptions="OVERWRITE"))
        # With rename options the NameNode runs rename2, which answers nothing or fails; plain rename answers a boolean.
        if answer.content and not answer.json().get("boolean", True):
            raise FileSystemError(f"HDFS refused to rename {src} to {dst} (does the source exist?)")

    def copy(self, src: str, dst: str) -> None:
        with self.open_read(src) as reader:
            writer = self.open_write(dst)
            try:
                while chunk := reader.read(1 << 20):
                    writer.write(chunk)
            except BaseException:
                writer.discard()
                raise
            writer.close()

    def delete(self, path: str) -> None:
        self.call(path, "delete", lambda: self.client._call("DELETE", method="delete", path=parse(path).path,
                                                              recursive="false"))

    def sync_folders(self, folders: Iterable[str]) -> None:
        """Nothing to do: the NameNode logs a rename durably before it answers."""

    def list_folders(self, path: str) -> list[str]:
        entries = self._list(path)
        return sorted(os.path.basename(str(e["name"]).rstrip("/")) for e in entries if e["type"] == "directory")

    def list_files(self, path: str) -> list[FileInfo]:
        root = parse(path).root
        found: list[FileInfo] = []
        folders = [parse(path).path]
        while folders:  # our own walk: fsspec's find() takes an unreachable NameNode for an empty folder
            for entry in self._list(root + folders.pop()):
                name = str(entry["name"])
                if entry["type"] == "directory":
                    folders.append(name)
                else:
                    found.append(FileInfo(root + name, int(str(entry["size"])),
                                          int(str(entry["modificationTime"])) * 1_000_000))
        return sorted(found, key=lambda f: f.path)

    def _list(self, path: str) -> list[dict[str, object]]:
        try:
            return self.call(path, "listing", lambda: self.client.ls(parse(path).path, detail=True))
        except FileNotFoundError:
            return []

    def remove_tree(self, path: str) -> None:
        self.call(path, "delete", lambda: self.client._call("DELETE", method="delete", path=parse(path).path,
                                                              recursive="true"))
