"""`make demo`: the example job, run twice on the embedded defaults — the second run continues from the first's
watermarks — then the state and the audit of both runs; then a time-partitioned job publishing into an Iceberg table:
the table's snapshots with oncelog's commit ids, and a `PartitionCompleted` event.

    python -m oncelog.demo [--fresh]
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.table import Column, Table

from events.completeness import PartitionCompleted
from events.log import EventLog, decode_records, open_log, raise_error
from oncelog.cli.run import show
from projections.projector import Projector
from replay.audit import audit
from replay.audit_html import write_html
from replay.render import audit_json, audit_tables, state_json, state_tables
from spark_pipeline.engines.spark import spark_session
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.progress import quiet_native_output

JOB_FILE = Path(__file__).parents[1] / "spark_pipeline" / "examples" / "demo.yaml"
TABLE_JOB_FILE = JOB_FILE.with_name("demo-iceberg.yaml")
WORK_DIR = Path(".oncelog/demo")
PIPE_WIDTH = 1_000
"""The width tables are laid out for when stdout is no terminal (`make demo > file`): their natural width, unwrapped."""


def demo_console() -> Console:
    """A terminal's console; in a pipe or a file, one wide enough that no table, path or command is wrapped."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=PIPE_WIDTH, soft_wrap=True)
    return console


def rule(console: Console, title: str) -> None:
    """A section's title: a rule across a terminal, one short line in a pipe."""
    if console.is_terminal:
        console.rule(title)
    else:
        console.print(f"── {title} ──")


def show_table(console: Console, log: EventLog, job: str, run_id: str) -> None:
    """The Iceberg table's snapshots with oncelog's commit ids (read through pyiceberg), and the run's first
    PartitionCompleted event."""
    from spark_pipeline.tables import iceberg  # pyiceberg: loaded for this section alone

    warehouse = (WORK_DIR / "warehouse").absolute()
    ref = iceberg.TableRef("oncelog", f"sqlite:///{warehouse / 'iceberg-catalog.db'}", str(warehouse), "lake.clicks",
                           str(warehouse / "lake" / "clicks"))
    table = iceberg.load_table(ref)
    rule(console, "the Iceberg table lake.clicks")
    if table is None:
        console.print("no table: the run published nothing", markup=False)
        return
    spec = ", ".join(f"{f.transform}({table.schema().find_column_name(f.source_id)})" for f in table.spec().fields)
    console.print(f"catalog {ref.catalog_uri}\npartition spec: {spec or 'none'}; {table.scan().to_arrow().num_rows} "
                  f"records", markup=False)
    snapshots = Table("snapshot", Column("oncelog.commit-id", overflow="fold"), "files", "records",
                      Column("watermarks", overflow="fold"), title="Snapshots (the last 4)",
                      title_justify="left")
    for snapshot in table.snapshots()[-4:]:
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        snapshots.add_row(str(snapshot.snapshot_id), summary.get("oncelog.commit-id", "-"),
                          f"+{summary.get('added-data-files', '0')}", f"+{summary.get('added-records', '0')}",
                          summary.get("oncelog.watermarks") or summary.get("oncelog.dataset-watermarks", "-"))
    console.print(snapshots)
    completed = [e.event for e in decode_records(log.codec, log.read_records(), raise_error)
                 if isinstance(e.event, PartitionCompleted) and e.event.job == job and e.event.run_id == run_id]
    events = Table("dataset", "partition", "event times (UTC)", "complete horizon",
                   title=f"PartitionCompleted (this run recorded {len(completed)}; the first)", title_justify="left")
    for event in completed[:1]:
        events.add_row(event.dataset_urn, event.partition, f"{_utc(event.start_ms)} – {_utc(event.end_ms)}",
                       _utc(event.horizon_ms))
    console.print(events)


def _utc(millis: int) -> str:
    """Epoch millis as a UTC time to the minute."""
    return dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%MZ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="start from an empty log (default: keep history)")
    args = parser.parse_args()
    if args.fresh and WORK_DIR.exists():
        shutil.rmtree(WORK_DIR)
    spark_log = (WORK_DIR / "spark.log").absolute()
    with quiet_native_output(spark_log):  # Spark's JVM (log4j WARN lines…) writes to spark_log, not to stdout
        console = demo_console()
        config = load_job_config(JOB_FILE)
        rule(console, f"[bold]oncelog demo[/] — job file {JOB_FILE}")
        spark = spark_session(config)
        spark.sparkContext.setLogLevel("ERROR")
        run_ids = []
        for attempt in (1, 2):
            rule(console, f"run {attempt}")
            started = time.perf_counter()
            result = JobLauncher(config, spark=spark).run()
            show(result, time.perf_counter() - started, False)
            run_ids.append(result.run_id)
        table_config = load_job_config(TABLE_JOB_FILE)
        rule(console, "a time-partitioned job into an Iceberg table")
        console.print(f"job file {TABLE_JOB_FILE}", markup=False)
        started = time.perf_counter()
        table_run = JobLauncher(table_config, spark=spark).run()
        show(table_run, time.perf_counter() - started, False)
        spark.stop()
    console.print(f"Spark's own output: {spark_log}", markup=False)
    with open_log(JobLauncher(config).config.log_url) as log:
        state, _ = Projector(log).rebuild()
        rule(console, "state (oncelog state)")
        console.print(state_tables(state_json(state, job=config.job_name)))
        for run_id in run_ids:
            rule(console, f"audit of run {run_id} (oncelog audit {run_id})")
            timeline = audit(log, run_id, config.job_name)
            console.print(audit_tables(audit_json(timeline)))
            report = WORK_DIR / f"audit-{run_id}.html"
            write_html(timeline, report)
            console.print(f"HTML report with a Gantt chart: {report}")
        show_table(console, log, table_config.job_name, table_run.run_id)
    rule(console, "try next")
    console.print("oncelog state --log sqlite:///.oncelog/demo/events.db\n"
                  "oncelog verify --log sqlite:///.oncelog/demo/events.db --publish-dir .oncelog/demo/published\n"
                  f"oncelog run {JOB_FILE}\n"
                  f"oncelog run {TABLE_JOB_FILE}   # one snapshot more")


if __name__ == "__main__":
    main()
