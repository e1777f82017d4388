"""``oncelog s3 up|down|status|build``: a local S3-compatible server (versitygw) that outlives the command.

A thin shell over :mod:`localservers.s3`, for developers who want an ``s3a://`` store without Docker
or AWS. ``up`` and ``status`` print only the endpoint URL on stdout, so scripts can capture it; ``up`` prints the
``export AWS_...`` lines that point AWS clients (boto3, the AWS CLI) at it on stderr.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from localservers import s3 as s3_local
from localservers.cli import ServerCommands, one_line_errors, server_app
from localservers.s3 import LocalS3


def _show(server: LocalS3) -> None:
    """The endpoint URL of a running server, on stdout."""
    typer.echo(server.endpoint_url)


SERVER = ServerCommands("s3", "S3 server", Path(".oncelog/s3"),
                        "Directory holding the buckets (data/), keys, pid and log (server.log).",
                        s3_local.down, s3_local.status, _show)
StateDir = Annotated[Path, SERVER.state_dir_option()]


def up(
    state_dir: StateDir = SERVER.state_dir,
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Port (default: the previous one, else a free one)."),
    ] = None,
    bucket: Annotated[
        list[str] | None,
        typer.Option("--bucket", help="A bucket to create if missing (repeatable)."),
    ] = None,
) -> None:
    """Start the server in the background (or find the running one) and print its endpoint URL."""
    with one_line_errors():
        for name in bucket or []:
            s3_local.check_bucket_name(name)
        started = s3_local.status(state_dir) is None
        server = s3_local.up(state_dir, port)
        try:
            for name in bucket or []:
                server.create_bucket(name)
        except BaseException:
            if started:  # a failed `up` leaves no server of its own behind
                s3_local.down(state_dir)
            raise
    _show(server)
    for key, value in server.env().items():
        typer.echo(f"export {key}={shlex.quote(value)}", err=True)


def build() -> None:
    """Build the server binary with `go install` into the cache (once) and print where it is."""
    with one_line_errors():
        path = s3_local.ensure_server()
    typer.echo(str(path))


app = server_app(SERVER, f"Run a local S3-compatible server (versitygw {s3_local.VERSITYGW_VERSION}, posix "
                         "backend), no Docker.", up, build)
