"""S3 and S3-compatible object stores through boto3: no rename, so a move is a copy, a check, then a delete.

Objects are written whole (one PUT, or a multipart upload completed at close), so a reader never sees part of
one; S3 reads are strongly consistent after a write. Each object is written and copied with a SHA-256 checksum
computed by the store over the bytes it received, which `checksum` reads back; an object without one (written
by another tool, or uploaded in parts) is read and hashed.

Settings (Hadoop's s3a keys, from the job or $HADOOP_CONF_DIR): `fs.s3a.endpoint`, `fs.s3a.endpoint.region`,
`fs.s3a.path.style.access`, `fs.s3a.access.key` / `fs.s3a.secret.key` / `fs.s3a.session.token`; what is not set
comes from AWS's usual places (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID…, ~/.aws profiles, instance roles).
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import IO, TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

from botocore.exceptions import BotoCoreError, ClientError

from filesystems.base import FileInfo, FileSystem, FileSystemError, WritableFile
from filesystems.settings import FileSystemSettings
from filesystems.urls import parse

if TYPE_CHECKING:
    import boto3

SPOOL_IN_MEMORY = 8 << 20
SINGLE_PUT_LIMIT = 256 << 20  # above this, a multipart upload (whose checksum is per part: read back to verify)
SINGLE_COPY_LIMIT = 5 << 30  # S3's limit for one CopyObject
MISSING = ("404", "NoSuchKey", "NotFound")
POOL_CONNECTIONS = 64  # above the commit's parallelism: a thread never waits for a connection, nor opens a new one
T = TypeVar("T")


def session_for(settings: FileSystemSettings) -> boto3.session.Session:
    """A boto3 session with the s3a keys' credentials and region, falling back to AWS's own configuration chain."""
    import boto3  # 0.1 s to import: every `oncelog` command loads this module, few of them reach S3

    return boto3.session.Session(
        aws_access_key_id=settings.get("fs.s3a.access.key"), aws_secret_access_key=settings.get("fs.s3a.secret.key"),
        aws_session_token=settings.get("fs.s3a.session.token"),
        region_name=settings.get("fs.s3a.endpoint.region"))


def endpoint_of(settings: FileSystemSettings) -> str | None:
    """The S3 endpoint URL `fs.s3a.endpoint` names (https:// when it gives no scheme); None: AWS's own."""
    endpoint = settings.get("fs.s3a.endpoint")
    return f"https://{endpoint}" if endpoint and "://" not in endpoint else endpoint


def client_for(settings: FileSystemSettings, probe_timeout_s: float | None = None) -> Any:
    """A boto3 S3 client from the s3a keys, falling back to AWS's own configuration chain; `probe_timeout_s`: one
    attempt per call, each connection and answer waited for that long at most (a pre-flight check)."""
    path_style = (settings.get("fs.s3a.path.style.access") or "").lower()
    endpoint = endpoint_of(settings)
    addressing = "path" if path_style == "true" or (endpoint and path_style != "false") else "auto"
    patience: dict[str, Any] = {"retries": {"max_attempts": 5, "mode": "standard"}} if probe_timeout_s is None else {
        "retries": {"total_max_attempts": 1}, "connect_timeout": probe_timeout_s, "read_timeout": probe_timeout_s}
    from botocore.config import Config

    config = Config(s3={"addressing_style": addressing}, max_pool_connections=POOL_CONNECTIONS,
                    request_checksum_calculation="when_required", response_checksum_validation="when_required",
                    **patience)
    return session_for(settings).client("s3", endpoint_url=endpoint, config=config)


def _split(path: str) -> tuple[str, str]:
    """(bucket, key) of an s3a:// or s3:// location."""
    location = parse(path)
    return location.authority, location.path.lstrip("/")


def _stored_sha256(head: dict[str, Any]) -> str | None:
    """The SHA-256 the store computed over the whole object (hex), if it keeps one (not per-part composites)."""
    stored = head.get("ChecksumSHA256")
    if not stored or "-" in stored or head.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
        return None
    return base64.b64decode(stored).hex()


class _S3File(WritableFile):
    """Spooled locally, then uploaded whole at close: the object appears complete or not at all."""

    def __init__(self, fs: S3FileSystem, path: str) -> None:
        self._fs = fs
        self.path = path
        self._spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)
        self._size = 0

    def write(self, data: bytes) -> int:
        self._size += len(data)
        return self._spool.write(data)

    def close(self) -> None:
        bucket, key = _split(self.path)
        self._spool.seek(0)
        body = cast(IO[bytes], self._spool)
        try:
            if self._size <= SINGLE_PUT_LIMIT:
                self._fs.call(self.path, "upload", lambda: self._fs.client.put_object(
                    Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm="SHA256"))
            else:
                self._fs.call(self.path, "upload", lambda: self._fs.client.upload_fileobj(body, bucket, key))
        finally:
            self._spool.close()

    def discard(self) -> None:
        self._spool.close()


