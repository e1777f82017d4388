"""A job's history as a self-contained HTML page: the durations, records and outcomes of its last N runs as inline
SVG charts, and a table of those runs with their errors as raised. No script, no external asset."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path

from events.errors import OncelogError
from projections.state import State
from projections.views import RunView
from replay.audit_html import STATUS_COLOURS, STYLE, nice_step, seconds_text

LABEL_WIDTH = 70
CHART_WIDTH = 900
DURATION_HEIGHT = 200
RECORDS_HEIGHT = 120
X_LABEL_GAP = 150
"""Pixels between the centres of two x labels (a label is about 100 wide): they never overlap."""


class JobNotFoundError(OncelogError):
    """The state has no run of that job."""


@dataclass(frozen=True)
class RunPoint:
    """One run of the job, as the history shows it."""

    run_id: str
    status: str
    started_at: datetime | None
    seconds: float | None
    """None while the run has no end in the log."""
    records: int
    datasets_committed: int
    datasets_abandoned: int
    datasets_skipped: int
    error: str | None


def run_point(view: RunView) -> RunPoint:
    seconds = (view.ended_at - view.started_at).total_seconds() if view.ended_at and view.started_at else None
    return RunPoint(view.run_id, view.status.name.lower(), view.started_at, seconds, view.records_written,
                    len(view.datasets_committed), len(view.datasets_abandoned), len(view.datasets_skipped), view.error)


def job_history(state: State, job: str, last: int = 50) -> list[RunPoint]:
    """The job's last `last` runs, oldest first; JobNotFoundError (naming the jobs there are) when it has none."""
    if last < 1:
        raise ValueError(f"last must be at least 1, got {last}")
    runs = state.runs_of(job)
    if not runs:
        known = sorted({j for j, _ in state.runs})
        raise JobNotFoundError(f"no run of job {job!r} in the log; its jobs: {', '.join(known) or 'none'}")
    return [run_point(view) for view in runs[-last:]]


def _colour(status: str) -> str:
    return STATUS_COLOURS.get(status, "#616161")


