"""Collections while folding and committing: spaced out during a fold, none during a commit, and back as they were
once the last of them ends (the settings are process-wide; threads may fold and commit at once)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from projections.projector import FOLD_YOUNG_COLLECTION_EVERY, fold_gc


@pytest.fixture(autouse=True)
def collections_as_they_were() -> Iterator[None]:
    enabled, threshold = gc.isenabled(), gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()


def test_a_commit_pauses_collections_until_the_last_pause_ends() -> None:
    gc.enable()
    with fold_gc.paused():
        assert not gc.isenabled()
        with fold_gc.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still runs
    assert gc.isenabled()


def test_collections_stay_off_after_a_pause_where_they_were_off_before() -> None:
    gc.disable()
    with fold_gc.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_pauses_in_threads_end_with_collections_back_on() -> None:
    gc.enable()
    inside, leave = threading.Barrier(3), threading.Event()

    def commit() -> None:
        with fold_gc.paused():
            inside.wait()
            leave.wait()

    threads = [threading.Thread(target=commit) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()
    assert not gc.isenabled()
    leave.set()
    for thread in threads:
        thread.join()
    assert gc.isenabled()


def test_a_fold_spaces_young_collections_and_puts_the_threshold_back() -> None:
    before = gc.get_threshold()
    with fold_gc():
        assert gc.get_threshold()[0] == FOLD_YOUNG_COLLECTION_EVERY
    assert gc.get_threshold() == before


def test_a_pause_ends_even_when_the_commit_raises() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), fold_gc.paused():
        raise RuntimeError("a commit that failed")
    assert gc.isenabled()
