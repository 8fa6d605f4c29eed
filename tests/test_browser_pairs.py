"""The browser benchmark's paired app / floor figure (explorer.bench.browser): its statistics on synthetic
latencies whose true ratio is known, with the disturbances that moved the figure between runs."""

from __future__ import annotations

import math
import statistics

import pytest

from explorer.bench import browser
from explorer.bench.browser import Latencies, pair_schedule, paired_ratio, ratio_quartiles, second_move_factor

TRUE_RATIO = 1.5  # app = 1.5 x floor in every synthetic pair below


def measured(pairs: int, load: list[float], second_factor: float = 1.0) -> Latencies:
    """Pairs in the order of pair_schedule; the machine's load multiplies both moves of pair i by load[i], and
    whichever move comes second in a pair takes ``second_factor`` times longer."""
    floor_ms, app_ms = 0.1, 0.1 * TRUE_RATIO
    result = Latencies([], [])
    for index, (app_first, _) in enumerate(pair_schedule(pairs)):
        floor, app = floor_ms * load[index], app_ms * load[index]
        if app_first:
            floor *= second_factor
        else:
            app *= second_factor
        result.app.append(app)
        result.floor.append(floor)
        result.ended.append(float(index))
        result.app_first.append(app_first)
    return result


def test_the_schedule_alternates_the_order_and_draws_seeded_pauses_in_range():
    schedule = pair_schedule(40)
    assert [app_first for app_first, _ in schedule] == [False, True] * 20
    pauses = [pause for _, pause in schedule]
    low, high = browser.PAUSE_SECONDS
    assert all(low <= pause <= high for pause in pauses)
    assert len(set(pauses)) == 40  # no fixed period for the trainers' chunks to lock onto
    assert pause_spread(pauses) > 0.2 * (high - low)
    assert pair_schedule(40) == schedule and pair_schedule(40, seed=1) != schedule  # the same run to run
    with pytest.raises(ValueError, match="pairs must be >= 1"):
        pair_schedule(0)


def pause_spread(pauses: list[float]) -> float:
    return statistics.pstdev(pauses)


def test_a_load_both_moves_of_a_pair_share_cancels_whatever_its_course():
    """The machine slows down 3x over the run, then has a spike: each pair's ratio is still the true one."""
    load = [1 + 2 * i / 29 for i in range(30)]
    load[17] = 8.0
    run = measured(30, load)
    assert run.ratio == pytest.approx(TRUE_RATIO, rel=1e-12)
    assert run.quartiles == pytest.approx((TRUE_RATIO, TRUE_RATIO), rel=1e-12)
    # what unpaired medians would say: the two pages' medians come from different pairs only by luck
    assert statistics.median(run.app) / statistics.median(run.floor) == pytest.approx(TRUE_RATIO, rel=1e-12)


@pytest.mark.parametrize("second_factor", [0.8, 1.3, 2.0])
def test_what_the_second_move_of_a_pair_pays_cancels_between_the_two_orders(second_factor):
    run = measured(30, [1.0] * 30, second_factor)
    assert run.ratio == pytest.approx(TRUE_RATIO, rel=1e-12)
    assert run.second_move_factor == pytest.approx(second_factor, rel=1e-12)
    # the old schedule, floor always first: its median of pair ratios is off by the whole factor
    floor_first = [a / f for a, f, first in zip(run.app, run.floor, run.app_first, strict=True) if not first]
    assert statistics.median(floor_first) == pytest.approx(TRUE_RATIO * second_factor, rel=1e-12)


def test_the_two_orders_medians_by_hand():
    """Floor-first pairs 3/2, 6/2, 3/1 (ratios 1.5, 3, 3: median 3); app-first 1/1, 4/2 (1, 2: median 1.5).
    sqrt(3 * 1.5) = 2.1213; second move factor sqrt(3 / 1.5) = sqrt(2)."""
    app, floor = [3.0, 1.0, 6.0, 4.0, 3.0], [2.0, 1.0, 2.0, 2.0, 1.0]
    order = [False, True, False, True, False]
    assert paired_ratio(app, floor, order) == pytest.approx(math.sqrt(4.5), rel=1e-12)
    assert second_move_factor(app, floor, order) == pytest.approx(math.sqrt(2), rel=1e-12)
    # one order only: the median of the pair ratios, and no second-move factor to tell
    assert paired_ratio(app, floor, [False] * 5) == pytest.approx(2.0)  # ratios 1.5, 1, 3, 2, 3
    assert second_move_factor(app, floor, [True] * 5) == 1.0
    with pytest.raises(ValueError, match="app_first has 4 entries for 5 pairs"):
        paired_ratio(app, floor, order[:4])
    with pytest.raises(ValueError, match="no pairs"):
        paired_ratio([], [], [])


def test_quartiles_of_the_pair_ratios_by_hand():
    """Ratios 1, 2, 3, 4, 5: inclusive quartiles 2 and 4."""
    assert ratio_quartiles([1.0, 4.0, 3.0, 8.0, 5.0], [1.0, 2.0, 1.0, 2.0, 1.0]) == pytest.approx((2.0, 4.0))
    assert ratio_quartiles([3.0], [2.0]) == (1.5, 1.5)


def test_pairs_before_a_deadline_keep_their_order():
    run = measured(6, [1.0, 1.0, 1.0, 1.0, 4.0, 4.0], second_factor=1.3)
    early = run.before(3.0)  # pairs ended at 0, 1, 2, 3
    assert early.app_first == [False, True, False, True] and early.ended == [0.0, 1.0, 2.0, 3.0]
    assert early.app == run.app[:4] and early.floor == run.floor[:4]
    assert early.ratio == pytest.approx(TRUE_RATIO, rel=1e-12)


def test_relative_spread_of_repeated_runs_by_hand():
    """The issue's two quiet runs: 1.41 and 1.16 idle (1.41 / 1.16 - 1 = 21.6 %), 1.88 and 1.23 training (52.8 %)."""
    assert browser.relative_spread([1.41, 1.16]) == pytest.approx(0.2155, abs=1e-4)
    assert browser.relative_spread([1.88, 1.23]) == pytest.approx(0.5285, abs=1e-4)
    holds = browser.relative_spread([1.20, 1.25, 1.30])
    assert holds == pytest.approx(0.0833, abs=1e-4) and holds <= browser.RATIO_HOLDS_WITHIN
    assert browser.relative_spread([1.3]) == 0.0
    with pytest.raises(ValueError, match="positive values"):
        browser.relative_spread([])


def test_the_runs_summary_says_whether_each_ratio_holds():
    def run(idle, training):
        return browser.BenchResult(
            sessions=5, train_seconds=300.0, peak_rss_bytes=1, peak_hwm_sum_bytes=1, latency_idle_median_s=0.1,
            latency_loaded_median_s=0.2, latency_loaded_samples=[0.2], floor_idle_median_s=0.1,
            floor_loaded_median_s=0.1, idle_vs_floor=idle, loaded_vs_floor=training, loaded_pairs_while_training="1 of 1",
            users=[],
        )  # fmt: skip

    summary = browser._runs_summary([run(1.20, 1.88), run(1.25, 1.23), run(1.30, 1.50)])
    idle, training = summary.splitlines()[1:]
    assert idle.split() == ["idle", "1.20", "/", "1.25", "/", "1.30", "spread", "8%", "holds"]
    assert training.split() == ["training", "1.88", "/", "1.23", "/", "1.50", "spread", "53%", "MOVES"]
