"""``oncelog spark jars``: fetch Spark's Kafka and Avro connectors and Hadoop's
S3A file system (hadoop-aws) into the cache (once) and print spark-submit's
``--jars`` line.

Only that line goes to stdout, so ``spark-submit $(oncelog spark jars) job.py`` works; Maven's progress, on the
first run only, goes to stderr. Later runs read the cache and work offline.
"""

from __future__ import annotations

import typer

from localservers.cli import one_line_errors
from spark_pipeline.connectors import fetch_connectors, jars_option

app = typer.Typer(name="spark", help="Spark's own parts that oncelog sets up: the Kafka, Avro and S3A connector jars.",
                  no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  context_settings={"help_option_names": ["-h", "--help"]})


@app.command()
def jars() -> None:
    """Fetch Spark's Kafka, Avro and S3A connector jars with Maven (first run only); print the `--jars` line."""
    with one_line_errors():
        found = fetch_connectors()
    typer.echo(jars_option(found))
