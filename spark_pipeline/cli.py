"""The pipeline sub-commands: `run` a job file, `recover` its unfinished commits, `schedule` a folder of jobs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from events.errors import ConfigError, FencedError, OncelogError
from events.log import open_log
from spark_pipeline.commit.steps import PublishRoots
from spark_pipeline.commit.faults import FaultInjector
from spark_pipeline.commit.session import open_session
from projections.views import RunStatus
from spark_pipeline.config_validation import load_job_config
from spark_pipeline.job_lock import JobLockedError
from spark_pipeline.launcher import JobLauncher, RunResult
from spark_pipeline.paths import absolute_config, run_dirs

console = Console(stderr=True)
out = Console()

JobFile = Annotated[Path, typer.Argument(help="A job file: .yaml/.yml, or Gobblin's .properties/.pull/.job.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a summary.")]
EXIT = {RunStatus.COMMITTED: 0, RunStatus.FAILED: 1, RunStatus.CANCELLED: 130}


def fail(message: str, code: int = 2) -> typer.Exit:
    console.print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def result_json(result: RunResult, seconds: float) -> dict[str, Any]:
    """A run's outcome as data."""
    return {
        "job": result.job, "run_id": result.run_id, "status": result.status.name, "error": result.error,
        "seconds": round(seconds, 3), "records_written": result.records_written,
        "tasks": [{"task_id": t.task_id, "succeeded": t.succeeded, "attempts": t.attempts, "error": t.error}
                  for t in result.tasks],
        "recovered": [{"dataset_urn": c.dataset_urn, "sequence_id": c.sequence_id, "outcome": c.outcome.value}
                      for c in result.recovered],
        "commits": [{"dataset_urn": c.dataset_urn, "outcome": c.outcome.value, "error": c.error}
                    for c in result.commits],
    }


def show(result: RunResult, seconds: float, as_json: bool) -> None:
    document = result_json(result, seconds)
    if as_json:
        out.print_json(json.dumps(document))
        return
    colour = {"COMMITTED": "green", "FAILED": "red", "CANCELLED": "yellow"}.get(document["status"], "white")
    out.print(f"[bold]{result.job}[/] run [bold]{result.run_id}[/]: [{colour}]{document['status']}[/] in "
              f"{seconds:.1f}s — {result.records_written:,} records written, "
              f"{sum(c.outcome.value == 'completed' for c in result.commits)} dataset(s) published"
              + (f", {len(result.recovered)} unfinished commit(s) of an earlier run recovered" if result.recovered
                 else ""), highlight=False)
    if result.error:
        out.print(f"[red]{result.error}[/]", highlight=False)


def run(job_file: JobFile, as_json: AsJson = False) -> None:
    """Run a job once: lock, recover, extract on Spark, publish exactly once, clean up, release."""
    try:
        config = load_job_config(job_file)
        launcher = JobLauncher(config, faults=FaultInjector.from_env(os.environ))
        started = time.perf_counter()
        result = launcher.run()
    except (JobLockedError, FencedError) as e:
        raise fail(str(e), 3) from e
    except (ConfigError, ValueError) as e:
        raise fail(str(e)) from e
    except OncelogError as e:
        raise fail(str(e), 1) from e
    show(result, time.perf_counter() - started, as_json)
    raise typer.Exit(EXIT.get(result.status, 1))


def recover(job_file: JobFile, release: Annotated[list[str] | None, typer.Option(
        help="Release this dataset, blocked by an abandoned commit sequence, so runs pull it again (repeatable).")]
            = None, as_json: AsJson = False) -> None:
    """Finish the job's planned-but-unfinished commit sequences, without extracting anything."""
    try:
        config = absolute_config(load_job_config(job_file))
        dirs = run_dirs(config, "")
        roots = PublishRoots.of([d.output for d in dirs], [d.final for d in dirs])
        with open_log(config.log_url, config.log_settings) as log, open_session(
                log, config.job_name, roots, config.commit_sequence_max_attempts, config.commit_parallelism) as s:
            results = s.committer.recover(config.job_name)
            for urn in release or ():
                sequence = s.committer.release(config.job_name, urn, "released with oncelog recover --release")
                console.print(f"released {urn} (blocked by abandoned sequence {sequence})")
    except OncelogError as e:
        raise fail(str(e)) from e
    document = [{"dataset_urn": r.dataset_urn, "sequence_id": r.sequence_id, "outcome": r.outcome.value,
                 "error": r.error} for r in results]
    if as_json:
        out.print_json(json.dumps(document))
    else:
        for r in document:
            out.print(f"{r['dataset_urn']} ({r['sequence_id']}): {r['outcome']}" + (f" — {r['error']}" if r["error"]
                                                                                    else ""), highlight=False)
        out.print(f"{len(results)} unfinished commit sequence(s) of {config.job_name}.")
    raise typer.Exit(0 if all(r.outcome.value == "completed" for r in results) else 1)


def schedule(directory: Annotated[Path, typer.Argument(help="A folder of job files.")],
             once: Annotated[bool, typer.Option(help="Run every due job once and exit.")] = False) -> None:
    """Run the jobs of a folder by their job.schedule cron expressions (one run at a time)."""
    from spark_pipeline.scheduler import Scheduler

    try:
        scheduler = Scheduler.from_directory(directory, FaultInjector.from_env(os.environ))
    except ConfigError as e:
        raise fail(str(e)) from e
    try:
        scheduler.run(once=once, report=lambda r, s: show(r, s, False))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    """Mount the pipeline sub-commands on the oncelog command."""
    app.command("run")(run)
    app.command("recover")(recover)
    app.command("schedule")(schedule)
