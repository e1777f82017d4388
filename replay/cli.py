"""The replay sub-commands: rebuild, state, replay, audit, verify, tail, gc. Each is a thin shell over its Python API."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from events.errors import OncelogError
from events.log import DEFAULT_URL, EventLog, open_log
from events.model import LoggedEvent
from filesystems.base import FileSystemError
from projections.projector import Projector
from replay.audit import audit
from replay.audit_html import write_html
from replay.render import audit_json, audit_tables, fold_json, state_json, state_tables, verify_json, when
from replay.retention import gc as run_gc
from replay.subscriptions import follow
from replay.time_travel import state_as_of
from replay.verify import verify as run_verify

LogUrl = Annotated[str, typer.Option("--log", envvar="ONCELOG_LOG", help="The log: sqlite:///path or kafka://host:port?topic=…")]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]

console = Console(stderr=True)
out = Console()


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print an error a user can act on; the caller raises the returned Exit."""
    console.print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


@contextmanager
def opened(url: str) -> Iterator[EventLog]:
    """The log at url; a SQLite file that does not exist is an error (reading must not create one)."""
    if url.startswith("sqlite:"):
        from events.log import parse_url

        _, location, _ = parse_url(url)
        if not Path(location).exists():
            raise fail(f"no log at {location} (from --log {url}); run a job first, or point --log at one")
    try:
        with open_log(url) as log:
            yield log
    except OncelogError as e:
        raise fail(str(e)) from e


class RateColumn(ProgressColumn):
    """Events per second of a progress task."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed or 0:,.0f} ev/s")


@contextmanager
def progress_bar(what: str, quiet: bool) -> Iterator[Callable[[int], None]]:
    """A spinner with events folded and events/s, on stderr; nothing when quiet (JSON output)."""
    if quiet or not console.is_terminal:
        yield lambda count: None
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed:,} events"),
                  RateColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(what, total=None)
        yield lambda count: bar.update(task, completed=count)


def emit(document: dict[str, Any], as_json: bool, tables: Callable[[dict[str, Any]], Any]) -> None:
    if as_json:
        out.print_json(json.dumps(document, default=str))
    else:
        out.print(tables(document))


def rebuild(log_url: LogUrl = DEFAULT_URL, from_snapshot: Annotated[bool, typer.Option(
        "--from-snapshot", help="Start from the latest snapshot instead of the beginning.")] = False,
            stop_on_error: Annotated[bool, typer.Option(help="Stop at the first record that cannot be used.")] = False,
            as_json: AsJson = False) -> None:
    """Rebuild every projection from the log, then write a fresh snapshot."""
    with opened(log_url) as log, progress_bar("Folding the log", as_json) as progress:
        projector = Projector(log, stop_on_error=stop_on_error)
        try:
            state, report = projector.rebuild(use_snapshot=from_snapshot, progress=progress)
        except OncelogError as e:
            raise fail(str(e)) from e
        snapshot = projector.save_snapshot(state)
    document = {**fold_json(report), "snapshot_bytes": len(snapshot.data), "offsets": snapshot.offsets,
                "problems": state.problem_count}
    if as_json:
        out.print_json(json.dumps(document))
    else:
        out.print(f"Folded {report.events:,} events in {report.seconds:.2f}s ({report.events_per_second:,.0f} ev/s)"
                  f"{' from the snapshot' if report.from_snapshot else ''}; snapshot of {len(snapshot.data):,} bytes "
                  f"written; {state.problem_count} problem(s).")


def state(urn: Annotated[str | None, typer.Argument(help="Show only this dataset URN.")] = None,
          job: Annotated[str | None, typer.Option(help="Show only this job.")] = None,
          log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Datasets with their watermarks and last run; pending commit sequences."""
    with opened(log_url) as log, progress_bar("Catching up", as_json) as progress:
        current, _ = Projector(log).rebuild(progress=progress)
    document = state_json(current, urn, job)
    if urn is not None and not document["datasets"] and not document["pending_sequences"]:
        raise fail(f"no dataset {urn!r} in {log_url}", 1)
    emit(document, as_json, state_tables)


