r"""Zenke & Vogels 2021's two contrasts, in a spiking network trained in time: the surrogate's scale
(peak-normalised vs asymptotic) and the reset (detached vs differentiable). Plain functions, pandas out.

Network: the two-moons point is a constant input current to 16 leaky integrate-and-fire units for
:data:`TIME_STEPS` steps, :math:`v_{t+1} = \lambda v_t + W x + b - \vartheta s_t`, :math:`s_t = H(v_t - \vartheta)`
(subtractive reset, :math:`\vartheta = 1`), read out by the mean spike count through a dense layer. The spike's
backward is the catalogue's ``sigmoid`` surrogate of steepness :math:`\beta`:

* **asymptotic** scale: :math:`\beta\,s(\beta u)\,s(-\beta u)` as declared (area 1: it tends to the step's true
  derivative, a Dirac, and its peak :math:`\beta/4` grows with the steepness);
* **peak-normalised**: the same shape divided by its peak, :math:`4\,s(\beta u)\,s(-\beta u)` (peak 1 at any
  steepness): the upstream gradient scaled by :math:`4/\beta` in front of the op (``scale_gradient``'s backward).

The reset term :math:`\vartheta s_t` is **differentiable** (the surrogate flows through it into the membrane's past)
or **detached** (``tf.stop_gradient``: the reset is treated as a constant in the backward pass).

Every model of a seed starts from the same weights and sees the same data; all models train at once as one
batch of weight tensors in one compiled loop (as :func:`explorer.train.presets.dann` does).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import tensorflow as tf

import ops
from explorer.train import tasks

TIME_STEPS = 12
HIDDEN = 16
LEAK = 0.9  # membrane decay per step
THRESHOLD = 1.0
STEEPNESS = (5.0, 25.0, 100.0)  # peak-normalising needs the factor 4/beta <= 2 (scale_gradient's range)
SCALES = ("peak-normalised", "asymptotic")
RESETS = ("detached", "differentiable")
POINTS, NOISE = 128, 0.15
TEST_POINTS = 1000
STEPS = 200
LEARNING_RATE = 0.02
SEEDS = 3
_ADAM = (0.9, 0.999, 1e-7)


def configurations(steepness=STEEPNESS) -> list[tuple[str, float, str]]:
    """Every (scale, steepness, reset) trained, in table order."""
    return list(itertools.product(SCALES, steepness, RESETS))


def _scaled_gradient(u: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``u`` forward, ``factor * dy`` backward (the catalogue's ``scale_gradient``, with one factor per model)."""
    return u * factor + tf.stop_gradient(u - u * factor)


def _logits(params, x, slope, factor, detached):
    """Per model: the readout logit of every point. ``params`` are stacked over models; ``slope``, ``factor`` (the
    scale: 4/slope peak-normalised, 1 asymptotic) and ``detached`` (1: reset detached) are per model, (m, 1, 1)."""
    kernel, bias, out_kernel, out_bias = params
    current = tf.einsum("mni,mij->mnj", x, kernel) + bias[:, None, :]
    spike = ops.get("sigmoid")

    def step(t, v, total):
        s = spike.apply(_scaled_gradient(v - THRESHOLD, factor), slope=slope)
        kept = detached * tf.stop_gradient(s) + (1.0 - detached) * s
        return t + 1, LEAK * v + current - THRESHOLD * kept, total + s

    zeros = tf.zeros_like(current)
    _, _, total = tf.while_loop(lambda t, *_: t < TIME_STEPS, step, (tf.constant(0), zeros, zeros), maximum_iterations=TIME_STEPS)
    return tf.einsum("mnj,mjk->mnk", total / TIME_STEPS, out_kernel)[..., 0] + out_bias


