"""The pipeline benchmark's spread figure: how much its slowest repeat of a side took over the median one."""

from __future__ import annotations

from benchmarks.pipeline import Timed, settled, slowest_over_median, targets_met


def runs(*seconds: float) -> list[Timed]:
    return [Timed(s, 0.0) for s in seconds]


def test_a_slow_first_repeat_is_measured_against_the_median_not_the_mean() -> None:
    assert slowest_over_median(runs(9.0, 6.3, 6.0, 6.6, 6.2)) == 0.429
    assert slowest_over_median(runs(6.5, 6.3, 6.0, 6.6, 6.2)) == 0.048
    assert slowest_over_median(None) is None


def test_the_spread_target_is_met_only_within_ten_percent() -> None:
    figures = {"ratio": None, "commit_share_1000": None, "ratio_dataframe_unguarded": None,
               "ratio_dataframe_sss": None, "cpu_dataframe_over_sss": None, "increment_ratio": None}
    assert targets_met({**figures, "dataframe_slowest_over_median": 0.098})["dataframe_repeats_target_met"]
    assert not targets_met({**figures, "dataframe_slowest_over_median": 0.429})["dataframe_repeats_target_met"]


def test_the_warm_up_goes_on_while_the_engine_is_still_getting_faster() -> None:
    assert not settled([2.02, 1.69])
    assert not settled([2.02, 1.76, 1.73, 1.55])
    assert settled([2.02, 1.76, 1.52, 1.48, 1.50])
    assert settled([1.50, 1.57, 1.52])
    assert not settled([1.50, 1.58, 1.52])
