r"""What a straight-through estimator costs: the bias benchmark of REBAR, RELAX and ReinMax, in closed form and live.

Minimise :math:`L(q) = E_{b \sim \mathrm{Bernoulli}(q)}\,|b - t|^p = q(1 - t)^p + (1 - q)\,t^p` over
:math:`q = \sigma(\theta)` by SGD on :math:`\theta` (Tucker et al. 2017, REBAR; Grathwohl et al. 2018, RELAX; Liu et
al. 2023, ReinMax, with :math:`t = 0.45`). For :math:`t < 1/2` the optimum is :math:`q = 0`, loss :math:`t^p`.
A straight-through estimator differentiates the sample :math:`f(b) = |b - t|^p` in :math:`b`,
:math:`f'(b) = p\,|b - t|^{p-1}\,\mathrm{sign}(b - t)`, as if :math:`b` were :math:`q`; its expectation
:math:`q\,p(1-t)^{p-1} - (1-q)\,p\,t^{p-1}` vanishes at
:math:`q^* = t^{p-1} / (t^{p-1} + (1-t)^{p-1})`, not at the optimum (for :math:`p = 2`, :math:`q^* = t`).

Every estimator sees the same uniform draws :math:`\xi` per step and seed (:math:`b = [\xi < q]`), so their
differences come from the gradient alone. Plain functions, pandas out; the page is :mod:`explorer.ui.presets`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

import ops

ESTIMATORS = {
    "exact": "exact gradient",
    "reinforce": "REINFORCE",
    "reinforce_baseline": "REINFORCE with a baseline",
    "ste_identity": "straight-through (identity)",
    "ste_sigmoid": "straight-through (σ′, Bengio 2013)",
}
UNBIASED = ("exact", "reinforce", "reinforce_baseline")
EXPONENTS = (1.5, 2.0, 3.0)
DEFAULT_T = 0.45
T_RANGE = (0.05, 0.49)  # below 1/2: the optimum is q = 0
BASELINE_DECAY = 0.9  # REINFORCE's baseline: a moving average of f(b), updated after each step's use (unbiased)
RECORD_POINTS = 300  # rows kept per run: every (steps / RECORD_POINTS)-th step, and the last
SURROGATE_FAMILY = "spike"


def _check(name: str, value: Any, low: float, high: float, integer: bool = False) -> Any:
    bad = isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real)
    if bad or not math.isfinite(float(value)) or not low <= value <= high:
        kind = "a whole number" if integer else "a number"
        raise ValueError(f"{name} must be {kind} in [{low:g}, {high:g}], got {value!r}")
    return int(value) if integer else float(value)


def expected_loss(q: Any, p: float, t: float) -> Any:
    """:math:`L(q) = q(1-t)^p + (1-q)t^p`, the expectation over :math:`b \\sim \\mathrm{Bernoulli}(q)`."""
    return q * (1.0 - t) ** p + (1.0 - q) * t**p


def ste_fixed_point(p: float, t: float) -> float:
    """Where the straight-through gradient's expectation vanishes: :math:`t^{p-1}/(t^{p-1} + (1-t)^{p-1})`."""
    return t ** (p - 1.0) / (t ** (p - 1.0) + (1.0 - t) ** (p - 1.0))


def closed_forms(p: float, t: float) -> pd.DataFrame:
    """The optimum and the straight-through fixed point, each with its expected loss (one row each)."""
    p, t = _check("p", p, 1.0, 4.0), _check("t", t, *T_RANGE)
    q_star = ste_fixed_point(p, t)
    return pd.DataFrame(
        {
            "point": ["optimum", "straight-through fixed point"],
            "q": [0.0, q_star],
            "loss": [expected_loss(0.0, p, t), expected_loss(q_star, p, t)],
        }
    )


def _draws(steps: int, seeds: int, seed: int) -> np.ndarray:
    """Uniform draws in (0, 1), one per step and seed (``default_rng([seed, s])`` for seed column ``s``)."""
    columns = [np.random.default_rng([seed, s]).random(steps) for s in range(seeds)]
    return np.clip(np.stack(columns, axis=1), 1e-12, 1.0 - 1e-12)


def estimator_gradient(estimator: str, q: Any, b: Any, p: float, t: float, baseline: Any = 0.0) -> Any:
    r"""One sample's estimate of :math:`dL/d\theta` from the draw ``b`` (0 or 1, :math:`P(b = 1) = q`): ``exact``
    ignores it; REINFORCE is :math:`(f(b) - c)(b - q)` (:math:`d \log P(b)/d\theta = b - q`; the baseline :math:`c`,
    0 without one, must not depend on ``b``); straight-through is :math:`f'(b)` times :math:`db/d\theta` taken as 1
    (identity) or :math:`\sigma'(\theta) = q(1 - q)`. ValueError for an unknown ``estimator``."""
    f = np.abs(b - t) ** p
    slope = p * np.abs(b - t) ** (p - 1.0) * np.sign(b - t)  # f'(b)
    if estimator == "exact":
        return q * (1.0 - q) * ((1.0 - t) ** p - t**p) + 0.0 * b
    if estimator == "reinforce":
        return f * (b - q)
    if estimator == "reinforce_baseline":
        return (f - baseline) * (b - q)
    if estimator == "ste_identity":
        return slope
    if estimator == "ste_sigmoid":
        return slope * q * (1.0 - q)
    raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")


