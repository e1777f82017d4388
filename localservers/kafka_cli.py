"""``oncelog kafka up|down|status``: a local Apache Kafka broker (or ``--nodes 3`` cluster) that outlives the command.

A thin shell over :mod:`localservers.kafka`, for developers who want ``kafka://127.0.0.1:<port>`` without
Docker. ``up`` and ``status`` print only the store URL on stdout, so scripts can capture it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from localservers import kafka as kafka_local
from localservers.cli import one_line_errors, report_down, require_running, server_app

app = server_app("kafka", f"Run a local Apache Kafka broker or cluster (KRaft; {kafka_local.KAFKA_VERSION} by default, "
                          f"{kafka_local.KAFKA4_VERSION} on request) from its jars, no Docker.")

StateDir = Annotated[
    Path,
    typer.Option("--state-dir", help="Directory holding the broker's data, config, pid and log (broker.log); "
                                     "a cluster's nodes live in node-<id>/ under it."),
]
KafkaVersion = Annotated[
    str,
    typer.Option("--kafka-version", help=f"Apache Kafka version to run (supported lines: 3.x, 4.x; tested: "
                                         f"{', '.join(kafka_local.SUPPORTED_KAFKA_VERSIONS)})."),
]


@app.command()
def up(
    state_dir: StateDir = Path(".oncelog/kafka"),
    port: Annotated[
        int | None,
        typer.Option("--port", min=1, max=65535, help="Client port (default: the previous one, else a free one); "
                                                       "single broker only."),
    ] = None,
    nodes: Annotated[
        int,
        typer.Option("--nodes", min=1, max=9, help="Number of KRaft nodes (3: a replicated cluster, internal topics "
                                                   "with replication 3 and min.insync.replicas 2)."),
    ] = 1,
    version: KafkaVersion = kafka_local.KAFKA_VERSION,
) -> None:
    """Start the broker or cluster in the background (or find the running one) and print its URL."""
    with one_line_errors():
        bootstrap = kafka_local.up(state_dir, port, nodes=nodes, version=version)
    typer.echo(f"kafka://{bootstrap}")


@app.command()
def jars(version: KafkaVersion = kafka_local.KAFKA_VERSION) -> None:
    """Resolve the broker's jars with Maven into the cache (once) and print where they are."""
    with one_line_errors():
        path = kafka_local.ensure_jars(version=version)
    typer.echo(str(path))


@app.command()
def down(state_dir: StateDir = Path(".oncelog/kafka")) -> None:
    """Stop the broker or cluster that `up` started (its data stays in the state dir)."""
    with one_line_errors():
        stopped = kafka_local.down(state_dir)
    report_down(stopped, "broker", state_dir)


@app.command()
def status(state_dir: StateDir = Path(".oncelog/kafka")) -> None:
    """Print the running broker's or cluster's URL; exit code 1 if none runs in the state dir."""
    with one_line_errors():
        bootstrap = kafka_local.status(state_dir)
    bootstrap = require_running(bootstrap, "broker", state_dir)
    typer.echo(f"kafka://{bootstrap}")
