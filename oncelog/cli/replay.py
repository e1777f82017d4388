"""The replay sub-commands: rebuild, state, replay, runs, audit, verify, tail, follow, gc. Each is a thin shell over its
Python API; how they print and exit is `oncelog.cli.console`'s policy (docs/cli.md)."""

from __future__ import annotations

import json
import re
import secrets
import shlex
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from events.errors import ConfigError, EventDecodeError, LogNotStableError, OncelogError
from events.log import DEFAULT_URL, EventLog, Offsets, open_log, parse_url
from events.log.kafka.config import redact_message, redact_url
from events.log.lock import HolderStatus
from events.model import LoggedEvent
from events.registry import EVENT_TYPES_BY_NAME
from filesystems.base import FileSystemError
from oncelog.cli.console import (
    ExitCode,
    TakesTheLogByOption,
    fail,
    stderr_console,
    stdout_console,
    suggest,
    warn,
)
from projections.projector import ProjectionStopped, Projector
from projections.state import State
from projections.timefmt import when
from projections.views import RunView
from replay.audit import AuditTimeline, RunNotFoundError, audit
from replay.audit_html import write_html
from replay.content import ContentCheck
from replay.history_html import write_history_html
from replay.render import (
    audit_blocks,
    audit_json,
    fold_json,
    runs_blocks,
    runs_json,
    state_blocks,
    state_json,
    verify_json,
)
from replay.retention import gc as run_gc
from replay.sheet import Block, show
from replay.subscriptions import COMMIT_EVENTS, OnError, error_handler, event_summary, follow, watch
from replay.time_travel import parse_until
from replay.verify import VerifyReport
from replay.verify import verify as run_verify

