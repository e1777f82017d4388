"""The `oncelog` command: composes the sub-commands each package owns.

events: `kafka`; filesystems: `hdfs`, `s3` (local servers); replay: `rebuild`, `state`, `replay`, `audit`, `verify`, `tail`, `gc`; projections: `serve`;
spark_pipeline: `run`, `recover`, `schedule`. Heavy imports (PySpark) wait until a command needs them.
"""

from __future__ import annotations

import typer

from events.kafka_cli import app as kafka_app
from filesystems.servers.hdfs_cli import app as hdfs_app
from filesystems.servers.s3_cli import app as s3_app
from projections.live_cli import register as register_live
from replay.cli import register as register_replay
from spark_pipeline.cli import register as register_pipeline

app = typer.Typer(
    name="oncelog",
    help="Event-sourced state for Gobblin-style ingestion on Spark, with Kafka (or SQLite) as its log.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(kafka_app, name="kafka")
app.add_typer(hdfs_app, name="hdfs")
app.add_typer(s3_app, name="s3")
register_pipeline(app)
register_replay(app)
register_live(app)


def main() -> None:
    """Entry point of the console script."""
    app()


if __name__ == "__main__":
    main()
