"""The local HDFS is real: WebHDFS and Spark's own Hadoop client write, read, rename and list; it survives crashes.

These tests also pin the WebHDFS behaviours the ``hdfs://`` backend relies on (redirects to the DataNode, rename
semantics, visibility on close), so an upgrade that changes one fails here first.
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from fsspec.implementations.webhdfs import WebHDFS
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from localservers import hdfs as hdfs_local
from localservers.errors import HdfsProvisioningError
from localservers.hdfs import HdfsDaemon, LocalHdfs
from localservers.hdfs_cli import app

pytestmark = pytest.mark.hdfs  # the server's own tests: each starts one of its own


def _webhdfs(server: LocalHdfs) -> WebHDFS:
    """fsspec's WebHDFS client for ``server`` (a fresh instance: fsspec caches them by arguments)."""
    return WebHDFS(host="127.0.0.1", port=server.ports.http, skip_instance_cache=True)


def _path(url: str) -> str:
    """The path part of an ``hdfs://`` URL."""
    return urllib.parse.urlsplit(url).path


def _api(server: LocalHdfs, path: str) -> str:
    """The WebHDFS REST URL of ``path`` on ``server``'s NameNode."""
    return f"http://{server.http_address}/webhdfs/v1{path}"


def _rename(server: LocalHdfs, src: str, dst: str, **params: str) -> requests.Response:
    """A raw WebHDFS RENAME (fsspec's ``mv`` drops its answer)."""
    return requests.put(_api(server, src), params={"op": "RENAME", "destination": dst, **params}, timeout=30)


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port some other process listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


def test_webhdfs_write_read_list_delete(hdfs: LocalHdfs, hdfs_folder: str) -> None:
    """A multi-chunk file written through fsspec's WebHDFS reads back byte for byte, lists, and deletes."""
    fs, folder = _webhdfs(hdfs), _path(hdfs_folder)
    data = bytes(range(256)) * 12_000  # ~3 MB, uploaded as three 1 MB APPENDs after an empty CREATE
    fs.makedirs(folder)
    with fs.open(f"{folder}/part-0.bin", "wb", block_size=1 << 20) as out:
        out.write(data)

    assert fs.cat_file(f"{folder}/part-0.bin") == data
    assert fs.ls(folder, detail=False) == [f"{folder}/part-0.bin"]
    info = fs.info(f"{folder}/part-0.bin")
    assert (info["type"], info["size"], info["replication"]) == ("file", len(data), 1)
    fs.rm(folder, recursive=True)
    assert not fs.exists(folder)


def test_create_redirects_to_the_loopback_datanode_and_is_visible_on_close(hdfs: LocalHdfs, hdfs_folder: str) -> None:
    """CREATE and OPEN answer 307 to the DataNode on 127.0.0.1; the file is complete once the DataNode answers 201."""
    path = f"{_path(hdfs_folder)}/created.txt"
    step1 = requests.put(_api(hdfs, path), params={"op": "CREATE"}, allow_redirects=False, timeout=30)
    assert step1.status_code == 307
    location = urllib.parse.urlsplit(step1.headers["Location"])
    assert (location.hostname, location.port) == ("127.0.0.1", hdfs.ports.datanode_http)

    step2 = requests.put(step1.headers["Location"], data=b"hello hdfs", timeout=30)
    assert step2.status_code == 201
    assert step2.headers["Location"] == f"{hdfs.url}{path}"

    status = requests.get(_api(hdfs, path), params={"op": "GETFILESTATUS"}, timeout=30).json()["FileStatus"]
    assert (status["type"], status["length"], status["replication"]) == ("FILE", 10, 1)
    assert status["pathSuffix"] == ""  # GETFILESTATUS names no path; LISTSTATUS fills pathSuffix
    opened = requests.get(_api(hdfs, path), params={"op": "OPEN"}, allow_redirects=False, timeout=30)
    assert opened.status_code == 307 and urllib.parse.urlsplit(opened.headers["Location"]).hostname == "127.0.0.1"
    assert requests.get(_api(hdfs, path), params={"op": "OPEN"}, timeout=30).content == b"hello hdfs"

    again = requests.put(_api(hdfs, path), params={"op": "CREATE", "overwrite": "false"}, timeout=30)
    assert again.status_code == 403 and again.json()["RemoteException"]["exception"] == "FileAlreadyExistsException"


def test_rename_never_overwrites_unless_asked(hdfs: LocalHdfs, hdfs_folder: str) -> None:
    """Plain RENAME onto an existing file answers false and changes nothing; renameoptions=OVERWRITE replaces it."""
    fs, folder = _webhdfs(hdfs), _path(hdfs_folder)
    src, dst = f"{folder}/src.txt", f"{folder}/dst.txt"
    fs.pipe_file(src, b"new")
    fs.pipe_file(dst, b"old")

    refused = _rename(hdfs, src, dst)
    assert refused.status_code == 200 and refused.json() == {"boolean": False}
    assert (fs.cat_file(src), fs.cat_file(dst)) == (b"new", b"old")
    fs.mv(src, dst)  # fsspec ignores the false answer: a backend must read it itself
    assert (fs.cat_file(src), fs.cat_file(dst)) == (b"new", b"old")
    assert _rename(hdfs, f"{folder}/missing", dst).json() == {"boolean": False}

    replaced = _rename(hdfs, src, dst, renameoptions="OVERWRITE")
    assert replaced.status_code == 200 and replaced.content == b""
    assert fs.cat_file(dst) == b"new" and not fs.exists(src)
    gone = _rename(hdfs, src, dst, renameoptions="OVERWRITE")
    assert gone.status_code == 404 and gone.json()["RemoteException"]["exception"] == "FileNotFoundException"

    fs.makedirs(f"{folder}/into")
    assert _rename(hdfs, dst, f"{folder}/into").json() == {"boolean": True}
    assert fs.ls(f"{folder}/into", detail=False) == [f"{folder}/into/dst.txt"]  # onto a folder: moved inside it