def _numpy_run(estimator: str, p: float, t: float, lr: float, draws: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """q at the kept steps (rows) for every seed (columns), SGD on theta from 0 (q = 1/2)."""
    steps, seeds = draws.shape
    theta, baseline = np.zeros(seeds), np.zeros(seeds)
    kept = []
    for step in range(steps + 1):
        q = 1.0 / (1.0 + np.exp(-theta))
        if keep[step]:
            kept.append(q)
        if step == steps:
            break
        b = (draws[step] < q).astype(np.float64)
        grad = estimator_gradient(estimator, q, b, p, t, baseline)
        if estimator == "reinforce_baseline":
            baseline = BASELINE_DECAY * baseline + (1.0 - BASELINE_DECAY) * np.abs(b - t) ** p
        theta = theta - lr * grad
    return np.stack(kept)


def _surrogate_run(spec: ops.OpSpec, params: dict, p: float, t: float, lr: float, draws: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The same SGD with :math:`b = H(\\theta - \\ell)`, :math:`\\ell = \\mathrm{logit}(\\xi)` (so :math:`P(b = 1) = q`),
    through the catalogue op's own custom gradient: ``tf.GradientTape`` of ``spec.apply`` in one compiled loop."""
    steps, seeds = draws.shape
    logits = tf.constant(np.log(draws) - np.log1p(-draws))
    kept_steps = tf.constant(np.flatnonzero(keep), tf.int32)

    @tf.function(autograph=False)
    def run():
        def body(step, theta, record):
            with tf.GradientTape() as tape:
                tape.watch(theta)
                b = spec.apply(theta - logits[step], **params)
                loss = tf.reduce_sum(tf.abs(b - t) ** p)  # seeds are independent: per-seed gradients
            theta_next = theta - lr * tape.gradient(loss, theta)
            return step + 1, theta_next, record.write(step, tf.sigmoid(theta))

        record = tf.TensorArray(tf.float64, size=steps + 1)
        _, theta, record = tf.while_loop(lambda step, *_: step < steps, body, (0, tf.zeros(seeds, tf.float64), record))
        return tf.gather(record.write(steps, tf.sigmoid(theta)).stack(), kept_steps)

    return run().numpy()


def ste_bias(
    p: float = 2.0,
    t: float = DEFAULT_T,
    *,
    steps: int = 3000,
    lr: float = 0.1,
    seeds: int = 5,
    seed: int = 0,
    surrogate: str = "sigmoid",
    surrogate_params: dict | None = None,
) -> pd.DataFrame:
    """Every estimator of :data:`ESTIMATORS` and the catalogue ``surrogate`` (a spike op: its custom gradient
    is :math:`\\partial b/\\partial\\theta`), ``seeds`` runs each of ``steps`` SGD steps from q = 1/2.

    One row per run, seed and kept step: ``estimator`` (a key of :data:`ESTIMATORS` or ``surrogate:<op>``),
    ``label``, ``seed``, ``step``, ``q`` and ``loss`` (the expected loss :math:`L(q)`, exact, not the sample's)."""
    p, t = _check("p", p, 1.0, 4.0), _check("t", t, *T_RANGE)
    steps = _check("steps", steps, 1, 20_000, integer=True)
    lr = _check("lr", lr, 1e-6, 10.0)
    seeds = _check("seeds", seeds, 1, 50, integer=True)
    seed = _check("seed", seed, 0, 2**31 - 1, integer=True)
    spec = ops.get(surrogate)
    if spec.family != SURROGATE_FAMILY:
        raise ValueError(f"surrogate must be a spike op ({', '.join(spike_ops())}), got {surrogate!r}")
    params = spec.resolve(surrogate_params or {})
    draws = _draws(steps, seeds, seed)
    every = max(1, steps // RECORD_POINTS)
    keep = np.zeros(steps + 1, bool)
    keep[::every] = True
    keep[steps] = True
    kept_steps = np.flatnonzero(keep)
    frames = []
    runs = [(key, label, _numpy_run(key, p, t, lr, draws, keep)) for key, label in ESTIMATORS.items()]
    runs.append((f"surrogate:{spec.key}", f"{spec.key} surrogate (catalogue)", _surrogate_run(spec, params, p, t, lr, draws, keep)))
    for key, label, q in runs:
        frames.append(
            pd.DataFrame(
                {
                    "estimator": key,
                    "label": label,
                    "seed": np.tile(np.arange(seeds), len(kept_steps)),
                    "step": np.repeat(kept_steps, seeds),
                    "q": q.ravel(),
                    "loss": expected_loss(q.ravel(), p, t),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


END_SHARE = 0.1  # the end point: q averaged over the last 10 % of the steps (SGD noise averaged out)


def end_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Per estimator and seed: q averaged over the kept rows of the last :data:`END_SHARE` of the steps."""
    last_step = runs["step"].max()
    window = runs[runs["step"] >= last_step * (1.0 - END_SHARE)]
    return window.groupby(["estimator", "label", "seed"], sort=False, as_index=False)["q"].mean()


def summary(runs: pd.DataFrame, p: float, t: float) -> pd.DataFrame:
    """Per estimator: the end point (:func:`end_points`) as mean and standard deviation over seeds, its
    expected loss, and where the estimator's expectation goes (0 unbiased, q* straight-through, NaN unknown)."""
    q_star = ste_fixed_point(p, t)
    rows = []
    for key, group in end_points(runs).groupby("estimator", sort=False):
        target = 0.0 if key in UNBIASED else (q_star if key.startswith("ste_") else math.nan)
        rows.append(
            {
                "estimator": group["label"].iloc[0],
                "end q (mean over seeds)": float(group["q"].mean()),
                "std over seeds": float(group["q"].std(ddof=1)) if len(group) > 1 else 0.0,
                "end loss": float(expected_loss(group["q"].mean(), p, t)),
                "its expectation goes to q": target,
            }
        )
    return pd.DataFrame(rows)


def spike_ops() -> list[str]:
    """The catalogue ops the page offers as the surrogate of b = H(theta - logit(xi))."""
    return [key for key in ops.names() if ops.get(key).family == SURROGATE_FAMILY]
