"""Locations compared (and their folders found) without parsing where they are plain local paths give what parsing
them gives."""

from __future__ import annotations

import posixpath

from hypothesis import given
from hypothesis import strategies as st

from filesystems import urls

SEGMENTS = st.lists(st.sampled_from(["a", "b", "ab", "a.b", ".c", "x y"]), min_size=1, max_size=4)
PATHS = SEGMENTS.map(lambda parts: "/" + "/".join(parts))


def outcome(location: str, base: str) -> str:
    try:
        return urls.relative_to(location, base)
    except ValueError:
        return "<not below>"


@given(PATHS, PATHS)
def test_a_plain_local_paths_place_below_a_folder_is_the_one_parsing_finds(location: str, base: str) -> None:
    joined = base + location
    for where in (location, joined):
        assert outcome(where, base) == outcome(f"file://{where}", f"file://{base}")
    assert outcome(joined, base) == location[1:]


@given(PATHS)
def test_a_plain_local_paths_folder_is_the_one_parsing_finds(location: str) -> None:
    assert urls.parent(location) == urls.parent(f"file://{location}").removeprefix("file://")
    assert urls.parent(location) == posixpath.dirname(location)
