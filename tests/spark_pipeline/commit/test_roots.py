"""The roots' checks place a path where comparing it with each root (`urls.is_within`) does, by strings alone where
every root and the path are plain local paths."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from filesystems import urls
from spark_pipeline.commit.steps import Roots

SEGMENTS = st.lists(st.sampled_from(["a", "b", "ab", "a.b", "..", ".c", ""]), min_size=1, max_size=4)
PLAIN = st.lists(st.sampled_from(["a", "b", "ab", "a.b"]), min_size=1, max_size=3).map(lambda s: "/" + "/".join(s))
PATHS = st.one_of(PLAIN, SEGMENTS.map(lambda s: "/" + "/".join(s)), PLAIN.map(lambda p: f"file://{p}"),
                  PLAIN.map(lambda p: p + "/"), PLAIN.map(lambda p: f"s3://bucket{p}"))


def within(path: str, root: str) -> bool:
    try:
        return urls.is_within(path, root)
    except ValueError:
        return False


@given(st.lists(PLAIN, min_size=1, max_size=3), PATHS)
def test_plain_local_roots_place_a_path_as_comparing_it_with_each_does(forms: list[str], path: str) -> None:
    roots = Roots(tuple(forms))
    assert roots.below is not None
    assert roots.hold(path) == any(within(path, root) for root in forms)
    assert roots.hold_strictly(path) == any(within(path, root) and path != root for root in forms)


@given(PLAIN, PATHS)
def test_roots_elsewhere_are_compared_one_by_one(form: str, path: str) -> None:
    forms = (form, f"s3://bucket{form}")
    roots = Roots(forms)
    assert roots.below is None
    assert roots.hold(path) == any(within(path, root) for root in forms)
    assert roots.hold_strictly(path) == any(within(path, root) and path != root for root in forms)
