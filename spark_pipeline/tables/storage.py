"""How the table libraries reach a warehouse's files: local disk, or an S3 bucket with the job's Hadoop keys (the s3a
endpoint and credentials, as `filesystems.s3` takes them). Arrow only: neither pyiceberg nor deltalake is loaded here.

The keys are secrets: a commit step's record holds none; the step is given them by the run (or `oncelog recover`)
from the job's file systems, and falls back to $HADOOP_CONF_DIR's and AWS's own configuration chain.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs

from filesystems.base import FileSystem
from filesystems.router import FileSystems
from filesystems.s3 import endpoint_of
from filesystems.settings import FileSystemSettings
from filesystems.urls import Scheme, parse
from spark_pipeline.tables.files import local

S3_SCHEMES = (Scheme.S3, Scheme.S3A)


@dataclass(frozen=True)
class TableStorage:
    """The Hadoop keys a table library's reads and commits use for a warehouse on S3 (none: local disk)."""

    settings: FileSystemSettings = field(default_factory=FileSystemSettings, repr=False)

    @classmethod
    def of(cls, fs: FileSystem) -> TableStorage:
        """The storage of a run's file systems (their job's keys), else $HADOOP_CONF_DIR's and AWS's own."""
        return cls(fs.settings if isinstance(fs, FileSystems) else FileSystemSettings.of({}))

    def delta_options(self, location: str) -> dict[str, str]:
        """delta-rs's storage options for a location: on S3, the endpoint, credentials, region and addressing the
        s3a keys set (any not set: AWS's environment, as delta-rs reads it); none for local disk."""
        if not is_s3(location):
            return {}
        endpoint = endpoint_of(self.settings)
        get = self.settings.get
        options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": get("fs.s3a.access.key"),
                   "AWS_SECRET_ACCESS_KEY": get("fs.s3a.secret.key"), "AWS_SESSION_TOKEN": get("fs.s3a.session.token"),
                   "AWS_REGION": get("fs.s3a.endpoint.region")}
        if endpoint is not None and endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
        if (get("fs.s3a.path.style.access") or "").lower() == "true" or endpoint is not None:
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        return {key: value for key, value in options.items() if value is not None}

    def arrow(self, path: str) -> tuple[pafs.FileSystem, str]:
        """Arrow's file system for a data file and its path there (`bucket/key` on S3)."""
        if not is_s3(path):
            return pafs.LocalFileSystem(), local(path)
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

    def exists(self, path: str) -> bool:
        """Whether a file or folder (on S3: any object under the prefix) exists."""
        if not is_s3(path):
            return Path(local(path)).exists()
        fs, where = self.arrow(path)
        return bool(fs.get_file_info(where).type != pafs.FileType.NotFound)


LOCAL_STORAGE = TableStorage()
"""Local disk (and S3 through AWS's own configuration chain alone)."""


def is_s3(location: str) -> bool:
    """Whether a location is in an S3 bucket (`s3a://`, `s3://`)."""
    return location.startswith(tuple(f"{s.value}://" for s in S3_SCHEMES))
