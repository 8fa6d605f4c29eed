"""explorer.bench.yours: the loaded-vs-built-in rerun measurement runs and reports what it measured."""

import os

import pytest

from explorer import loaded
from explorer.bench import yours


def test_slider_values_are_distinct_inside_both_ranges_and_never_the_default():
    values = yours._values(2.5, 100.0, 14)
    assert len(values) == 14 == len(set(values))
    assert all(2.5 < v < 100.0 for v in values) and 25.0 not in values


@pytest.mark.slow
def test_one_pair_measures_both_pages_and_restores_the_environment():
    before = os.environ.get(loaded.OPS_ENV)
    result = yours.measure_loaded_rerun(pairs=1, warm_up=0)
    assert result["loaded_rerun_pairs"] == 1
    assert result["loaded_rerun_ms"] > 0 and result["builtin_rerun_ms"] > 0
    ratio = result["loaded_rerun_ms"] / result["builtin_rerun_ms"]
    assert result["loaded_vs_builtin_rerun"] == pytest.approx(ratio)
    assert result["loaded_vs_builtin_rerun_met"] == (ratio <= 1.5)
    assert os.environ.get(loaded.OPS_ENV) == before and "fast_sigmoid_spike" not in loaded.names()


def test_interleaved_pairs_alternate_sides_and_drop_the_warm_up():
    calls: list[tuple[str, int]] = []
    mine_seconds, builtin_seconds = [10.0, 10.0, 2.0, 4.0, 9.0], [1.0, 1.0, 1.0, 2.0, 3.0]

    def mine(index):
        calls.append(("mine", index))
        return mine_seconds[index]

    def builtin(index):
        calls.append(("builtin", index))
        return builtin_seconds[index]

    ratio, mine_median, builtin_median, pairs = yours._interleaved(5, 2, mine, builtin)
    assert calls == [(side, i) for i in range(5) for side in ("mine", "builtin")]  # one pair at a time
    # pairs 2..4: ratios 2, 2, 3 -> median 2; seconds 2, 4, 9 -> 4 and 1, 2, 3 -> 2
    assert (ratio, mine_median, builtin_median, pairs) == (2.0, 4.0, 2.0, 3)
