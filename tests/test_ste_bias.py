"""The ste_bias preset (explorer.train.ste_bias): its closed forms against a NumPy evaluation of the expectation,
and its runs' end points against them, over seeds."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ops
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


# -- the estimators as estimators (issue 45): their expectations against hand-derived formulas ---------------
QS = (0.1, 0.3, 0.5, 0.8)


def _exact_gradient(q: float, p: float, t: float) -> float:
    """dL/dtheta = dL/dq * dq/dtheta, L(q) = q (1-t)^p + (1-q) t^p, q = sigma(theta): by hand."""
    return ((1 - t) ** p - t**p) * q * (1 - q)


def _ste_expectation(q: float, p: float, t: float) -> float:
    """E f'(b) over b ~ Bernoulli(q), f'(b) = p |b - t|^(p-1) sign(b - t), by hand: b = 1 and b = 0 weighted."""
    return q * p * (1 - t) ** (p - 1) - (1 - q) * p * t ** (p - 1)


def _exact_expectation(estimator: str, q: float, p: float, t: float, baseline: float = 0.0) -> float:
    """The estimator's exact expectation: its values at b = 1 and b = 0 weighted by q and 1 - q."""
    ones, zeros = (ste_bias.estimator_gradient(estimator, q, np.float64(b), p, t, baseline) for b in (1.0, 0.0))
    return q * float(ones) + (1 - q) * float(zeros)


@pytest.mark.parametrize("p", ste_bias.EXPONENTS)
@pytest.mark.parametrize("q", QS)
def test_reinforce_is_unbiased_its_monte_carlo_mean_is_the_exact_gradient_within_its_standard_error(q, p):
    t, n = 0.45, 200_000
    rng = np.random.default_rng([45, int(q * 10), int(p * 10)])
    b = (rng.random(n) < q).astype(np.float64)
    exact = _exact_gradient(q, p, t)
    for estimator, baseline in (("reinforce", 0.0), ("reinforce_baseline", 0.3)):
        samples = ste_bias.estimator_gradient(estimator, q, b, p, t, baseline)
        standard_error = samples.std(ddof=1) / np.sqrt(n)
        assert abs(samples.mean() - exact) < 4 * standard_error, (estimator, samples.mean(), exact, standard_error)
        # and its exact expectation (two points) is the gradient, not only within noise
        assert _exact_expectation(estimator, q, p, t, baseline) == pytest.approx(exact, rel=1e-12, abs=1e-15)
    assert ste_bias.estimator_gradient("exact", q, b[:3], p, t) == pytest.approx([exact] * 3, rel=1e-12)


def test_the_monte_carlo_test_has_the_power_to_see_a_biased_estimator():
    """The REINFORCE test's 4 standard errors at n = 200,000 separate a bias of a few per cent of the gradient."""
    q, p, t, n = 0.3, 2.0, 0.45, 200_000
    b = (np.random.default_rng(7).random(n) < q).astype(np.float64)
    samples = np.abs(b - t) ** p * (b - 0.9 * q)  # d log P/d theta with q off by 10 %: biased by 0.1 q E f
    standard_error = samples.std(ddof=1) / np.sqrt(n)
    assert abs(samples.mean() - _exact_gradient(q, p, t)) > 4 * standard_error


@pytest.mark.parametrize("p", ste_bias.EXPONENTS)
@pytest.mark.parametrize("q", QS)
def test_each_straight_through_variants_expected_update_is_its_closed_form(q, p):
    t = 0.45
    identity = _ste_expectation(q, p, t)
    assert _exact_expectation("ste_identity", q, p, t) == pytest.approx(identity, rel=1e-12)
    # sigma-prime: db/dtheta taken as sigma'(theta) = q (1 - q), both factors
    assert _exact_expectation("ste_sigmoid", q, p, t) == pytest.approx(q * (1 - q) * identity, rel=1e-12)
    # both vanish at the fixed point q*, not at the optimum q = 0 (where the exact gradient is 0 only in the limit)
    q_star = ste_bias.ste_fixed_point(p, t)
    assert _exact_expectation("ste_identity", q_star, p, t) == pytest.approx(0.0, abs=1e-12)


