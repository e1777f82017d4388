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
from projections.views import RunStatus
from spark_pipeline.commit.faults import FaultInjector
from spark_pipeline.commit.session import open_session
from spark_pipeline.config_validation import load_job_config
from filesystems.router import FileSystems
from events.job_lock import JobLockedError
from spark_pipeline.launcher import JobLauncher, RunResult, commit_settings
from spark_pipeline.paths import absolute_config

console = Console(stderr=True)
out = Console()

JobFile = Annotated[Path, typer.Argument(help="A job file: .yaml/.yml, or Gobblin's .properties/.pull/.job.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a summary.")]
EXIT = {RunStatus.COMMITTED: 0, RunStatus.FAILED: 1, RunStatus.CANCELLED: 130}
EXIT_SKIPPED = 4
"""A committed run that skipped datasets (their history was not settled): not a plain success."""


def exit_code(result: RunResult) -> int:
    """The process's exit code for a run's outcome."""
    if result.status is RunStatus.COMMITTED and result.skipped:
        return EXIT_SKIPPED
    return EXIT.get(result.status, 1)


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
        "skipped": [{"dataset_urn": urn, "reason": reason} for urn, reason in result.skipped.items()],
        "warnings": result.warnings,
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
                 else "")
              + (f", [yellow]{len(result.skipped)} dataset(s) skipped[/]" if result.skipped else ""), highlight=False)
    for urn, reason in result.skipped.items():
        out.print(f"[yellow]skipped {urn}[/]: {reason}", highlight=False)
    for warning in result.warnings:
        out.print(f"[yellow]warning:[/] {warning}", highlight=False)
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
    raise typer.Exit(exit_code(result))


def recover(job_file: JobFile, release: Annotated[list[str] | None, typer.Option(
        help="Release this dataset, blocked by an abandoned commit sequence: what that sequence published is rolled "
             "back first, then runs pull the dataset again (repeatable).")]
            = None, as_json: AsJson = False) -> None:
    """Finish the job's planned-but-unfinished commit sequences, without extracting anything."""
    try:
        config = absolute_config(load_job_config(job_file))
        with open_log(config.log_url, config.log_settings) as log, open_session(
                log, config.job_name, commit_settings(config), FileSystems.of(config.properties)) as s:
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
