"""`make demo`: the example job, run twice on the embedded defaults — the second run continues from the first's
watermarks — then the state and the audit of both runs.

    python -m oncelog.demo [--fresh]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from rich.console import Console

from events.log import open_log
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
    rule(console, "try next")
    console.print("oncelog state --log sqlite:///.oncelog/demo/events.db\n"
                  "oncelog verify --log sqlite:///.oncelog/demo/events.db --publish-dir .oncelog/demo/published\n"
                  f"oncelog run {JOB_FILE}")


if __name__ == "__main__":
    main()
