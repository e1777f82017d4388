"""The member list of a run's table commit (`oncelog.members`): any set of numbers written as runs and read back the
same, a run's thousands of sequences in a few characters, and a damaged list refused naming the property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.commit import TABLE_MEMBERS, decode_members, encode_members


@given(st.sets(st.integers(min_value=0, max_value=20_000), max_size=300))
def test_members_read_back_as_written(numbers: set[int]) -> None:
    assert decode_members(encode_members(numbers)) == numbers


def test_a_whole_run_is_one_range_and_gaps_are_runs() -> None:
    assert encode_members(range(10_000)) == "0-9999"
    assert encode_members([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert encode_members([]) == ""


def test_a_damaged_list_is_refused_naming_the_property() -> None:
    with pytest.raises(ValueError, match=f"{TABLE_MEMBERS} '0-x' is no list"):
        decode_members("0-x")
