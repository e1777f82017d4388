"""The live view's `/metrics`, pure: the Prometheus text format, written by hand.

Per job: how its last finished run ended (status, duration, records, datasets published / failed / skipped), when it
last committed, its runs in progress with their start, its consecutive failures and its commit sequences pending or
abandoned. Per dataset (only with `LiveSettings.dataset_metrics`): the last commit time and the watermarks.
"""

from __future__ import annotations

from collections.abc import Iterable

from projections.state import State
from projections.views import RunStatus, RunView, SequenceStatus
from replay.live.view import LiveView, Phase

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def label_value(value: str) -> str:
    """A label value escaped as the text format requires (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample(name: str, value: float | int, **labels: str) -> str:
    """One sample line."""
    inner = ",".join(f'{k}="{label_value(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value}" if labels else f"{name} {value}"


def metric(kind: str, name: str, help_text: str, samples: list[str]) -> list[str]:
    """A metric family: its HELP and TYPE lines, then its samples."""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]


ENDED = (RunStatus.COMMITTED, RunStatus.FAILED, RunStatus.CANCELLED)
"""The statuses a finished run ends in: one series each for the last run's status (1 for the one it has)."""


def last_finished(runs: Iterable[RunView]) -> RunView | None:
    """The run that finished last (by its end time)."""
    ended = [r for r in runs if r.status.finished and r.ended_at is not None]
    return max(ended, key=lambda r: (r.ended_at, r.run_id)) if ended else None


def run_datasets(state: State, run: RunView) -> tuple[int, int, int]:
    """Datasets the run published, failed to publish (planned, neither published nor skipped), and skipped."""
    published, skipped = set(run.datasets_committed), set(run.datasets_skipped)
    planned = {u.spec.dataset_urn for u in state.work_units.get((run.job, run.run_id), {}).values()}
    failed = planned - published - skipped if run.status is not RunStatus.COMMITTED else set(run.datasets_abandoned)
    return len(published), len(failed), len(skipped)


def run_records(state: State, run: RunView) -> tuple[int, int]:
    """Records the run's tasks wrote, and those of them in the datasets it published."""
    units = state.work_units.get((run.job, run.run_id), {}).values()
    published = set(run.datasets_committed)
    written = max(run.records_written, sum(u.records_written for u in units))
    return written, sum(u.records_written for u in units if u.spec.dataset_urn in published)


def job_lines(state: State, jobs: list[str], pending: dict[str, int]) -> list[str]:
    """Per job: its last finished run, its last success, its runs in progress, its failures in a row."""
    by_job: dict[str, list[RunView]] = {j: [] for j in jobs}
    for (job, _), run in state.runs.items():
        by_job.setdefault(job, []).append(run)
    last = {j: last_finished(runs) for j, runs in by_job.items()}
    ended = {j: r for j, r in last.items() if r is not None}
    succeeded = {j: state.runs.get((j, v.last_committed_run_id)) for j, v in state.jobs.items()
                 if v.last_committed_run_id}
    running = [r for runs in by_job.values() for r in runs if not r.status.finished and r.started_at is not None]
    datasets = {j: run_datasets(state, r) for j, r in ended.items()}
    records = {j: run_records(state, r) for j, r in ended.items()}
    return [
        *metric("gauge", "oncelog_job_last_run_status", "How the job's last finished run ended: 1 for its status, "
                "0 for the others.",
                [sample("oncelog_job_last_run_status", int(r.status is s), job=j, status=s.name.lower())
                 for j, r in sorted(ended.items()) for s in ENDED]),
        *metric("gauge", "oncelog_job_last_run_end_timestamp_seconds", "When the job's last finished run ended.",
                [sample("oncelog_job_last_run_end_timestamp_seconds", r.ended_at.timestamp(), job=j)
                 for j, r in sorted(ended.items()) if r.ended_at is not None]),
        *metric("gauge", "oncelog_job_last_run_duration_seconds", "How long the job's last finished run took.",
                [sample("oncelog_job_last_run_duration_seconds", round((r.ended_at - r.started_at).total_seconds(), 3),
                        job=j) for j, r in sorted(ended.items()) if r.ended_at and r.started_at]),
        *metric("gauge", "oncelog_job_last_run_records", "Records of the job's last finished run: written by its "
                "tasks, and published (those in the datasets it published).",
                [sample("oncelog_job_last_run_records", n, job=j, outcome=outcome)
                 for j, pair in sorted(records.items()) for outcome, n in zip(("written", "published"), pair,
                                                                              strict=True)]),
        *metric("gauge", "oncelog_job_last_run_datasets", "Datasets of the job's last finished run: published, "
                "failed (planned, not published) and skipped (their history unsettled).",
                [sample("oncelog_job_last_run_datasets", n, job=j, outcome=outcome)
                 for j, triple in sorted(datasets.items())
                 for outcome, n in zip(("published", "failed", "skipped"), triple, strict=True)]),
        *metric("gauge", "oncelog_job_last_success_timestamp_seconds", "When the job's last committed run ended.",
                [sample("oncelog_job_last_success_timestamp_seconds", r.ended_at.timestamp(), job=j)
                 for j, r in sorted(succeeded.items()) if r is not None and r.ended_at is not None]),
        *metric("gauge", "oncelog_job_consecutive_failures", "Runs of the job that failed since its last committed "
                "one.", [sample("oncelog_job_consecutive_failures", v.consecutive_failures, job=j)
                         for j, v in sorted(state.jobs.items())]),
        *metric("gauge", "oncelog_job_runs_in_progress", "Runs of the job started and not ended.",
                [sample("oncelog_job_runs_in_progress", sum(r.job == j for r in running), job=j) for j in jobs]),
        *metric("gauge", "oncelog_run_in_progress_start_timestamp_seconds", "When each run in progress started.",
                [sample("oncelog_run_in_progress_start_timestamp_seconds", r.started_at.timestamp(), job=r.job,
                        run_id=r.run_id) for r in sorted(running, key=lambda r: (r.job, r.run_id))
                 if r.started_at is not None]),
        *metric("gauge", "oncelog_commit_sequences_pending", "Commit sequences planned and not yet completed.",
                [sample("oncelog_commit_sequences_pending", n, job=j) for j, n in pending.items()]),
    ]