def replay(until: Annotated[str, typer.Option(help="An offset (N, or P:N,… per partition) or an ISO-8601 time.")],
           urn: Annotated[str | None, typer.Argument(help="Show only this dataset URN.")] = None,
           log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """The state as of a point in the log's history (time travel)."""
    with opened(log_url) as log, progress_bar("Replaying", as_json) as progress:
        try:
            past, report = state_as_of(log, until, progress)
        except OncelogError as e:
            raise fail(str(e)) from e
    document = {"until": until, **state_json(past, urn), "fold": fold_json(report)}
    emit(document, as_json, state_tables)


def audit_run(run_id: Annotated[str, typer.Argument(help="The run to audit.")],
              job: Annotated[str | None, typer.Option(help="The run's job, if several jobs have this run id.")] = None,
              html: Annotated[Path | None, typer.Option(help="Also write a self-contained HTML report here.")] = None,
              log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """A run as a timeline: work units, task attempts and retries, commit steps with timings, watermarks moved."""
    with opened(log_url) as log, progress_bar("Reading the log", as_json) as progress:
        try:
            timeline = audit(log, run_id, job, progress)
        except OncelogError as e:
            raise fail(str(e), 1) from e
    if html is not None:
        write_html(timeline, html)
        console.print(f"wrote {html}")
    emit(audit_json(timeline), as_json, audit_tables)


def verify(publish_dir: Annotated[str | None, typer.Option(
        help="Also check that every file in this folder (a path, hdfs://… or s3a://…) was published by a completed "
             "sequence, and that every file published there is still there.")] = None,
           log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Check the invariants over the whole history; exit code 1 with the list of violations if any is broken."""
    try:
        with opened(log_url) as log, progress_bar("Verifying", as_json) as progress:
            report = run_verify(log, publish_dir, progress)
    except FileSystemError as e:
        raise fail(str(e), 2) from e
    if as_json:
        out.print_json(json.dumps(verify_json(report)))
    else:
        for violation in report.violations:
            out.print(f"[red]✗[/] {violation}", highlight=False)
        for pending in report.pending:
            out.print(f"• pending: {pending}", highlight=False)
        verdict = "[green]OK[/]" if report.ok else f"[red]{len(report.violations)} violation(s)[/]"
        out.print(f"{verdict}: {report.events:,} events, {report.sequences:,} commit sequences, "
                  f"{report.published_files:,} published files checked.")
    if not report.ok:
        raise typer.Exit(1)


def tail(types: Annotated[list[str] | None, typer.Option("--type", help="Only events of this type (repeatable).")] = None,
         group: Annotated[str, typer.Option(help="Consumer group: a restarted tail resumes after its commits.")]
         = "oncelog-tail",
         max_events: Annotated[int | None, typer.Option("--max", help="Stop after this many events.")] = None,
         idle_timeout: Annotated[float | None, typer.Option(help="Stop after this many seconds without events.")]
         = None,
         log_url: LogUrl = DEFAULT_URL, as_json: AsJson = False) -> None:
    """Follow the log's events as a downstream subscriber (at least once; dedupe on the event id)."""

    def show(logged: LoggedEvent) -> None:
        event = logged.event
        if as_json:
            sys.stdout.write(json.dumps({"topic": logged.topic, "partition": logged.partition, "offset": logged.offset,
                                         "event_id": str(event.event_id), "type": event.event_type(), "key": event.key,
                                         "event": event.model_dump(mode="json")}) + "\n")
            sys.stdout.flush()
        else:
            out.print(f"{when(event.emitted_at)} [{logged.partition}]@{logged.offset} [bold]{event.event_type()}[/] "
                      f"{event.key}", highlight=False)

    with opened(log_url) as log:
        try:
            follow(log, group, show, types or (), max_events=max_events, idle_timeout_s=idle_timeout)
        except OncelogError as e:
            raise fail(str(e)) from e
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def gc(keep_runs: Annotated[int, typer.Option(help="Finished runs to keep per job.")],
       dry_run: Annotated[bool, typer.Option(help="Only say what would be deleted.")] = False,
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
        out.print_json(json.dumps(document))
    else:
        verb = "would delete" if dry_run else "deleted"
        out.print(f"{verb} {len(report.runs_deleted)} run(s) ({report.tombstones:,} transitions); kept the plans, "
                  f"watermarks and states of their {len(report.sequences_kept)} commit sequence(s).")


def register(app: typer.Typer) -> None:
    """Mount the replay sub-commands on the oncelog command."""
    app.command("rebuild")(rebuild)
    app.command("state")(state)
    app.command("replay")(replay)
    app.command("audit")(audit_run)
    app.command("verify")(verify)
    app.command("tail")(tail)
    app.command("gc")(gc)
