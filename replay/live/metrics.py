"""The live view's `/metrics`, pure: the Prometheus text format, written by hand."""

from __future__ import annotations

from projections.views import SequenceStatus
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


def metrics_text(view: LiveView) -> str:
    """The view's metrics (lock held): catch-up state, pending and abandoned sequences, datasets' commits."""
    state = view.state
    jobs = sorted({*state.jobs, *(s.job for s in state.sequences.values())})
    pending = dict.fromkeys(jobs, 0)
    abandoned = dict.fromkeys(jobs, 0)
    for sequence in state.sequences.values():
        if sequence.pending:
            pending[sequence.job] += 1
        elif sequence.status is SequenceStatus.ABANDONED:
            abandoned[sequence.job] += 1
    datasets = sorted(state.datasets.items())
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
        *metric("gauge", "oncelog_commit_sequences_pending", "Commit sequences planned and not yet completed.",
                [sample("oncelog_commit_sequences_pending", n, job=j) for j, n in pending.items()]),
        *metric("gauge", "oncelog_commit_sequences_abandoned", "Commit sequences abandoned for good.",
                [sample("oncelog_commit_sequences_abandoned", n, job=j) for j, n in abandoned.items()]),
        *metric("gauge", "oncelog_dataset_last_commit_timestamp_seconds", "When the dataset's last commit was.",
                [sample("oncelog_dataset_last_commit_timestamp_seconds", v.committed_at.timestamp(), job=j,
                        dataset_urn=urn) for (j, urn), v in datasets if v.committed_at is not None]),
        *metric("gauge", "oncelog_dataset_watermark", "The dataset's committed high watermark, per partition.",
                [sample("oncelog_dataset_watermark", value, job=j, dataset_urn=urn, partition=p)
                 for (j, urn), v in datasets for p, value in sorted(v.watermarks.items())]),
    ]
    return "\n".join(lines) + "\n"
