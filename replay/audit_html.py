"""`oncelog audit RUN_ID --html FILE`: a self-contained HTML report of a run: its phases on a time axis that starts
at JobRunStarted and ends with the run, its tasks with records, bytes and throughput, each dataset's records, bytes
and commit, and the errors as they were raised. No external asset: it opens from a mail attachment or a ticket.

A run of many datasets (LARGE_RUN_DATASETS or more) gets its commit steps rolled up per dataset, charts of counts
over time instead of one row per step, and a small inline script that filters the datasets table: a 10,000-dataset
run stays readable and well under 2 MB.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from pathlib import Path

from events.job import DatasetSkipped
from projections.views import Phase
from replay.audit import (
    SPARK_APP_ID,
    AuditTimeline,
    DatasetRow,
    FailureRow,
    SequenceRow,
    StepRow,
    TaskRow,
    natural_key,
)

LARGE_RUN_DATASETS = 100
"""From this many datasets on, commit steps are rolled up per dataset and the datasets table gets a filter."""
MAX_ROWS = 500
"""The most rows a table of tasks, attempts, work units or steps shows; the JSON audit has them all."""
MAX_DATASET_ROWS = 50_000
"""The most datasets a large run's report holds (as data for the filter)."""
SHOWN_DATASETS = 500
"""The most dataset rows a large run's report lays out at a time."""
ATTEMPT_LANES = 40
"""Up to this many task attempts get a lane each; more are packed into slots, like executors' task slots."""
MAX_SLOTS = 64
"""More concurrent attempts than this are drawn as a count of tasks running over time."""

LANE_HEIGHT = 20
CURVE_HEIGHT = 70
HEADER_HEIGHT = 22
AXIS_HEIGHT = 26
LABEL_WIDTH = 260
CHART_WIDTH = 900

