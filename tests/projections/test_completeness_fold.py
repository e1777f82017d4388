"""Property tests of the completeness fold (projections/completeness.py): whatever events come, in whatever order
they interleave, the horizon never moves back, a completed partition stays completed and is never open again, and
late records add up."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from events.completeness import EventTimeAdvanced, PartitionCompleted
from events.model import RunFields
from projections.completeness import Completeness, advance

LABELS = ("00", "01", "02", "03")
FIELDS: RunFields = {"job": "j", "run_id": "r"}

completed = st.builds(lambda label, horizon, seq: PartitionCompleted(
    **FIELDS, dataset_urn="ds", sequence_id=f"s{seq}", partition=label, start_ms=0, end_ms=LABELS.index(label) + 1,
    horizon_ms=horizon),
    st.sampled_from(LABELS), st.integers(0, 10), st.integers(0, 3))
advanced = st.builds(lambda frontiers, horizon, opened, late, seq: EventTimeAdvanced(
    **FIELDS, dataset_urn="ds", sequence_id=f"s{seq}", frontiers=frontiers, horizon_ms=horizon, open_partitions=opened,
    late_records=late, late_files=dict.fromkeys(late, 1)),
    st.dictionaries(st.sampled_from(("p0", "p1")), st.integers(0, 10)), st.none() | st.integers(0, 10),
    st.dictionaries(st.sampled_from(LABELS), st.integers(1, 4)),
    st.dictionaries(st.sampled_from(LABELS), st.integers(1, 5)), st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(st.lists(completed | advanced, max_size=12))
def test_the_horizon_never_moves_back_and_a_complete_partition_stays_complete(
        events: list[PartitionCompleted | EventTimeAdvanced]) -> None:
    view: Completeness | None = None
    late: dict[str, int] = {}
    for event in events:
        before = view or Completeness()
        view = advance(view, event)
        if before.horizon_ms is not None:
            assert view.horizon_ms is not None and view.horizon_ms >= before.horizon_ms
        assert view.completed >= before.completed
        assert not view.completed & view.open_partitions.keys()
        for source, millis in before.frontiers.items():
            assert view.frontiers[source] >= millis
        if isinstance(event, PartitionCompleted):
            assert event.partition in view.completed
            assert view.horizon_ms is not None and view.horizon_ms >= event.horizon_ms
        else:
            assert view.last_sequence_id == event.sequence_id
            for label, count in event.late_records.items():
                late[label] = late.get(label, 0) + count
        assert view.late_records == late
        assert view.late_total == sum(late.values())
