"""``oncelog hdfs up|down|status|jars``: a local single-node HDFS (NameNode + DataNode) that outlives the command.

A thin shell over :mod:`localservers.hdfs`, for developers who want ``hdfs://127.0.0.1:<port>``
without Docker. ``up`` and ``status`` print only the file system URL on stdout, so scripts can capture it; the
``HADOOP_CONF_DIR`` to export for Hadoop clients (Spark, WebHDFS) goes to stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from localservers import hdfs as hdfs_local
from localservers.cli import ServerCommands, one_line_errors, server_app
from localservers.hdfs import LocalHdfs


def _show(hdfs: LocalHdfs) -> None:
    """Print the URL on stdout and, on stderr, how Hadoop clients find the rest of the configuration."""
    typer.echo(hdfs.url)
    typer.echo(f"WebHDFS at {hdfs.webhdfs_url}; for Hadoop clients: export HADOOP_CONF_DIR={hdfs.conf_dir}", err=True)


SERVER = ServerCommands("hdfs", "HDFS", Path(".oncelog/hdfs"),
                        "Directory holding the HDFS data, conf/, pids and logs (namenode.log, datanode.log).",
                        hdfs_local.down, hdfs_local.status, _show)
StateDir = Annotated[Path, SERVER.state_dir_option()]


def up(
    state_dir: StateDir = SERVER.state_dir,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535,
                     help="NameNode RPC port (default: the previous one, else a free one)."),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option("--http-port", min=1, max=65535,
                     help="NameNode HTTP (WebHDFS) port (default: the previous one, else a free one)."),
    ] = None,
) -> None:
    """Start HDFS in the background (or find the running one) and print its URL."""
    with one_line_errors():
        hdfs = hdfs_local.up(state_dir, port, http_port)
    _show(hdfs)


def jars() -> None:
    """Resolve Hadoop's HDFS jars with Maven into the cache (once) and print where they are."""
    with one_line_errors():
        path = hdfs_local.ensure_jars()
    typer.echo(str(path))


app = server_app(SERVER, f"Run a local single-node Apache Hadoop {hdfs_local.HADOOP_VERSION} HDFS (NameNode + "
                         "DataNode) from its jars, no Docker.", up, jars)
