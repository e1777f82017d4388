"""The local S3 server is real: it signs, stores on disk, copies server-side, uploads in parts, keeps checksums."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from localservers import s3 as s3_local
from localservers.errors import S3ProvisioningError
from localservers.s3 import LocalS3
from localservers.s3_cli import app

pytestmark = pytest.mark.s3  # the server's own tests: each starts one of its own

MIB = 1 << 20


@pytest.fixture
def bucket(s3: LocalS3) -> str:
    """A fresh bucket of the test's own on the shared server."""
    name = f"t-{uuid.uuid4().hex[:20]}"
    s3.create_bucket(name)
    return name


@pytest.fixture
def client(s3: LocalS3) -> Any:
    """A boto3 client configured only by the environment the ``s3`` fixture set (as the project's code will be)."""
    return boto3.client("s3")


def _error_code(error: ClientError) -> str:
    """The S3 error code of a failed call (``NoSuchKey``, ``404``, ``AccessDenied``…)."""
    return str(error.response.get("Error", {}).get("Code"))


def _sha256_b64(data: bytes) -> str:
    """SHA-256 as S3 reports it: base64 of the digest."""
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_put_get_head_report_size_md5_etag_and_user_metadata(client: Any, bucket: str) -> None:
    data = os.urandom(1000)
    put = client.put_object(Bucket=bucket, Key="dir/a.bin", Body=data, Metadata={"run-id": "r1", "n": "7"})
    head = client.head_object(Bucket=bucket, Key="dir/a.bin")
    assert put["ETag"] == head["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert head["ContentLength"] == 1000
    assert head["Metadata"] == {"run-id": "r1", "n": "7"}
    assert client.get_object(Bucket=bucket, Key="dir/a.bin")["Body"].read() == data
    with pytest.raises(ClientError) as missing:
        client.head_object(Bucket=bucket, Key="dir/absent")
    assert _error_code(missing.value) == "404"


def test_copy_is_server_side_keeps_or_replaces_metadata_and_keeps_the_etag(client: Any, bucket: str) -> None:
    data = b"payload " * 100
    source = {"Bucket": bucket, "Key": "src"}
    client.put_object(Bucket=bucket, Key="src", Body=data, Metadata={"origin": "writer"})
    kept = client.copy_object(Bucket=bucket, Key="kept", CopySource=source)
    replaced = client.copy_object(Bucket=bucket, Key="replaced", CopySource=source, MetadataDirective="REPLACE",
                                  Metadata={"origin": "publisher"})
    etag = f'"{hashlib.md5(data).hexdigest()}"'
    assert kept["CopyObjectResult"]["ETag"] == replaced["CopyObjectResult"]["ETag"] == etag
    assert client.head_object(Bucket=bucket, Key="kept")["Metadata"] == {"origin": "writer"}
    assert client.head_object(Bucket=bucket, Key="replaced")["Metadata"] == {"origin": "publisher"}
    assert client.get_object(Bucket=bucket, Key="kept")["Body"].read() == data


def test_list_objects_v2_with_prefix_and_delimiter(client: Any, bucket: str) -> None:
    for key in ("out/a/1", "out/a/2", "out/b/1", "out/top", "other/x"):
        client.put_object(Bucket=bucket, Key=key, Body=key.encode())
    listed = client.list_objects_v2(Bucket=bucket, Prefix="out/", Delimiter="/")
    assert [item["Key"] for item in listed.get("Contents", [])] == ["out/top"]
    assert [item["Prefix"] for item in listed["CommonPrefixes"]] == ["out/a/", "out/b/"]
    deep = client.list_objects_v2(Bucket=bucket, Prefix="out/a/")
    assert [(item["Key"], item["Size"]) for item in deep["Contents"]] == [("out/a/1", 7), ("out/a/2", 7)]
    paged = client.list_objects_v2(Bucket=bucket, MaxKeys=2)
    assert paged["IsTruncated"] and len(paged["Contents"]) == 2
    rest = client.list_objects_v2(Bucket=bucket, ContinuationToken=paged["NextContinuationToken"])
    assert len(rest["Contents"]) == 3 and not rest["IsTruncated"]


def test_delete_object_and_delete_objects(client: Any, bucket: str) -> None:
    for key in ("a", "b", "c"):
        client.put_object(Bucket=bucket, Key=key, Body=b"x")
    client.delete_object(Bucket=bucket, Key="a")
    deleted = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "b"}, {"Key": "c"}]})
    assert sorted(item["Key"] for item in deleted["Deleted"]) == ["b", "c"] and not deleted.get("Errors")
    assert client.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    with pytest.raises(ClientError) as gone:
        client.get_object(Bucket=bucket, Key="a")
    assert _error_code(gone.value) == "NoSuchKey"


def test_multipart_upload_of_11_mib_assembles_the_parts(client: Any, bucket: str) -> None:
    data = os.urandom(11 * MIB)
    upload = client.create_multipart_upload(Bucket=bucket, Key="big", Metadata={"parts": "3"})
    parts = []
    for number, offset in enumerate(range(0, len(data), 5 * MIB), start=1):
        part = client.upload_part(Bucket=bucket, Key="big", UploadId=upload["UploadId"], PartNumber=number,
                                  Body=data[offset:offset + 5 * MIB])
        parts.append({"ETag": part["ETag"], "PartNumber": number})
    done = client.complete_multipart_upload(Bucket=bucket, Key="big", UploadId=upload["UploadId"],
                                            MultipartUpload={"Parts": parts})
    part_md5s = b"".join(hashlib.md5(data[o:o + 5 * MIB]).digest() for o in range(0, len(data), 5 * MIB))
    assert done["ETag"] == f'"{hashlib.md5(part_md5s).hexdigest()}-3"'  # S3's multipart ETag
    head = client.head_object(Bucket=bucket, Key="big")
    assert (head["ContentLength"], head["Metadata"]) == (11 * MIB, {"parts": "3"})
    assert client.get_object(Bucket=bucket, Key="big")["Body"].read() == data
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    copy = client.copy_object(Bucket=bucket, Key="big-copy", CopySource={"Bucket": bucket, "Key": "big"},
                              ChecksumAlgorithm="SHA256")  # a server-side copy hashes the whole object
    assert copy["CopyObjectResult"]["ChecksumSHA256"] == _sha256_b64(data)


