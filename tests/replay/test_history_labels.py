"""The history page's x axis: one kind of label (a run's start time), evenly spread, never overlapping."""

from __future__ import annotations

import re

import pytest

from events.job import JobRunCommitted, JobRunFailed, JobRunStarted
from events.model import RunFields
from projections.state import State
from replay.history_html import X_LABEL_GAP, render_history_html
from tests.factories import at

LABEL = re.compile(r'<text class="x-label" x="([\d.]+)"[^>]*>([^<]*)</text>')
TICK = re.compile(r"^\d\d-\d\d \d\d:\d\d:\d\d$")


def history(runs: int) -> State:
    state = State()
    for n in range(runs):
        run: RunFields = {"job": "orders", "run_id": f"20261121T{n:06d}000Z-abcdef"}
        state.apply_event(JobRunStarted(**run, emitted_at=at(60 * n)))
        state.apply_event(JobRunCommitted(**run, emitted_at=at(60 * n + 20)) if n % 3 else
                          JobRunFailed(**run, error="boom", emitted_at=at(60 * n + 20)))
    return state


@pytest.mark.parametrize("runs", [1, 2, 7, 50])
def test_x_labels_are_start_times_spread_without_overlap(runs: int) -> None:
    page = render_history_html(history(runs), "orders")
    charts = page.split("<svg")[1:]
    assert len(charts) == 2  # durations and records
    for chart in charts:
        labels = [(float(x), text) for x, text in LABEL.findall(chart)]
        assert labels and all(TICK.match(text) for _, text in labels), labels  # no run id among them
        assert labels[0][1] == "11-21 12:00:00"  # the first run's start
        xs = [x for x, _ in labels]
        assert all(b - a >= X_LABEL_GAP * 0.99 for a, b in zip(xs, xs[1:])), xs
        assert "abcdef</text>" not in chart