class S3FileSystem(FileSystem):
    """Buckets of one S3 endpoint."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def call(self, path: str, action: str, do: Callable[[], T]) -> T:
        """Run a client call, mapping its failures to a FileSystemError naming the action and location."""
        try:
            return do()
        except ClientError as e:
            error = e.response.get("Error", {})
            if error.get("Code") == "NoSuchBucket":
                raise FileSystemError(f"S3 {action} of {path} failed: NoSuchBucket: the bucket {_split(path)[0]!r} "
                                      f"does not exist") from e
            raise FileSystemError(f"S3 {action} of {path} failed: {error.get('Code', '?')}: "
                                  f"{error.get('Message', e)}") from e
        except BotoCoreError as e:
            raise FileSystemError(f"S3 {action} of {path} failed: {e}") from e

    def _head(self, path: str) -> dict[str, Any] | None:
        bucket, key = _split(path)
        if not key:
            return None
        try:
            return cast(dict[str, Any], self.client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED"))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in MISSING:
                return None
            raise FileSystemError(f"S3 status of {path} failed: {e}") from e
        except BotoCoreError as e:
            raise FileSystemError(f"S3 status of {path} failed: {e}") from e

    def size(self, path: str) -> int | None:
        head = self._head(path)
        return int(head["ContentLength"]) if head is not None else None

    def checksum(self, path: str) -> str:
        head = self._head(path)
        return (_stored_sha256(head) if head else None) or super().checksum(path)

    def holds(self, path: str, size: int, checksum: str) -> bool:
        head = self._head(path)
        if head is None or int(head["ContentLength"]) != size:
            return False
        return (_stored_sha256(head) or super().checksum(path)) == checksum

    def open_read(self, path: str, start: int = 0) -> BinaryIO:
        bucket, key = _split(path)
        ranged = {"Range": f"bytes={start}-"} if start else {}
        answer = self.call(path, "read", lambda: self.client.get_object(Bucket=bucket, Key=key, **ranged))
        return cast(BinaryIO, answer["Body"])

    def open_write(self, path: str) -> WritableFile:
        return _S3File(self, path)

    def renames_atomically(self, path: str) -> bool:
        return False

    def rename(self, src: str, dst: str) -> None:
        raise FileSystemError(f"S3 has no rename ({src} → {dst}): move() copies, checks and deletes instead")

    def copy(self, src: str, dst: str) -> None:
        (src_bucket, src_key), (bucket, key) = _split(src), _split(dst)
        source = {"Bucket": src_bucket, "Key": src_key}
        size = self.size(src)
        if size is not None and size <= SINGLE_COPY_LIMIT:
            self.call(dst, "copy", lambda: self.client.copy_object(CopySource=source, Bucket=bucket, Key=key,
                                                                   ChecksumAlgorithm="SHA256"))
        else:
            self.call(dst, "copy", lambda: self.client.copy(source, bucket, key))

    def delete(self, path: str) -> None:
        bucket, key = _split(path)
        self.call(path, "delete", lambda: self.client.delete_object(Bucket=bucket, Key=key))

    def sync_folders(self, folders: Iterable[str]) -> None:
        """Nothing to do: an object is durable once its write or copy has answered."""

    def _pages(self, path: str, **kwargs: str) -> Iterator[dict[str, Any]]:
        bucket, key = _split(path)
        prefix = key.rstrip("/") + "/" if key else ""
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            yield from paginator.paginate(Bucket=bucket, Prefix=prefix, **kwargs)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "NoSuchBucket":
                return
            raise FileSystemError(f"S3 listing of {path} failed: {e}") from e
        except BotoCoreError as e:
            raise FileSystemError(f"S3 listing of {path} failed: {e}") from e

    def list_folders(self, path: str) -> list[str]:
        names = [p["Prefix"].rstrip("/").rpartition("/")[2] for page in self._pages(path, Delimiter="/")
                 for p in page.get("CommonPrefixes", [])]
        return sorted(names)

    def list_files(self, path: str) -> list[FileInfo]:
        bucket = _split(path)[0]
        root = parse(path).root
        found = [FileInfo(f"{root}/{o['Key']}", int(o["Size"]), int(o["LastModified"].timestamp() * 1e9))
                 for page in self._pages(path)
                 for o in page.get("Contents", []) if not o["Key"].endswith("/")]
        return sorted(found, key=lambda f: f.path) if bucket else []

    def remove_tree(self, path: str) -> None:
        bucket = _split(path)[0]
        keys = [{"Key": o["Key"]} for page in self._pages(path) for o in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            batch = keys[start:start + 1000]
            self.call(path, "delete", partial(self.client.delete_objects, Bucket=bucket,
                                              Delete={"Objects": batch, "Quiet": True}))
