"""Published results, reproduced live: each preset is a plain function returning pandas DataFrames.

No streamlit here: notebooks and tests call these directly; the Train page shows their output
(``explorer/ui/train.py``). Everything is generated in code from a seed.

* :func:`yin2019`: Yin et al. 2019 (ICLR), "Understanding Straight-Through Estimator in Training
  Activation Quantized Neural Nets": coarse gradient descent on the population loss of a one-hidden-
  layer binary-activation network, from a spurious local minimiser, with the identity, ReLU or
  clipped-ReLU straight-through estimator (closed forms; :func:`yin2019_monte_carlo` checks them
  against a TensorFlow ``@tf.custom_gradient`` STE on sampled inputs).
* :func:`dann`: gradient reversal (Ganin & Lempitsky 2015), a shallow DANN on rotated two moons.
* :func:`shape_scale`: surrogate shape vs scale (Zenke & Vogels 2021) on a Heaviside hidden layer, and
  :func:`spiking_contrasts`: their peak-normalised vs asymptotic scale and detached vs differentiable reset in a
  spiking layer trained in time (:mod:`explorer.train.spiking`).
* :func:`ste_bias`: what a straight-through estimator costs (Tucker et al. 2017; Grathwohl et al. 2018; Liu et al.
  2023): SGD on E_b[|b - t|^p] with the exact gradient, REINFORCE and straight-through, against the closed forms
  (:mod:`explorer.train.ste_bias`).
* :func:`gradient_flow`: per-layer gradient norms through a 6-hidden-layer Heaviside network with one
  surrogate at three scales.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import tensorflow as tf

import ops
from explorer.train import tasks

# -- Yin et al. 2019 -----------------------------------------------------------------------------------
from explorer.train import trainer as train
from explorer.train.setup import TrainState
from explorer.train.spiking import contrast_table as spiking_contrast_table  # noqa: F401
from explorer.train.spiking import contrasts as spiking_contrasts  # noqa: F401
from explorer.train.ste_bias import (  # noqa: F401 - the ste_bias preset's functions, as explorer.train.presets.<name>
    closed_forms as ste_bias_closed_forms,
)
from explorer.train.ste_bias import end_points as ste_bias_end_points  # noqa: F401
from explorer.train.ste_bias import ste_bias  # noqa: F401
from explorer.train.ste_bias import summary as ste_bias_summary  # noqa: F401

YIN_HIDDEN = 4  # m: rows of Z, hidden units
YIN_INPUT = 10  # n: columns of Z, input dimension
YIN_TEACHER_V = np.array([1.0, 1.0, 1.0, -1.0])  # v*
YIN_TEACHER_W = np.eye(YIN_INPUT)[0]  # w* = e_1
YIN_START_V = np.array([-0.2, -0.2, -0.2, 1.8])  # the spurious minimiser's v, with w = -w*
STES = ("identity", "relu", "clipped_relu")
_ROOT_2PI = math.sqrt(2.0 * math.pi)


def _check_ste(ste: Any) -> str:
    if ste not in STES:
        raise ValueError(f"ste must be one of {', '.join(STES)}, got {ste!r}")
    return ste


def _check_whole(name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number in [{low}, {high}], got {value!r}")
    return int(value)


def _check_real(name: str, value: Any, low: float, high: float, *, open_low: bool = False) -> float:
    bad_low = value <= low if open_low else value < low
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or bad_low or value > high:
        bracket = "(" if open_low else "["
        raise ValueError(f"{name} must be a number in {bracket}{low:g}, {high:g}], got {value!r}")
    return float(value)


def yin2019_angle(w: np.ndarray, w_star: np.ndarray = YIN_TEACHER_W) -> float:
    """theta = arccos(w.w* / (|w| |w*|)), the cosine clipped to [-1, 1] against rounding."""
    cosine = float(w @ w_star) / (float(np.linalg.norm(w)) * float(np.linalg.norm(w_star)))
    return math.acos(min(1.0, max(-1.0, cosine)))


def yin2019_loss(v: np.ndarray, theta: float, v_star: np.ndarray = YIN_TEACHER_V) -> float:
    """Population loss, Lemma 1 of Yin et al. 2019 (w != 0):
    f = 1/8 [v'(I+11')v - 2 v'((1 - 2 theta/pi) I + 11')v* + v*'(I+11')v*]."""
    ones_v, ones_star = float(v.sum()), float(v_star.sum())
    return 0.125 * (
        float(v @ v) + ones_v**2
        - 2.0 * ((1.0 - 2.0 * theta / math.pi) * float(v @ v_star) + ones_v * ones_star)
        + float(v_star @ v_star) + ones_star**2
    )


def yin2019_grad_v(v: np.ndarray, theta: float, v_star: np.ndarray = YIN_TEACHER_V) -> np.ndarray:
    """Exact expected gradient in v: 1/4 [(I+11')v - ((1 - 2 theta/pi) I + 11')v*]."""
    return 0.25 * (v + v.sum() - ((1.0 - 2.0 * theta / math.pi) * v_star + v_star.sum()))


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0))) if math.isfinite(z) else float(z > 0)


def yin2019_coarse_grad_w(
    ste: str, v: np.ndarray, w: np.ndarray, v_star: np.ndarray = YIN_TEACHER_V, w_star: np.ndarray = YIN_TEACHER_W
) -> np.ndarray:
    """Expected coarse gradient in w, E_Z[Z'(mu'(Zw) * v)(v'sigma(Zw) - v*'sigma(Zw*))], |w*| = 1.

    With h = |v|^2 + (1'v)^2 - (1'v)(1'v*) + v'v* and w_hat = w/|w|:

    * identity (mu' = 1), Lemma 7: (|v|^2 w_hat - (v'v*) w*) / sqrt(2 pi).
    * relu (mu' = 1{x > 0}), Lemma 4: h/(2 sqrt(2 pi)) w_hat - cos(theta/2) (v'v*)/sqrt(2 pi) (w_hat + w*)/|w_hat + w*|.
    * clipped_relu (mu' = 1{0 < x < 1}): (h/2) E[z 1{0 < z'w < 1}] - (v'v*) E[z 1{0 < z'w < 1} 1{z'w* > 0}],
      with a = 1/|w|, phi, Phi the standard normal density and distribution, and u the unit vector
      of w* orthogonal to w: E[z 1{0 < z'w < 1}] = (phi(0) - phi(a)) w_hat and
      E[z 1{0 < z'w < 1} 1{z'w* > 0}] = [phi(0)/2 - phi(a) Phi(a cot theta) + cos(theta) (Phi(a/sin theta) - 1/2)/sqrt(2 pi)] w_hat
      + sin(theta) (Phi(a/sin theta) - 1/2)/sqrt(2 pi) u  (integrate t phi(t) Phi(t cot theta) by parts).
      As |w| -> 0 (a -> inf) this is the ReLU formula.
    """
    _check_ste(ste)
    norm_w = float(np.linalg.norm(w))
    w_hat = w / norm_w
    v_dot_star = float(v @ v_star)
    if ste == "identity":
        return (float(v @ v) * w_hat - v_dot_star * w_star) / _ROOT_2PI
    h = float(v @ v) + float(v.sum()) ** 2 - float(v.sum()) * float(v_star.sum()) + v_dot_star
    theta = yin2019_angle(w, w_star)
    if ste == "relu":
        sum_direction = w_hat + w_star
        length = float(np.linalg.norm(sum_direction))
        cross = math.cos(theta / 2.0) * sum_direction / length if length > 0.0 else np.zeros_like(w)
        return h / (2.0 * _ROOT_2PI) * w_hat - v_dot_star / _ROOT_2PI * cross
    a = 1.0 / norm_w
    phi_0, phi_a = 1.0 / _ROOT_2PI, math.exp(-0.5 * a * a) / _ROOT_2PI
    sin_theta, cos_theta = math.sin(theta), math.cos(theta)
    orthogonal = w_star - (w_star @ w_hat) * w_hat
    orthogonal_length = float(np.linalg.norm(orthogonal))
    u = orthogonal / orthogonal_length if orthogonal_length > 1e-12 else np.zeros_like(w)
    tail = _normal_cdf(a / sin_theta) - 0.5 if sin_theta > 0.0 else 0.5
    cot_term = _normal_cdf(a * cos_theta / sin_theta) if sin_theta > 0.0 else float(cos_theta > 0.0)
    along = phi_0 / 2.0 - phi_a * cot_term + cos_theta * tail / _ROOT_2PI
    across = sin_theta * tail / _ROOT_2PI
    single = (phi_0 - phi_a) * w_hat
    joint = along * w_hat + across * u
    return 0.5 * h * single - v_dot_star * joint


def yin2019(ste: str, steps: int = 3000, lr: float = 0.1) -> pd.DataFrame:
    """Coarse gradient descent of Yin et al. 2019 from the spurious minimiser, in closed form.

    Model ``y = v' sigma(Z w)``, sigma = 1{x > 0}, Z in R^{4x10} i.i.d. N(0, 1), teacher
    v* = (1, 1, 1, -1), w* = e_1; start v = (-0.2, -0.2, -0.2, 1.8), w = -w* (loss 0.4). Each step
    ``v -= lr * df/dv`` (exact expected gradient) and ``w -= lr * E[g_ste]`` (expected coarse gradient,
    :func:`yin2019_coarse_grad_w`), both at the current (v, w). One row per step, step 0 the start:
    ``step, loss, theta, w_norm, w_along_target`` (w'w*), ``grad_v_norm, grad_w_norm`` (of the step
    taken from that row), ``v_1..v_4``. A large ``lr`` can make the identity STE diverge: the run
    stops at the last step whose (v, w) is finite, within :data:`YIN_DIVERGED` and has w != 0 (theta
    is undefined there), so ``len(frame) - 1 < steps`` means "diverged" (see :func:`yin2019_summary`).
    """
    _check_ste(ste)
    steps = _check_whole("steps", steps, 1, 100_000)
    lr = _check_real("lr", lr, 0.0, 10.0, open_low=True)
    v, w = YIN_START_V.copy(), -YIN_TEACHER_W.copy()
    rows = []
    for step in range(steps + 1):
        if not _yin_state_ok(v, w):
            break
        theta = yin2019_angle(w, YIN_TEACHER_W)
        grad_v = yin2019_grad_v(v, theta)
        grad_w = yin2019_coarse_grad_w(ste, v, w)
        rows.append(
            (step, yin2019_loss(v, theta), theta, float(np.linalg.norm(w)), float(w @ YIN_TEACHER_W),
             float(np.linalg.norm(grad_v)), float(np.linalg.norm(grad_w)), *v)
        )
        if step < steps:
            v, w = v - lr * grad_v, w - lr * grad_w
    columns = ["step", "loss", "theta", "w_norm", "w_along_target", "grad_v_norm", "grad_w_norm"]
    return pd.DataFrame(rows, columns=columns + [f"v_{i}" for i in range(1, YIN_HIDDEN + 1)])


YIN_DIVERGED = 1e100  # |v|, |w| beyond this: squares would overflow float64 within a few steps


def _yin_state_ok(v: np.ndarray, w: np.ndarray) -> bool:
    largest = max(float(np.max(np.abs(v))), float(np.max(np.abs(w))))
    return math.isfinite(largest) and largest < YIN_DIVERGED and float(np.linalg.norm(w)) > 0.0


def yin2019_summary(histories: dict[str, pd.DataFrame], steps: int | None = None) -> pd.DataFrame:
    """Per STE: start and final loss, highest loss, first step with theta < pi/2 (w flipped), final theta,
    and ``diverged``: the run stopped before ``steps`` (when given) because v or w left the float range."""
    rows = []
    for ste, history in histories.items():
        flipped = history.index[history["theta"] < math.pi / 2]
        rows.append(
            {
                "ste": ste,
                "start loss": float(history["loss"].iloc[0]),
                "final loss": float(history["loss"].iloc[-1]),
                "highest loss": float(history["loss"].max()),
                "w flips at step": int(history["step"].loc[flipped[0]]) if len(flipped) else None,
                "final theta": float(history["theta"].iloc[-1]),
                "steps": int(history["step"].iloc[-1]),
                "diverged": steps is not None and int(history["step"].iloc[-1]) < steps,
            }
        )
    return pd.DataFrame(rows)


def _heaviside_ste(ste: str):
    """sigma(x) = 1{x > 0} whose backward is the STE's mu'(x): the catalogue's ``straight_through``
    for the identity STE (mu' = 1); ReLU (mu' = 1{x > 0}) and clipped ReLU (mu' = 1{0 < x < 1}) are
    written here with ``@tf.custom_gradient`` (the catalogue has no Heaviside op with those backwards)."""
    _check_ste(ste)
    if ste == "identity":
        spec = ops.get("straight_through")
        return lambda x: spec.apply(x)

    @tf.custom_gradient
    def binary(x):
        def grad(dy):
            inside = x > 0.0 if ste == "relu" else tf.logical_and(x > 0.0, x < 1.0)
            return dy * tf.cast(inside, x.dtype)

        return tf.cast(x > 0.0, x.dtype), grad

    return binary


def yin2019_monte_carlo(
    ste: str, v: Sequence[float], w: Sequence[float], *, samples: int = 100_000, seed: int = 0
) -> pd.DataFrame:
    """Sampled gradients against the closed forms: a TensorFlow ``@tf.custom_gradient`` STE on ``samples``
    draws of Z (float64), per-sample loss 1/2 (v' sigma(Z w) - v*' sigma(Z w*))^2 differentiated by
    ``tf.GradientTape``. One row per parameter component (``v_1..v_4``, ``w_1..w_10``): ``closed_form``
    (:func:`yin2019_grad_v`, :func:`yin2019_coarse_grad_w`), ``monte_carlo`` (mean over samples),
    ``standard_error`` (sample std / sqrt(samples)) and ``z`` = (monte_carlo - closed_form) / standard_error."""
    _check_ste(ste)
    samples = _check_whole("samples", samples, 100, 2_000_000)
    v = np.asarray(v, np.float64)
    w = np.asarray(w, np.float64)
    if v.shape != (YIN_HIDDEN,) or w.shape != (YIN_INPUT,) or not np.linalg.norm(w) > 0:
        raise ValueError(f"v must have {YIN_HIDDEN} entries and w {YIN_INPUT} entries, not all zero")
    z = tf.constant(np.random.default_rng(seed).standard_normal((samples, YIN_HIDDEN, YIN_INPUT)))
    sigma = _heaviside_ste(ste)
    v_rows = tf.Variable(np.tile(v, (samples, 1)))  # one copy per sample: the tape gives per-sample gradients
    w_rows = tf.Variable(np.tile(w, (samples, 1)))
    teacher = tf.cast(tf.einsum("sij,j->si", z, YIN_TEACHER_W) > 0.0, tf.float64) @ YIN_TEACHER_V[:, None]
    with tf.GradientTape() as tape:
        hidden = sigma(tf.einsum("sij,sj->si", z, w_rows))
        output = tf.reduce_sum(hidden * v_rows, axis=1, keepdims=True)
        loss = tf.reduce_sum(0.5 * tf.square(output - teacher))
    grad_v, grad_w = (g.numpy() for g in tape.gradient(loss, [v_rows, w_rows]))
    sampled = np.concatenate([grad_v, grad_w], axis=1)
    theta = yin2019_angle(w)
    closed = np.concatenate([yin2019_grad_v(v, theta), yin2019_coarse_grad_w(ste, v, w)])
    mean = sampled.mean(axis=0)
    error = sampled.std(axis=0, ddof=1) / math.sqrt(samples)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(error > 0, (mean - closed) / error, np.where(mean == closed, 0.0, np.inf))
    names = [f"v_{i}" for i in range(1, YIN_HIDDEN + 1)] + [f"w_{i}" for i in range(1, YIN_INPUT + 1)]
    return pd.DataFrame(
        {"parameter": names, "closed_form": closed, "monte_carlo": mean, "standard_error": error, "z": score}
    )


def yin2019_loss_sweep(points: int = 361, v: Sequence[float] = tuple(YIN_START_V)) -> pd.DataFrame:
    """The closed-form loss along w(theta) = cos(theta) e_1 + sin(theta) e_2, theta in [0, pi] (both ends
    on the grid), and TensorFlow's autodiff of it in w through theta = arccos(w'w*/(|w||w*|)).

    Columns ``theta, loss, grad_w_norm`` (autodiff), ``exact_grad_w_norm`` = |v'v*|/(2 pi |w|) (the
    derivative df/dtheta = v'v*/(2 pi) times |d theta/dw| = 1/|w|, valid for 0 < theta < pi) and
    ``singular``: autodiff gave inf or NaN. d arccos(c)/dc = -1/sqrt(1 - c^2) is infinite at c = +-1,
    so the gradient is singular at theta = 0 and pi, exactly where w is parallel to w*.
    """
    points = _check_whole("points", points, 3, 100_001)
    v = np.asarray(v, np.float64)
    theta = np.linspace(0.0, math.pi, points)
    directions = np.zeros((points, YIN_INPUT))
    directions[:, 0], directions[:, 1] = np.cos(theta), np.sin(theta)
    directions[-1, :2] = (-1.0, 0.0)  # exactly -w*: cos(pi) rounds to -1 but sin(pi) does not round to 0
    w = tf.Variable(directions)
    teacher_v = tf.constant(YIN_TEACHER_V)
    v_tensor = tf.constant(v)
    with tf.GradientTape() as tape:
        cosine = tf.reduce_sum(w * tf.constant(YIN_TEACHER_W), axis=1) / tf.norm(w, axis=1)
        angle = tf.acos(cosine)
        ones_v, ones_star = tf.reduce_sum(v_tensor), tf.reduce_sum(teacher_v)
        loss = 0.125 * (
            tf.tensordot(v_tensor, v_tensor, 1) + ones_v**2
            - 2.0 * ((1.0 - 2.0 * angle / math.pi) * tf.tensordot(v_tensor, teacher_v, 1) + ones_v * ones_star)
            + tf.tensordot(teacher_v, teacher_v, 1) + ones_star**2
        )
        total = tf.reduce_sum(loss)  # row i depends on w[i] only: the gradient of the sum is per row
    gradient = tape.gradient(total, w).numpy()
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.linalg.norm(gradient, axis=1)
    exact = abs(float(v @ YIN_TEACHER_V)) / (2.0 * math.pi) / np.linalg.norm(directions, axis=1)  # one-sided at the ends
    return pd.DataFrame(
        {
            "theta": theta,
            "loss": loss.numpy(),
            "grad_w_norm": norms,
            "exact_grad_w_norm": exact,
            "singular": ~np.isfinite(norms),
        }
    )


# -- gradient reversal: Ganin & Lempitsky 2015 ---------------------------------------------------------
DANN_POINTS = 150  # per domain
DANN_NOISE = 0.05
DANN_ROTATION = 35.0  # degrees, about the origin (the moons are centred there)
DANN_HIDDEN = 15
DANN_TEST_POINTS = 1000  # fresh target points the accuracy is measured on
DANN_STEPS = 2000
DANN_LEARNING_RATE = 0.01
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPSILON = 1e-7


def reversal_strength(progress: Any) -> Any:
    """Ganin & Lempitsky's schedule lambda_p = 2 / (1 + exp(-10 p)) - 1, p = training progress in [0, 1]."""
    exp = tf.exp if isinstance(progress, tf.Tensor) else np.exp
    return 2.0 / (1.0 + exp(-10.0 * progress)) - 1.0


def rotate(points: np.ndarray, degrees: float) -> np.ndarray:
    """Points rotated anticlockwise by ``degrees`` about the origin."""
    angle = math.radians(degrees)
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return points @ rotation.T


def dann_domains(seed: int, points: int = DANN_POINTS, noise: float = DANN_NOISE, rotation: float = DANN_ROTATION):
    """(source x, source y, target x, target test x, target test y): two moons (``tasks.moons``,
    centred) for the labelled source; the target is a fresh sample rotated by ``rotation`` degrees."""
    rng = np.random.default_rng([seed, 0])
    source_x, source_y = tasks.moons(points, noise, rng)
    target_x, _ = tasks.moons(points, noise, rng)  # unlabelled during training
    test_x, test_y = tasks.moons(DANN_TEST_POINTS, noise, rng)
    return source_x, source_y, rotate(target_x, rotation), rotate(test_x, rotation), test_y


def _glorot(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    limit = math.sqrt(6.0 / sum(shape))
    return rng.uniform(-limit, limit, shape)


def dann(
    seeds: int = 10,
    *,
    steps: int = DANN_STEPS,
    learning_rate: float = DANN_LEARNING_RATE,
    rotation: float = DANN_ROTATION,
) -> pd.DataFrame:
    """A shallow DANN (Ganin & Lempitsky 2015) against the same network without gradient reversal, per seed.

    Network: x (2) -> 15 sigmoid units (features) -> label logit, and features -> gradient reversal
    (the catalogue's ``gradient_reversal``, lam = lambda_p of :func:`reversal_strength`) -> domain logit.
    Loss: label cross-entropy on the 150 labelled source points plus domain cross-entropy on source
    (domain 0) and the 150 unlabelled target points (domain 1); full batch, Adam. The comparison run
    is identical (same data, same initial weights) except that the features get no gradient from the
    domain head (``tf.stop_gradient`` instead of the reversal): a plain source-only classifier.

    Why not ``Model.fit``: the 2 x ``seeds`` tiny networks train as one batch of weight tensors (shape
    ``(models, ...)``) in a single XLA-compiled ``tf.while_loop``, about 1,000 times less Python and
    launch overhead than 20 Keras models fitted one after another, so 10 seeds finish in seconds.

    One row per seed: ``seed``, ``dann_target_accuracy``, ``source_only_target_accuracy`` (on 1,000
    fresh rotated target points), ``dann_source_accuracy``, ``source_only_source_accuracy``.
    """
    seeds = _check_whole("seeds", seeds, 1, 50)
    steps = _check_whole("steps", steps, 1, 20_000)
    learning_rate = _check_real("learning_rate", learning_rate, 0.0, 1.0, open_low=True)
    rotation = _check_real("rotation", rotation, -180.0, 180.0)
    domains = [dann_domains(seed, rotation=rotation) for seed in range(seeds)]
    initial = []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, 1])
        initial.append(
            [_glorot(rng, (2, DANN_HIDDEN)), np.zeros(DANN_HIDDEN), _glorot(rng, (DANN_HIDDEN, 1)), np.zeros(1),
             _glorot(rng, (DANN_HIDDEN, 1)), np.zeros(1)]
        )
    # models 0..seeds-1: DANN; seeds..2 seeds-1: the same seeds without reversal
    stacked = [tf.constant(np.stack([weights[i] for weights in initial] * 2), tf.float32) for i in range(6)]
    source_x = np.stack([d[0] for d in domains] * 2)
    inputs = tf.constant(np.concatenate([source_x, np.stack([d[2] for d in domains] * 2)], axis=1), tf.float32)
    labels = tf.constant(np.stack([d[1] for d in domains] * 2)[..., None], tf.float32)
    domain_labels = tf.constant(np.repeat([0.0, 1.0], DANN_POINTS)[None, :, None] * np.ones((2 * seeds, 1, 1)), tf.float32)
    trained = _train_dann(stacked, inputs, labels, domain_labels, seeds, steps, learning_rate)
    weights = [t.numpy().astype(np.float64) for t in trained]

    def accuracy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        features = 1.0 / (1.0 + np.exp(-(np.einsum("mni,mij->mnj", x, weights[0]) + weights[1][:, None, :])))
        logits = np.einsum("mnj,mjk->mnk", features, weights[2])[..., 0] + weights[3]
        return ((logits > 0.0) == (y > 0.5)).mean(axis=1)

    target = accuracy(np.stack([d[3] for d in domains] * 2), np.stack([d[4] for d in domains] * 2))
    source = accuracy(source_x, np.stack([d[1] for d in domains] * 2))
    return pd.DataFrame(
        {
            "seed": np.arange(seeds),
            "dann_target_accuracy": target[:seeds],
            "source_only_target_accuracy": target[seeds:],
            "dann_source_accuracy": source[:seeds],
            "source_only_source_accuracy": source[seeds:],
        }
    )


def _train_dann(weights, inputs, labels, domain_labels, seeds: int, steps: int, learning_rate: float):
    """Full-batch Adam on every model at once (see :func:`dann`); returns the trained weight tensors."""
    reversal = ops.get("gradient_reversal")
    beta_1, beta_2 = _ADAM_BETAS

    def gradients(params, strength):
        with tf.GradientTape() as tape:
            tape.watch(params)
            kernel, bias, label_kernel, label_bias, domain_kernel, domain_bias = params
            features = tf.sigmoid(tf.einsum("mni,mij->mnj", inputs, kernel) + bias[:, None, :])
            label_logits = tf.einsum("mnj,mjk->mnk", features[:, :DANN_POINTS], label_kernel) + label_bias[:, None, :]
            label_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, label_logits), axis=[1, 2])
            to_domain = tf.concat([reversal.apply(features[:seeds], lam=strength), tf.stop_gradient(features[seeds:])], 0)
            domain_logits = tf.einsum("mnj,mjk->mnk", to_domain, domain_kernel) + domain_bias[:, None, :]
            domain_loss = tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(domain_labels, domain_logits), axis=[1, 2]
            )
            total = tf.reduce_sum(label_loss + domain_loss)  # models are independent: per-model gradients
        return tape.gradient(total, params)

    @tf.function(jit_compile=True, autograph=False)
    def run(params):
        def body(step, params, first_moments, second_moments):
            strength = reversal_strength(tf.cast(step, tf.float32) / steps)
            grads = gradients(params, strength)
            count = tf.cast(step + 1, tf.float32)
            first_moments = [beta_1 * m + (1.0 - beta_1) * g for m, g in zip(first_moments, grads, strict=True)]
            second_moments = [beta_2 * s + (1.0 - beta_2) * g * g for s, g in zip(second_moments, grads, strict=True)]
            rate = learning_rate * tf.sqrt(1.0 - beta_2**count) / (1.0 - beta_1**count)
            params = [
                p - rate * m / (tf.sqrt(s) + _ADAM_EPSILON)
                for p, m, s in zip(params, first_moments, second_moments, strict=True)
            ]
            return step + 1, params, first_moments, second_moments

        zeros = [tf.zeros_like(p) for p in params]
        _, params, _, _ = tf.while_loop(
            lambda step, *_: step < steps, body, (tf.constant(0), list(params), zeros, list(zeros))
        )
        return params

    return run(weights)


