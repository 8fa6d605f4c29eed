"""The ste_bias preset (explorer.train.ste_bias): its closed forms against a NumPy evaluation of the expectation,
and its runs' end points against them, over seeds."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.train import presets, ste_bias


def _expectation(q: np.ndarray, p: float, t: float) -> np.ndarray:
    """E_b |b - t|^p over b ~ Bernoulli(q), summed over b in {0, 1} (not the module's formula)."""
    return sum(np.where(b == 1, q, 1 - q) * abs(b - t) ** p for b in (0, 1))


@pytest.mark.parametrize("p", ste_bias.EXPONENTS)
@pytest.mark.parametrize("t", [0.45, 0.2, 0.05])
def test_closed_forms_match_the_expectation_and_the_straight_through_zero(p, t):
    closed = presets.ste_bias_closed_forms(p, t).set_index("point")
    grid = np.linspace(0.0, 1.0, 100_001)
    loss = _expectation(grid, p, t)
    assert grid[np.argmin(loss)] == closed.loc["optimum", "q"] == 0.0
    assert closed.loc["optimum", "loss"] == pytest.approx(loss.min(), rel=1e-12)
    # straight-through: the expectation over b of f'(b) = p |b - t|^(p-1) sign(b - t), evaluated on the grid
    ste = grid * p * (1 - t) ** (p - 1) - (1 - grid) * p * t ** (p - 1)
    zero = grid[np.argmin(np.abs(ste))]
    assert closed.loc["straight-through fixed point", "q"] == pytest.approx(zero, abs=1e-5)
    assert closed.loc["straight-through fixed point", "loss"] == pytest.approx(_expectation(zero, p, t), abs=1e-5)


def test_the_quoted_numbers_of_the_issue():
    """t = 0.45: optimum losses 0.3019 / 0.2025 / 0.0911, q* 0.475 / 0.450 / 0.401, losses 0.3522 / 0.2475 / 0.1213."""
    table = [presets.ste_bias_closed_forms(p, 0.45) for p in (1.5, 2.0, 3.0)]
    assert [round(c["loss"].iloc[0], 4) for c in table] == [0.3019, 0.2025, 0.0911]
    assert [round(c["q"].iloc[1], 3) for c in table] == [0.475, 0.45, 0.401]
    assert [round(c["loss"].iloc[1], 4) for c in table] == [0.3522, 0.2475, 0.1213]


@pytest.mark.slow
@pytest.mark.parametrize("p", ste_bias.EXPONENTS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_end_points_straight_through_near_its_fixed_point_unbiased_near_the_optimum(p, seed):
    runs = presets.ste_bias(p, 0.45, seed=seed, surrogate="atan")
    summary = presets.ste_bias_summary(runs, p, 0.45).set_index("estimator")["end q (mean over seeds)"]
    q_star = ste_bias.ste_fixed_point(p, 0.45)
    labels = ste_bias.ESTIMATORS
    for key in ("ste_identity", "ste_sigmoid"):
        assert abs(summary[labels[key]] - q_star) < 0.05, (key, summary[labels[key]], q_star)
    for key in ("exact", "reinforce", "reinforce_baseline"):
        assert summary[labels[key]] < 0.1, (key, summary[labels[key]])


def test_every_estimator_sees_the_same_draws_and_the_exact_run_is_deterministic_gradient_descent():
    runs = presets.ste_bias(2.0, 0.3, steps=40, seeds=2, surrogate="sigmoid")
    assert set(runs["estimator"]) == {*ste_bias.ESTIMATORS, "surrogate:sigmoid"}
    exact = runs[(runs["estimator"] == "exact") & (runs["seed"] == 0)]
    theta = 0.0
    for _ in range(40):  # theta -= lr * sigma'(theta) ((1-t)^2 - t^2)
        q = 1 / (1 + np.exp(-theta))
        theta -= 0.1 * q * (1 - q) * (0.7**2 - 0.3**2)
    assert exact["q"].iloc[-1] == pytest.approx(1 / (1 + np.exp(-theta)), rel=1e-12)
    # the straight_through op's custom gradient is 1: its surrogate run is the identity straight-through run
    identity = presets.ste_bias(2.0, 0.3, steps=40, seeds=2, surrogate="straight_through")
    pairs = identity.pivot_table(index=["seed", "step"], columns="estimator", values="q")
    np.testing.assert_allclose(pairs["surrogate:straight_through"], pairs["ste_identity"], rtol=1e-12)


@pytest.mark.parametrize(("arguments", "message"), [
    ({"p": 0.5}, "p must be a number in [1, 4]"), ({"t": 0.5}, "t must be a number in [0.05, 0.49]"),
    ({"steps": 0}, "steps must be a whole number"), ({"surrogate": "ste_sign"}, "surrogate must be a spike op"),
])  # fmt: skip
def test_bad_arguments_name_their_range(arguments, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        presets.ste_bias(**arguments)