def contrasts(steepness=STEEPNESS, *, seeds: int = SEEDS, steps: int = STEPS) -> pd.DataFrame:
    """Test accuracy of every (scale, steepness, reset) for ``seeds`` seeds: one row per model with ``scale``,
    ``steepness``, ``reset``, ``seed``, ``accuracy`` (on :data:`TEST_POINTS` fresh points), ``final loss`` and
    ``grad_norm_init`` (the input kernel's gradient norm at initialisation: what the scale does to it)."""
    if not 1 <= seeds <= 10 or not 1 <= steps <= 5000:
        raise ValueError(f"seeds must be in [1, 10] and steps in [1, 5000], got {seeds!r}, {steps!r}")
    steepness = tuple(float(b) for b in steepness)
    if any(not 2.0 <= b <= 100.0 for b in steepness):
        raise ValueError(f"steepness must be in [2, 100] (peak-normalising scales the gradient by 4/steepness <= 2), got {steepness!r}")
    configs = configurations(steepness)
    data, test = [], []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, 7])
        data.append(tasks.moons(POINTS, NOISE, rng))
        test.append(tasks.moons(TEST_POINTS, NOISE, rng))
    initial = []
    for seed in range(seeds):
        rng = np.random.default_rng([seed, 8])
        initial.append([rng.uniform(0.5, 1.5, (2, HIDDEN)) * rng.choice([-1, 1], (2, HIDDEN)), rng.uniform(0.0, 0.3, HIDDEN),
                        rng.normal(0, 1 / np.sqrt(HIDDEN), (HIDDEN, 1)), np.zeros(1)])  # fmt: skip
    # model order: configuration-major, then seed (so each configuration's models are one slice)
    stacked = [tf.constant(np.stack([initial[s][i] for _ in configs for s in range(seeds)]), tf.float32) for i in range(4)]
    x = tf.constant(np.stack([data[s][0] for _ in configs for s in range(seeds)]), tf.float32)
    y = tf.constant(np.stack([data[s][1] for _ in configs for s in range(seeds)]), tf.float32)
    per_model = [(beta, 4.0 / beta if scale == "peak-normalised" else 1.0, float(reset == "detached"))
                 for scale, beta, reset in configs for _ in range(seeds)]  # fmt: skip
    slope, factor, detached = (tf.constant(np.array(column)[:, None, None], tf.float32) for column in zip(*per_model, strict=True))

    def loss_and_grads(params):
        with tf.GradientTape() as tape:
            tape.watch(params)
            logits = _logits(params, x, slope, factor, detached)
            losses = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, logits), axis=1)
            total = tf.reduce_sum(losses)  # models are independent: per-model gradients
        return losses, tape.gradient(total, params)

    @tf.function(autograph=False, jit_compile=True)
    def train(params):
        beta_1, beta_2, epsilon = _ADAM
        _, first_grads = loss_and_grads(params)

        def body(step, params, first, second):
            _, grads = loss_and_grads(params)
            grads = [tf.where(tf.math.is_finite(g), g, tf.zeros_like(g)) for g in grads]
            count = tf.cast(step + 1, tf.float32)
            first = [beta_1 * m + (1 - beta_1) * g for m, g in zip(first, grads, strict=True)]
            second = [beta_2 * v + (1 - beta_2) * g * g for v, g in zip(second, grads, strict=True)]
            rate = LEARNING_RATE * tf.sqrt(1 - beta_2**count) / (1 - beta_1**count)
            params = [p - rate * m / (tf.sqrt(v) + epsilon) for p, m, v in zip(params, first, second, strict=True)]
            return step + 1, params, first, second

        zeros = [tf.zeros_like(p) for p in params]
        _, params, _, _ = tf.while_loop(lambda step, *_: step < steps, body, (tf.constant(0), list(params), zeros, list(zeros)))
        losses, _ = loss_and_grads(params)
        return params, losses, tf.norm(first_grads[0], axis=[1, 2])

    trained, losses, grad_init = train(stacked)
    test_x = tf.constant(np.stack([test[s][0] for _ in configs for s in range(seeds)]), tf.float32)
    test_y = np.stack([test[s][1] for _ in configs for s in range(seeds)])
    evaluate = tf.function(_logits, autograph=False)  # per-model slopes are tensors: checked at the op's range above
    accuracy = ((evaluate(trained, test_x, slope, factor, detached).numpy() > 0) == (test_y > 0.5)).mean(axis=1)
    rows = [
        {"scale": scale, "steepness": beta, "reset": reset, "seed": seed}
        for scale, beta, reset in configs for seed in range(seeds)
    ]  # fmt: skip
    frame = pd.DataFrame(rows)
    frame["accuracy"], frame["final loss"], frame["grad_norm_init"] = accuracy, losses.numpy(), grad_init.numpy()
    return frame


def contrast_table(results: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation of the accuracy over seeds per (scale, steepness, reset), and the mean
    initial gradient norm."""
    grouped = results.groupby(["scale", "steepness", "reset"], sort=False)
    table = grouped.agg(accuracy=("accuracy", "mean"), std=("accuracy", "std"), grad_norm_init=("grad_norm_init", "mean"))
    return table.reset_index()
