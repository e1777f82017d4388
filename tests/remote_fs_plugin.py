"""Pytest plugin: `remote`, a fresh folder on each remote file system in turn (real HDFS, real S3-compatible
server), with the Hadoop keys a job file needs to reach it (so that Spark's workers need no environment)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from localservers.hdfs import LocalHdfs
from localservers.s3 import LocalS3

REMOTE_STORES = ["hdfs", "s3"]


@dataclass(frozen=True)
class Remote:
    """A remote folder and the job keys that reach its store."""

    kind: str
    root: str
    settings: dict[str, str]


def hdfs_settings(hdfs: LocalHdfs) -> dict[str, str]:
    """What a job sets to reach the test HDFS over WebHDFS."""
    return {"dfs.namenode.http-address": hdfs.http_address}


def s3_settings(s3: LocalS3) -> dict[str, str]:
    """What a job sets to reach the test S3 server (Hadoop's s3a keys)."""
    return {"fs.s3a.endpoint": s3.endpoint_url, "fs.s3a.access.key": s3.access_key,
            "fs.s3a.secret.key": s3.secret_key, "fs.s3a.path.style.access": "true",
            "fs.s3a.endpoint.region": s3.region}


@pytest.fixture(params=REMOTE_STORES)
def remote(request: pytest.FixtureRequest) -> Remote:
    """A fresh folder on HDFS, then on S3."""
    if request.param == "hdfs":
        return Remote("hdfs", request.getfixturevalue("hdfs_folder"), hdfs_settings(request.getfixturevalue("hdfs")))
    return Remote("s3", request.getfixturevalue("s3_folder"), s3_settings(request.getfixturevalue("s3")))
