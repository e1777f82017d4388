"""`oncelog audit RUN_ID --html FILE`: a self-contained HTML report of a run, with a Gantt chart (inline SVG) of its
task attempts and commit steps. No script, no external asset: it opens from a mail attachment or a ticket.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from replay.audit import AuditTimeline, Span
from replay.render import audit_json

COLOURS = {
    "succeeded": "#2e7d32", "executed": "#1565c0", "verified": "#00838f", "failed": "#c62828",
    "running": "#f9a825", "not applied": "#9e9e9e",
}
LANE_HEIGHT = 22
LABEL_WIDTH = 300
CHART_WIDTH = 900

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#212121}
h1{font-size:20px}h2{font-size:16px;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f5f5f5}.status-COMMITTED{color:#2e7d32}.status-FAILED,.status-CANCELLED{color:#c62828}
svg text{font:12px system-ui,sans-serif}.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}
"""


def gantt_svg(spans: list[Span]) -> str:
    """An SVG Gantt chart: one lane per task attempt or commit step, bars to scale on a shared time axis."""
    if not spans:
        return "<p>No task attempt or commit step was recorded.</p>"
    start = min(s.start for s in spans)
    end = max(s.end for s in spans)
    total = max((end - start).total_seconds(), 1e-3)
    height = LANE_HEIGHT * len(spans) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LABEL_WIDTH + CHART_WIDTH + 20}" height="{height}">']
    for tick in range(6):
        x = LABEL_WIDTH + CHART_WIDTH * tick / 5
        parts.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 20}" stroke="#eee"/>')
        parts.append(f'<text x="{x:.1f}" y="{height - 5}" text-anchor="middle">+{total * tick / 5:.2f}s</text>')
    for lane, span in enumerate(spans):
        y = lane * LANE_HEIGHT
        x = LABEL_WIDTH + CHART_WIDTH * (span.start - start).total_seconds() / total
        width = max(2.0, CHART_WIDTH * (span.end - span.start).total_seconds() / total)
        colour = COLOURS.get(span.status, "#616161")
        label = escape(f"{span.group}: {span.lane}")
        tip = escape(f"{span.lane} — {span.status} — {(span.end - span.start).total_seconds() * 1000:.1f} ms"
                     + (f" — {span.detail}" if span.detail else ""))
        parts.append(f'<text x="4" y="{y + 15}">{label[:48]}</text>')
        parts.append(f'<rect x="{x:.1f}" y="{y + 4}" width="{width:.1f}" height="{LANE_HEIGHT - 8}" '
                     f'fill="{colour}"><title>{tip}</title></rect>')
    parts.append("</svg>")
    legend = "".join(f'<span style="background:{c}"></span>{escape(name)}' for name, c in COLOURS.items())
    return f'<div class="legend">{legend}</div>' + "".join(parts)


def _cell(value: Any) -> str:
    """A value as table text: nothing for None, lists joined, durations to a tenth of a millisecond."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, list):
        return "; ".join(str(v) for v in value)
    return str(value)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "<p>None.</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(timeline: AuditTimeline) -> str:
    """The whole report as one HTML document."""
    doc = audit_json(timeline)
    run = doc["run"]
    title = f"{run['job']} — run {run['run_id']}"
    summary = (f"<p>Status <b class='status-{escape(run['status'])}'>{escape(run['status'])}</b>, "
               f"{escape(str(run['started_at']))} → {escape(str(run['ended_at']))}, {doc['events']} events."
               + (f"<br>Error: {escape(run['error'])}" if run["error"] else "") + "</p>")
    sections = [
        ("Timeline", gantt_svg(timeline.spans())),
        ("Work units", _table(doc["work_units"], ["work_unit_id", "dataset_urn", "partition", "low_watermark",
                                                  "expected_high_watermark", "actual_high_watermark", "status"])),
        ("Task attempts", _table(doc["attempts"], ["task_id", "attempt", "status", "started_at", "ended_at",
                                                   "executor", "error", "retry_delay_s"])),
        ("Skipped datasets (history not settled)", _table(doc["skipped"], ["dataset_urn", "reason"])),
        ("Commit sequences", _table(doc["sequences"], ["dataset_urn", "status", "planned_at", "ended_at", "error"])),
        ("Commit steps", _table(doc["commit_steps"], ["dataset_urn", "index", "kind", "detail", "outcome",
                                                      "applied_at", "duration_ms", "failures"])),
        ("Watermarks moved", _table(doc["watermarks"], ["dataset_urn", "partition", "from", "to", "at"])),
    ]
    body = "".join(f"<h2>{escape(name)}</h2>{content}" for name, content in sections)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{summary}{body}</body></html>")


def write_html(timeline: AuditTimeline, path: Path) -> None:
    """Write the report to `path` (its folder is created if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(timeline), encoding="utf-8")
