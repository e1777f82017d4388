"""What the replay commands print: JSON documents for machines; sheets (Rich tables in a terminal, plain text in a
pipe) for people."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from events.job import DatasetSkipped
from events.log.lock import HolderStatus
from projections.projector import FoldReport
from projections.state import State
from projections.timefmt import when
from projections.views import RunView
from replay.audit import AuditTimeline
from replay.live.documents import dataset_doc, sequence_doc
from replay.sheet import Block, Sheet, rich_table
from replay.verify import VerifyReport


def run_json(view: RunView) -> dict[str, Any]:
    return {
        "job": view.job, "run_id": view.run_id, "status": view.status.name, "started_at": when(view.started_at),
        "ended_at": when(view.ended_at), "work_units": view.work_units, "records_written": view.records_written,
        "error": view.error, "datasets_committed": list(view.datasets_committed),
        "datasets_abandoned": list(view.datasets_abandoned), "datasets_skipped": list(view.datasets_skipped),
    }


def state_json(state: State, urn: str | None = None, job: str | None = None,
               holders: Mapping[str, HolderStatus] | None = None) -> dict[str, Any]:
    """The datasets (with watermarks and last run), jobs, pending sequences and problems of a state; `holders`, the
    status of each job's lock holder now, where it was looked at (not for a past state)."""
    def wanted(j: str, u: str | None) -> bool:
        return (job is None or j == job) and (urn is None or u == urn)

    datasets = [dataset_doc(v) for (j, u), v in sorted(state.datasets.items()) if wanted(j, u)]
    pending = [sequence_doc(v) for v in state.pending_sequences() if wanted(v.job, v.dataset_urn)]
    abandoned = [sequence_doc(v) for v in state.sequences.values() if not v.pending and wanted(v.job, v.dataset_urn)]
    looked = holders or {}
    jobs = {j: {"consecutive_failures": v.consecutive_failures, "last_run_id": v.last_run_id,
                "lock_holder": v.lock_holder, "lock_run_id": v.lock_run_id,
                "lock_holder_status": None if j not in looked else looked[j].value}
            for j, v in sorted(state.jobs.items()) if job is None or j == job}
    return {
        "offsets": {str(p): o for p, o in sorted(state.offsets.items())},
        "jobs": jobs, "datasets": datasets, "pending_sequences": pending, "abandoned_sequences": abandoned,
        "problems": [{"where": p.where(), "kind": p.kind, "message": p.message} for p in state.problems],
        "problem_count": state.problem_count,
    }


def state_blocks(document: dict[str, Any]) -> list[Block]:
    """`state_json` as sheets: datasets, pending sequences, held job locks, problems."""
    datasets = Sheet("Datasets", ("job", "dataset", "watermarks", "last run", "committed at", "records", "files",
                                  "blocked by"),
                     tuple((d["job"], d["dataset_urn"],
                            ", ".join(f"{p}={v}" for p, v in sorted(d["watermarks"].items())),
                            d["last_run_id"] or "-", d["committed_at"] or "-", str(d["records_published"]),
                            str(d["files_published"]), d["blocked_by"] or "") for d in document["datasets"]))
    pending = Sheet("Pending commit sequences", ("job", "dataset", "sequence", "steps applied", "failed attempts",
                                                 "last error"),
                    tuple((s["job"], s["dataset_urn"], s["sequence_id"], f"{len(s['applied'])}/{s['steps']}",
                           str(s["failed_attempts"]), s["last_error"] or "") for s in document["pending_sequences"]))
    blocks: list[Block] = [datasets]
    partitioned = [d for d in document["datasets"] if d.get("completeness")]
    if partitioned:
        blocks.append(Sheet("Time partitions (complete up to the horizon)",
                            ("job", "dataset", "complete horizon", "completed", "open", "late records"),
                            tuple((d["job"], d["dataset_urn"], d["completeness"]["horizon"] or "-",
                                   str(d["completeness"]["partitions_completed"]),
                                   ", ".join(d["completeness"]["open_partitions"]) or "-",
                                   ", ".join(f"{p}={n}" for p, n in sorted(d["completeness"]["late_records"].items()))
                                   or "0") for d in partitioned)))
    blocks.append(pending if pending.rows else "No pending commit sequences.")
    locks = lock_sheet(document["jobs"])
    if locks.rows:
        blocks.append(locks)
    if document["problem_count"]:
        blocks.append(Sheet(f"Problems ({document['problem_count']})", ("where", "kind", "message"),
                            tuple((p["where"], p["kind"], p["message"]) for p in document["problems"])))
    return blocks