LogUrl = Annotated[str, typer.Option(
    "--log", envvar="ONCELOG_LOG", help="The log: sqlite:///path or kafka://host:port?topic=… (flag > $ONCELOG_LOG > "
                                        "default).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
AllowProblems = Annotated[bool, typer.Option(
    "--allow-problems", help="Exit 0 even if the log has records the fold could not use (they are still shown).")]
Job = Annotated[str | None, typer.Option("--job", help="Only this job.")]
LATEST = "latest"
"""The run id `audit` reads as: the latest run (of --job, if given)."""
_PER_PARTITION = re.compile(r"^\d+:\d+(,\d+:\d+)*$")
_AGO = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


@contextmanager
def opened(url: str) -> Iterator[EventLog]:
    """The log at url; a SQLite file that does not exist is an error (reading must not create one)."""
    if url.startswith("sqlite:"):
        _, location, _ = parse_url(url)
        if not Path(location).exists():
            raise fail(f"no log at {location} (log URL {redact_url(url)}, from --log, $ONCELOG_LOG or the default)"
                       f"{missing_log_hint(location)}")
    try:
        with open_log(url) as log:
            yield log
    except OncelogError as e:
        raise fail(redact_message(str(e), url)) from e


def missing_log_hint(location: str) -> str:
    """What to do about a SQLite log not found. A relative path (`sqlite:///tmp/x.db` is tmp/x.db, below the current
    folder) is said to be one, with the URL of the absolute path a user most likely meant when a log is there."""
    what_to_do = "; run a job first, or point --log at one"
    if Path(location).is_absolute():
        return what_to_do
    absolute = Path("/") / location
    if absolute.exists():
        return (f", but there is one at {absolute}: an absolute path takes four slashes, "
                f"--log {shlex.quote(f'sqlite:///{absolute}')}")
    return f", a path relative to {Path.cwd()} (an absolute path takes four slashes: sqlite:////…){what_to_do}"


PINNED_WAIT_S = 3.0
"""How long `state` and `verify` wait for another writer's open transaction to end before saying that one pins the
log (a read_committed fold stops where it began)."""


def warn_if_pinned(log: EventLog, command: str) -> None:
    """Say so when another writer's open transaction pins the log: the fold stops short of it, silently otherwise."""
    try:
        log.await_stable(timeout_s=PINNED_WAIT_S)
    except LogNotStableError as e:
        warn(f"{e}. What `{command}` shows stops at the last stable offset: it leaves out every event after the open "
             f"transaction; `oncelog recover JOB_FILE` of the job whose writer it was aborts it at once")


class RateColumn(ProgressColumn):
    """Events per second of a progress task."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed or 0:,.0f} ev/s")


@contextmanager
def progress_bar(what: str, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A spinner with events folded and events/s, on stderr in a terminal; nothing otherwise or when quiet (JSON)."""
    console = stderr_console()
    if quiet or not console.is_terminal:
        yield lambda count: None
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed:,} events"),
                  RateColumn(), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda count: bar.update(task, completed=count)


def emit(document: dict[str, Any], as_json: bool, blocks: Callable[[dict[str, Any]], list[Block]]) -> None:
    """Print a document as JSON, or as the blocks made of it."""
    if as_json:
        stdout_console().print_json(json.dumps(document, default=str))
    else:
        show(blocks(document), stdout_console())


def judge_problems(state: State, allow: bool) -> None:
    """Exit 1 when the fold met records it could not use, unless the user allows them."""
    if state.problem_count == 0:
        return
    first = state.problems[0]
    message = (f"{state.problem_count} record(s) of the log could not be used (first at {first.where()}, "
               f"{first.kind}: {first.message})")
    if allow:
        warn(message)
        return
    raise fail(f"{message}; --allow-problems exits 0 anyway", ExitCode.VERDICT)


def known_jobs(state: State) -> set[str]:
    """Every job the state knows of: with runs, datasets or sequences."""
    return set(state.jobs) | {j for j, _ in state.datasets} | {s.job for s in state.sequences.values()}


def check_names(state: State, urn: str | None, job: str | None, where: str) -> None:
    """Exit 2 naming an unknown job or dataset, with close matches (`where`, a log URL, shown redacted)."""
    where = redact_url(where)
    if job is not None and job not in known_jobs(state):
        raise fail(f"no job {job!r} in {where}{suggest('job', job, known_jobs(state))}")
    if urn is None:
        return
    urns = {u for j, u in state.datasets if job is None or j == job} | {
        s.dataset_urn for s in state.sequences.values() if job is None or s.job == job}
    if urn not in urns:
        of = f" of job {job!r}" if job is not None else ""
        raise fail(f"no dataset {urn!r}{of} in {where}{suggest('dataset', urn, urns)}")


def rebuild(log_url: LogUrl = DEFAULT_URL,
            from_snapshot: Annotated[bool, typer.Option(
                "--from-snapshot", help="Start from the latest snapshot instead of the beginning.")] = False,
            stop_on_error: Annotated[bool, typer.Option(
                "--stop-on-error", help="Stop at the first record that cannot be used (exit 1).")] = False,
            allow_problems: AllowProblems = False, as_json: AsJson = False) -> None:
    """Rebuild every projection from the log, then write a fresh snapshot."""
    with opened(log_url) as log, progress_bar("Folding the log", as_json) as progress:
        projector = Projector(log, stop_on_error=stop_on_error)
        try:
            state, report = projector.rebuild(use_snapshot=from_snapshot, progress=progress)
        except ProjectionStopped as e:
            raise fail(str(e), ExitCode.VERDICT) from e
        except OncelogError as e:
            raise fail(str(e)) from e
        snapshot = projector.save_snapshot(state)
    document = {**fold_json(report), "snapshot_bytes": len(snapshot.data), "offsets": snapshot.offsets,
                "problems": state.problem_count}
    if as_json:
        stdout_console().print_json(json.dumps(document))
    else:
        stdout_console().out(
            f"Folded {report.events:,} events in {report.seconds:.2f}s ({report.events_per_second:,.0f} ev/s)"
            f"{' from the snapshot' if report.from_snapshot else ''}; snapshot of {len(snapshot.data):,} bytes "
            f"written; {state.problem_count} problem(s).", highlight=False)
    judge_problems(state, allow_problems)


def holder_statuses(log: EventLog, current: State) -> dict[str, HolderStatus]:
    """What became of each job's lock holder that the log shows holding it (no release recorded), asked of the
    store's own job lock."""
    return {j: log.job_lock(j).holder_status(v.lock_holder, v.lock_run_id or "")
            for j, v in current.jobs.items() if v.lock_holder is not None}


def state(urn: Annotated[str | None, typer.Argument(help="Show only this dataset URN.")] = None,
          job: Job = None, log_url: LogUrl = DEFAULT_URL, allow_problems: AllowProblems = False,
          as_json: AsJson = False) -> None:
    """Datasets with their watermarks and last run; pending commit sequences; job locks still held, and whether
    their holder is alive, dead, fenced or unknown (on another host)."""
    with opened(log_url) as log:
        warn_if_pinned(log, "state")
        with progress_bar("Catching up", as_json) as progress:
            current, _ = Projector(log).rebuild(progress=progress)
        holders = holder_statuses(log, current)
    check_names(current, urn, job, log_url)
    emit(state_json(current, urn, job, holders), as_json, state_blocks)
    judge_problems(current, allow_problems)


def end_description(end: Offsets) -> str:
    """A log's last offsets, in the form --until takes."""
    last = {p: e - 1 for p, e in sorted(end.items())}
    if len(set(last.values())) == 1:
        return f"its last offset is {next(iter(last.values()))}"
    return "its last offsets are " + ",".join(f"{p}:{o}" for p, o in last.items())


def checked_until(log: EventLog, until: str) -> Offsets:
    """Where a replay stops; an offset past the log's end, or a partition left out, is an error naming them."""
    cut = parse_until(log, until)
    text = until.strip()
    if _PER_PARTITION.match(text):
        named = {int(pair.split(":")[0]) for pair in text.split(",")}
        missing = sorted(set(range(log.partitions)) - named)
        if missing:
            raise ConfigError(f"--until {text}: no offset for partition(s) {', '.join(map(str, missing))}; the log has "
                              f"{log.partitions} partitions, give P:N for each (or a time)")
    end = log.end_offsets()
    beyond = sorted(p for p, o in cut.items() if o > end.get(p, 0))
    if beyond:
        raise ConfigError(f"--until {text}: past the end of the log in partition(s) {', '.join(map(str, beyond))}; "
                          f"{end_description(end)}")
    return cut


def replay(until: Annotated[str, typer.Option(help="An offset (N, or P:N,… for every partition, inclusive) or an "
                                                   "ISO-8601 time.")],
           urn: Annotated[str | None, typer.Argument(help="Show only this dataset URN.")] = None,
           job: Job = None, log_url: LogUrl = DEFAULT_URL, allow_problems: AllowProblems = False,
           as_json: AsJson = False) -> None:
    """The state as of a point in the log's history (time travel)."""
    with opened(log_url) as log, progress_bar("Replaying", as_json) as progress:
        try:
            cut = checked_until(log, until)
            past, report = Projector(log).rebuild(use_snapshot=True, until=cut, progress=progress)
        except OncelogError as e:
            raise fail(str(e)) from e
    check_names(past, urn, job, f"{log_url} as of --until {until}")
    document = {"until": until, **state_json(past, urn, job), "fold": fold_json(report)}
    emit(document, as_json, state_blocks)
    judge_problems(past, allow_problems)


def parse_since(since: str) -> datetime:
    """`--since`: an ISO-8601 time (no zone means UTC) or a span ago: 30m, 12h, 7d."""
    ago = _AGO.match(since.strip())
    if ago:
        return datetime.now(UTC) - timedelta(**{_UNITS[ago.group(2)]: int(ago.group(1))})
    try:
        moment = datetime.fromisoformat(since.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise ConfigError(f"--since {since!r} is neither an ISO-8601 time (2026-11-21T12:00:00Z) nor a span ago "
                          "(30m, 12h, 7d)") from e
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def runs(job: Job = None,
         since: Annotated[str | None, typer.Option(
             help="Only runs started at or after this ISO-8601 time, or this long ago: 30m, 12h, 7d.")] = None,
         log_url: LogUrl = DEFAULT_URL, allow_problems: AllowProblems = False, as_json: AsJson = False) -> None:
    """The runs of every job (or one), oldest first: status, duration, records, datasets committed and skipped."""
    try:
        start = None if since is None else parse_since(since)
    except ConfigError as e:
        raise fail(str(e)) from e
    with opened(log_url) as log, progress_bar("Catching up", as_json) as progress:
        current, _ = Projector(log).rebuild(progress=progress)
    check_names(current, None, job, log_url)
    views = sorted((r for r in current.runs.values() if (job is None or r.job == job)
                    and (start is None or (r.started_at is not None and r.started_at >= start))), key=run_order)
    emit(runs_json(views), as_json, runs_blocks)
    judge_problems(current, allow_problems)


def history(job: Annotated[str, typer.Argument(help="The job whose runs to chart.")],
            html: Annotated[Path, typer.Option(help="Write the self-contained HTML page here.")],
            last: Annotated[int, typer.Option(min=1, help="How many of the job's latest runs to chart.")] = 50,
            log_url: LogUrl = DEFAULT_URL) -> None:
    """A job's history as an HTML page: duration, records and outcome of its last runs, as charts and a table."""
    with opened(log_url) as log, progress_bar("Catching up", False) as progress:
        current, _ = Projector(log).rebuild(progress=progress)
    check_names(current, None, job, log_url)
    try:
        write_history_html(current, job, html, last)
    except OncelogError as e:
        raise fail(str(e)) from e
    stderr_console().out(f"wrote {html}", highlight=False)


def run_order(view: RunView) -> tuple[datetime, str, str]:
    """Runs by start time (unknown first), then job and id."""
    return view.started_at or datetime.min.replace(tzinfo=UTC), view.job, view.run_id


def resolve_run(state: State, wanted: str, job: str | None, where: str) -> RunView:
    """The one run `wanted` names: `latest`, an id, or a unique prefix of one; exit 2 if none or several."""
    check_names(state, None, job, where)
    candidates = [r for r in state.runs.values() if job is None or r.job == job]
    if wanted == LATEST:
        if not candidates:
            raise fail(f"no runs{f' of job {job!r}' if job else ''} in {where}")
        return max(candidates, key=run_order)
    exact = [r for r in candidates if r.run_id == wanted]
    matches = exact or [r for r in candidates if r.run_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    of = f" of job {job!r}" if job else ""
    if not matches:
        raise fail(f"no run {wanted!r}{of} in {where}{suggest('run', wanted, {r.run_id for r in candidates})}")
    listed = ", ".join(f"{r.job} {r.run_id}" for r in sorted(matches, key=run_order)[:10])
    more = f" and {len(matches) - 10} more" if len(matches) > 10 else ""
    hint = "name the job with --job" if exact else "give more of the id"
    raise fail(f"run {wanted!r}{of} is ambiguous in {where}: {listed}{more}; {hint}")


def find_run(log: EventLog, wanted: str, job: str | None, progress: Callable[[int], None]) -> AuditTimeline:
    """The timeline of the run `wanted` names; a full id is read at once, `latest` or a prefix needs the fold first."""
    if wanted != LATEST:
        try:
            return audit(log, wanted, job, progress)
        except RunNotFoundError:
            pass  # a prefix, several jobs' run, or no run at all: the fold says which
    current, _ = Projector(log).rebuild(progress=progress)
    view = resolve_run(current, wanted, job, log.url)
    try:
        return audit(log, view.run_id, view.job, progress)
    except RunNotFoundError as e:
        raise fail(str(e)) from e


def audit_run(run_id: Annotated[str, typer.Argument(
                  help="The run to audit: its id, a unique prefix of it, or 'latest'.")],
              job: Annotated[str | None, typer.Option(
                  help="The run's job, if several jobs have this run id (with 'latest': that job's latest).")] = None,
              html: Annotated[Path | None, typer.Option(help="Also write a self-contained HTML report here.")] = None,
              log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """A run as a timeline: work units, task attempts and retries, commit steps with timings, watermarks moved."""
    with opened(log_url) as log, progress_bar("Reading the log", as_json) as progress:
        try:
            timeline = find_run(log, run_id, job, progress)
        except OncelogError as e:
            raise fail(str(e)) from e
    if html is not None:
        write_html(timeline, html)
        stderr_console().out(f"wrote {html}", highlight=False)
    emit(audit_json(timeline), as_json, audit_blocks)


class VerifyDisplay:
    """What `verify` shows on stderr in a terminal: the fold's spinner (events folded, events/s), then the content
    check's bar (files, bytes, speed, time left); one live display at a time, nothing when quiet or in a pipe."""

    def __init__(self, quiet: bool) -> None:
        self.console = stderr_console()
        self.shown = not quiet and self.console.is_terminal
        self.bar: Progress | None = None
        self.task = TaskID(0)
        self.files_done = 0
        if self.shown:
            self._open(Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                TextColumn("{task.completed:,} events"), RateColumn(), TimeElapsedColumn(),
                                console=self.console, transient=True), "Verifying", None)

    def _open(self, bar: Progress, what: str, total: int | None) -> None:
        """Show this display instead of the one shown."""
        self.close()
        self.bar = bar
        bar.start()
        self.task = bar.add_task(what, total=total, files=0)

    def events(self, count: int) -> None:
        """Events folded so far."""
        if self.bar is not None:
            self.bar.update(self.task, completed=count)

    def started(self, files: int, size: int) -> None:
        """The content check begins: `files` files, `size` bytes."""
        if self.shown:
            self._open(Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.fields[files]:,}/" + f"{files:,} files"), DownloadColumn(),
                                TransferSpeedColumn(), TimeRemainingColumn(), console=self.console, transient=True),
                       "Checking content", size)

    def checked(self, size: int) -> None:
        """One more file checked."""
        self.files_done += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=size, files=self.files_done)

    def close(self) -> None:
        """Remove the display shown."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


@contextmanager
def verify_display(quiet: bool) -> Iterator[VerifyDisplay]:
    """A VerifyDisplay, removed at the end (an error or Ctrl-C too)."""
    display = VerifyDisplay(quiet)
    try:
        yield display
    finally:
        display.close()


def content_check(publish_dir: str | None, content: bool, sample: int | None, seed: int | None) -> ContentCheck | None:
    """What `--content`, `--sample` and `--seed` ask for; they need a publish folder, and a seed needs a sample."""
    if publish_dir is None and (content or sample is not None):
        raise fail("--content and --sample check the files under a publish folder: add --publish-dir DIR")
    if seed is not None and sample is None:
        raise fail("--seed chooses the files of a sample: add --sample N")
    if not content and sample is None:
        return None
    return ContentCheck(sample=sample, seed=secrets.randbelow(1_000_000) if seed is None else seed)


def files_line(report: VerifyReport, content: ContentCheck | None) -> str | None:
    """What the check of the published files covered, in one line (None without a publish folder)."""
    files = report.files
    if files is None:
        return None
    if files.contents is None:
        return (f"• files: {files.sizes:,} published under the folder, each found with its recorded size (content "
                f"not read: --content reads it)")
    if files.sampled_from is None or content is None:
        return f"• files: {files.sizes:,} published under the folder, each checked for its recorded size and sha256"
    return (f"• files: {files.sizes:,} published under the folder, each checked for its recorded size; sampled "
            f"{files.contents:,} of them at random for their sha256 (--sample {content.sample} --seed {files.seed} "
            f"repeats this choice)")


def verify(publish_dir: Annotated[str | None, typer.Option(
        help="Also check the files in this folder (a path, hdfs://… or s3a://…): each was published by a completed "
             "sequence, and each file published there is still there with the size its sequence recorded.")] = None,
           content: Annotated[bool, typer.Option(
               "--content", help="With --publish-dir: also compare each published file's SHA-256 with the one its "
                                 "sequence recorded (files are read, several at once; on S3 the checksum the store "
                                 "keeps is used when it has one).")] = False,
           sample: Annotated[int | None, typer.Option(
               min=1, help="With --publish-dir: compare the SHA-256 of only N published files, chosen at random "
                           "(implies --content; sizes are still checked for all).")] = None,
           seed: Annotated[int | None, typer.Option(
               min=0, help="The seed choosing the --sample (printed with the result; default: a random one).")] = None,
           log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Check the invariants over the whole history; exit code 1 with the list of violations if any is broken."""
    from filesystems.router import FileSystems
    from spark_pipeline.tables.storage import TableStorage  # Arrow: loaded only where tables are checked

    check = content_check(publish_dir, content, sample, seed)
    try:
        with opened(log_url) as log:
            warn_if_pinned(log, "verify")
            with verify_display(as_json) as display:
                report = run_verify(log, publish_dir, display.events, content=check, content_progress=display,
                                    tables=TableStorage.of(FileSystems.of({})).iceberg_properties)
    except FileSystemError as e:
        raise fail(str(e)) from e
    if as_json:
        stdout_console().print_json(json.dumps(verify_json(report)))
    else:
        out = stdout_console()
        files = files_line(report, check)
        show([Text.assemble(("✗ ", "red"), str(violation)) for violation in report.violations]
             + [f"• pending: {pending}" for pending in report.pending] + ([files] if files else []), out)
        verdict = (Text("OK", style="green") if report.ok
                   else Text(f"{len(report.violations)} violation(s)", style="red"))
        show([Text.assemble(verdict, f": {report.events:,} events, {report.sequences:,} commit sequences, "
                                     f"{report.published_files:,} published files checked.")], out)
    if not report.ok:
        raise typer.Exit(ExitCode.VERDICT)


