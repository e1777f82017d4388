"""``oncelog s3 up|down|status``: a local S3-compatible server (versitygw) that outlives the command.

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
from localservers.cli import one_line_errors, report_down, require_running, server_app

app = server_app("s3", f"Run a local S3-compatible server (versitygw {s3_local.VERSITYGW_VERSION}, posix backend), no Docker.")

StateDir = Annotated[
    Path,
    typer.Option("--state-dir", help="Directory holding the buckets (data/), keys, pid and log (server.log)."),
]



@app.command()
def up(
    state_dir: StateDir = Path(".oncelog/s3"),
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
        server = s3_local.up(state_dir, port)
        for name in bucket or []:
            server.create_bucket(name)
    typer.echo(server.endpoint_url)
    for key, value in server.env().items():
        typer.echo(f"export {key}={shlex.quote(value)}", err=True)


@app.command()
def build() -> None:
    """Build the server binary with `go install` into the cache (once) and print where it is."""
    with one_line_errors():
        path = s3_local.ensure_server()
    typer.echo(str(path))


@app.command()
def down(state_dir: StateDir = Path(".oncelog/s3")) -> None:
    """Stop the server that `up` started (its buckets stay in the state dir)."""
    with one_line_errors():
        stopped = s3_local.down(state_dir)
    report_down(stopped, "S3 server", state_dir)


@app.command()
def status(state_dir: StateDir = Path(".oncelog/s3")) -> None:
    """Print the running server's endpoint URL; exit code 1 if none runs in the state dir."""
    with one_line_errors():
        server = s3_local.status(state_dir)
    server = require_running(server, "S3 server", state_dir)
    typer.echo(server.endpoint_url)
