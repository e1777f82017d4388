"""`oncelog serve`: the live projector — the log folded from its latest snapshot and followed, with HTTP views.

Mount it with `register(parent)` (adds the `serve` command to the `oncelog` Typer app); `app` runs it on its own:
`python -m oncelog.cli.serve serve --log kafka://127.0.0.1:9092?topic=oncelog.events`.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Annotated

import typer

from events.errors import ConfigError, OncelogError
from events.log import DEFAULT_URL
from events.log.kafka.config import redact_message
from replay.live.settings import (
    DEFAULT_HOST,
    DEFAULT_POLL_S,
    DEFAULT_PORT,
    DEFAULT_SNAPSHOT_EVERY,
    LiveSettings,
)

app = typer.Typer(
    name="serve",
    help="The live projector: the log folded from its latest snapshot and followed, with HTTP views.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help, as the oncelog command's (docs/cli.md)
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


class LogLevel(StrEnum):
    """How much the live projector logs."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@app.callback()
def _group() -> None:
    """The live projector (keeps `serve` a named sub-command when this app runs on its own)."""


@app.command("serve")
def serve(
    log: Annotated[
        str,
        typer.Option(
            "--log", envvar="ONCELOG_LOG", help="The log: kafka://host:port?topic=…&<settings> or sqlite:///…"
        ),
    ] = DEFAULT_URL,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port of the views.")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option("--host", help="Address the HTTP views listen on.")] = DEFAULT_HOST,
    poll_s: Annotated[
        float, typer.Option("--poll-s", min=0.01, help="Once caught up, how often to look for new events (seconds).")
    ] = DEFAULT_POLL_S,
    snapshot_every: Annotated[
        int, typer.Option("--snapshot-every", min=0, help="Save a snapshot after this many events folded (0: never).")
    ] = DEFAULT_SNAPSHOT_EVERY,
    use_snapshot: Annotated[
        bool, typer.Option("--snapshot/--from-scratch", help="Start from the latest snapshot, or fold the whole log.")
    ] = True,
    loglevel: Annotated[LogLevel, typer.Option("--loglevel", case_sensitive=False, help="How much it logs.")]
    = LogLevel.INFO,
    dataset_metrics: Annotated[bool, typer.Option(
        "--dataset-metrics", help="Also serve two series per dataset on /metrics (last commit time, watermarks): "
                                  "thousands for a large job, hence off by default.")] = False,
) -> None:
    """Serve /health, /metrics, /datasets, /datasets/{urn}, /runs, /runs/{run_id}, /commits/pending (503 until
    caught up)."""
    from replay.live.server import open_view
    from replay.live.server import serve as serve_view

    logging.basicConfig(level=loglevel.value.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = LiveSettings(log_url=log, port=port, host=host, poll_s=poll_s, snapshot_every=snapshot_every,
                            use_snapshot=use_snapshot, dataset_metrics=dataset_metrics)
    try:
        view, server = open_view(settings)
    except OncelogError as e:
        shown = redact_message(str(e), log)  # never the URL's sasl.password
        typer.echo("error: " + " | ".join(shown.splitlines()), err=True)  # one line, for logs
        raise typer.Exit(code=2 if isinstance(e, ConfigError) else 1) from e
    raise typer.Exit(code=serve_view(view, server))


def register(parent: typer.Typer) -> None:
    """Add the `serve` command to the `oncelog` CLI."""
    parent.command("serve")(serve)


if __name__ == "__main__":
    app()
