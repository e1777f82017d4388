"""Pre-flight probes of a folder: whether its store answers (short timeouts, one attempt), takes our credentials, has
the bucket, and (for an input) holds the folder. Each says why a folder cannot be used, or None; nothing is written.

A probe asks what a run's first call would ask, only sooner and without waiting out retries: a NameNode or S3
endpoint that refuses connections, S3 without credentials or without the bucket, a local folder that is missing
or cannot be written under.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests
from botocore.exceptions import BotoCoreError, ClientError

from filesystems.s3 import MISSING, client_for, endpoint_of, session_for
from filesystems.settings import FileSystemSettings
from filesystems.urls import Location, Scheme, parse
from filesystems.webhdfs import http_address

PROBE_TIMEOUT_S = 3.0
"""How long a probe waits for a connection or an answer (a store that refuses connections answers at once)."""
S3_CREDENTIAL_KEYS = "fs.s3a.access.key and fs.s3a.secret.key (in the job or $HADOOP_CONF_DIR/core-site.xml)"


class Use(StrEnum):
    """What a job does with a folder: reads what is in it (it must exist), or writes into it (it may not yet)."""

    READ = "read"
    WRITE = "write"


@dataclass(frozen=True)
class Probe:
    """Probes folders of every store a job names, with the job's file-system settings."""

    settings: FileSystemSettings
    timeout_s: float = PROBE_TIMEOUT_S

    def problem(self, folder: str, use: Use) -> str | None:
        """Why `folder` cannot be used so (unreachable, refused, no bucket, no folder); None when it can."""
        try:
            location = parse(folder)
        except ValueError as e:
            return str(e)
        if location.scheme is Scheme.FILE:
            return local_problem(Path(location.path), use)
        if location.scheme in (Scheme.S3, Scheme.S3A):
            return self._s3(location, use)
        return self._hdfs(location, use)

    def _hdfs(self, location: Location, use: Use) -> str | None:
        """The NameNode's WebHDFS answer about the folder (GETFILESTATUS)."""
        address = http_address(location, self.settings)
        user = self.settings.get("hadoop.user.name") or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        url = f"http://{address}/webhdfs/v1{quote(location.path, safe='/=')}"
        try:
            with requests.Session() as session:
                session.trust_env = False
                answer = session.get(url, params={"op": "GETFILESTATUS", "user.name": user},
                                     timeout=self.timeout_s)
        except requests.RequestException as e:
            return (f"no HDFS NameNode answers WebHDFS at http://{address} within {self.timeout_s:.0f}s (set "
                    f"dfs.namenode.http-address in the job or in $HADOOP_CONF_DIR/hdfs-site.xml): "
                    f"{type(e).__name__}")
        if answer.status_code == 404:
            return f"no such folder on HDFS (NameNode http://{address})" if use is Use.READ else None
        if answer.status_code != 200:
            return (f"the HDFS NameNode at http://{address} answered HTTP {answer.status_code}: "
                    f"{_remote_message(answer)}")
        kind = answer.json().get("FileStatus", {}).get("type")
        return "a file, not a folder" if kind == "FILE" else None

    def _s3(self, location: Location, use: Use) -> str | None:
        """Credentials first (AWS's chain included), then the bucket, then (to read) an object under the folder."""
        if session_for(self.settings).get_credentials() is None:
            return f"no S3 credentials: set {S3_CREDENTIAL_KEYS}, or AWS's own (AWS_ACCESS_KEY_ID…, a profile)"
        endpoint = endpoint_of(self.settings) or os.environ.get("AWS_ENDPOINT_URL") or "AWS's endpoint"
        client = client_for(self.settings, probe_timeout_s=self.timeout_s)
        bucket, prefix = location.authority, location.path.strip("/")
        try:
            client.head_bucket(Bucket=bucket)
            if use is Use.READ:
                listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/" if prefix else "", MaxKeys=1)
                if not listed.get("KeyCount"):
                    return f"no such folder: no object under it in bucket {bucket!r} ({endpoint})"
        except ClientError as e:
            return _s3_refusal(e, bucket, endpoint)
        except BotoCoreError as e:
            return f"no S3 endpoint answers at {endpoint} within {self.timeout_s:.0f}s (fs.s3a.endpoint): {e}"
        return None


def local_problem(folder: Path, use: Use) -> str | None:
    """A local folder to read must be one; one to write is created under its nearest existing folder if missing,
    which must be a folder we may write in."""
    if use is Use.READ:
        if folder.is_dir():
            return None
        return "a file, not a folder" if folder.exists() else "no such folder"
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def _s3_refusal(error: ClientError, bucket: str, endpoint: str) -> str:
    """What an S3 error answer means for the job: no bucket, refused credentials, or the store's own words."""
    answer: dict[str, Any] = error.response.get("Error", {})
    code = str(answer.get("Code", "?"))
    if code in (*MISSING, "NoSuchBucket"):
        return f"bucket {bucket!r} does not exist ({endpoint})"
    if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return f"S3 refused access to bucket {bucket!r} ({endpoint}): {code}; check {S3_CREDENTIAL_KEYS}"
    return f"S3 answered {code} for bucket {bucket!r} ({endpoint}): {answer.get('Message', error)}"


def _remote_message(answer: requests.Response) -> str:
    """The message of a WebHDFS error answer (its RemoteException), else the start of its body."""
    try:
        return str(answer.json()["RemoteException"]["message"])
    except (ValueError, KeyError, TypeError):
        return answer.text[:200]
