"""``oncelog kafka up|down|status|jars``: a local Apache Kafka broker (or ``--nodes 3`` cluster) that outlives the
command.

A thin shell over :mod:`localservers.kafka`, for developers who want ``kafka://127.0.0.1:<port>`` without
Docker. ``up`` and ``status`` print only the store URL on stdout, so scripts can capture it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from localservers import kafka as kafka_local
from localservers.cli import ServerCommands, one_line_errors, server_app


def _show(bootstrap: str) -> None:
    """The store URL of a running broker or cluster, on stdout."""
    typer.echo(f"kafka://{bootstrap}")


SERVER = ServerCommands("kafka", "broker", Path(".oncelog/kafka"),
                        "Directory holding the broker's data, config, pid and log (broker.log); a cluster's nodes "
                        "live in node-<id>/ under it.", kafka_local.down, kafka_local.status, _show)
StateDir = Annotated[Path, SERVER.state_dir_option()]
KafkaVersion = Annotated[
    str,
    typer.Option("--kafka-version", help=f"Apache Kafka version to run (supported lines: 3.x, 4.x; tested: "
                                         f"{', '.join(kafka_local.SUPPORTED_KAFKA_VERSIONS)})."),
]


def up(
    state_dir: StateDir = SERVER.state_dir,
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
    _show(bootstrap)


def jars(version: KafkaVersion = kafka_local.KAFKA_VERSION) -> None:
    """Resolve the broker's jars with Maven into the cache (once) and print where they are."""
    with one_line_errors():
        path = kafka_local.ensure_jars(version=version)
    typer.echo(str(path))


app = server_app(SERVER, f"Run a local Apache Kafka broker or cluster (KRaft; {kafka_local.KAFKA_VERSION} by "
                         f"default, {kafka_local.KAFKA4_VERSION} on request) from its jars, no Docker.", up, jars)