def test_straight_through_hand_values_at_p_2():
    """p = 2, t = 0.45, q = 0.3: f'(1) = 2 * 0.55 = 1.1, f'(0) = -2 * 0.45 = -0.9; E = 0.3 * 1.1 - 0.7 * 0.9 = -0.3;
    sigma-prime: 0.21 * -0.3 = -0.063."""
    assert _exact_expectation("ste_identity", 0.3, 2.0, 0.45) == pytest.approx(-0.3, abs=1e-12)
    assert _exact_expectation("ste_sigmoid", 0.3, 2.0, 0.45) == pytest.approx(-0.063, abs=1e-12)
    with pytest.raises(ValueError, match="estimator must be one of"):
        ste_bias.estimator_gradient("ste_tanh", 0.3, 1.0, 2.0, 0.45)


@pytest.mark.parametrize("estimator", sorted(ste_bias.ESTIMATORS))
def test_each_run_takes_its_estimators_step(estimator):
    """Two SGD steps from theta = 0 by hand, with the run's own draws: the loop applies the estimator it names
    (REINFORCE with a baseline: 0 at the first step, then 0.1 f(b_0))."""
    p, t, lr = 2.0, 0.45, 0.5
    runs = presets.ste_bias(p, t, steps=2, seeds=3, lr=lr, seed=11, surrogate="sigmoid")
    got = runs[runs["estimator"] == estimator].pivot_table(index="step", columns="seed", values="q").to_numpy()
    draws = ste_bias._draws(2, 3, 11)
    theta, baseline = np.zeros(3), np.zeros(3)
    expected = []
    for step in range(3):
        q = 1 / (1 + np.exp(-theta))
        expected.append(q)
        if step == 2:
            break
        b = (draws[step] < q).astype(float)
        f, slope = np.abs(b - t) ** p, 2 * (b - t)  # p = 2: f'(b) = 2 (b - t)
        grad = {
            "exact": q * (1 - q) * ((1 - t) ** 2 - t**2) + 0 * b, "reinforce": f * (b - q),
            "reinforce_baseline": (f - baseline) * (b - q), "ste_identity": slope, "ste_sigmoid": slope * q * (1 - q),
        }[estimator]  # fmt: skip
        baseline = 0.9 * baseline + 0.1 * f
        theta = theta - lr * grad
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-12)


# -- what mutation testing found untested (docs/testing.md) -------------------------------------------------
BOUNDS = [  # (argument, lowest accepted, highest accepted, just below, just above)
    ("p", 1.0, 4.0, 0.999, 4.001), ("t", 0.05, 0.49, 0.0499, 0.4901), ("steps", 1, 20_000, 0, 20_001),
    ("lr", 1e-6, 10.0, 0.9e-6, 10.001), ("seeds", 1, 50, 0, 51), ("seed", 0, 2**31 - 1, -1, 2**31),
]  # fmt: skip


@pytest.mark.parametrize(("name", "low", "high", "below", "above"), BOUNDS)
def test_each_argument_is_accepted_at_both_ends_of_its_range_and_refused_beyond_them_by_name(name, low, high, below, above, monkeypatch):
    # the range check, not the runs: q = 0 for every kept step (keep) and seed (the draws' columns)
    monkeypatch.setattr(ste_bias, "_numpy_run", lambda *a: np.zeros((a[5].sum(), a[4].shape[1])))
    monkeypatch.setattr(ste_bias, "_surrogate_run", lambda *a: np.zeros((a[6].sum(), a[5].shape[1])))
    small = {"steps": 1, "seeds": 1}
    for value in (low, high):
        ste_bias.ste_bias(**{**small, name: value})
    for value in (below, above, float("nan"), True):
        with pytest.raises(ValueError, match=rf"^{name} must be a (whole )?number in \["):
            ste_bias.ste_bias(**{**small, name: value})
    if name in ("p", "t"):
        ste_bias.closed_forms(**{"p": 2.0, "t": 0.45, name: high})
        with pytest.raises(ValueError, match=rf"^{name} must be a number in \["):
            ste_bias.closed_forms(**{"p": 2.0, "t": 0.45, name: above})


