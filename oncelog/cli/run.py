"""The pipeline sub-commands: `run` a job file, `recover` its unfinished commits, `validate` job files, `schedule` a
folder of jobs.

The log a command uses: `--log` > the job file's `oncelog.log.url` (or `--conf oncelog.log.url=…`) > `$ONCELOG_LOG` >
`sqlite:///.oncelog/events.db`. `--conf KEY=VALUE` sets a job-file key over the file's value, before validation.
While a job runs, the output of Spark's JVM (log4j) and of librdkafka goes to `.oncelog/logs/<job>-<run id>.log`
(relative to where the command starts; `schedule`: `.oncelog/logs/schedule-<time>.log`), unless `--verbose`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from events.errors import ConfigError, FencedError, OncelogError
from events.log import open_log, parse_url
from events.log.kafka.config import redact_url
from events.log.lock import JobLockedError
from filesystems.router import FileSystems
from oncelog.cli.console import ExitCode, fail, stderr_console, stdout_console, warn
from projections.projector import Projector
from projections.views import RunStatus
from spark_pipeline.commit.faults import FaultInjector
from spark_pipeline.commit.session import open_session
from spark_pipeline.jobfile.config import JobConfig, JobConfigError
from spark_pipeline.jobfile.formats import JOB_FILE_SUFFIXES, Entry, parse_job_file
from spark_pipeline.jobfile.paths import JobRoots, absolute_config, overlaps
from spark_pipeline.progress import (
    LOGS_DIR,
    SILENT,
    FailedAttempt,
    PlainProgress,
    RichProgress,
    RunWatch,
    Watched,
    quiet_native_output,
)

# PySpark loads with the launcher, the explainer and the job-file validation (through the engines): each command
# imports them when it runs, so that `oncelog --help` and the commands without Spark start without it.
if TYPE_CHECKING:
    from spark_pipeline.launcher import RunResult

LOG_KEY = "oncelog.log.url"
LOG_ENV = "ONCELOG_LOG"
EXIT_CANCELLED = 130

JobFile = Annotated[Path, typer.Argument(
    help="A job file: .yaml/.yml, or Gobblin's .properties/.pull/.job.", show_default=False)]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a summary.")]
Conf = Annotated[list[str] | None, typer.Option(
    "--conf", metavar="KEY=VALUE", show_default=False,
    help="Set a job-file key, over the file's value and before validation (repeatable), as spark-submit's --conf.")]
LogUrl = Annotated[str | None, typer.Option(
    "--log", metavar="URL", show_default=False,
    help=f"The log: sqlite:///path or kafka://host:port (--log > the job file's {LOG_KEY} > ${LOG_ENV} > "
         f"sqlite:///.oncelog/events.db).")]
Verbose = Annotated[bool, typer.Option(
    "--verbose", "-v", help=f"Leave Spark's and librdkafka's own output on the terminal (else it goes to a log file "
                            f"under {LOGS_DIR}/, which the summary names).")]


def exit_code(result: RunResult) -> int:
    """The process's exit code for a run's outcome."""
    if result.status is RunStatus.COMMITTED:
        return ExitCode.SKIPPED if result.skipped else ExitCode.OK
    return EXIT_CANCELLED if result.status is RunStatus.CANCELLED else ExitCode.VERDICT


def result_json(result: RunResult, took: Durations, log_file: Path | None = None) -> dict[str, Any]:
    """A run's outcome as data: `seconds` as `oncelog runs` counts it (JobRunStarted to the run's end; the whole
    command's when the log could not be followed), `command_seconds` with Spark's start-up."""
    return {
        "job": result.job, "run_id": result.run_id, "status": result.status.name, "error": result.error,
        "seconds": round(took.command_s if took.run_s is None else took.run_s, 3),
        "command_seconds": round(took.command_s, 3), "records_written": result.records_written,
        "tasks": [{"task_id": t.task_id, "succeeded": t.succeeded, "attempts": t.attempts, "error": t.error}
                  for t in result.tasks],
        "recovered": [{"dataset_urn": c.dataset_urn, "sequence_id": c.sequence_id, "outcome": c.outcome.value}
                      for c in result.recovered],
        "commits": [{"dataset_urn": c.dataset_urn, "outcome": c.outcome.value, "error": c.error}
                    for c in result.commits],
        "skipped": [{"dataset_urn": urn, "reason": reason} for urn, reason in result.skipped.items()],
        "warnings": result.warnings,
        "engine": None if result.engine is None else {"kind": result.engine[0], "reason": result.engine[1]},
        "log_file": str(log_file) if log_file else None,
    }


@dataclass(frozen=True)
class Durations:
    """How long a run took: as its log records it (JobRunStarted to its end, what `oncelog runs` shows; None when
    the log could not be followed), and the whole command (Spark's start-up included)."""

    run_s: float | None
    command_s: float

    @property
    def shown(self) -> str:
        """`24.9s (+27.6s starting Spark and ending)`: the run's own duration first, as `runs` has it."""
        if self.run_s is None:
            return f"{self.command_s:.1f}s (the whole command, Spark's start-up included)"
        run_s = round(self.run_s, 3)  # as `runs` rounds it before showing it
        return f"{run_s:.1f}s (+{max(0.0, self.command_s - run_s):.1f}s starting Spark and ending)"


def show(result: RunResult, seconds: float | Durations, as_json: bool, log_file: Path | None = None) -> None:
    """Print a run's summary (or its JSON document) on stdout; `log_file` holds Spark's own output and the failed
    attempts' traces. `seconds`: the command's time alone (the scheduler's runs), or both durations."""
    took = seconds if isinstance(seconds, Durations) else Durations(None, seconds)
    document = result_json(result, took, log_file)
    out = stdout_console()
    if as_json:
        out.print_json(json.dumps(document))
        return
    colour = {"COMMITTED": "green", "FAILED": "red", "CANCELLED": "yellow"}.get(document["status"], "white")
    out.print(f"[bold]{escape(result.job)}[/] run [bold]{result.run_id}[/]: [{colour}]{document['status']}[/] in "
              f"{took.shown} — {result.records_written:,} records written, "
              f"{sum(c.outcome.value == 'completed' for c in result.commits)} dataset(s) published"
              + (f", {len(result.recovered)} unfinished commit(s) of an earlier run recovered" if result.recovered
                 else "")
              + (f", [yellow]{len(result.skipped)} dataset(s) skipped[/]" if result.skipped else ""), highlight=False)
    if result.engine:
        out.print(f"task engine [bold]{escape(result.engine[0])}[/]: {escape(result.engine[1])}", highlight=False)
    for urn, reason in result.skipped.items():
        out.print(f"[yellow]skipped {escape(urn)}[/]: {escape(reason)}", highlight=False)
    for warning in result.warnings:
        out.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    if result.error:
        out.print(f"[red]{escape(result.error)}[/]", highlight=False)
    if log_file:
        out.print(f"Spark's and librdkafka's own output: {log_file}", markup=False, highlight=False)
        if any(not task.succeeded for task in result.tasks):
            out.print(f"each failed attempt's full trace: {log_file}", markup=False, highlight=False)


# --- job files, --conf and --log ---------------------------------------------------------------------------------


def parse_conf(items: Sequence[str] | None) -> dict[str, str]:
    """`--conf KEY=VALUE` items as a mapping (a later one wins); exit 2 naming a malformed one."""
    overrides: dict[str, str] = {}
    for item in items or ():
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise fail(f"--conf {item!r}: expected KEY=VALUE (e.g. --conf task.maxretries=2)")
        overrides[key.strip()] = value
    return overrides


def log_url_over(file_value: str | None, flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The log URL to set over the job's: `--log`, else (when the job file sets none) `$ONCELOG_LOG`; None keeps the
    file's value, or the default."""
    if flag:
        return flag
    if file_value and file_value.strip():
        return None
    return environ.get(LOG_ENV, "").strip() or None


def check_job_path(path: Path, folder_hint: str) -> None:
    """Exit 2 when `path` is no file: missing, or a folder (`folder_hint` says what to do instead)."""
    if path.is_dir():
        raise fail(f"{path} is a folder, not a job file; {folder_hint}")
    if not path.exists():
        raise fail(f"no such job file: {path}")


def load_job(path: Path, overrides: Mapping[str, str], log_flag: str | None, environ: Mapping[str, str]) -> JobConfig:
    """A job file with `--conf` overrides and the log URL by precedence applied, fully validated (JobConfigError)."""
    from spark_pipeline.jobs import validate_parsed

    parsed = parse_job_file(path, environ)
    if parsed.readable:
        for key, value in overrides.items():
            parsed.entries[key] = Entry(value)
        entry = parsed.entries.get(LOG_KEY)
        url = log_url_over(entry.value if entry else None, log_flag, environ)
        if url is not None:
            parsed.entries[LOG_KEY] = Entry(url)
    return validate_parsed(parsed, environ)


def migration_notes(path: Path, environ: Mapping[str, str]) -> tuple[str, ...]:
    """What of a (Gobblin) job file does not carry over, or carries over as another key: one line each."""
    from spark_pipeline.jobs import migration_report

    return migration_report(path, environ=environ).warnings


def with_log_url(config: JobConfig, flag: str | None, environ: Mapping[str, str]) -> JobConfig:
    """A loaded job with the log URL by precedence (for `schedule`, whose folder is loaded as a whole)."""
    url = log_url_over(config.properties.get(LOG_KEY), flag, environ)
    if url is None:
        return config
    parse_url(url)
    return config.model_copy(update={"log_url": url, "properties": {**config.properties, LOG_KEY: url}})


def job_for(path: Path, conf: Sequence[str] | None, log_flag: str | None, folder_hint: str) -> JobConfig:
    """The job a command runs: its file checked, loaded with overrides; exit 2 on any problem."""
    overrides = parse_conf(conf)
    check_job_path(path, folder_hint)
    try:
        return load_job(path, overrides, log_flag, os.environ)
    except ConfigError as e:
        raise fail(str(e)) from e


# --- run, recover, schedule ----------------------------------------------------------------------------------------


@contextmanager
def progress_display(console: Console, label: str, live: bool) -> Iterator[PlainProgress | RichProgress]:
    """A Rich display when `live` and the console is a terminal, else one plain line per phase."""
    if live and console.is_terminal:
        with RichProgress(console) as rich:
            yield rich
        return
    plain = PlainProgress(console.file, label)
    try:
        yield plain
    finally:
        plain.finish()


def kept_log(path: Path | None) -> Path | None:
    """The output log if it holds anything; an empty one is removed (nothing to look at)."""
    if path is None or not path.exists():
        return None
    if path.stat().st_size == 0:
        path.unlink()
        return None
    return path


def run(job_file: JobFile, conf: Conf = None, log_url: LogUrl = None, verbose: Verbose = False,
        as_json: AsJson = False, explain_only: Annotated[bool, typer.Option(
            "--explain", help="Print the plan (engine and why, tasks, work units, Spark's plan); run nothing.")
        ] = False,
        take_over: Annotated[bool, typer.Option(
            "--take-over", help="If another run of the job holds its lock and is alive, take the lock from it: that "
                                "run is fenced (publishes nothing more) and recorded as ended.")] = False
        ) -> None:
    """Run a job once: lock, recover, extract on Spark, publish exactly once, clean up, release."""
    from spark_pipeline.launcher import new_run_id

    config = job_for(job_file, conf, log_url, f"to run every job in it use `oncelog schedule {job_file}`")
    check_before_spark(config, job_file, parse_conf(conf))
    if explain_only:
        show_explanation(config, as_json)
        return
    for note in migration_notes(job_file, os.environ):
        warn(note)
    try:
        faults = FaultInjector.from_env(os.environ)
    except ValueError as e:
        raise fail(str(e)) from e
    run_id = new_run_id(datetime.now(UTC))
    log_file = None if verbose else (LOGS_DIR / f"{config.job_name}-{run_id}.log").absolute()
    started = time.perf_counter()
    watch = RunWatch(lambda: open_log(config.log_url, config.log_settings), config.job_name, run_id, ignore_failure)
    try:
        result = run_shown(config, faults, run_id, log_file, verbose, quiet=as_json and merged_output(), watch=watch,
                           take_over=take_over)
    except (JobLockedError, FencedError) as e:
        raise fail(with_log_hint(str(e), log_file), ExitCode.REFUSED) from e
    except (ConfigError, ValueError) as e:
        raise fail(with_log_hint(str(e), log_file)) from e
    except OncelogError as e:
        raise fail(with_log_hint(str(e), log_file), ExitCode.VERDICT) from e
    show(result, Durations(watch.seconds, time.perf_counter() - started), as_json, kept_log(log_file))
    if result.stopped_now:
        exit_now(exit_code(result))
    raise typer.Exit(exit_code(result))


def check_before_spark(config: JobConfig, job_file: Path, overrides: Mapping[str, str]) -> None:
    """Exit 2 naming every pre-flight problem (folders, file systems, Kafka) before anything starts."""
    problems = preflight_problems(config, job_file, overrides)
    if problems:
        count = len(problems)
        raise fail("\n".join([f"the job cannot run ({count} problem{'s' if count != 1 else ''}, found before "
                               f"starting Spark); nothing was run:", *(f"  {p}" for p in problems)]))


def preflight_problems(config: JobConfig, job_file: Path, overrides: Mapping[str, str]) -> list[str]:
    """The pre-flight checks' problems of a loaded job, located in its file ("set with --conf" when a flag set the
    key)."""
    from spark_pipeline.preflight import located, preflight

    problems = located(preflight(absolute_config(config)), job_file, os.environ)
    return [f"{p} (set with --conf)" if p.key in overrides else str(p) for p in problems]


def exit_now(code: int) -> None:
    """End the process at once, its output flushed: a run stopped by a second signal may have abandoned task threads
    (their writers fenced, the run recorded) that Python's exit would otherwise wait for."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def show_explanation(config: JobConfig, as_json: bool) -> None:
    """`run --explain`: the plan of the job's next run, Spark's own output kept out of the way."""
    from spark_pipeline.explain import explain

    with quiet_native_output((LOGS_DIR / f"{config.job_name}-explain.log").absolute()):
        try:
            explained = explain(config)
        except (ConfigError, ValueError) as e:
            raise fail(str(e)) from e
        except OncelogError as e:
            raise fail(str(e), ExitCode.VERDICT) from e
    out = stdout_console()
    if as_json:
        out.print_json(json.dumps(explained.as_json()))
        return
    document = explained.as_json()
    out.print(f"[bold]{escape(explained.job)}[/]: task engine [bold]{explained.engine.value}[/] "
              f"({escape(explained.reason)})", highlight=False)
    out.print(f"{len(explained.tasks)} task(s), {len(explained.work_units)} work unit(s):", highlight=False)
    for unit in document["work_units"]:
        out.print(f"  {escape(unit['work_unit_id'])}  {escape(unit['partition'])}  "
                  f"[{unit['low_watermark']}, {unit['expected_high_watermark']})", highlight=False)
    for urn, reason in explained.skipped.items():
        out.print(f"[yellow]skipped {escape(urn)}[/]: {escape(reason)}", highlight=False)
    if explained.spark_plan:
        out.print("Spark's plan of the first task:", highlight=False)
        out.print(explained.spark_plan, markup=False, highlight=False)


def run_shown(config: JobConfig, faults: FaultInjector, run_id: str, log_file: Path | None, verbose: bool,
              quiet: bool, watch: RunWatch, take_over: bool = False) -> RunResult:
    """Run a job, the output of the JVM and native libraries (and each failed attempt's full trace) sent to
    `log_file` (when given), its progress and failed attempts shown as they happen (unless `quiet`; as plain lines
    when `verbose`, since Spark's own output then shares the terminal); `watch` follows the run in its log."""
    from spark_pipeline.launcher import JobLauncher

    with quiet_native_output(log_file) as native, traces_to(log_file):
        try:
            if quiet:
                return JobLauncher(config, faults=faults, run_id=run_id, observer=Watched(SILENT, watch),
                                   take_over=take_over).run()
            console = Console(file=native.user_stderr, highlight=False)
            with progress_display(console, f"{config.job_name} run {run_id}", live=not verbose) as shown:
                watch.failed = shown.attempt_failed
                try:
                    return JobLauncher(config, faults=faults, run_id=run_id, observer=Watched(shown, watch),
                                       take_over=take_over,
                                       notice=lambda text: console.print(text, style="yellow", markup=False,
                                                                         soft_wrap=True)).run()
                finally:
                    watch.stop()  # the last failed attempts shown before the display ends
        finally:
            watch.stop()


def ignore_failure(failed: FailedAttempt) -> None:
    """No display (--json): failed attempts are in the document's tasks and in the log."""


@contextmanager
def traces_to(log_file: Path | None) -> Iterator[None]:
    """While a run lasts, oncelog's own log records (each failed attempt's full trace, from the tasks that run in
    this process) go to the run's log file beside Spark's output, not to the terminal; tasks on Spark's executors
    write theirs to their stderr, which is that file too."""
    if log_file is None:
        yield
        return
    logger = logging.getLogger("spark_pipeline")
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        handler.close()


def merged_output() -> bool:
    """Whether stderr writes into the file or pipe stdout writes to (`2>&1`, or spark-submit, which merges its
    driver's stderr into its stdout): progress lines there would break a --json document."""
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return not sys.stdout.isatty() and (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)


def with_log_hint(message: str, log_file: Path | None) -> str:
    """An error message, naming the file that holds Spark's own output when there is one."""
    kept = kept_log(log_file)
    return f"{message} (Spark's and librdkafka's own output: {kept})" if kept else message


def recover(job_file: JobFile, release: Annotated[list[str] | None, typer.Option(
        help="Release this dataset, blocked by an abandoned commit sequence: what that sequence published is rolled "
             "back first, then runs pull the dataset again (repeatable).", show_default=False)] = None,
            conf: Conf = None, log_url: LogUrl = None, as_json: AsJson = False) -> None:
    """Finish the job's planned-but-unfinished commit sequences, without extracting anything."""
    from spark_pipeline.launcher import commit_settings, dead_task_writers

    config = absolute_config(job_for(job_file, conf, log_url, "name one job file"))
    try:
        with open_log(config.log_url, config.log_settings) as log, log.job_lock(config.job_name) as lock:
            lock.acquire(f"recover-{uuid.uuid4().hex[:12]}")  # refused while a run of the job is alive
            with open_session(log, config.job_name, commit_settings(config), FileSystems.of(config.properties),
                              dead_task_writers(config.job_name)) as s:
                results = s.committer.recover(config.job_name)
                for urn in release or ():
                    sequence = s.committer.release(config.job_name, urn, "released with oncelog recover --release")
                    stderr_console().print(f"released {urn} (blocked by abandoned sequence {sequence})", markup=False)
    except (JobLockedError, FencedError) as e:
        raise fail(str(e), ExitCode.REFUSED) from e
    except OncelogError as e:
        raise fail(str(e)) from e
    document = [{"dataset_urn": r.dataset_urn, "sequence_id": r.sequence_id, "outcome": r.outcome.value,
                 "error": r.error} for r in results]
    out = stdout_console()
    if as_json:
        out.print_json(json.dumps(document))
    else:
        for r in document:
            out.print(f"{r['dataset_urn']} ({r['sequence_id']}): {r['outcome']}" + (f" — {r['error']}" if r["error"]
                                                                                    else ""), markup=False)
        out.print(f"{len(results)} unfinished commit sequence(s) of {config.job_name}.", markup=False)
    raise typer.Exit(ExitCode.OK if all(r.outcome.value == "completed" for r in results) else ExitCode.VERDICT)


def schedule(directory: Annotated[Path, typer.Argument(help="A folder of job files.", show_default=False)],
             once: Annotated[bool, typer.Option("--once", help="Run every due job once and exit.")] = False,
             log_url: LogUrl = None, verbose: Verbose = False) -> None:
    """Run the jobs of a folder by their job.schedule cron expressions (one run at a time)."""
    from spark_pipeline.jobs import load_job_dir
    from spark_pipeline.scheduler import Scheduler

    if not directory.is_dir():
        raise fail(f"{directory} is not a folder of job files" + (
            f"; to run one job use `oncelog run {directory}`" if directory.is_file() else ""))
    try:
        jobs = [with_log_url(job, log_url, os.environ) for job in load_job_dir(directory)]
        scheduler = Scheduler(jobs, FaultInjector.from_env(os.environ))
    except (ConfigError, ValueError) as e:
        raise fail(str(e)) from e
    log_file = None if verbose else (
        LOGS_DIR / f"schedule-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{os.getpid()}.log").absolute()
    try:
        with quiet_native_output(log_file) as native:
            if native.file:
                Console(file=native.user_stderr).print(f"Spark's and librdkafka's own output: {native.file}",
                                                       markup=False, highlight=False, soft_wrap=True)
            scheduler.run(once=once, report=lambda r, s: show(r, s, False))
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_CANCELLED) from None
    finally:
        kept_log(log_file)


# --- validate ------------------------------------------------------------------------------------------------------


@dataclass
class Verdict:
    """What `validate` found for one job file."""

    file: Path
    job: str | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config: JobConfig | None = None

    @property
    def valid(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {"file": str(self.file), "job": self.job, "valid": self.valid, "problems": self.problems,
                "notes": self.notes}


def job_files(paths: Sequence[Path]) -> list[Path]:
    """The job files named, folders expanded to the job files under them (hidden ones skipped); exit 2 naming a
    path that does not exist or a folder that holds no job file."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in JOB_FILE_SUFFIXES
                            and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not inside:
                raise fail(f"{path} holds no job file ({', '.join(JOB_FILE_SUFFIXES)})")
            found += inside
        elif path.exists():
            found.append(path)
        else:
            raise fail(f"no such job file or folder: {path}")
    return list(dict.fromkeys(found))


def check_job(path: Path, overrides: Mapping[str, str], log_flag: str | None, against_log: bool,
              deep: bool = False) -> Verdict:
    """Every check `run` makes before it runs anything, on one job file (`deep`: Spark's too)."""
    from spark_pipeline.launcher import commit_settings

    verdict = Verdict(path, notes=list(migration_notes(path, os.environ)))
    try:
        config = absolute_config(load_job(path, overrides, log_flag, os.environ))
        commit_settings(config)
    except JobConfigError as e:
        verdict.problems += [f"{p} (set with --conf)" if p.key in overrides else str(p) for p in e.problems]
        return verdict
    except (ConfigError, ValueError) as e:
        verdict.problems.append(f"{path}: {e}")
        return verdict
    verdict.job, verdict.config = config.job_name, config
    verdict.problems += preflight_problems(config, path, overrides)
    if against_log:
        verdict.problems += log_problems(path, config)
    if deep and verdict.valid:
        verdict.problems += deep_problems(path, config)
    return verdict


def deep_problems(path: Path, config: JobConfig) -> list[str]:
    """What only Spark tells: the job planned as `run --explain` plans it, its SQL stages analysed over the source's
    real columns (Spark's output kept in a log file)."""
    from spark_pipeline.explain import explain

    with quiet_native_output((LOGS_DIR / f"{config.job_name}-validate.log").absolute()):
        try:
            explain(config)
        except (OncelogError, ValueError) as e:
            return [f"{path}: {e}"]
    return []


def log_problems(path: Path, config: JobConfig) -> list[str]:
    """Folders the job would share with other jobs of its log (a SQLite log not yet created has none)."""
    from spark_pipeline.launcher import check_own_folders

    scheme, location, _ = parse_url(config.log_url)
    if scheme == "sqlite" and not Path(location).exists():
        return []
    try:
        with open_log(config.log_url, config.log_settings) as log:
            state, _ = Projector(log).rebuild()
        check_own_folders(config, state)
    except ConfigError as e:
        return [f"{path}: {e}"]
    except OncelogError as e:
        return [f"{path}: cannot read the log {redact_url(config.log_url)} to compare folders with its other jobs: "
                f"{e}"]
    return []


def shared_problems(verdicts: Sequence[Verdict]) -> None:
    """Record, on the later file, two valid jobs with one job.name or with equal or nested folders."""
    valid = [(v, v.config) for v in verdicts if v.config is not None]
    for index, (later, config) in enumerate(valid):
        for earlier, other in valid[:index]:
            if other.job_name == config.job_name:
                later.problems.append(f"{later.file}: 'job.name' {later.job!r} is already the name of the job in "
                                      f"{earlier.file}")
                continue
            later.problems += [f"{later.file}: {message} (job {earlier.job!r} is defined in {earlier.file})"
                               for message in overlaps(JobRoots.of(other), JobRoots.of(config))]


def validate(jobs: Annotated[list[Path], typer.Argument(
                 help="Job files, or folders of job files.", show_default=False)],
             conf: Conf = None, log_url: LogUrl = None,
             check_log: Annotated[bool, typer.Option(
                 "--check-log", help="Also read each job's log and refuse folders another job of that log uses.")]
             = False,
             deep: Annotated[bool, typer.Option(
                 "--deep", help="Also plan each job as `run --explain` does, with Spark: its SQL analysed over the "
                                "source's columns.")] = False,
             as_json: AsJson = False) -> None:
    """Check job files as `run` does before it runs anything (keys, values, constructs, folders, the stores they
    name), running nothing.

    Exit 0 when every job is valid, 1 when any is not, 2 on a usage error (no such file)."""
    overrides = parse_conf(conf)
    verdicts = [check_job(path, overrides, log_url, check_log, deep) for path in job_files(jobs)]
    shared_problems(verdicts)
    out = stdout_console()
    if as_json:
        out.print_json(json.dumps([v.as_json() for v in verdicts]))
    else:
        for v in verdicts:
            if v.valid:
                out.print(f"OK       {v.file} (job {v.job})", markup=False)
            else:
                out.print(f"INVALID  {v.file} ({len(v.problems)} problem{'s' if len(v.problems) != 1 else ''})",
                          markup=False)
            for line in [*v.problems, *(f"note: {n}" for n in v.notes)]:
                out.print(f"  {line}", markup=False)
    raise typer.Exit(ExitCode.OK if all(v.valid for v in verdicts) else ExitCode.VERDICT)


def register(app: typer.Typer) -> None:
    """Mount the pipeline sub-commands on the oncelog command."""
    app.command("run")(run)
    app.command("recover")(recover)
    app.command("validate")(validate)
    app.command("schedule")(schedule)
