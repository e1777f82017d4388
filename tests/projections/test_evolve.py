"""`evolve`, the reducers' copy of a frozen view: what `dataclasses.replace` gives, for every view class."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from projections.views import AttemptStatus, AttemptView, DatasetView, JobView, RunStatus, RunView, evolve


@pytest.mark.parametrize("view, changes", [
    (AttemptView(2, AttemptStatus.RUNNING, executor="e-1"), {"status": AttemptStatus.FAILED, "error": "boom"}),
    (RunView("job", "run-1", RunStatus.RUNNING, work_units=3), {"ended_at": datetime(2026, 1, 1, tzinfo=UTC)}),
    (DatasetView("job", "urn", {"p": 1}, records_published=5), {"watermarks": {"p": 2}}),
    (JobView("job", recent_runs=("a", "b")), {}),
])
def test_evolve_is_replace(view: Any, changes: dict[str, Any]) -> None:
    before = dataclasses.astuple(view)
    copy = evolve(view, **changes)
    assert copy == dataclasses.replace(view, **changes) and type(copy) is type(view)
    assert copy is not view and dataclasses.astuple(view) == before  # the original is left as it was


def test_evolve_refuses_a_field_the_view_does_not_have_and_a_class_it_cannot_copy() -> None:
    with pytest.raises(AttributeError, match="nope"):
        evolve(JobView("job"), nope=1)

    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        value: int

    with pytest.raises(TypeError, match="Unslotted"):
        evolve(Unslotted(1), value=2)