def test_namenode_sigkill_then_start_keeps_data(hdfs: LocalHdfs, hdfs_folder: str) -> None:
    """After a SIGKILL of the NameNode it restarts on the same ports with every closed file; writes work again."""
    fs, folder = _webhdfs(hdfs), _path(hdfs_folder)
    fs.pipe_file(f"{folder}/before.txt", b"acknowledged")
    _rename(hdfs, f"{folder}/before.txt", f"{folder}/renamed.txt")
    datanode_pid, url = hdfs.pid(HdfsDaemon.DATANODE), hdfs.url

    hdfs.kill(HdfsDaemon.NAMENODE)
    assert hdfs.pid(HdfsDaemon.NAMENODE) is None and not hdfs.is_running()
    hdfs.start()
    assert hdfs.url == url and hdfs.pid(HdfsDaemon.DATANODE) == datanode_pid
    fs = _webhdfs(hdfs)
    assert fs.ls(folder, detail=False) == [f"{folder}/renamed.txt"]
    assert fs.cat_file(f"{folder}/renamed.txt") == b"acknowledged"
    fs.pipe_file(f"{folder}/after.txt", b"later")
    assert fs.cat_file(f"{folder}/after.txt") == b"later"


@pytest.mark.spark
def test_spark_writes_and_reads_hdfs(hdfs: LocalHdfs, hdfs_folder: str, spark: SparkSession) -> None:
    """pyspark's own bundled Hadoop client writes Parquet to ``hdfs://`` and reads it back."""
    spark.range(10).write.parquet(f"{hdfs_folder}/range")
    assert spark.read.parquet(f"{hdfs_folder}/range").count() == 10
    assert _webhdfs(hdfs).exists(f"{_path(hdfs_folder)}/range/_SUCCESS")


def test_start_on_a_busy_port_fails_clearly(tmp_path: Path, busy_port: int) -> None:
    """A port held by another process is an HdfsProvisioningError naming the port; no daemon is left behind."""
    server = LocalHdfs(tmp_path / "hdfs", port=busy_port)
    with pytest.raises(HdfsProvisioningError, match=str(busy_port)):
        server.start()
    assert all(server.pid(daemon) is None for daemon in HdfsDaemon)


def test_namenode_exiting_at_start_up_reports_its_log(tmp_path: Path) -> None:
    """A NameNode dying during start-up (here: an unreadable name dir) raises naming its log; nothing stays up."""
    version = tmp_path / "hdfs" / "name" / "current" / "VERSION"
    version.parent.mkdir(parents=True)
    version.write_text("not a storage version file\n")
    server = LocalHdfs(tmp_path / "hdfs")
    with pytest.raises(HdfsProvisioningError, match="namenode .* exited during start-up") as raised:
        server.start()
    assert str(server.log_path(HdfsDaemon.NAMENODE)) in str(raised.value)
    assert all(server.pid(daemon) is None for daemon in HdfsDaemon)


def test_cli_up_status_down_detached(tmp_path: Path) -> None:
    """``up`` prints the hdfs:// URL (and HADOOP_CONF_DIR on stderr) once; ``status`` finds it; ``down`` stops it."""
    runner, state = CliRunner(), tmp_path / "state"
    assert runner.invoke(app, ["status", "--state-dir", str(state)]).exit_code == 1
    try:
        started = runner.invoke(app, ["up", "--state-dir", str(state)])
        assert started.exit_code == 0, started.output
        url = started.stdout.strip()
        assert url.startswith("hdfs://127.0.0.1:") and "\n" not in url
        assert f"export HADOOP_CONF_DIR={state.resolve() / 'conf'}" in started.stderr
        server = hdfs_local.status(state)
        assert server is not None and server.url == url
        assert f"<value>{url}</value>" in (server.conf_dir / "core-site.xml").read_text()
        pids = [server.pid(daemon) for daemon in HdfsDaemon]
        again = runner.invoke(app, ["up", "--state-dir", str(state)])
        assert again.stdout.strip() == url and [server.pid(daemon) for daemon in HdfsDaemon] == pids
        status = runner.invoke(app, ["status", "--state-dir", str(state)])
        assert status.exit_code == 0 and status.stdout.strip() == url
        _webhdfs(server).pipe_file("/detached.txt", b"outlives the command")
    finally:
        stopped = runner.invoke(app, ["down", "--state-dir", str(state)])
    assert stopped.exit_code == 0, stopped.output
    assert runner.invoke(app, ["status", "--state-dir", str(state)]).exit_code == 1
    assert hdfs_local.down(state) is False
