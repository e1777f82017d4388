"""``oncelog hdfs up|down|status|jars``: a local single-node HDFS (NameNode + DataNode) that outlives the command.

A thin shell over :mod:`filesystems.servers.hdfs_local`, for developers who want ``hdfs://127.0.0.1:<port>``
without Docker. ``up`` and ``status`` print only the file system URL on stdout, so scripts can capture it; the
``HADOOP_CONF_DIR`` to export for Hadoop clients (Spark, WebHDFS) goes to stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from filesystems.servers import hdfs_local
from filesystems.servers.hdfs_local import HdfsProvisioningError, LocalHdfs

app = typer.Typer(
    name="hdfs",
    help=f"Run a local single-node Apache Hadoop {hdfs_local.HADOOP_VERSION} HDFS (NameNode + DataNode) from its "
         "jars, no Docker.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help, as the oncelog command's (docs/cli.md)
    context_settings={"help_option_names": ["-h", "--help"]},
)

StateDir = Annotated[
    Path,
    typer.Option("--state-dir", help="Directory holding the HDFS data, conf/, pids and logs (namenode.log, "
                                     "datanode.log)."),
]


def _fail(error: HdfsProvisioningError) -> typer.Exit:
    """Print the error's first line (it names the log to read for details) and return exit code 1."""
    first_line = (str(error).strip().splitlines() or ["unknown error"])[0]
    typer.echo(f"error: {first_line}", err=True)
    return typer.Exit(code=1)


def _describe(hdfs: LocalHdfs) -> None:
    """Print the URL on stdout and, on stderr, how Hadoop clients find the rest of the configuration."""
    typer.echo(hdfs.url)
    typer.echo(f"WebHDFS at {hdfs.webhdfs_url}; for Hadoop clients: export HADOOP_CONF_DIR={hdfs.conf_dir}", err=True)


@app.command()
def up(
    state_dir: StateDir = Path(".oncelog/hdfs"),
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
    try:
        hdfs = hdfs_local.up(state_dir, port, http_port)
    except HdfsProvisioningError as e:
        raise _fail(e) from e
    _describe(hdfs)


@app.command()
def jars() -> None:
    """Resolve Hadoop's HDFS jars with Maven into the cache (once) and print where they are."""
    try:
        path = hdfs_local.ensure_jars()
    except HdfsProvisioningError as e:
        raise _fail(e) from e
    typer.echo(str(path))


@app.command()
def down(state_dir: StateDir = Path(".oncelog/hdfs")) -> None:
    """Stop the HDFS that `up` started (its data stays in the state dir)."""
    try:
        stopped = hdfs_local.down(state_dir)
    except HdfsProvisioningError as e:
        raise _fail(e) from e
    typer.echo(f"stopped the HDFS in {state_dir}" if stopped else f"no HDFS running in {state_dir}", err=True)


@app.command()
def status(state_dir: StateDir = Path(".oncelog/hdfs")) -> None:
    """Print the running HDFS's URL; exit code 1 if none runs in the state dir."""
    try:
        hdfs = hdfs_local.status(state_dir)
    except HdfsProvisioningError as e:
        raise _fail(e) from e
    if hdfs is None:
        typer.echo(f"no HDFS running in {state_dir}", err=True)
        raise typer.Exit(code=1)
    _describe(hdfs)
