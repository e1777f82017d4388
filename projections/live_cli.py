"""`oncelog serve`: run the live projector (a faust worker) over a Kafka log, with its HTTP views.

Mount it with `register(parent)` (adds the `serve` command to the `oncelog` Typer app); `app` runs it on its own:
`python -m projections.live_cli serve --log kafka://127.0.0.1:9092?topic=oncelog.events`.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from events.errors import ConfigError, OncelogError
from events.log import DEFAULT_URL
from projections.live_settings import DEFAULT_APP_ID, DEFAULT_DATA_DIR, DEFAULT_HOST, DEFAULT_PORT, LiveSettings

app = typer.Typer(
    name="serve",
    help="The live projector: Faust tables folded from the events topic, with HTTP views.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help, as the oncelog command's (docs/cli.md)
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


class LogLevel(StrEnum):
    """How much the faust worker logs."""

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
            "--log", envvar="ONCELOG_LOG", help="The log: kafka://host:port?topic=… (the live projector needs Kafka)."
        ),
    ] = DEFAULT_URL,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port of the views.")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option("--host", help="Address the HTTP views listen on.")] = DEFAULT_HOST,
    app_id: Annotated[
        str, typer.Option("--app-id", help="Faust app id: the consumer group and the prefix of the changelog topics.")
    ] = DEFAULT_APP_ID,
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Faust's data directory.")] = DEFAULT_DATA_DIR,
    loglevel: Annotated[LogLevel, typer.Option("--loglevel", case_sensitive=False, help="How much the worker logs.")]
    = LogLevel.INFO,
) -> None:
    """Fold the events topic into live tables and serve /datasets, /datasets/{urn}, /runs/{run_id}, /commits/pending."""
    from projections.live import create_app, run_worker  # faust takes a while to import: only when serving

    settings = LiveSettings(log_url=log, port=port, host=host, app_id=app_id, data_dir=data_dir)
    try:
        faust_app = create_app(settings)
    except OncelogError as e:
        typer.echo("error: " + " | ".join(str(e).splitlines()), err=True)  # one line, for logs
        raise typer.Exit(code=2 if isinstance(e, ConfigError) else 1) from e
    run_worker(faust_app, loglevel.value)


def register(parent: typer.Typer) -> None:
    """Add the `serve` command to the `oncelog` CLI."""
    parent.command("serve")(serve)


if __name__ == "__main__":
    app()