def test_sha256_additional_checksums_on_put_copy_and_head(client: Any, bucket: str) -> None:
    data = os.urandom(4096)
    put = client.put_object(Bucket=bucket, Key="sum", Body=data, ChecksumAlgorithm="SHA256")
    assert put["ChecksumSHA256"] == _sha256_b64(data)
    copy = client.copy_object(Bucket=bucket, Key="sum-copy", CopySource={"Bucket": bucket, "Key": "sum"},
                              ChecksumAlgorithm="SHA256")
    assert copy["CopyObjectResult"]["ChecksumSHA256"] == _sha256_b64(data)
    for key in ("sum", "sum-copy"):
        head = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert (head["ChecksumSHA256"], head.get("ChecksumType")) == (_sha256_b64(data), "FULL_OBJECT")
    with pytest.raises(ClientError) as corrupt:  # the server checks the checksum it is sent
        client.put_object(Bucket=bucket, Key="bad", Body=data, ChecksumSHA256=_sha256_b64(b"other bytes"))
    assert _error_code(corrupt.value) == "BadDigest"


def test_requests_signed_with_a_wrong_secret_are_refused(s3: LocalS3, bucket: str) -> None:
    impostor = boto3.client("s3", endpoint_url=s3.endpoint_url, region_name=s3.region,
                            aws_access_key_id=s3.access_key, aws_secret_access_key="not-the-secret")
    with pytest.raises(ClientError) as refused:
        impostor.list_objects_v2(Bucket=bucket)
    assert _error_code(refused.value) == "SignatureDoesNotMatch"


def test_objects_are_files_on_disk_and_survive_sigkill_and_restart(restartable_s3: LocalS3) -> None:
    server = restartable_s3
    client = server.client()
    server.create_bucket("durable")
    data = os.urandom(2 * MIB)
    client.put_object(Bucket="durable", Key="dir/obj", Body=data, Metadata={"k": "v"}, ChecksumAlgorithm="SHA256")
    assert (server.data_dir / "durable" / "dir" / "obj").read_bytes() == data
    port, keys, pid = server.port, (server.access_key, server.secret_key), server.pid()
    server.kill()
    assert not server.is_running() and pid is not None and not Path(f"/proc/{pid}").exists()
    again = LocalS3(server.work_dir)  # a new owner finds the recorded port and keys
    again.start()
    try:
        assert (again.port, (again.access_key, again.secret_key)) == (port, keys)
        head = again.client().head_object(Bucket="durable", Key="dir/obj", ChecksumMode="ENABLED")
        assert (head["Metadata"], head["ChecksumSHA256"]) == ({"k": "v"}, _sha256_b64(data))
        again.restart()
        assert again.client().get_object(Bucket="durable", Key="dir/obj")["Body"].read() == data
    finally:
        again.stop()


@pytest.mark.skipif(shutil.which("go") is None, reason="needs `go` to try a build")
def test_a_failed_build_names_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOPROXY", "off")  # nothing can be downloaded into the empty module cache
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    log = tmp_path / "cache" / f"versitygw-{s3_local.VERSITYGW_VERSION}" / "build.log"
    with pytest.raises(S3ProvisioningError, match=re.escape("failed (exit 1) to make versitygw") + ".*" +
                       re.escape(f"full output in {log}")):
        s3_local.ensure_server(tmp_path / "cache")
    assert "GOPROXY=off" in log.read_text()
    assert not (log.parent / "bin").exists()  # nothing half-built is left where a later run would take it


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port some other process listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_busy_port_is_an_error_naming_it(tmp_path: Path, busy_port: int) -> None:
    with pytest.raises(S3ProvisioningError, match=f"port {busy_port} on 127.0.0.1 is already in use"):
        LocalS3(tmp_path / "s3", port=busy_port).start()


def test_cli_up_status_down(tmp_path: Path, s3: LocalS3) -> None:
    runner, state_dir = CliRunner(), str(tmp_path / "state")
    try:
        started = runner.invoke(app, ["up", "--state-dir", state_dir, "--bucket", "cli-bucket"])
        assert started.exit_code == 0, started.output
        endpoint = started.stdout.strip()
        assert endpoint.startswith("http://127.0.0.1:")
        assert f"export AWS_ENDPOINT_URL={endpoint}" in started.stderr
        assert "export AWS_SECRET_ACCESS_KEY=" in started.stderr
        assert runner.invoke(app, ["up", "--state-dir", state_dir]).stdout.strip() == endpoint  # idempotent
        assert runner.invoke(app, ["status", "--state-dir", state_dir]).stdout.strip() == endpoint
        server = s3_local.status(Path(state_dir))
        assert server is not None
        assert [b["Name"] for b in server.client().list_buckets()["Buckets"]] == ["cli-bucket"]
    finally:
        stopped = runner.invoke(app, ["down", "--state-dir", state_dir])
    assert stopped.exit_code == 0 and "stopped" in stopped.stderr
    gone = runner.invoke(app, ["status", "--state-dir", state_dir])
    assert gone.exit_code == 1 and "no S3 server running" in gone.stderr