def lock_sheet(jobs: dict[str, dict[str, Any]]) -> Sheet:
    """The jobs whose lock the log shows as held (no release recorded), with what became of the holder."""
    return Sheet("Job locks held", ("job", "run", "holder", "holder status"),
                 tuple((j, v["lock_run_id"] or "-", v["lock_holder"], v["lock_holder_status"] or "-")
                       for j, v in jobs.items() if v["lock_holder"] is not None))


def state_tables(document: dict[str, Any]) -> RenderableType:
    """`state_json` as Rich tables, for a terminal."""
    return renderable(state_blocks(document))


def fold_json(report: FoldReport) -> dict[str, Any]:
    return {"events": report.events, "seconds": round(report.seconds, 3),
            "events_per_second": round(report.events_per_second, 1), "from_snapshot": report.from_snapshot,
            "snapshot_offsets": report.snapshot_offsets}


def verify_json(report: VerifyReport) -> dict[str, Any]:
    return {"ok": report.ok, "events": report.events, "sequences": report.sequences,
            "published_files": report.published_files, "pending": report.pending,
            "files": None if report.files is None else {
                "sizes_checked": report.files.sizes, "contents_checked": report.files.contents,
                "sampled_from": report.files.sampled_from, "seed": report.files.seed},
            "violations": [{"kind": v.kind, "message": v.message, "position": v.position} for v in report.violations]}


def audit_json(timeline: AuditTimeline) -> dict[str, Any]:
    """The timeline of a run, as data: what failed first (`failures`: each task that failed, on which dataset and
    why), then its work units, attempts, commit sequences and steps, watermarks."""
    causes = timeline.failed_attempts()
    return {
        "run": run_json(timeline.run),
        "work_units": [{"work_unit_id": w.spec.work_unit_id, "dataset_urn": w.spec.dataset_urn,
                        "partition": w.spec.partition, "low_watermark": w.spec.low_watermark,
                        "expected_high_watermark": w.spec.expected_high_watermark,
                        "actual_high_watermark": w.actual_high_watermark, "status": w.status.name,
                        "attempt": w.attempt} for w in timeline.work_units],
        "failures": [{"task_id": f.task_id, "dataset_urn": f.dataset_urn or None,
                      "work_unit_id": f.work_unit_id or None, "where": f.where, "cause": f.cause,
                      "attempts_failed": f.attempts_failed, "last_attempt": f.last_attempt,
                      "retriable": f.retriable, "recovered": f.recovered, "parts": list(f.parts),
                      "failed_parts": list(f.failed_parts)} for f in timeline.failures()],
        "attempts": [{"task_id": t.task_id, "attempt": a.attempt, "status": a.status.name,
                      "started_at": when(a.started_at), "ended_at": when(a.ended_at), "executor": a.executor,
                      "cause": causes[t.task_id, a.attempt].cause_line if (t.task_id, a.attempt) in causes else None,
                      "error": a.error, "retry_delay_s": a.retry_delay_s} for t, a in timeline.attempts],
        "sequences": [{"dataset_urn": s.dataset_urn, "status": s.status, "planned_at": when(s.planned_at),
                       "ended_at": when(s.ended_at), "error": s.error} for s in timeline.sequences],
        "commit_steps": [{"dataset_urn": s.dataset_urn, "index": s.index, "kind": s.kind, "detail": s.detail,
                          "outcome": s.outcome, "applied_at": when(s.applied_at), "duration_ms": s.duration_ms,
                          "failures": list(s.failures)} for s in timeline.steps],
        "watermarks": [{"dataset_urn": m.dataset_urn, "partition": m.partition, "from": m.low, "to": m.value,
                        "at": when(m.at)} for m in timeline.watermarks],
        "engine": None if timeline.engine is None else {"kind": timeline.engine[0], "reason": timeline.engine[1]},
        "skipped": [{"dataset_urn": e.dataset_urn, "reason": e.reason} for e in
                    (logged.event for logged in timeline.events) if isinstance(e, DatasetSkipped)],
        "events": len(timeline.events),
    }


