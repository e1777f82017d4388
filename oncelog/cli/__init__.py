"""The `oncelog` command: composes the sub-commands each package owns.

events: `kafka`; filesystems: `hdfs`, `s3` (local servers); replay: `rebuild`, `state`, `replay`, `runs`, `audit`,
`verify`, `tail`, `follow`, `gc`; projections: `serve`; spark_pipeline: `run`, `recover`, `schedule`. Heavy imports
(PySpark) wait until a command needs them. Conventions for all of them (help, exit codes, output in pipes): docs/cli.md.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Annotated

import typer

from localservers.hdfs_cli import app as hdfs_app
from localservers.kafka_cli import app as kafka_app
from localservers.s3_cli import app as s3_app
from oncelog.cli.connectors import app as spark_app
from oncelog.cli.console import reader_gone
from oncelog.cli.replay import register as register_replay
from oncelog.cli.run import register as register_pipeline
from oncelog.cli.serve import register as register_live

app = typer.Typer(
    name="oncelog",
    help="Event-sourced state for Gobblin-style ingestion on Spark, with Kafka (or SQLite) as its log.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: flags shown as flags, usage errors on one line
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(kafka_app, name="kafka")
app.add_typer(hdfs_app, name="hdfs")
app.add_typer(s3_app, name="s3")
app.add_typer(spark_app, name="spark")
register_pipeline(app)
register_replay(app)
register_live(app)


def installed_version() -> str:
    """The version of the installed oncelog distribution, from its package metadata."""
    try:
        return package_version("oncelog")
    except PackageNotFoundError:
        return "unknown (not installed as a package)"


def print_version(asked: bool) -> None:
    """`--version`: print `oncelog <version>` and stop."""
    if asked:
        typer.echo(f"oncelog {installed_version()}")
        raise typer.Exit()


@app.callback()
def options(version: Annotated[bool, typer.Option(
        "--version", callback=print_version, is_eager=True, help="Print oncelog's version and exit.")] = False) -> None:
    """Event-sourced state for Gobblin-style ingestion on Spark, with Kafka (or SQLite) as its log."""


def main() -> None:
    """Entry point of the console script; a reader of its output that goes away ends it quietly with exit 0."""
    try:
        app()
    except BrokenPipeError:
        raise reader_gone() from None
