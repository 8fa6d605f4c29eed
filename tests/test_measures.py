"""explorer.explore.measures (explorer.metrics, explorer.metrics_table): peak, width, area, dead zone and mismatch against analytic values."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ops
from explorer.explore.measures import COLUMNS, metrics, metrics_table
from explorer.explore.points import special_points
from explorer.explore.sweeps import sweep
from explorer.expr import compile_op


def _one(df, points=None):
    table = metrics(df, points)
    assert list(table.columns) == list(COLUMNS) and len(table) == 1
    return table.iloc[0]


def test_atan_area_is_the_jump_minus_its_tails():
    alpha, half_range, n = 2.0, 200.0, 400_001
    result = _one(sweep("atan", lo=-half_range, hi=half_range, n=n, params={"alpha": alpha}))
    # the primitive is arctan(pi*alpha*x/2)/pi + 1/2: the area over [-L, L] misses the two tails
    tail = 1.0 - 2.0 / math.pi * math.atan(math.pi * alpha * half_range / 2.0)
    assert tail == pytest.approx(1.0132e-3, rel=1e-3)
    # trapezoid error: h^2/12 * integral |g''| <= h^2/12 * 2 * max|g'| (g' has 2 monotone pieces per side)
    step = 2 * half_range / (n - 1)
    max_slope = 3 * math.sqrt(3) / 16 * math.pi * alpha**2  # max |g'| of (alpha/2)/(1 + (pi alpha x/2)^2)
    trapezoid = step**2 / 12 * 4 * max_slope
    assert abs(result["area"] - (1.0 - tail)) <= trapezoid + 1e-9
    assert result["forward_change"] == 1.0 and result["jump"] == 1.0
    assert result["normalised"]  # within 2% of the jump
    assert result["peak"] == pytest.approx(alpha / 2, rel=1e-6) and result["peak_x"] == 0.0
    assert result["fwhm"] == pytest.approx(4 / (math.pi * alpha), abs=step)  # half height at pi*alpha*x/2 = +-1


@pytest.mark.parametrize("slope", [5.0, 25.0, 100.0])
def test_fast_sigmoid_area_is_two_over_slope(slope):
    half_range, n = 3.0, 200_001
    result = _one(sweep("fast_sigmoid", lo=-half_range, hi=half_range, n=n, params={"slope": slope}))
    # integral of 1/(k|x|+1)^2 over [-L, L] = 2/k * (1 - 1/(kL + 1)) -> 2/k
    finite_range = 2 / slope * (1 - 1 / (slope * half_range + 1))
    step = 2 * half_range / (n - 1)
    assert result["area"] == pytest.approx(finite_range, abs=2 * slope * step**2)
    assert result["area"] == pytest.approx(2 / slope, rel=1 / (slope * half_range) + 1e-6)
    assert not result["normalised"]
    assert result["peak"] == pytest.approx(1.0, rel=1e-6) and result["peak_x"] == 0.0
    assert result["fwhm"] == pytest.approx(2 * (math.sqrt(2) - 1) / slope, abs=2 * step)


@pytest.mark.parametrize("alpha", [1.0, 2.0, 4.0])
def test_gaussian_fwhm_and_peak(alpha):
    n = 20_001
    result = _one(sweep("gaussian", n=n, params={"alpha": alpha}))
    step = 6 / (n - 1)
    # linear interpolation of a concave-at-half-height curve: error well below one step
    assert result["fwhm"] == pytest.approx(2 * math.sqrt(math.log(2)) / alpha, abs=step)
    assert result["peak"] == pytest.approx(alpha / math.sqrt(math.pi), rel=1e-6)
    assert result["area"] == pytest.approx(math.erf(3 * alpha), abs=1e-6)
    assert result["normalised"]


@pytest.mark.parametrize(
    ("key", "params", "peak", "peak_x"),
    [
        ("sigmoid", {"slope": 40.0}, 40.0 / 4, 0.0),
        ("spike_rate_escape", {"beta": 2.0, "slope": 30.0, "threshold": 0.5}, 30.0, 1.5),  # peaks at threshold + 1
        ("approx_sign", {}, 2.0, 0.0),
        ("triangle", {"alpha": 2.0, "threshold": -0.5}, 2.0, -0.5),
        ("gradient_reversal", {"lam": 3.0}, -3.0, -3.0),  # signed: the largest magnitude
    ],
)
def test_peaks(key, params, peak, peak_x):
    result = _one(sweep(key, params=params))
    assert result["peak"] == pytest.approx(peak, rel=1e-6)
    assert result["peak_x"] == pytest.approx(peak_x, abs=1e-7)


def test_ste_sign_dead_fraction_outside_the_clip_window():
    n = 2001
    result = _one(sweep("ste_sign", lo=-3.0, hi=3.0, n=n))
    step = 6 / (n - 1)
    # gradient 0 on [-3, -1) and (1, 3]; the rows next to +-1 cost at most one step each side
    assert result["dead_fraction"] == pytest.approx((6 - 2) / 6, abs=2 * step / 6)
    assert result["area"] == pytest.approx(2.0, abs=2 * step)  # = the jump of sign: normalised
    assert result["normalised"] and result["jump"] == 2.0
    assert result["fwhm"] == pytest.approx(2.0, abs=2 * step)


def test_clip_gradient_area_shrinks_with_a_large_upstream_gradient():
    plain = _one(sweep("clip_gradient"))
    assert plain["area"] == pytest.approx(6.0) and plain["normalised"]
    clipped = _one(sweep("clip_gradient", upstream=3.0))
    # custom = clip(3) = 1, per unit upstream 1/3: area 6/3
    assert clipped["area"] == pytest.approx(2.0) and not clipped["normalised"]
    assert clipped["max_abs_diff"] == pytest.approx(2.0)  # |1 - 3|


def test_max_abs_diff():
    # a deliberate override: |scale * 2x - 2x| is largest at the ends of the range
    square = _one(sweep("scaled_square", params={"scale": 0.5}))
    assert square["max_abs_diff"] == pytest.approx(0.5 * 2 * 3.0, rel=1e-6)
    # the stable gradient equals autodiff wherever autodiff is finite
    stable = _one(sweep("log1pexp", lo=-20.0, hi=20.0))
    assert stable["max_abs_diff"] < 1e-6
    # a spike op's true gradient is missing, counted as 0: the mismatch is the surrogate itself,
    # away from the threshold (rows within 2.5 grid steps excluded)
    alpha, step = 2.0, 6 / 2000
    spike = _one(sweep("atan", params={"alpha": alpha}))
    nearest = 3 * step  # the closest row that is not excluded
    assert spike["max_abs_diff"] == pytest.approx((alpha / 2) / (1 + (math.pi * alpha * nearest / 2) ** 2), rel=1e-5)


def test_undeclared_points_can_be_excluded_too():
    # a leaky ReLU with its kink at 0 left undeclared: autodiff of maximum(x, x/2) sends the tie at 0
    # to the first argument (gradient 1); the custom gradient says 1/2 there, and agrees everywhere else
    spec = compile_op("leaky", "maximum(x, x / 2)", "where(x > 0, 1, 0.5)")
    df = sweep(spec)
    assert _one(df)["max_abs_diff"] == pytest.approx(0.5)
    points = special_points(df)
    assert points["status"].tolist() == ["undeclared"] and points["x"].tolist() == [0.0]
    assert _one(df, points)["max_abs_diff"] == 0.0


def test_metrics_table():
    keys = ops.names()[:4]
    table = metrics_table([sweep(key) for key in keys])
    assert list(table.index) == keys and list(table.columns) == ["label", *COLUMNS]
    assert table["label"].tolist() == keys
    labelled = metrics_table([sweep("atan"), sweep("atan", params={"alpha": 4.0})], labels=["a2", "a4"])
    assert labelled.loc["a4", "peak"] == pytest.approx(2.0) and labelled.loc["a2", "peak"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="labels must have one entry per sweep"):
        metrics_table([sweep("atan")], labels=["a", "b"])
    assert np.isfinite(table["area"]).all()