def audit_blocks(document: dict[str, Any]) -> list[Block]:
    """`audit_json` as a header and a timeline of sheets."""
    run = document["run"]
    header: list[Block] = [Text.assemble((run["job"], "bold"), " run ", (run["run_id"], "bold"),
                                         f": {run['status']}  {run['started_at'] or '?'} → {run['ended_at'] or '…'}  "
                                         f"({document['events']} events)")]
    if document["engine"]:
        header.append(Text.assemble("task engine ", (document["engine"]["kind"], "bold"),
                                    f": {document['engine']['reason']}"))
    if run["error"]:
        header.append(Text(run["error"], style="red"))
    header += [Text.assemble((f"skipped {s['dataset_urn']}", "yellow"), f": {s['reason']}")
               for s in document["skipped"]]
    failed = [f for f in document["failures"] if not f["recovered"] and not f.get("parts")]
    split = [f for f in document["failures"] if not f["recovered"] and f.get("parts")]
    retried = [f for f in document["failures"] if f["recovered"]]
    culprits = _sheet(f"What failed ({len(failed)} task(s))", ["dataset", "work unit", "task", "attempts", "cause"],
                      [[f["dataset_urn"] or f["where"], f["work_unit_id"], f["task_id"],
                        f"{f['attempts_failed']}" + ("" if f["retriable"] else " (not retriable)"), f["cause"]]
                       for f in failed])
    packs = _sheet(f"Split into parts to isolate the failure ({len(split)} task(s))",
                   ["task", "parts", "failed parts", "first failure"],
                   [[f["task_id"], ", ".join(f["parts"]), ", ".join(f["failed_parts"]) or "none", f["cause"]]
                    for f in split])
    recovered = _sheet(f"Failed, then succeeded on a retry ({len(retried)} task(s))",
                       ["dataset", "work unit", "task", "failed attempts", "cause"],
                       [[f["dataset_urn"] or f["where"], f["work_unit_id"], f["task_id"], f["attempts_failed"],
                         f["cause"]] for f in retried])
    header += [b for b in (culprits, packs, recovered) if b.rows]
    units = _sheet("Work units", ["work unit", "dataset", "partition", "low", "expected high", "actual high", "status"],
                   [[w["work_unit_id"], w["dataset_urn"], w["partition"], w["low_watermark"],
                     w["expected_high_watermark"], w["actual_high_watermark"], w["status"]]
                    for w in document["work_units"]])
    attempts = _sheet("Task attempts", ["task", "attempt", "status", "started", "ended", "executor", "retry",
                                        "error (first line; --json has it whole)"],
                      [[a["task_id"], a["attempt"], a["status"], a["started_at"], a["ended_at"], a["executor"],
                        "" if a["retry_delay_s"] is None else f"after {a['retry_delay_s']:g}s",
                        a["cause"] or first_line(a["error"])] for a in document["attempts"]])
    steps = _sheet("Commit steps", ["dataset", "step", "kind", "detail", "outcome", "applied at", "ms", "failures"],
                   [[s["dataset_urn"], s["index"], s["kind"], s["detail"], s["outcome"], s["applied_at"],
                     "" if s["duration_ms"] is None else f"{s['duration_ms']:.1f}", "; ".join(s["failures"])]
                    for s in document["commit_steps"]])
    marks = _sheet("Watermarks moved", ["dataset", "partition", "from", "to", "at"],
                   [[m["dataset_urn"], m["partition"], m["from"], m["to"], m["at"]] for m in document["watermarks"]])
    return [*header, units, attempts, steps, marks]


def audit_tables(document: dict[str, Any]) -> RenderableType:
    """`audit_json` as Rich tables, for a terminal."""
    return renderable(audit_blocks(document))


def duration_s(view: RunView) -> float | None:
    """How long a run took, in seconds, from its JobRunStarted (recorded once Spark has started and the job lock is
    taken) to its end (JobRunCommitted, JobRunFailed or JobRunCancelled): what `oncelog run`'s summary shows first;
    None while it runs (or if its start is unknown)."""
    if view.started_at is None or view.ended_at is None:
        return None
    return round((view.ended_at - view.started_at).total_seconds(), 3)


def runs_json(views: list[RunView]) -> dict[str, Any]:
    """Runs as data, oldest first."""
    return {"runs": [{**run_json(v), "duration_s": duration_s(v), "records_extracted": v.records_extracted}
                     for v in views]}


def runs_blocks(document: dict[str, Any]) -> list[Block]:
    """`runs_json` as one sheet: a line per run."""
    return [_sheet("Runs", ["job", "run", "status", "started", "duration", "records", "datasets committed",
                            "skipped", "abandoned", "error"],
                   [[r["job"], r["run_id"], r["status"], r["started_at"],
                     "" if r["duration_s"] is None else f"{r['duration_s']:.1f}s", r["records_written"],
                     len(r["datasets_committed"]), len(r["datasets_skipped"]), len(r["datasets_abandoned"]),
                     first_line(r["error"])]
                    for r in document["runs"]])]


def first_line(text: str | None) -> str:
    """An error's first non-blank line ("" for none)."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def renderable(blocks: list[Block]) -> RenderableType:
    """Blocks as one Rich renderable (tables drawn), for a terminal."""
    return Group(*(rich_table(b) if isinstance(b, Sheet) else Text(b) if isinstance(b, str) else b for b in blocks))


def _sheet(title: str, columns: list[str], rows: list[list[Any]]) -> Sheet:
    return Sheet(title, tuple(columns), tuple(tuple("" if v is None else str(v) for v in row) for row in rows))