def event_types(names: Collection[str]) -> tuple[str, ...]:
    """Event type names as the log spells them, matched case-insensitively; an unknown one exits 2 with suggestions."""
    by_lower = {name.lower(): name for name in EVENT_TYPES_BY_NAME}
    for name in names:
        if name.lower() not in by_lower:
            raise fail(f"unknown event type {name!r}{suggest('event type', name, set(EVENT_TYPES_BY_NAME), 100)}")
    return tuple(by_lower[name.lower()] for name in names)


def event_line(logged: LoggedEvent, console: Console) -> Text:
    """One event on one line: when, where, type, key, then what it says (paths and counts), if anything."""
    event = logged.event
    summary = event_summary(event)
    return Text.assemble(f"{when(event.emitted_at)} [{logged.partition}]@{logged.offset} ",
                         (event.event_type(), "bold" if console.is_terminal else ""), f" {event.key}",
                         f"  {summary}" if summary else "")


def event_printer(as_json: bool) -> Callable[[LoggedEvent], None]:
    """How `tail` and `follow` print an event: a JSON line, or one line (bold type in a terminal), flushed."""
    out = stdout_console()

    def show_event(logged: LoggedEvent) -> None:
        event = logged.event
        if as_json:
            sys.stdout.write(json.dumps({"topic": logged.topic, "partition": logged.partition, "offset": logged.offset,
                                         "event_id": str(event.event_id), "type": event.event_type(), "key": event.key,
                                         "event": event.model_dump(mode="json")}) + "\n")
        elif out.is_terminal:
            out.print(event_line(logged, out), soft_wrap=True)
        else:
            sys.stdout.write(event_line(logged, out).plain + "\n")
        sys.stdout.flush()

    return show_event


