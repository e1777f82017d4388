"""Pytest plugin giving tests a real S3-compatible server: ``s3`` (shared), ``s3_folder`` and ``restartable_s3``.

``s3`` runs :class:`~localservers.s3.LocalS3` (versitygw, built once with ``go install`` into the
cache) for the whole session and points AWS clients at it through the ``AWS_*`` environment variables, restored
afterwards. When it cannot start, tests skip with the reason, except under ``CI=true`` where they fail: CI must
never go green by silently skipping the S3 suite. Enable with ``pytest_plugins = ["tests.s3_plugin"]``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from localservers.errors import S3ProvisioningError
from localservers.s3 import LocalS3
from tests.unavailable import unavailable

TEST_BUCKET = "oncelog-test"



def _started(server: LocalS3) -> LocalS3:
    """The server, started; else unavailable (skip, or fail under CI) with the reason."""
    reason = ""
    try:
        server.start()
    except S3ProvisioningError as e:
        reason = str(e)
    if reason:  # outside the except: the skip or failure is not "during handling of" the error
        unavailable("S3 server", reason)
    return server


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    """A started local S3 server shared by the session, with ``AWS_*`` set to reach it (restored afterwards)."""
    server = _started(LocalS3(tmp_path_factory.mktemp("s3")))
    try:
        with pytest.MonkeyPatch.context() as patch:
            for key, value in server.env().items():
                patch.setenv(key, value)
            yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_bucket(s3: LocalS3) -> str:
    """The session's test bucket, created once."""
    reason = ""
    try:
        s3.create_bucket(TEST_BUCKET)
    except S3ProvisioningError as e:
        reason = str(e)
    if reason:
        unavailable("S3 server", reason)
    return TEST_BUCKET


@pytest.fixture
def s3_folder(s3_bucket: str) -> str:
    """A fresh, empty folder of the test's own: ``s3a://<bucket>/test-<uuid>``."""
    return f"s3a://{s3_bucket}/test-{uuid.uuid4().hex}"


@pytest.fixture
def restartable_s3(tmp_path: Path) -> Iterator[LocalS3]:
    """A started server of the test's own (own dir, port and keys) that it may stop, kill and restart; stopped after."""
    server = _started(LocalS3(tmp_path / "s3"))
    try:
        yield server
    finally:
        server.stop()
