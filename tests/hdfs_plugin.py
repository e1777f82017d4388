"""Pytest plugin giving tests a real HDFS (NameNode + DataNode from Hadoop's jars): ``hdfs`` and ``hdfs_folder``.

``hdfs`` is one :class:`~localservers.hdfs.LocalHdfs` shared by the session, with ``HADOOP_CONF_DIR``
pointing at its configuration while it runs. When it cannot start, tests skip with the reason, except under
``CI=true`` where they fail: CI must never go green by silently skipping the HDFS suite.
Enable with ``pytest_plugins = ["tests.hdfs_plugin"]``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from localservers.errors import HdfsProvisioningError
from localservers.hdfs import LocalHdfs
from tests.unavailable import unavailable


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHdfs]:
    """A started local HDFS shared by the whole session; ``HADOOP_CONF_DIR`` names its conf dir meanwhile."""
    server = LocalHdfs(tmp_path_factory.mktemp("hdfs"))
    try:
        server.start()
    except HdfsProvisioningError as e:
        unavailable("HDFS", f"the local HDFS did not start: {e}")
    previous = os.environ.get("HADOOP_CONF_DIR")
    os.environ["HADOOP_CONF_DIR"] = str(server.conf_dir)
    try:
        yield server
    finally:
        if previous is None:
            os.environ.pop("HADOOP_CONF_DIR", None)
        else:
            os.environ["HADOOP_CONF_DIR"] = previous
        server.stop()


@pytest.fixture
def hdfs_folder(hdfs: LocalHdfs) -> str:
    """A fresh, not yet existing folder URL on the session's HDFS: ``hdfs://127.0.0.1:<port>/test-<uuid>``."""
    return f"{hdfs.url}/test-{uuid.uuid4().hex}"