def metrics_text(view: LiveView) -> str:
    """The view's metrics (lock held): catch-up state, each job's runs and sequences, per dataset if asked."""
    state = view.state
    jobs = sorted({*state.jobs, *(s.job for s in state.sequences.values())})
    pending = dict.fromkeys(jobs, 0)
    abandoned = dict.fromkeys(jobs, 0)
    for sequence in state.sequences.values():
        if sequence.pending:
            pending[sequence.job] += 1
        elif sequence.status is SequenceStatus.ABANDONED:
            abandoned[sequence.job] += 1
    last_event = [] if view.last_event_ms is None else [sample("oncelog_live_last_event_timestamp_seconds",
                                                               view.last_event_ms / 1000)]
    lines = [
        *metric("gauge", "oncelog_live_caught_up", "1 once the view has folded the log to the end seen at start.",
                [sample("oncelog_live_caught_up", int(view.phase is Phase.OK))]),
        *metric("gauge", "oncelog_live_lag_events", "Offsets between the fold and the end of the log it reads to.",
                [sample("oncelog_live_lag_events", view.lag())]),
        *metric("counter", "oncelog_live_events_folded_total", "Events this view has folded since it started.",
                [sample("oncelog_live_events_folded_total", view.folded)]),
        *metric("gauge", "oncelog_live_last_event_timestamp_seconds", "Log time of the last record folded.",
                last_event),
        *metric("gauge", "oncelog_log_problems", "Records the fold could not use (undecodable, unplaceable).",
                [sample("oncelog_log_problems", state.problem_count)]),
        *job_lines(state, jobs, pending),
        *metric("gauge", "oncelog_commit_sequences_abandoned", "Commit sequences abandoned for good.",
                [sample("oncelog_commit_sequences_abandoned", n, job=j) for j, n in abandoned.items()]),
    ]
    lines += horizon_lines(state)
    if view.settings.dataset_metrics:
        lines += dataset_lines(state)
    return "\n".join(lines) + "\n"


def horizon_lines(state: State) -> list[str]:
    """Each time-partitioned dataset's complete horizon: every time partition ending by it is complete."""
    return metric("gauge", "oncelog_dataset_complete_horizon_timestamp_seconds",
                  "Every time partition of the dataset ending at or before this time is complete.",
                  [sample("oncelog_dataset_complete_horizon_timestamp_seconds", v.completeness.horizon_ms / 1000, job=j,
                          dataset_urn=urn) for (j, urn), v in sorted(state.datasets.items())
                   if v.completeness is not None and v.completeness.horizon_ms is not None])


def dataset_lines(state: State) -> list[str]:
    """Two series per dataset: its last commit time and its watermarks (a setting: thousands per large job)."""
    datasets = sorted(state.datasets.items())
    return [
        *metric("gauge", "oncelog_dataset_last_commit_timestamp_seconds", "When the dataset's last commit was.",
                [sample("oncelog_dataset_last_commit_timestamp_seconds", v.committed_at.timestamp(), job=j,
                        dataset_urn=urn) for (j, urn), v in datasets if v.committed_at is not None]),
        *metric("gauge", "oncelog_dataset_watermark", "The dataset's committed high watermark, per partition.",
                [sample("oncelog_dataset_watermark", value, job=j, dataset_urn=urn, partition=p)
                 for (j, urn), v in datasets for p, value in sorted(v.watermarks.items())]),
    ]