def dann_summary(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard deviation, min and max of target accuracy over seeds, and seeds where each variant wins."""
    rows = []
    for name, column, other in (
        ("with gradient reversal (DANN)", "dann_target_accuracy", "source_only_target_accuracy"),
        ("without (source only)", "source_only_target_accuracy", "dann_target_accuracy"),
    ):
        values = per_seed[column]
        rows.append(
            {
                "network": name,
                "mean target accuracy": float(values.mean()),
                "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                "min": float(values.min()),
                "max": float(values.max()),
                "better in seeds": int((values > per_seed[other]).sum()),
                "seeds": len(values),
            }
        )
    return pd.DataFrame(rows)


# -- surrogate shape vs scale: Zenke & Vogels 2021 -----------------------------------------------------
SHAPES = {"fast_sigmoid": "slope", "sigmoid": "slope", "triangle": "alpha"}  # op -> its steepness parameter
STEEPNESS = (1.0, 10.0, 100.0)
SHAPE_SCALE_TASK = {"name": "moons", "n": 256, "noise": 0.2, "seed": 0}
SHAPE_SCALE_EPOCHS = 300
IDENTITY_STE = "straight_through"  # the catalogue's identity STE: forward [x > 0], backward 1


def shape_scale_runs(steepness: Sequence[float] = STEEPNESS) -> list[train.Run]:
    """Every shape at every steepness its parameter range allows (triangle's alpha stops at 10), then
    the identity STE and the true gradient of the same Heaviside forward."""
    runs = []
    for key, name in SHAPES.items():
        param = next(p for p in ops.get(key).params if p.name == name)
        runs += [train.Run(key, {name: float(value)}) for value in steepness if param.low <= value <= param.high]
    return [*runs, train.Run(IDENTITY_STE), train.Run(IDENTITY_STE, gradient="true")]


def shape_scale(steepness: Sequence[float] = STEEPNESS, *, epochs: int = SHAPE_SCALE_EPOCHS, seed: int = 0) -> pd.DataFrame:
    """One Heaviside hidden layer (width 16, Adam 0.03, full batch) on noisy moons (256 points, noise 0.2)
    trained with each surrogate shape at each steepness (:func:`shape_scale_runs`), all from the same
    initial weights (:func:`explorer.train.compare`). One row per run: ``surrogate`` (op, or
    "identity STE" / "true gradient"), ``steepness`` (NaN for the last two), ``accuracy`` and ``loss``
    after the last epoch, ``grad_norm_init`` (first-layer gradient norm at initialisation), ``status``."""
    if not steepness or any(isinstance(v, bool) or not isinstance(v, numbers.Real) or not v > 0 for v in steepness):
        raise ValueError(f"steepness must be a non-empty list of positive numbers, got {steepness!r}")
    epochs = _check_whole("epochs", epochs, 1, train.MAX_EPOCHS)
    runs = shape_scale_runs(steepness)
    state = TrainState(task=SHAPE_SCALE_TASK["name"], n=SHAPE_SCALE_TASK["n"], noise=SHAPE_SCALE_TASK["noise"],
                       width=16, epochs=epochs, seed=seed, runs=runs)
    results = train.compare(state)
    rows = []
    for run, result in zip(runs, results, strict=True):
        history = result.history
        if run.op == IDENTITY_STE:
            name, value = ("identity STE" if run.gradient == "custom" else "true gradient"), math.nan
        else:
            name, value = run.op, float(run.params[SHAPES[run.op]])
        rows.append(
            {
                "surrogate": name,
                "steepness": value,
                "accuracy": float(history["accuracy"].iloc[-1]),
                "loss": float(history["loss"].iloc[-1]),
                "grad_norm_init": float(history["grad_norm"].iloc[0]),
                "status": result.status,
            }
        )
    return pd.DataFrame(rows)


def shape_scale_table(results: pd.DataFrame) -> pd.DataFrame:
    """Accuracy with one row per surrogate and one column per steepness (a single "-" column for the
    identity STE and the true gradient, which have none)."""
    table = results.assign(steepness=results["steepness"].map(lambda v: "-" if math.isnan(v) else f"{v:g}"))
    order = list(dict.fromkeys(table["surrogate"]))
    pivot = table.pivot(index="surrogate", columns="steepness", values="accuracy").reindex(order)
    columns = sorted((c for c in pivot.columns if c != "-"), key=float) + (["-"] if "-" in pivot.columns else [])
    return pivot[columns].reset_index()


# -- gradient flow through depth -----------------------------------------------------------------------
DEPTH_OP = "sigmoid"
DEPTH_SCALES = (1.0, 10.0, 100.0)  # slope; the sigmoid surrogate's peak is slope/4: 0.25, 2.5, 25


def gradient_flow_table(results: Sequence[train.RunResult], *, epoch: int | None = None) -> pd.DataFrame:
    """Per run: kernel gradient norms of the first and last hidden layer and their ratio, at
    initialisation (history row 1) and at ``epoch`` (default: the last row). A ratio below 1 means the
    first layer gets a smaller gradient than the last (vanishing through depth), above 1 larger."""
    rows = []
    for result in results:
        history = result.history
        if not len(history):
            continue
        depth = sum(column.startswith("grad_norm_") and column[10:].isdigit() for column in history.columns)
        last_column = f"grad_norm_{depth}"
        later = history.iloc[-1] if epoch is None else history[history["epoch"] == epoch].iloc[0]
        row = {"run": result.run.label, "depth": depth}
        for name, values in (("init", history.iloc[0]), ("now", later)):
            first, last = float(values["grad_norm_1"]), float(values[last_column])
            row[f"first/last at {name}"] = first / last if last > 0 else math.nan
        row["epoch"] = int(later["epoch"])
        row["first layer at init"] = float(history["grad_norm_1"].iloc[0])
        row["last layer at init"] = float(history[last_column].iloc[0])
        rows.append(row)
    return pd.DataFrame(rows)


# -- the presets ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Preset:
    """A published result: the paper's claim (one sentence) and reference, and the Train-page state it sets.

    ``state``: the Train controls it sets (its ``preset`` field is the preset's key). ``live``: the preset is a
    Train-page session, started when the preset loads (its numbers come from that session). Otherwise the page
    runs the preset's function and shows its tables; ``state`` then puts the Train controls on a related live
    experiment (or the defaults), not started."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", self.state.replace(preset=self.key))

    key: str
    title: str
    claim: str
    reference: str
    state: TrainState
    live: bool = False


PRESETS: dict[str, Preset] = {
    preset.key: preset
    for preset in (
        Preset(
            "yin2019",
            "Straight-through estimators: identity vs ReLU (Yin et al. 2019)",
            "Coarse gradient descent with the ReLU or clipped-ReLU STE is a descent direction of the population "
            "loss, while the identity STE can be repelled from a local minimiser and does not converge.",
            "Yin, Lyu, Zhang, Osher, Qi & Xin 2019, ICLR: \"Understanding Straight-Through Estimator in Training "
            "Activation Quantized Neural Nets\" (Lemmas 1, 4, 7).",
            TrainState(),
        ),
        Preset(
            "dann",
            "Gradient reversal: domain adaptation on rotated moons (Ganin & Lempitsky 2015)",
            "A gradient reversal layer between the features and a domain classifier makes the features "
            "domain-invariant, so a classifier trained on labelled source data does better on the shifted target.",
            "Ganin & Lempitsky 2015, ICML: \"Unsupervised Domain Adaptation by Backpropagation\"; the shallow "
            "inter-twinning-moons experiment of Ganin et al. 2016, JMLR 17(59).",
            TrainState(),
        ),
        Preset(
            "ste_bias",
            "The bias of straight-through (REBAR, RELAX, ReinMax)",
            "A straight-through estimator is biased: minimising E_{b~Bernoulli(q)} |b - t|^p with t = 0.45, its "
            "expected gradient vanishes at q* = t^(p-1) / (t^(p-1) + (1-t)^(p-1)), not at the optimum q = 0, so it "
            "settles where the true objective does not; REINFORCE, with or without a baseline, is unbiased and reaches it.",
            "Tucker et al. 2017, NeurIPS: \"REBAR: Low-variance, unbiased gradient estimates for discrete latent variable "
            "models\"; Grathwohl et al. 2018, ICLR: \"Backpropagation through the Void\" (RELAX); Liu et al. 2023, "
            "NeurIPS: \"Bridging Discrete and Backpropagation: Straight-Through and Beyond\" (ReinMax); Bengio, "
            "Léonard & Courville 2013 (straight-through with σ′).",
            TrainState(),
        ),
        Preset(
            "zenke2021",
            "Surrogate shape vs scale (Zenke & Vogels 2021)",
            "Learning with surrogate gradients is robust to the surrogate's shape but sensitive to its scale.",
            "Zenke & Vogels 2021, Neural Computation 33(4): \"The Remarkable Robustness of Surrogate Gradient "
            "Learning for Instilling Complex Function in Spiking Neural Networks\".",
            TrainState(
                task=SHAPE_SCALE_TASK["name"],
                n=SHAPE_SCALE_TASK["n"],
                noise=SHAPE_SCALE_TASK["noise"],
                epochs=SHAPE_SCALE_EPOCHS,
                runs=(
                    train.Run("fast_sigmoid", {"slope": 10.0}),
                    train.Run("sigmoid", {"slope": 10.0}),
                    train.Run("triangle", {"alpha": 10.0}),
                    train.Run("sigmoid", {"slope": 1.0}),
                    train.Run(IDENTITY_STE),
                    train.Run(IDENTITY_STE, gradient="true"),
                ),
            ),
        ),
        Preset(
            "depth",
            "Gradient flow through depth: one surrogate at three scales",
            "A surrogate's scale multiplies through every layer, so in deep networks surrogate gradients vanish "
            "or explode unless the scale is chosen with care at initialisation.",
            "Zenke & Vogels 2021, Neural Computation 33(4); Rossbroich, Gygax & Zenke 2022, Neuromorphic "
            "Computing and Engineering 2(4): \"Fluctuation-driven initialization for spiking neural network training\".",
            TrainState(
                task="moons",
                n=256,
                noise=0.1,
                width=16,
                depth=6,
                epochs=200,
                runs=tuple(train.Run(DEPTH_OP, {"slope": scale}) for scale in DEPTH_SCALES),
            ),
            live=True,
        ),
    )
}


def names() -> list[str]:
    """Every preset key, in page order."""
    return list(PRESETS)


def get(key: str) -> Preset:
    """The preset ``key``; ValueError lists the valid keys."""
    if not isinstance(key, str) or key not in PRESETS:
        raise ValueError(f"unknown preset {key!r}; valid presets: {', '.join(PRESETS)}")
    return PRESETS[key]


def gradient_flow(epochs: int | None = None) -> pd.DataFrame:
    """The ``depth`` preset's session (6 hidden layers, sigmoid surrogate at slopes 1, 10, 100) trained for
    ``epochs`` (default: the preset's), summarised by :func:`gradient_flow_table`."""
    state = PRESETS["depth"].state
    epochs = state.epochs if epochs is None else _check_whole("epochs", epochs, 1, train.MAX_EPOCHS)
    results = train.compare(state, epochs=epochs)
    return gradient_flow_table(results)
