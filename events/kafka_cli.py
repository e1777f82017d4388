"""``oncelog kafka up|down|status``: a local single-node Apache Kafka broker that outlives the command.

A thin shell over :mod:`events.kafka_local`, for developers who want ``kafka://127.0.0.1:<port>`` without
Docker. ``up`` and ``status`` print only the store URL on stdout, so scripts can capture it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from events import kafka_local
from events.errors import KafkaProvisioningError

app = typer.Typer(
    name="kafka",
    help=f"Run a local single-node Apache Kafka {kafka_local.KAFKA_VERSION} broker (KRaft) from its jars, no Docker.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help, as the oncelog command's (docs/cli.md)
    context_settings={"help_option_names": ["-h", "--help"]},
)

StateDir = Annotated[
    Path,
    typer.Option("--state-dir", help="Directory holding the broker's data, config, pid and log (broker.log)."),
]


def _fail(error: KafkaProvisioningError) -> typer.Exit:
    """Print the error's first line (it names the log to read for details) and return exit code 1."""
    first_line = (str(error).strip().splitlines() or ["unknown error"])[0]
    typer.echo(f"error: {first_line}", err=True)
    return typer.Exit(code=1)


@app.command()
def up(
    state_dir: StateDir = Path(".oncelog/kafka"),
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Client port (default: the previous one, else a free one)."),
    ] = None,
) -> None:
    """Start the broker in the background (or find the running one) and print its URL."""
    try:
        bootstrap = kafka_local.up(state_dir, port)
    except KafkaProvisioningError as e:
        raise _fail(e) from e
    typer.echo(f"kafka://{bootstrap}")


@app.command()
def jars() -> None:
    """Resolve the broker's jars with Maven into the cache (once) and print where they are."""
    try:
        path = kafka_local.ensure_jars()
    except KafkaProvisioningError as e:
        raise _fail(e) from e
    typer.echo(str(path))


@app.command()
def down(state_dir: StateDir = Path(".oncelog/kafka")) -> None:
    """Stop the broker that `up` started (its data stays in the state dir)."""
    try:
        stopped = kafka_local.down(state_dir)
    except KafkaProvisioningError as e:
        raise _fail(e) from e
    typer.echo(f"stopped the broker in {state_dir}" if stopped else f"no broker running in {state_dir}", err=True)


@app.command()
def status(state_dir: StateDir = Path(".oncelog/kafka")) -> None:
    """Print the running broker's URL; exit code 1 if none runs in the state dir."""
    try:
        bootstrap = kafka_local.status(state_dir)
    except KafkaProvisioningError as e:
        raise _fail(e) from e
    if bootstrap is None:
        typer.echo(f"no broker running in {state_dir}", err=True)
        raise typer.Exit(code=1)
    typer.echo(f"kafka://{bootstrap}")
