"""Zenke & Vogels' two contrasts (explorer.train.spiking): the spiking forward against a NumPy simulation, the
peak-normalised scale against the asymptotic one, and the contrasts the zenke2021 preset shows."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from explorer.train import presets, spiking


def test_the_spiking_forward_is_a_leaky_integrate_and_fire_layer_with_subtractive_reset():
    rng = np.random.default_rng(3)
    kernel, bias = rng.normal(size=(1, 2, 5)), rng.uniform(0, 0.5, (1, 5))
    out_kernel, out_bias = rng.normal(size=(1, 5, 1)), np.array([0.2])
    x = rng.normal(size=(1, 7, 2))
    one = tf.constant(np.ones((1, 1, 1)), tf.float32)
    params = [tf.constant(p, tf.float32) for p in (kernel, bias, out_kernel, out_bias)]
    logits = tf.function(spiking._logits, autograph=False)(params, tf.constant(x, tf.float32), 25.0 * one, one, one)
    current = x[0] @ kernel[0] + bias[0]
    v, count = np.zeros_like(current), np.zeros_like(current)
    for _ in range(spiking.TIME_STEPS):  # v <- leak v + I - s, s = [v > 1]
        s = (v > spiking.THRESHOLD).astype(float)
        count += s
        v = spiking.LEAK * v + current - spiking.THRESHOLD * s
    expected = (count / spiking.TIME_STEPS) @ out_kernel[0][:, 0] + out_bias[0]
    np.testing.assert_allclose(logits.numpy()[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_the_contrasts_scale_matters_with_a_differentiable_reset_and_peak_normalising_is_exact():
    results = presets.spiking_contrasts(seeds=2, steps=150)
    table = presets.spiking_contrast_table(results)
    assert len(table) == 12 and set(table["scale"]) == set(spiking.SCALES) and set(table["reset"]) == set(spiking.RESETS)

    def cell(scale, reset, beta):
        return results[(results["scale"] == scale) & (results["reset"] == reset) & (results["steepness"] == beta)]

    for beta in spiking.STEEPNESS:  # reset detached: the membrane is linear in the backward, so the peak-normalised
        # gradient is the asymptotic one times 4 / beta, exactly (the same seeds and weights)
        peak, asymptotic = cell("peak-normalised", "detached", beta), cell("asymptotic", "detached", beta)
        np.testing.assert_allclose(peak["grad_norm_init"].to_numpy(), asymptotic["grad_norm_init"].to_numpy() * 4 / beta, rtol=1e-4)
    exploding = [cell("asymptotic", "differentiable", beta)["grad_norm_init"].mean() for beta in spiking.STEEPNESS]
    assert exploding[-1] > 10 * exploding[0]  # through the reset, the surrogate's peak multiplies in time
    worst = cell("asymptotic", "differentiable", 100.0)["accuracy"].mean()
    assert worst < cell("peak-normalised", "differentiable", 100.0)["accuracy"].mean() - 0.03
    assert worst < cell("asymptotic", "detached", 100.0)["accuracy"].mean() - 0.03


def test_bad_arguments_name_their_range():
    with pytest.raises(ValueError, match=r"steepness must be in \[2, 100\]"):
        presets.spiking_contrasts(steepness=(1.0,))