STATUS_COLOURS = {
    "committed": "#2e7d32", "succeeded": "#2e7d32", "completed": "#2e7d32", "executed": "#1565c0",
    "verified": "#00838f", "failed": "#c62828", "abandoned": "#c62828", "cancelled": "#c62828",
    "running": "#f9a825", "pending": "#f9a825", "successful": "#9ccc65", "not applied": "#9e9e9e",
}
PHASE_COLOURS = {
    Phase.LOCK: "#8e24aa", Phase.RECOVER: "#ef6c00", Phase.PLAN: "#6d4c41", Phase.TASKS: "#2e7d32",
    Phase.COMMIT: "#1565c0", Phase.CLEANUP: "#546e7a",
}

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#212121}
h1{font-size:20px}h2{font-size:16px;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5;position:sticky;top:0}td{font-variant-numeric:tabular-nums}
pre{margin:0;white-space:pre-wrap;font:12px/1.3 ui-monospace,monospace;max-width:70em}
pre.error{background:#fff5f5;border-left:3px solid #c62828;padding:.5em}
.status-COMMITTED,.s-completed,.s-committed,.s-succeeded{color:#2e7d32}
.status-FAILED,.status-CANCELLED,.s-failed,.s-abandoned{color:#c62828}.s-pending,.s-running{color:#b28704}
dl.summary{display:grid;grid-template-columns:max-content auto;gap:2px 16px}
dl.summary dt{color:#616161}dl.summary dd{margin:0}
svg text{font:12px system-ui,sans-serif}svg text.section{font-weight:bold}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.note{color:#616161}#dataset-filter{width:24em}
section.failed{border:2px solid #c62828;background:#fff5f5;padding:.5em 1em;margin:1em 0}
section.failed h2{margin-top:.2em;color:#c62828}details summary{cursor:pointer;color:#616161}
"""

FILTER_SCRIPT = """
(() => {
  const data = JSON.parse(document.getElementById('datasets-data').textContent);
  const input = document.getElementById('dataset-filter'), body = document.getElementById('datasets').tBodies[0];
  const shown = document.getElementById('datasets-shown'), matching = document.getElementById('datasets-matching');
  const texts = data.map(row => row.join(' ').toLowerCase());
  const escape = text => text.replace(/[&<>"]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'})[c]);
  const cell = (value, i) => i === STATUS && !FINE.includes(value)
    ? `<td><b class="s-${escape(value.replace(/ /g, '-'))}">${escape(value)}</b>`
    : i === ERROR && value ? `<td><pre class="error">${escape(value)}</pre>` : `<td>${escape(value)}`;
  function apply() {
    const query = input.value.trim().toLowerCase(), hits = [];
    let count = 0;
    texts.forEach((text, i) => {
      if (!query || text.includes(query)) { count++; if (hits.length < LIMIT) hits.push(i); }
    });
    body.innerHTML = hits.map(i => '<tr>' + data[i].map(cell).join('')).join('');
    shown.textContent = hits.length.toLocaleString('en');
    matching.textContent = count.toLocaleString('en');
  }
  input.addEventListener('input', apply);
  const linked = /[#&]filter=([^&]*)/.exec(location.hash);
  if (linked) { input.value = decodeURIComponent(linked[1]); apply(); }
})();
"""


@dataclass(frozen=True)
class Bar:
    """A bar on the time axis, in seconds since the run started."""

    start_s: float
    end_s: float
    colour: str
    tip: str
    kind: str


@dataclass(frozen=True)
class Lane:
    """A row of the chart: bars, or a curve of a count over time (points: seconds, fraction of the lane's height)."""

    label: str
    bars: tuple[Bar, ...] = ()
    curve: tuple[tuple[float, float], ...] = ()
    curve_label: str = ""


@dataclass(frozen=True)
class Section:
    """A titled group of lanes."""

    title: str
    lanes: tuple[Lane, ...]


def nice_step(total_s: float, most: int = 10) -> float:
    """A tick spacing of 1, 2 or 5 times a power of ten that puts at most `most` ticks on the axis."""
    raw = max(total_s, 1e-3) / most
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def seconds_text(value: float) -> str:
    """A duration for people: 0 s, 0.25 s, 12.5 s, 3 min 20 s."""
    if value >= 120:
        minutes, seconds = divmod(value, 60)
        return f"{int(minutes)} min {seconds:.0f} s"
    return f"{value:.3f}".rstrip("0").rstrip(".") + " s"


def bytes_text(value: float) -> str:
    """A size in B, KiB, MiB or GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def chart_svg(total_s: float, sections: Sequence[Section]) -> str:
    """The run's chart: a time axis from 0 (JobRunStarted) to the run's end, and the sections' lanes under it."""
    height = AXIS_HEIGHT + sum(HEADER_HEIGHT + sum(CURVE_HEIGHT if lane.curve else LANE_HEIGHT for lane in s.lanes)
                               for s in sections)
    total = max(total_s, 1e-3)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{LABEL_WIDTH + CHART_WIDTH + 30}" '
             f'height="{height}" data-total-s="{total_s:.3f}">']
    step = nice_step(total)
    for i in range(int(total / step + 1e-9) + 1):
        tick = i * step
        x = _x(tick, total)
        parts.append(f'<line x1="{x:.1f}" y1="{AXIS_HEIGHT - 6}" x2="{x:.1f}" y2="{height}" stroke="#e0e0e0"/>'
                     f'<text class="tick" x="{x:.1f}" y="{AXIS_HEIGHT - 10}" text-anchor="middle" '
                     f'data-s="{tick:.3f}">{escape(seconds_text(tick))}</text>')
    y = AXIS_HEIGHT
    for section in sections:
        parts.append(f'<text class="section" x="4" y="{y + 16}">{escape(section.title)}</text>')
        y += HEADER_HEIGHT
        for lane in section.lanes:
            lane_height = CURVE_HEIGHT if lane.curve else LANE_HEIGHT
            parts.append(f'<text class="lane" x="12" y="{y + 14}">{escape(_clip(lane.label, 40))}</text>')
            parts.extend(_bar_svg(bar, y, total) for bar in lane.bars)
            if lane.curve:
                parts.append(_curve_svg(lane, y, total))
            y += lane_height
    parts.append("</svg>")
    return "".join(parts)


def _x(seconds: float, total: float) -> float:
    return LABEL_WIDTH + CHART_WIDTH * min(max(seconds / total, 0.0), 1.0)


def _bar_svg(bar: Bar, y: int, total: float) -> str:
    x = _x(bar.start_s, total)
    width = max(2.0, _x(bar.end_s, total) - x)
    return (f'<rect class="bar {bar.kind}" x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{LANE_HEIGHT - 6}" '
            f'fill="{bar.colour}" data-start="{bar.start_s:.3f}" data-end="{bar.end_s:.3f}">'
            f'<title>{escape(bar.tip)}</title></rect>')


def _curve_svg(lane: Lane, y: int, total: float) -> str:
    bottom = y + CURVE_HEIGHT - 4
    scale = CURVE_HEIGHT - 10
    points = [f"{_x(0, total):.1f},{bottom}"]
    points += [f"{_x(t, total):.1f},{bottom - scale * f:.1f}" for t, f in lane.curve]
    points.append(f"{_x(lane.curve[-1][0], total):.1f},{bottom}")
    return (f'<polygon class="curve" points="{" ".join(points)}" fill="#90caf9" stroke="#1565c0">'
            f'<title>{escape(lane.curve_label)}</title></polygon>'
            f'<text x="{LABEL_WIDTH + CHART_WIDTH + 4}" y="{y + 14}" text-anchor="end" class="note">'
            f'{escape(lane.curve_label)}</text>')


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _colour(status: str) -> str:
    return STATUS_COLOURS.get(status.lower(), "#616161")


def _offset(moment: datetime | None, start: datetime) -> float | None:
    return None if moment is None else (moment - start).total_seconds()


def run_section(timeline: AuditTimeline, start: datetime, end: datetime) -> Section:
    """The run's bar (0 to its end) and one lane per phase."""
    run = timeline.run
    status = run.status.name.lower()
    total = (end - start).total_seconds()
    lanes = [Lane(f"run · {seconds_text(total)}", (Bar(0.0, total, _colour(status), f"run {run.run_id}: {status}, "
                                                       f"{seconds_text(total)}", "run"),))]
    for phase in timeline.phases():
        from_s, to_s = _offset(phase.start, start) or 0.0, _offset(phase.end, start) or 0.0
        lanes.append(Lane(f"{phase.phase.value} · {seconds_text(phase.seconds)}", (Bar(
            from_s, to_s, PHASE_COLOURS[phase.phase],
            f"{phase.phase.value}: +{seconds_text(from_s)} → +{seconds_text(to_s)} — {phase.detail}",
            f"phase phase-{phase.phase.value}"),)))
    return Section("Run and its phases", tuple(lanes))


def task_section(timeline: AuditTimeline, start: datetime) -> Section | None:
    """Task attempts: a lane each when few, packed into slots when many, a count of tasks running when very many."""
    spans = []
    for task, attempt in timeline.attempts:
        begin, finish = attempt.started_at or attempt.ended_at, attempt.ended_at or attempt.started_at
        if begin is None or finish is None:
            continue
        status = attempt.status.name.lower()
        records = sum(r.records_written for r in attempt.results)
        tip = (f"{task.task_id} #{attempt.attempt} — {status} — {seconds_text((finish - begin).total_seconds())}, "
               f"{records:,} records" + (f" — {attempt.executor}" if attempt.executor else "")
               + (f" — {attempt.error.splitlines()[-1]}" if attempt.error else ""))
        spans.append((f"{task.task_id} #{attempt.attempt}", Bar(_offset(begin, start) or 0.0,
                                                                _offset(finish, start) or 0.0,
                                                                _colour(status), tip, f"task task-{status}")))
    if not spans:
        return None
    spans.sort(key=lambda s: s[1].start_s)
    if len(spans) <= ATTEMPT_LANES:
        return Section(f"Tasks ({len(spans)} attempts)", tuple(Lane(label, (bar,)) for label, bar in spans))
    slots = _pack([bar for _, bar in spans])
    if len(slots) <= MAX_SLOTS:
        return Section(f"Tasks ({len(spans)} attempts in {len(slots)} slots)",
                       tuple(Lane(f"slot {i + 1}", tuple(bars)) for i, bars in enumerate(slots)))
    intervals = [(bar.start_s, bar.end_s) for _, bar in spans]
    curve, most = running_curve(intervals, _total(timeline, start))
    return Section(f"Tasks ({len(spans)} attempts)", (Lane("tasks running", curve=curve,
                                                           curve_label=f"at most {most:,} running"),))


def _pack(bars: list[Bar]) -> list[list[Bar]]:
    """Bars (sorted by start) packed into the fewest lanes where none overlap: the first lane free at its start."""
    lanes: list[list[Bar]] = []
    for bar in bars:
        lane = next((lane for lane in lanes if lane[-1].end_s <= bar.start_s), None)
        if lane is None:
            lanes.append([bar])
            if len(lanes) > MAX_SLOTS:
                return lanes
        else:
            lane.append(bar)
    return lanes


def running_curve(intervals: Sequence[tuple[float, float]], total_s: float) -> tuple[tuple[tuple[float, float], ...],
                                                                                      int]:
    """How many intervals overlap each pixel column of the chart, as curve points; and the most at once."""
    total = max(total_s, 1e-3)
    diff = [0] * (CHART_WIDTH + 2)
    for begin, end in intervals:
        first = min(CHART_WIDTH, max(0, int(begin / total * CHART_WIDTH)))
        last = min(CHART_WIDTH, max(first, int(end / total * CHART_WIDTH)))
        diff[first] += 1
        diff[last + 1] -= 1
    counts, running = [], 0
    for column in range(CHART_WIDTH + 1):
        running += diff[column]
        counts.append(running)
    most = max(counts) or 1
    return tuple((column / CHART_WIDTH * total, count / most) for column, count in enumerate(counts)), max(counts)


def cumulative_curve(moments: Iterable[float], total_s: float) -> tuple[tuple[float, float], ...]:
    """The fraction of `moments` passed at each pixel column of the chart, as curve points."""
    total = max(total_s, 1e-3)
    per_column = [0] * (CHART_WIDTH + 1)
    count = 0
    for moment in moments:
        per_column[min(CHART_WIDTH, max(0, int(moment / total * CHART_WIDTH)))] += 1
        count += 1
    points, done = [], 0
    for column, n in enumerate(per_column):
        done += n
        points.append((column / CHART_WIDTH * total, done / max(count, 1)))
    return tuple(points)


def commit_section(title: str, sequences: list[SequenceRow], steps: list[StepRow], start: datetime,
                   total_s: float) -> Section | None:
    """Commit sequences: a lane per dataset with its steps when few, datasets completed over time when many."""
    if not sequences:
        return None
    if len(sequences) < LARGE_RUN_DATASETS:
        by_dataset: dict[str, list[StepRow]] = {}
        for step in steps:
            by_dataset.setdefault(step.dataset_urn, []).append(step)
        lanes = []
        for sequence in sequences:
            bars = [_step_bar(step, start) for step in by_dataset.get(sequence.dataset_urn, [])
                    if step.applied_at is not None]
            if sequence.planned_at is not None and sequence.ended_at is not None:
                bars.insert(0, Bar(_offset(sequence.planned_at, start) or 0.0, _offset(sequence.ended_at, start) or 0.0,
                                   "#bbdefb", f"{sequence.dataset_urn}: {sequence.status}, {sequence.steps} steps",
                                   "sequence"))
            lanes.append(Lane(f"{sequence.dataset_urn} ({sequence.status})", tuple(bars)))
        return Section(title, tuple(lanes))
    ended = [_offset(s.ended_at, start) or 0.0 for s in sequences if s.ended_at is not None]
    completed = sum(1 for s in sequences if s.status == "completed")
    label = f"{completed:,} of {len(sequences):,} datasets completed"
    return Section(title, (Lane("datasets done (cumulative)", curve=cumulative_curve(ended, total_s),
                                curve_label=label),))


def _step_bar(step: StepRow, start: datetime) -> Bar:
    assert step.applied_at is not None
    end = _offset(step.applied_at, start) or 0.0
    took = step.duration_ms or 0.0
    tip = (f"{step.dataset_urn} · step {step.index} {step.kind} — {step.outcome} — {ms_text(step.duration_ms)} ms — "
           f"{step.detail}" + (f" — failures: {'; '.join(step.failures)}" if step.failures else ""))
    return Bar(end - took / 1000, end, _colour(step.outcome), tip, f"step step-{step.outcome}")


def ms_text(value: float | None) -> str:
    """A step's milliseconds; "" when not known (not applied, or a log of a version that did not time it)."""
    return "" if value is None else f"{value:.1f}"


def _total(timeline: AuditTimeline, start: datetime) -> float:
    return (timeline.axis()[1] - start).total_seconds()


def _pre(text: str | None) -> str:
    return "" if not text else f'<pre class="error">{escape(text)}</pre>'


def _table(columns: Sequence[str], rows: Iterable[Sequence[str]], numeric: frozenset[int], table_id: str) -> str:
    """A table of already-escaped cells, its numeric columns right-aligned by one style rule. End tags of cells and
    rows, and empty cells at a row's end, are left out: valid HTML, and a 10,000-row table half the size."""
    head = "".join(f"<th>{escape(c)}" for c in columns)
    body = "".join("<tr><td>" + "<td>".join(_trimmed(row)) for row in rows)
    align = ",".join(f"#{table_id} td:nth-child({i + 1})" for i in sorted(numeric))
    style = f"<style>{align}{{text-align:right}}</style>" if numeric else ""
    return f'{style}<table id="{table_id}"><thead><tr>{head}</thead><tbody>{body}</tbody></table>'


def _trimmed(row: Sequence[str]) -> Sequence[str]:
    end = len(row)
    while end > 1 and not row[end - 1]:
        end -= 1
    return row[:end]


def _capped(rows: list[Sequence[str]], what: str, cap: int = MAX_ROWS) -> tuple[list[Sequence[str]], str]:
    if len(rows) <= cap:
        return rows, ""
    return rows[:cap], (f'<p class="note">The first {cap:,} of {len(rows):,} {what} are shown; '
                        f"<code>oncelog audit RUN --json</code> lists them all.</p>")


def _s(value: str) -> str:
    return escape(value)


def _status(value: str) -> str:
    """A status, coloured when something is wrong (plain when all went well: most rows of a large run)."""
    if value in FINE_STATUSES:
        return escape(value)
    return f'<b class="s-{escape(value.replace(" ", "-"))}">{escape(value)}</b>'


def summary_html(timeline: AuditTimeline, start: datetime, end: datetime, datasets: list[DatasetRow],
                 tasks: list[TaskRow]) -> str:
    """The run at a glance: status, times, Spark application, counts."""
    run = timeline.run
    started = timeline.started
    app_id = timeline.spark_app_id
    counts = Counter(dataset.status for dataset in datasets)
    items = [
        ("Status", f"<b class='status-{escape(run.status.name)}'>{escape(run.status.name)}</b>"),
        ("Started", escape(start.isoformat(timespec="milliseconds"))),
        ("Ended", escape(end.isoformat(timespec="milliseconds")) if timeline.ending else "no end in the log"),
        ("Duration", escape(seconds_text((run.ended_at - run.started_at).total_seconds())) + _RUN_DURATION
         if run.started_at and run.ended_at else escape(seconds_text((end - start).total_seconds()))),
        ("Spark application", f"<code id='spark-app-id'>{escape(app_id)}</code>" if app_id else
         f"<span class='note'>not recorded (no <code>{SPARK_APP_ID}</code> property in JobRunStarted)</span>"),
        ("Launcher", escape(started.launcher) if started else ""),
        ("Job group", escape(run.job_group or "")),
        ("Work units", f"{len(timeline.work_units):,}"),
        ("Tasks", f"{len(tasks):,} ({len(timeline.attempts):,} attempts)"),
        ("Records written", f"{sum(t.records for t in tasks):,}"),
        ("Bytes written", bytes_text(sum(t.bytes for t in tasks))),
        ("Datasets", f"{len(datasets):,}" + (" — " + ", ".join(f"{n:,} {escape(s)}" for s, n in sorted(counts.items()))
                                             if counts else "")),
        ("Datasets skipped", f"{len(run.datasets_skipped):,}"),
        ("Events", f"{len(timeline.events):,}"),
    ]
    body = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in items)
    error = f"<h2>Error</h2>{_pre(run.error)}" if run.error else ""
    return f'<dl class="summary">{body}</dl>{error}'


def failures_html(failures: list[FailureRow], datasets: list[DatasetRow]) -> str:
    """What failed and why, first on the page: each task that stayed failed, the dataset and work unit it failed on
    and its root cause's first line; then those a retry recovered."""
    failed = [f for f in failures if f.culprit]
    split = [f for f in failures if not f.recovered and f.split]
    recovered = [f for f in failures if f.recovered]
    along = sum(1 for d in datasets if d.status == "failed with its task")
    parts = []
    if failed:
        rows: list[Sequence[str]] = [[
            _s(f.dataset_urn or f.where), _s(f.work_unit_id), _s(f.task_id),
            f"{f.attempts_failed}" + ("" if f.retriable else " (not retriable)"), f"<b>{escape(f.cause)}</b>",
        ] for f in failed]
        shown, note = _capped(rows, "failed tasks")
        parts.append(f"<p>{len(failed):,} task(s) failed"
                     + (f"; {along:,} other dataset(s) packed into their tasks were not published with them"
                        if along else "") + ":</p>"
                     + _table(["dataset", "work unit", "task", "attempts", "cause"], shown, frozenset({3}),
                              "failures") + note)
    if split:
        rows = [[_s(f.task_id), _s(", ".join(f.parts)), _s(", ".join(f.failed_parts) or "none"), _s(f.cause)]
                for f in split]
        shown, note = _capped(rows, "split tasks")
        parts.append(f"<p>{len(split):,} packed task(s) failed and were split into parts, each run on its own, so "
                     f"that only the failing work units fail:</p>"
                     + _table(["task", "parts", "failed parts", "first failure"], shown, frozenset(), "split")
                     + note)
    if recovered:
        rows = [[_s(f.dataset_urn or f.where), _s(f.task_id), str(f.attempts_failed), _s(f.cause)] for f in recovered]
        shown, note = _capped(rows, "retried tasks")
        parts.append(f"<p>{len(recovered):,} task(s) failed, then succeeded on a retry:</p>"
                     + _table(["dataset", "task", "failed attempts", "cause"], shown, frozenset({2}), "retried")
                     + note)
    return "".join(parts)


_RUN_DURATION = ' <span class="note">(JobRunStarted to the run\'s end, as <code>oncelog runs</code> counts it)</span>'


def phases_html(timeline: AuditTimeline, start: datetime) -> str:
    rows = [[_s(p.phase.value), f"+{seconds_text(_offset(p.start, start) or 0.0)}",
             f"+{seconds_text(_offset(p.end, start) or 0.0)}", seconds_text(p.seconds), _s(p.detail)]
            for p in timeline.phases()]
    return _table(["phase", "from", "to", "duration", "what"], rows, frozenset({1, 2, 3}), "phases")


def tasks_html(tasks: list[TaskRow]) -> str:
    ordered = sorted(tasks, key=lambda t: (2 if t.status == "succeeded" else 1 if t.status.startswith("split") else 0,
                                           natural_key(t.task_id)))  # what failed first, then split packs
    rows: list[Sequence[str]] = [[
        _s(t.task_id), _status(t.status), str(t.attempts),
        _s(f"{len(t.work_unit_ids)}: " + ", ".join(t.work_unit_ids[:3]) + (" …" if len(t.work_unit_ids) > 3 else "")),
        f"{t.records:,}", bytes_text(t.bytes), str(t.files), seconds_text(t.seconds),
        "" if t.records_per_s is None else f"{t.records_per_s:,.0f}",
        "" if t.bytes_per_s is None else bytes_text(t.bytes_per_s) + "/s", _s(t.executor),
    ] for t in ordered]
    shown, note = _capped(rows, "tasks")
    return _table(["task", "status", "attempts", "work units", "records", "bytes", "files", "duration", "records/s",
                   "throughput", "executor"], shown, frozenset({2, 4, 5, 6, 7, 8, 9}), "tasks") + note


def attempts_html(timeline: AuditTimeline, start: datetime) -> str:
    pairs = timeline.attempts
    failed = timeline.failed_attempts()
    if len(pairs) > MAX_ROWS:
        pairs = [(t, a) for t, a in pairs if a.error or a.retry_delay_s is not None or t.attempts[-1] is not a]
    rows: list[Sequence[str]] = [[
        _s(t.task_id), str(a.attempt), _status(a.status.name.lower()),
        "" if a.started_at is None else f"+{seconds_text(_offset(a.started_at, start) or 0.0)}",
        "" if a.ended_at is None else f"+{seconds_text(_offset(a.ended_at, start) or 0.0)}", _s(a.executor),
        "" if a.retry_delay_s is None else f"after {a.retry_delay_s:g} s",
        _error_html(failed[t.task_id, a.attempt].cause_line if (t.task_id, a.attempt) in failed else None, a.error),
    ] for t, a in pairs]
    shown, note = _capped(rows, "attempts")
    return _table(["task", "attempt", "status", "started", "ended", "executor", "retried", "error"], shown,
                  frozenset({1, 3, 4}), "attempts") + note


def _error_html(cause: str | None, error: str | None) -> str:
    """An attempt's error: its root cause's first line, the whole error (frames and all) folded under it."""
    if not error:
        return ""
    if not cause:
        return _pre(error)
    return f"<b>{escape(cause)}</b><details><summary>whole error</summary>{_pre(error)}</details>"


def work_units_html(timeline: AuditTimeline, large: bool) -> str:
    units = timeline.work_units
    if large and len(units) > MAX_ROWS:
        return (f'<p class="note">{len(units):,} work units: counted per dataset in the datasets table; '
                f"<code>oncelog audit RUN --json</code> lists each.</p>")
    rows: list[Sequence[str]] = [[
        _s(w.spec.work_unit_id), _s(w.spec.dataset_urn), _s(w.spec.partition), str(w.spec.low_watermark),
        str(w.spec.expected_high_watermark), "" if w.actual_high_watermark is None else str(w.actual_high_watermark),
        f"{w.records_written:,}", _s(w.task_id or ""), _status(w.status.name.lower()),
    ] for w in units]
    shown, note = _capped(rows, "work units")
    return _table(["work unit", "dataset", "partition", "low", "expected high", "actual high", "records", "task",
                   "status"], shown, frozenset({3, 4, 5, 6}), "work-units") + note


DATASET_COLUMNS = ("dataset", "work units", "records", "bytes", "files", "commit", "steps applied", "step failures",
                   "commit ms", "records published", "error")
STATUS_COLUMN, ERROR_COLUMN = 5, 10
FINE_STATUSES = ("completed", "succeeded", "successful", "committed", "executed")


def dataset_cells(d: DatasetRow) -> list[str]:
    """A dataset's row as plain text cells (DATASET_COLUMNS)."""
    return [d.dataset_urn, str(d.work_units), f"{d.records:,}", bytes_text(d.bytes), str(d.files), d.status,
            f"{d.executed + d.verified}/{d.steps}" + (f" ({d.verified} verified)" if d.verified else ""),
            str(d.failures) if d.failures else "", "" if d.commit_ms is None else f"{d.commit_ms:,.1f}",
            f"{d.records_published:,}", d.error or ""]


def _dataset_html_cells(cells: list[str]) -> list[str]:
    return [_status(c) if i == STATUS_COLUMN else _pre(c) if i == ERROR_COLUMN else escape(c)
            for i, c in enumerate(cells)]


def datasets_html(datasets: list[DatasetRow], large: bool) -> str:
    """Each dataset's records, bytes and commit. A large run's come as data with a filter that shows at most
    SHOWN_DATASETS rows at a time (those needing attention first): 10,000 table rows take seconds to lay out."""
    numeric = frozenset({1, 2, 3, 4, 7, 8, 9})
    if not large:
        rows = [_dataset_html_cells(dataset_cells(d)) for d in datasets]
        return _table(DATASET_COLUMNS, rows, numeric, "datasets")
    cells = [dataset_cells(d) for d in datasets[:MAX_DATASET_ROWS]]  # those needing attention first
    first = [_dataset_html_cells(c) for c in cells[:SHOWN_DATASETS]]
    needing = sum(1 for d in datasets if d.status != "completed" or d.failures)
    data = json.dumps(cells, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    script = (f"const STATUS = {STATUS_COLUMN}, ERROR = {ERROR_COLUMN}, FINE = {json.dumps(FINE_STATUSES)}, "
              f"LIMIT = {SHOWN_DATASETS};{FILTER_SCRIPT}")
    search = (f'<p><label>Filter datasets <input id="dataset-filter" type="search" '
              f'placeholder="part of a URN, or a status: pending, abandoned…"></label> '
              f'<span id="datasets-shown">{len(first):,}</span> shown of <span id="datasets-matching">'
              f"{len(cells):,}</span> matching; {len(datasets):,} datasets, {needing:,} failed, unpublished or with a "
              f"failed step or an unfinished commit (listed first).</p>")
    note = "" if len(cells) == len(datasets) else (
        f'<p class="note">The filter searches the first {len(cells):,}; <code>oncelog audit RUN --json</code> '
        f"lists all {len(datasets):,}.</p>")
    return (search + _table(DATASET_COLUMNS, first, numeric, "datasets") + note
            + f'<script type="application/json" id="datasets-data">{data}</script><script>{script}</script>')


def steps_html(steps: list[StepRow], start: datetime, large: bool) -> str:
    if large:
        steps = [s for s in steps if s.failures or s.outcome == "not applied"]
        intro = ('<p class="note">Rolled up per dataset in the datasets table. Steps that failed at least once or '
                 "were not applied:</p>")
        if not steps:
            return intro.replace(":</p>", ": none.</p>")
    else:
        intro = ""
    rows: list[Sequence[str]] = [[
        _s(s.dataset_urn), str(s.index), _s(s.kind), _s(s.detail), _status(s.outcome),
        "" if s.applied_at is None else f"+{seconds_text(_offset(s.applied_at, start) or 0.0)}",
        ms_text(s.duration_ms), _pre("\n".join(s.failures)),
    ] for s in steps]
    shown, note = _capped(rows, "steps")
    return intro + _table(["dataset", "step", "kind", "detail", "outcome", "applied", "ms", "failures"], shown,
                          frozenset({1, 5, 6}), "commit-steps") + note


def sequences_html(sequences: list[SequenceRow], start: datetime, table_id: str) -> str:
    rows: list[Sequence[str]] = [[
        _s(s.dataset_urn), _s(s.run_id), _status(s.status),
        "before the run" if s.planned_at is None else f"+{seconds_text(_offset(s.planned_at, start) or 0.0)}",
        "" if s.ended_at is None else f"+{seconds_text(_offset(s.ended_at, start) or 0.0)}", str(s.steps),
        f"{s.records_published:,}", bytes_text(s.bytes_published), _pre(s.error),
    ] for s in sequences]
    shown, note = _capped(rows, "sequences")
    return _table(["dataset", "planned by run", "status", "planned", "ended", "steps", "records", "bytes", "error"],
                  shown, frozenset({3, 4, 5, 6, 7}), table_id) + note


def watermarks_html(timeline: AuditTimeline, large: bool) -> str:
    moves = timeline.watermarks
    if large and len(moves) > MAX_ROWS:
        return (f'<p class="note">{len(moves):,} partitions moved: <code>oncelog audit RUN --json</code> lists each; '
                f"<code>oncelog state</code> shows where every dataset stands.</p>")
    rows: list[Sequence[str]] = [[_s(m.dataset_urn), _s(m.partition), str(m.low), str(m.value),
                                  escape(m.at.isoformat(timespec="milliseconds"))] for m in moves]
    shown, note = _capped(rows, "watermarks")
    return _table(["dataset", "partition", "from", "to", "at"], shown, frozenset({2, 3}), "watermarks") + note


def skipped_html(timeline: AuditTimeline) -> str:
    skipped = [e for e in (logged.event for logged in timeline.events) if isinstance(e, DatasetSkipped)]
    if not skipped:
        return "<p>None.</p>"
    rows: list[Sequence[str]] = [[_s(e.dataset_urn), _s(e.sequence_id), _s(e.reason)] for e in skipped]
    shown, note = _capped(rows, "skipped datasets")
    return _table(["dataset", "unsettled sequence", "reason"], shown, frozenset(), "skipped") + note


def legend_html() -> str:
    phases = "".join(f'<span style="background:{c}"></span>{escape(p.value)}' for p, c in PHASE_COLOURS.items())
    statuses = "".join(f'<span style="background:{c}"></span>{escape(name)}' for name, c in STATUS_COLOURS.items()
                       if name in ("succeeded", "executed", "verified", "failed", "running", "not applied"))
    return f'<div class="legend">Phases: {phases}</div><div class="legend">Tasks and steps: {statuses}</div>'


def render_html(timeline: AuditTimeline) -> str:
    """The whole report as one HTML document."""
    start, end = timeline.axis()
    total = (end - start).total_seconds()
    datasets = timeline.dataset_rows()
    tasks = timeline.task_rows()
    large = len(datasets) >= LARGE_RUN_DATASETS
    sections = [run_section(timeline, start, end), task_section(timeline, start),
                commit_section("Recovery: earlier runs' sequences finished", timeline.recovered,
                               timeline.recovered_steps, start, total),
                commit_section("Commit", timeline.sequences, timeline.steps, start, total)]
    chart = chart_svg(total, [s for s in sections if s is not None])
    title = f"{timeline.job} — run {timeline.run_id}"
    failures = timeline.failures()
    failed = failures_html(failures, datasets) if failures else ""
    parts = [
        ("Summary", summary_html(timeline, start, end, datasets, tasks)),
        ("Timeline", f'<p class="note">Time since JobRunStarted; hover a bar for details.</p>{legend_html()}{chart}'),
        ("Phases", phases_html(timeline, start)),
        ("Tasks", tasks_html(tasks)),
        ("Task attempts", attempts_html(timeline, start)),
        ("Work units", work_units_html(timeline, large)),
        ("Datasets", datasets_html(datasets, large)),
        ("Skipped datasets (history not settled)", skipped_html(timeline)),
        ("Commit steps", steps_html(timeline.steps, start, large)),
        ("Recovered sequences of earlier runs", sequences_html(timeline.recovered, start, "recovered")
         if timeline.recovered else "<p>None.</p>"),
        ("Watermarks moved", watermarks_html(timeline, large)),
    ]
    body = "".join(f"<h2>{escape(name)}</h2>{content}" for name, content in parts)
    first = (f'<section class="failed" id="what-failed"><h2>What failed</h2>{failed}</section>' if failed else "")
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{first}{body}</body></html>")


def write_html(timeline: AuditTimeline, path: Path) -> None:
    """Write the report to `path` (its folder is created if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(timeline), encoding="utf-8")
