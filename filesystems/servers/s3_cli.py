"""``oncelog s3 up|down|status``: a local S3-compatible server (versitygw) that outlives the command.

A thin shell over :mod:`filesystems.servers.s3_local`, for developers who want an ``s3a://`` store without Docker
or AWS. ``up`` and ``status`` print only the endpoint URL on stdout, so scripts can capture it; ``up`` prints the
``export AWS_...`` lines that point AWS clients (boto3, the AWS CLI) at it on stderr.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from filesystems.servers import s3_local
from filesystems.servers.s3_local import S3ProvisioningError

app = typer.Typer(
    name="s3",
    help=f"Run a local S3-compatible server (versitygw {s3_local.VERSITYGW_VERSION}, posix backend), no Docker.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help, as the oncelog command's (docs/cli.md)
    context_settings={"help_option_names": ["-h", "--help"]},
)

StateDir = Annotated[
    Path,
    typer.Option("--state-dir", help="Directory holding the buckets (data/), keys, pid and log (server.log)."),
]


def _fail(error: S3ProvisioningError) -> typer.Exit:
    """Print the error's first line (it names the log to read for details) and return exit code 1."""
    first_line = (str(error).strip().splitlines() or ["unknown error"])[0]
    typer.echo(f"error: {first_line}", err=True)
    return typer.Exit(code=1)


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
    try:
        server = s3_local.up(state_dir, port)
        for name in bucket or []:
            server.create_bucket(name)
    except S3ProvisioningError as e:
        raise _fail(e) from e
    typer.echo(server.endpoint_url)
    for key, value in server.env().items():
        typer.echo(f"export {key}={shlex.quote(value)}", err=True)


@app.command()
def build() -> None:
    """Build the server binary with `go install` into the cache (once) and print where it is."""
    try:
        path = s3_local.ensure_server()
    except S3ProvisioningError as e:
        raise _fail(e) from e
    typer.echo(str(path))


@app.command()
def down(state_dir: StateDir = Path(".oncelog/s3")) -> None:
    """Stop the server that `up` started (its buckets stay in the state dir)."""
    try:
        stopped = s3_local.down(state_dir)
    except S3ProvisioningError as e:
        raise _fail(e) from e
    typer.echo(f"stopped the S3 server in {state_dir}" if stopped else f"no S3 server running in {state_dir}",
               err=True)


@app.command()
def status(state_dir: StateDir = Path(".oncelog/s3")) -> None:
    """Print the running server's endpoint URL; exit code 1 if none runs in the state dir."""
    try:
        server = s3_local.status(state_dir)
    except S3ProvisioningError as e:
        raise _fail(e) from e
    if server is None:
        typer.echo(f"no S3 server running in {state_dir}", err=True)
        raise typer.Exit(code=1)
    typer.echo(server.endpoint_url)