def bar_chart(points: Sequence[RunPoint], value: Callable[[RunPoint], float | None], height: int, kind: str,
              unit: Callable[[float], str], extra: Callable[[RunPoint], str]) -> str:
    """One bar per run, oldest on the left, coloured by outcome, on a y axis from 0 to a round maximum."""
    values = [value(p) for p in points]
    top = max([v for v in values if v is not None] + [1e-3])
    step = nice_step(top, 5)
    top = step * -(-top // step)
    slot = CHART_WIDTH / len(points)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{kind}-chart" width="{LABEL_WIDTH + CHART_WIDTH + 60}" '
             f'height="{height + 40}">']  # the last x label may reach past the bars by half its width
    for i in range(int(round(top / step)) + 1):
        y = 10 + height - height * i * step / top
        parts.append(f'<line x1="{LABEL_WIDTH}" y1="{y:.1f}" x2="{LABEL_WIDTH + CHART_WIDTH}" y2="{y:.1f}" '
                     f'stroke="#e0e0e0"/><text x="{LABEL_WIDTH - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{escape(unit(i * step))}</text>")
    for n, (point, v) in enumerate(zip(points, values)):
        bar = max(2.0, height * (v or 0) / top)
        x = LABEL_WIDTH + n * slot + slot * 0.15
        shown = "no end in the log" if v is None else unit(v)
        tip = f"{point.run_id} — {point.status} — {shown}" + extra(point)
        parts.append(f'<rect class="{kind}-bar status-{escape(point.status)}" x="{x:.1f}" y="{10 + height - bar:.1f}" '
                     f'width="{max(1.0, slot * 0.7):.1f}" height="{bar:.1f}" fill="{_colour(point.status)}" '
                     f'data-run="{escape(point.run_id)}" {_data(point)}><title>{escape(tip)}</title></rect>')
    parts += x_labels(points, height + 30)
    parts.append("</svg>")
    return "".join(parts)


def x_labels(points: Sequence[RunPoint], y: float) -> list[str]:
    """The x axis: runs' start times (one kind of label), under every k-th bar from the first, never closer than
    X_LABEL_GAP."""
    slot = CHART_WIDTH / len(points)
    chosen = range(0, len(points), max(1, math.ceil(X_LABEL_GAP / slot)))
    return [f'<text class="x-label" x="{LABEL_WIDTH + (n + 0.5) * slot:.1f}" y="{y}" text-anchor="middle">'
            f"{escape(_tick(points[n].started_at))}</text>" for n in chosen]


def _tick(moment: datetime | None) -> str:
    """A run's start as an x label: month-day and time of day, UTC (the run id and the full time are in the tip)."""
    return "no start" if moment is None else moment.strftime("%m-%d %H:%M:%S")


def _data(point: RunPoint) -> str:
    seconds = "" if point.seconds is None else f"{point.seconds:.3f}"
    return f'data-seconds="{seconds}" data-records="{point.records}"'


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _extra(point: RunPoint) -> str:
    return (f" — {point.records:,} records, {point.datasets_committed:,} datasets committed"
            + (f", {point.datasets_abandoned} abandoned" if point.datasets_abandoned else "")
            + (f", {point.datasets_skipped} skipped" if point.datasets_skipped else ""))


def _records(value: float) -> str:
    return f"{value:,.0f}"


def runs_table(points: Sequence[RunPoint]) -> str:
    head = "".join(f"<th>{c}" for c in ("run", "started", "status", "duration", "records", "committed", "abandoned",
                                         "skipped", "error"))
    rows = "".join(
        f"<tr><td>{escape(p.run_id)}<td>{escape(_when(p.started_at))}<td><span class='s-{escape(p.status)}'>"
        f"{escape(p.status)}</span><td class='n'>{'' if p.seconds is None else escape(seconds_text(p.seconds))}"
        f"<td class='n'>{p.records:,}<td class='n'>{p.datasets_committed:,}<td class='n'>{p.datasets_abandoned:,}"
        f"<td class='n'>{p.datasets_skipped:,}<td>"
        + (f"<pre class='error'>{escape(p.error)}</pre>" if p.error else "")
        for p in reversed(points))
    return f"<table id='runs'><thead><tr>{head}</thead><tbody>{rows}</tbody></table>"


def render_history_html(state: State, job: str, last: int = 50) -> str:
    """The history page of `job`: its last `last` runs."""
    points = job_history(state, job, last)
    total = len(state.runs_of(job))
    outcomes = Counter(p.status for p in points)
    durations = [p.seconds for p in points if p.seconds is not None]
    summary = (f"<p>The last {len(points):,} of {total:,} runs: "
               + ", ".join(f"{n:,} {escape(status)}" for status, n in sorted(outcomes.items()))
               + (f"; median duration {seconds_text(statistics.median(durations))}, longest "
                  f"{seconds_text(max(durations))}" if durations else "")
               + f"; {sum(p.records for p in points):,} records written.</p>")
    legend = "".join(f'<span style="background:{_colour(s)}"></span>{escape(s)}' for s in sorted(outcomes))
    title = f"{job} — the last {len(points)} runs"
    body = (f"<h1>{escape(title)}</h1>{summary}<div class='legend'>{legend}</div>"
            f"<h2>Duration</h2>{bar_chart(points, lambda p: p.seconds, DURATION_HEIGHT, 'run', seconds_text, _extra)}"
            f"<h2>Records written</h2>"
            f"{bar_chart(points, lambda p: float(p.records), RECORDS_HEIGHT, 'records', _records, _extra)}"
            f"<h2>Runs, newest first</h2>{runs_table(points)}")
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


def write_history_html(state: State, job: str, path: Path, last: int = 50) -> None:
    """Write the history page of `job` (its last `last` runs) to `path`, its folder created if needed."""
    html = render_history_html(state, job, last)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
