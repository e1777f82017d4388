"""The properties of one table commit made for many sequences: each dataset's ranges kept while they stay small."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from events.commit import TABLE_WATERMARKS
from spark_pipeline.tables.base import DATASET_WATERMARKS, DATASET_WATERMARKS_MAX, shared_summary

RANGES = st.dictionaries(st.text("0123456789", min_size=1, max_size=3),
                         st.tuples(st.integers(0, 10**12), st.integers(0, 10**12)), min_size=1, max_size=40)


def summary(dataset: str, ranges: dict[str, tuple[int, int]]) -> dict[str, str]:
    return {"oncelog.job": "job", "oncelog.dataset": dataset, "oncelog.records": "2",
            TABLE_WATERMARKS: json.dumps({p: list(r) for p, r in ranges.items()}, sort_keys=True,
                                         separators=(",", ":"))}


@settings(max_examples=60)
@given(st.lists(RANGES, min_size=2, max_size=60))
def test_each_datasets_ranges_are_kept_exactly_while_their_text_fits(all_ranges: list[dict[str, tuple[int, int]]]
                                                                     ) -> None:
    summaries = [summary(f"ds.{i}", ranges) for i, ranges in enumerate(all_ranges)]
    text = json.dumps({s["oncelog.dataset"]: json.loads(s[TABLE_WATERMARKS]) for s in summaries}, sort_keys=True,
                      separators=(",", ":"))
    properties = shared_summary(summaries)
    assert properties.get(DATASET_WATERMARKS) == (text if len(text) <= DATASET_WATERMARKS_MAX else None)
    assert properties["oncelog.sequences"] == str(len(summaries))
    assert properties["oncelog.records"] == str(2 * len(summaries))