def test_the_defaults_are_the_papers_setting():
    import inspect

    defaults = {k: v.default for k, v in inspect.signature(ste_bias.ste_bias).parameters.items()}
    assert defaults == {"p": 2.0, "t": 0.45, "steps": 3000, "lr": 0.1, "seeds": 5, "seed": 0, "surrogate": "sigmoid",
                        "surrogate_params": None}  # fmt: skip


def test_draws_are_the_seeded_uniforms_column_by_column():
    draws = ste_bias._draws(1000, 3, 17)
    expected = np.stack([np.random.default_rng([17, s]).random(1000) for s in range(3)], axis=1)
    np.testing.assert_array_equal(draws, expected)  # the clip to [1e-12, 1 - 1e-12] changes none of these


def test_a_long_run_keeps_every_other_step_and_its_frame_is_complete():
    """600 steps: every (600 // 300) = 2nd step is kept, and the last; one row per kept step and seed."""
    runs = ste_bias.ste_bias(2.0, 0.45, steps=600, seeds=1, surrogate="sigmoid")
    assert list(runs.columns) == ["estimator", "label", "seed", "step", "q", "loss"]
    assert list(runs.index) == list(range(len(runs)))
    exact = runs[runs["estimator"] == "exact"]
    assert exact["step"].tolist() == list(range(0, 601, 2)) and exact["label"].iloc[0] == "exact gradient"
    np.testing.assert_allclose(exact["loss"], exact["q"] * 0.55**2 + (1 - exact["q"]) * 0.45**2, rtol=1e-12)


def test_the_surrogates_parameters_reach_its_run_and_only_spike_ops_are_offered():
    """The sigmoid surrogate's gradient at theta - logit(xi): a different slope, a different run."""
    steep = ste_bias.ste_bias(2.0, 0.3, steps=20, seeds=1, surrogate="sigmoid", surrogate_params={"slope": 80.0})
    flat = ste_bias.ste_bias(2.0, 0.3, steps=20, seeds=1, surrogate="sigmoid", surrogate_params={"slope": 1.0})
    column = "surrogate:sigmoid"
    assert not np.allclose(steep[steep.estimator == column]["q"], flat[flat.estimator == column]["q"])
    offered = ste_bias.spike_ops()
    assert {"sigmoid", "atan", "straight_through"} <= set(offered)
    assert all(ops.get(key).family == "spike" for key in offered) and "ste_sign" not in offered
    with pytest.raises(ValueError, match=re.escape(f"surrogate must be a spike op ({', '.join(offered)}), got 'ste_sign'")):
        ste_bias.ste_bias(surrogate="ste_sign")
    with pytest.raises(ValueError, match="estimator must be one of exact, reinforce, reinforce_baseline, ste_identity"):
        ste_bias.estimator_gradient("nope", 0.5, 1.0, 2.0, 0.45)


def test_reinforce_without_a_baseline_is_the_baseline_estimator_at_zero():
    b = np.array([0.0, 1.0, 1.0])
    np.testing.assert_array_equal(ste_bias.estimator_gradient("reinforce_baseline", 0.3, b, 2.0, 0.45),
                                  ste_bias.estimator_gradient("reinforce", 0.3, b, 2.0, 0.45))  # fmt: skip
    assert ste_bias.estimator_gradient("reinforce_baseline", 0.3, 1.0, 2.0, 0.45) == pytest.approx(0.55**2 * 0.7)