def report_skipped(error: EventDecodeError) -> None:
    """A record `tail` or `follow` cannot read, on one line of stderr."""
    warn(f"skipped {error} (--on-error stop stops at such records)")


def tail(types: Annotated[list[str] | None, typer.Option(
             "--type", help="Only events of this type, any case (repeatable).")] = None,
         group: Annotated[str, typer.Option(help="Consumer group: a restarted tail resumes after its commits.")]
         = "oncelog-tail",
         max_events: Annotated[int | None, typer.Option("--max", min=1, help="Stop after this many events.")] = None,
         idle_timeout: Annotated[float | None, typer.Option(
             min=0, help="Stop after this many seconds without events.")] = None,
         on_error: Annotated[OnError, typer.Option(
             "--on-error", help="At a record that cannot be decoded (damaged, or of a newer schema): skip reports it "
                                "on stderr and goes on; stop exits 1 there.")] = OnError.SKIP,
         log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Follow the log's events as a downstream subscriber (at least once; dedupe on the event id): one line each."""
    wanted = event_types(types or ())
    with opened(log_url) as log:
        with subscriber_errors():
            follow(log, group, event_printer(as_json), wanted, max_events=max_events, idle_timeout_s=idle_timeout,
                   on_error=error_handler(on_error, report_skipped))


@contextmanager
def subscriber_errors() -> Iterator[None]:
    """How `tail` and `follow` end on an undecodable record (--on-error stop), a log error, or Ctrl-C."""
    try:
        yield
    except EventDecodeError as e:
        raise fail(f"{e}; stopped there (--on-error stop); --on-error skip reports it and goes on",
                   ExitCode.VERDICT) from e
    except OncelogError as e:
        raise fail(str(e)) from e
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def follow_commits(types: Annotated[list[str] | None, typer.Option(
                       "--type", help="Show events of this type instead, any case (repeatable; default: runs "
                                      "starting and ending, datasets published or abandoned).")] = None,
                   job: Job = None,
                   since: Annotated[str | None, typer.Option(
                       help="Start at this ISO-8601 time, or this long ago (30m, 12h, 7d); default: now.")] = None,
                   max_events: Annotated[int | None, typer.Option("--max", min=1,
                                                                  help="Stop after this many events.")] = None,
                   idle_timeout: Annotated[float | None, typer.Option(
                       min=0, help="Stop after this many seconds without events.")] = None,
                   on_error: Annotated[OnError, typer.Option(
                       "--on-error", help="At a record that cannot be decoded: skip reports it on stderr and goes "
                                          "on; stop exits 1 there.")] = OnError.SKIP,
                   log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Follow commits as they happen, like `tail -f`: each run's start and end and each dataset published, one line
    each with its paths and counts. Reads only (no consumer group: `tail` is the resumable subscriber); Ctrl-C ends."""
    wanted = event_types(types) if types else COMMIT_EVENTS
    try:
        start_at = parse_since(since) if since else None
    except ConfigError as e:
        raise fail(str(e)) from e
    show_event = event_printer(as_json)

    def shown(logged: LoggedEvent) -> None:
        if job is None or getattr(logged.event, "job", None) == job:
            show_event(logged)

    with opened(log_url) as log:
        start = None if start_at is None else log.offsets_for_time(int(start_at.timestamp() * 1000))
        with subscriber_errors():
            watch(log, shown, wanted, start=start, max_events=max_events, idle_timeout_s=idle_timeout,
                  on_error=error_handler(on_error, report_skipped))


def lineage(since: Annotated[str, typer.Option(
                help="Runs started at or after this ISO-8601 time, or this long ago: 30m, 12h, 7d.")],
            job: Job = None, log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Send past runs to OpenLineage (a backfill from the log): each run's START and its end, with inputs and outputs.

    OpenLineage's standard configuration says where (OPENLINEAGE_URL, openlineage.yml …); see docs/lineage.md."""
    from replay.lineage import run_lineage  # OpenLineage's client: only this command needs it (0.18 s to import)
    from replay.lineage_client import LineageClient, LineageError, past_runs

    try:
        start = parse_since(since)
        client = LineageClient.from_environment()
    except ConfigError as e:
        raise fail(str(e)) from e
    if client is None:
        raise fail("OpenLineage is not configured: set OPENLINEAGE_URL (or OPENLINEAGE_CONFIG, or put an "
                   "openlineage.yml in this folder or ~/.openlineage/); see docs/lineage.md")
    unreadable: list[EventDecodeError] = []
    with opened(log_url) as log, progress_bar("Reading the log", as_json) as progress:
        runs = past_runs(log, start, job, progress, unreadable.append)
    events = [event for run in runs for event in run_lineage(run, client.settings)]
    for error in unreadable:
        warn(f"skipped {error}")
    done = 0
    try:
        with sending_bar(len(events), as_json) as sent:
            for event in events:
                client.send(event)
                done += 1
                sent(done)
    except LineageError as e:
        raise fail(f"{e}; {done} of {len(events)} event(s) were sent (sending them again is harmless: the run ids "
                   "are the same)", ExitCode.VERDICT) from e
    finally:
        client.close()
    document = {"runs": len(runs), "events": len(events), "endpoint": client.endpoint, "unreadable": len(unreadable)}
    if as_json:
        stdout_console().print_json(json.dumps(document))
    else:
        stdout_console().out(f"sent {len(events)} OpenLineage event(s) of {len(runs)} run(s) to {client.endpoint}",
                             highlight=False)


@contextmanager
def sending_bar(total: int, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A bar of events sent out of total, on stderr in a terminal; nothing otherwise or when quiet (JSON)."""
    console = stderr_console()
    if quiet or not console.is_terminal:
        yield lambda count: None
        return
    with Progress(TextColumn("Sending to OpenLineage"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("send", total=total)
        yield lambda count: bar.update(task, completed=count)


def gc(keep_runs: Annotated[int, typer.Option(help="Finished runs to keep per job (at least 1).")],
       dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be deleted.")] = False,
       log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Retention: tombstone the transitions of old runs; what was published (plans, watermarks, states) stays."""
    with opened(log_url) as log, progress_bar("Collecting", as_json) as progress:
        try:
            report = run_gc(log, keep_runs, progress=progress, dry_run=dry_run)
        except OncelogError as e:
            raise fail(str(e)) from e
    document = {"dry_run": dry_run, "runs_deleted": [f"{j} / {r}" for j, r in report.runs_deleted],
                "sequences_kept": report.sequences_kept, "tombstones": report.tombstones}
    if as_json:
        stdout_console().print_json(json.dumps(document))
    else:
        verb = "would delete" if dry_run else "deleted"
        stdout_console().out(f"{verb} {len(report.runs_deleted)} run(s) ({report.tombstones:,} transitions); kept the "
                             f"plans, watermarks and states of their {len(report.sequences_kept)} commit sequence(s).",
                             highlight=False)


def register(app: typer.Typer) -> None:
    """Mount the replay sub-commands on the oncelog command."""
    app.command("rebuild", cls=TakesTheLogByOption)(rebuild)
    app.command("state", cls=TakesTheLogByOption)(state)
    app.command("replay", cls=TakesTheLogByOption)(replay)
    app.command("runs", cls=TakesTheLogByOption)(runs)
    app.command("audit", cls=TakesTheLogByOption)(audit_run)
    app.command("history", cls=TakesTheLogByOption)(history)
    app.command("verify", cls=TakesTheLogByOption)(verify)
    app.command("tail", cls=TakesTheLogByOption)(tail)
    app.command("follow", cls=TakesTheLogByOption)(follow_commits)
    app.command("lineage", cls=TakesTheLogByOption)(lineage)
    app.command("gc", cls=TakesTheLogByOption)(gc)
