"""Presets: published results reproduced, checked against hand-computed numbers and independent references."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from explorer.train import preset_figures, presets, tasks
from explorer.train import trainer as train
from explorer.train.figures import layer_norm_figure, snapshot_epochs

ROOT_2PI = math.sqrt(2 * math.pi)


# -- Yin et al. 2019 ---------------------------------------------------------------------------------
def test_closed_form_loss_by_hand_at_the_spurious_minimiser():
    """v = (-0.2, -0.2, -0.2, 1.8), v* = (1, 1, 1, -1): v'v = 3.36, (1'v)^2 = 1.44, v'v* = -2.4, 1'v = 1.2,
    1'v* = 2, |v*|^2 + (1'v*)^2 = 8. theta = pi: f = (3.36 + 1.44 - 2(2.4 + 2.4) + 8)/8 = 0.4;
    theta = 0: f = (4.8 - 2(-2.4 + 2.4) + 8)/8 = 1.6."""
    v = presets.YIN_START_V
    assert presets.yin2019_loss(v, math.pi) == pytest.approx(0.4, abs=1e-12)
    assert presets.yin2019_loss(v, 0.0) == pytest.approx(1.6, abs=1e-12)
    # a stationary point in v at theta = pi: 1/4 (v + 1.2 - (-v* + 2)) = 1/4 (v + v* - 0.8) = 0
    np.testing.assert_allclose(presets.yin2019_grad_v(v, math.pi), 0.0, atol=1e-12)


def test_coarse_gradients_by_hand_at_the_spurious_minimiser():
    v, w = presets.YIN_START_V, -presets.YIN_TEACHER_W
    e1 = presets.YIN_TEACHER_W
    # identity: (|v|^2 w_hat - v'v* w*)/sqrt(2 pi) = (3.36 (-e1) + 2.4 e1)/sqrt(2 pi)
    np.testing.assert_allclose(presets.yin2019_coarse_grad_w("identity", v, w), -0.96 / ROOT_2PI * e1, atol=1e-12)
    # relu: h = 3.36 + 1.44 - 2.4 - 2.4 = 0 and cos(pi/2) = 0: no coarse gradient, w stays
    np.testing.assert_allclose(presets.yin2019_coarse_grad_w("relu", v, w), 0.0, atol=1e-12)
    np.testing.assert_allclose(presets.yin2019_coarse_grad_w("clipped_relu", v, w), 0.0, atol=1e-12)


def test_relu_ste_stays_at_the_spurious_minimiser_for_3000_steps():
    history = presets.yin2019("relu")
    assert len(history) == 3001 and history["step"].iloc[-1] == 3000
    assert history["loss"].iloc[0] == pytest.approx(0.4, abs=1e-12)
    assert history["loss"].iloc[-1] == pytest.approx(0.400, abs=0.001)
    assert history["theta"].iloc[-1] == pytest.approx(math.pi)


def test_identity_ste_flips_w_and_the_loss_jumps_within_60_steps():
    """Each identity step moves w by lr * 0.96/sqrt(2 pi) = 0.0383 along w* while v stays (its gradient is 0
    at theta = pi): w = -w* crosses 0 after 1/0.0383 = 26.1 steps, so theta is 0 from step 27, where
    the loss is 1.6 (hand-computed above)."""
    history = presets.yin2019("identity", steps=60)
    assert (history["loss"].iloc[:27] - 0.4).abs().max() < 1e-9
    flipped = history[history["theta"] < math.pi / 2]
    assert flipped["step"].iloc[0] == math.ceil(1 / (0.1 * 0.96 / ROOT_2PI)) == 27
    assert history["loss"].max() > 1.4
    assert history["loss"].iloc[27] == pytest.approx(1.6, abs=1e-9)
    assert (history["theta"].iloc[28:] > math.pi / 2).any()  # it flips back: chatter, no convergence


def test_summary_reads_the_histories():
    histories = {ste: presets.yin2019(ste, steps=60) for ste in presets.STES}
    summary = presets.yin2019_summary(histories).set_index("ste")
    assert summary.loc["identity", "w flips at step"] == 27
    assert pd.isna(summary.loc["relu", "w flips at step"])
    assert summary.loc["identity", "highest loss"] == pytest.approx(1.6)


# A generic point: |w| ~ 0.71 (the clipped ReLU's window 0 < z'w < 1 cuts), theta ~ 2.2, h != 0, v'v* != 0.
GENERIC_V = np.array([0.6, -0.4, 0.9, -1.1])
GENERIC_W = np.array([-0.4, 0.5, 0.3, 0, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("ste", presets.STES)
def test_monte_carlo_custom_gradient_agrees_with_the_closed_forms(ste):
    check = presets.yin2019_monte_carlo(ste, GENERIC_V, GENERIC_W, samples=100_000, seed=1)
    assert len(check) == 14 and (check["standard_error"] > 0).all()
    assert check["z"].abs().max() < 5.0, check.to_string()
    # the check can fail: a gradient off by 10 % in w_1 is many standard errors away
    wrong = check["closed_form"].to_numpy().copy()
    wrong[4] *= 1.1
    assert abs(check["monte_carlo"].iloc[4] - wrong[4]) / check["standard_error"].iloc[4] > 5


def test_the_three_stes_give_different_coarse_gradients():
    grads = [presets.yin2019_coarse_grad_w(ste, GENERIC_V, GENERIC_W) for ste in presets.STES]
    assert not np.allclose(grads[0], grads[1]) and not np.allclose(grads[1], grads[2])


def test_clipped_relu_tends_to_relu_as_the_window_opens():
    """1{0 < z'w < 1} -> 1{z'w > 0} as |w| -> 0: the clipped-ReLU formula must tend to Lemma 4."""
    small = GENERIC_W * 1e-4
    np.testing.assert_allclose(
        presets.yin2019_coarse_grad_w("clipped_relu", GENERIC_V, small),
        presets.yin2019_coarse_grad_w("relu", GENERIC_V, small),
        rtol=1e-8,
        atol=1e-12,
    )


def test_autodiff_of_the_closed_form_is_singular_exactly_where_w_is_parallel_to_w_star():
    sweep = presets.yin2019_loss_sweep(points=181)
    assert sweep.loc[sweep["singular"], "theta"].tolist() == [0.0, math.pi]
    assert sweep["loss"].iloc[0] == pytest.approx(1.6) and sweep["loss"].iloc[-1] == pytest.approx(0.4)
    inner = sweep[~sweep["singular"]]
    # |df/dtheta| |dtheta/dw| = |v'v*|/(2 pi) / |w| with |w| = 1: 2.4/(2 pi)
    np.testing.assert_allclose(inner["grad_w_norm"], 2.4 / (2 * math.pi), rtol=1e-6)
    # linear in theta between the ends: f(pi/2) = (4.8 - 2(0 + 2.4) + 8)/8 = 1
    assert sweep["loss"].iloc[90] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: presets.yin2019("sign"), "ste must be one of identity, relu, clipped_relu"),
        (lambda: presets.yin2019("relu", steps=0), r"steps must be a whole number in \[1, 100000\]"),
        (lambda: presets.yin2019("relu", lr=0.0), r"lr must be a number in \(0, 10\]"),
        (lambda: presets.yin2019("relu", lr=float("nan")), "lr must be a number"),
        (lambda: presets.dann(seeds=0), r"seeds must be a whole number in \[1, 50\]"),
        (lambda: presets.shape_scale([]), "steepness must be a non-empty list"),
        (lambda: presets.get("nope"), "unknown preset 'nope'; valid presets: yin2019, dann, ste_bias, zenke2021, depth"),
    ],
)
def test_bad_arguments_name_the_argument_and_range(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- gradient reversal ---------------------------------------------------------------------------------
def test_reversal_schedule_by_hand():
    assert presets.reversal_strength(0.0) == 0.0
    assert presets.reversal_strength(1.0) == pytest.approx(2 / (1 + math.exp(-10)) - 1)  # 0.999909
    assert presets.reversal_strength(0.1) == pytest.approx(2 / (1 + math.exp(-1)) - 1)  # 0.462


def test_target_domain_is_the_source_geometry_rotated_by_35_degrees():
    source_x, source_y, target_x, test_x, test_y = presets.dann_domains(0)
    assert source_x.shape == target_x.shape == (150, 2) and test_x.shape == (1000, 2)
    assert source_y.sum() == 75  # balanced moons
    # rotation keeps radii and turns the mean angle of class 0 by 35 degrees
    np.testing.assert_allclose(presets.rotate(np.array([[1.0, 0.0]]), 35.0), [[math.cos(0.6109), math.sin(0.6109)]], atol=1e-4)
    unrotated = presets.rotate(test_x, -35.0)
    assert abs(unrotated[test_y == 0, 1].mean() - source_x[source_y == 0, 1].mean()) < 0.1


@pytest.fixture(scope="module")
def dann_runs():
    return presets.dann()


@pytest.mark.slow
def test_gradient_reversal_beats_the_source_only_network_on_average(dann_runs):
    per_seed = dann_runs
    assert len(per_seed) == 10
    assert per_seed["dann_target_accuracy"].mean() > per_seed["source_only_target_accuracy"].mean() + 0.05
    assert (per_seed[["dann_source_accuracy", "source_only_source_accuracy"]] > 0.95).all().all()  # both fit the source
    summary = presets.dann_summary(per_seed)
    assert summary["mean target accuracy"].iloc[0] == pytest.approx(per_seed["dann_target_accuracy"].mean())
    assert summary["std"].iloc[1] == pytest.approx(np.std(per_seed["source_only_target_accuracy"], ddof=1))


def test_dann_summary_by_hand():
    per_seed = pd.DataFrame(
        {"seed": [0, 1, 2], "dann_target_accuracy": [0.9, 0.8, 0.7], "source_only_target_accuracy": [0.7, 0.85, 0.7]}
    )
    summary = presets.dann_summary(per_seed).set_index("network")
    dann, source_only = summary.iloc[0], summary.iloc[1]
    assert (dann["mean target accuracy"], dann["std"], dann["min"], dann["max"]) == pytest.approx((0.8, 0.1, 0.7, 0.9))
    assert (dann["better in seeds"], source_only["better in seeds"], dann["seeds"]) == (1, 1, 3)  # a tie counts for neither
    assert source_only["mean target accuracy"] == pytest.approx(0.75)


# -- surrogate shape vs scale --------------------------------------------------------------------------
def test_shape_scale_runs_cover_every_shape_within_its_parameter_range():
    labels = [run.label for run in presets.shape_scale_runs((1.0, 10.0, 100.0))]
    assert labels == [
        "fast_sigmoid (custom, slope=1)", "fast_sigmoid (custom, slope=10)", "fast_sigmoid (custom, slope=100)",
        "sigmoid (custom, slope=1)", "sigmoid (custom, slope=10)", "sigmoid (custom, slope=100)",
        "triangle (custom)", "triangle (custom, alpha=10)",  # alpha stops at 10; 1 is its default
        "straight_through (custom)", "straight_through (true)",
    ]


@pytest.mark.slow
def test_shaped_surrogates_learn_and_the_true_gradient_does_not():
    results = presets.shape_scale()
    shaped = results[results["steepness"].notna()]
    true = results[results["surrogate"] == "true gradient"].iloc[0]
    assert (shaped["accuracy"] >= 0.95).all(), results.to_string()
    assert true["status"] == "no_gradient" and true["grad_norm_init"] == 0.0
    assert true["accuracy"] < shaped["accuracy"].min() - 0.05
    table = presets.shape_scale_table(results)
    assert list(table.columns) == ["surrogate", "1", "10", "100", "-"]
    assert table.set_index("surrogate").loc["true gradient", "-"] == true["accuracy"]


# -- gradient flow through depth -----------------------------------------------------------------------
def numpy_kernel_norms(weights, x, y, slope, depth):
    """Mean-BCE kernel gradient norm of each hidden layer of a Heaviside net, backward through the
    sigmoid surrogate slope s(slope h) s(-slope h), in NumPy."""
    weights = [np.asarray(w, np.float64) for w in weights]
    activations, pre = [x], []
    for layer in range(depth):
        pre.append(activations[-1] @ weights[2 * layer] + weights[2 * layer + 1])
        activations.append((pre[-1] > 0).astype(np.float64))
    logits = activations[-1] @ weights[-2] + weights[-1]
    delta = (1 / (1 + np.exp(-logits)) - y[:, None]) / len(y)
    upstream, norms = delta @ weights[-2].T, []
    for layer in reversed(range(depth)):
        z = slope * pre[layer]
        dh = upstream * slope / (1 + np.exp(-z)) / (1 + np.exp(z))
        norms.append(np.linalg.norm(activations[layer].T @ dh))
        upstream = dh @ weights[2 * layer].T
    return norms[::-1]


@pytest.mark.slow
def test_depth_preset_ratios_match_numpy_and_grow_with_the_surrogate_scale():
    setup = presets.get("depth").state
    data = tasks.make(setup.task, n=setup.n, noise=setup.noise, seed=setup.seed)
    session = train.Session(setup)
    results = session.step(1)
    table = presets.gradient_flow_table(results)
    x, y = data.x.astype(np.float64), data.y.astype(np.float64)
    expected = []
    for run in setup.runs:
        norms = numpy_kernel_norms(session.initial_weights, x, y, run.params["slope"], setup.depth)
        expected.append(norms[0] / norms[-1])
    np.testing.assert_allclose(table["first/last at init"], expected, rtol=1e-3)
    ratios = table["first/last at init"].tolist()
    assert ratios[0] < 1e-2 < 1 < ratios[2]  # slope 1 vanishes through 6 layers, slope 100 explodes
    assert table["depth"].tolist() == [6, 6, 6]


def test_gradient_flow_table_by_hand():
    history = pd.DataFrame(
        {"epoch": [1, 2], "grad_norm_1": [0.5, 0.0], "grad_norm_2": [2.0, 4.0], "grad_norm_output": [1.0, 1.0]}
    )
    result = train.RunResult(train.Run("atan"), "ok", history, None, 0.0, 0.0, None)
    row = presets.gradient_flow_table([result]).iloc[0]
    assert (row["depth"], row["first/last at init"], row["first/last at now"], row["epoch"]) == (2, 0.25, 0.0, 2)


def test_snapshot_epochs_are_the_first_and_evenly_spaced():
    assert snapshot_epochs(200) == [1, 50, 100, 150, 200]
    assert snapshot_epochs(2) == [1, 2] and snapshot_epochs(1) == [1] and snapshot_epochs(0) == []


def test_layer_norm_figure_has_a_panel_per_run_with_each_layer_and_leaves_zeros_out():
    epochs = np.arange(1, 9)
    deep = pd.DataFrame(
        {"epoch": epochs, "grad_norm_1": 0.5 / epochs, "grad_norm_2": 2.0 * epochs, "grad_norm_output": np.ones(8)}
    )
    deep.loc[deep["epoch"] == 8, "grad_norm_1"] = 0.0
    diverged = deep.iloc[:3]  # stopped at epoch 3
    fig = layer_norm_figure([deep, diverged], ["deep", "diverged"])
    first = [t for t in fig.data if t.xaxis == "x"]
    assert [t.name for t in first] == ["epoch 1 (initialisation)", "epoch 2", "epoch 4", "epoch 6", "epoch 8"]
    assert list(first[0].x) == ["1", "2", "output"] and list(first[0].y) == [0.5, 2.0, 1.0]
    assert list(first[2].y) == [0.125, 8.0, 1.0]  # epoch 4's row
    assert np.isnan(first[-1].y[0]) and "0 (no gradient)" in first[-1].text[0]
    second = [t for t in fig.data if t.xaxis == "x2"]
    assert [t.name for t in second] == ["epoch 1 (initialisation)", "epoch 2"]  # only the epochs it reached
    assert not any(t.showlegend for t in second)  # one legend entry per epoch colour
    assert first[0].line.color == second[0].line.color != first[1].line.color
    assert fig.layout.yaxis.type == fig.layout.yaxis2.type == "log"


def test_preset_figures_carry_the_data():
    histories = {ste: presets.yin2019(ste, steps=30) for ste in presets.STES}
    fig = preset_figures.yin2019_figure(histories)
    assert len(fig.data) == 6 and list(fig.data[0].y) == histories["identity"]["loss"].tolist()
    sweep = presets.yin2019_loss_sweep(points=91)
    singular = [trace for trace in preset_figures.yin2019_sweep_figure(sweep).data if trace.name.startswith("singular")]
    assert [list(trace.x) for trace in singular] == [[0.0, math.pi]] * 2
    per_seed = pd.DataFrame({"seed": [0, 1], "dann_target_accuracy": [0.9, 0.8], "source_only_target_accuracy": [0.7, 0.75]})
    means = [trace for trace in preset_figures.dann_figure(per_seed).data if trace.name.endswith("mean ± std")]
    assert [trace.y[0] for trace in means] == [pytest.approx(0.725), pytest.approx(0.85)]


def test_every_preset_sets_a_valid_train_state():
    for key in presets.names():
        setup = presets.get(key).state
        assert setup.preset == key
        assert setup.task in tasks.names() and 1 <= setup.depth <= train.MAX_DEPTH
        assert len(setup.runs) <= 6  # the Train page compares at most 6 runs
    assert presets.get("depth").state.depth == 6 and presets.get("depth").live


# -- the benchmark of the presets ----------------------------------------------------------------------
def test_preset_benchmark_times_every_preset_interleaved_and_reports_medians(monkeypatch):
    from explorer.bench import presets as bench

    assert list(bench.FIRST_RESULT) == presets.names()  # every preset is timed
    order, clock = [], iter(range(1000))
    monkeypatch.setattr(bench.train, "compare", lambda *args, **kwargs: None)  # the warm-up
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock) ** 2)
    monkeypatch.setattr(bench, "FIRST_RESULT", {key: (lambda key=key: order.append(key)) for key in ("a", "b", "c")})
    seconds = bench.preset_seconds(repeats=3)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # rotated by one per repetition
    # call k starts at clock 2k, ends at 2k+1: (2k+1)^2 - (2k)^2 = 4k+1; a ran as calls 0, 5, 7 (1, 21, 29),
    # b as 1, 3, 8 (5, 13, 33), c as 2, 4, 6 (9, 17, 25)
    assert seconds == {"a": 21, "b": 13, "c": 17}
    with pytest.raises(ValueError, match=r"repeats must be a whole number in \[1, 20\]"):
        bench.preset_seconds(repeats=0)


def _stopped_early_at_a_finite_state(history: pd.DataFrame, steps: int) -> None:
    values = history.drop(columns="step").to_numpy()
    assert np.isfinite(values).all() and (history["w_norm"] > 0).all()
    assert history["step"].tolist() == list(range(len(history)))
    assert len(history) - 1 < steps  # it really stopped before the last step
    summary = presets.yin2019_summary({"identity": history}, steps=steps).iloc[0]
    assert summary["diverged"] and summary["steps"] == len(history) - 1


# Why these diverge, by hand: the loss is quadratic in v with Hessian A = E[s s'], s = sigma(Z w) for i.i.d.
# Gaussian rows of Z: P(z'w > 0) = 1/2 and, for two rows, 1/4, so A = (I + 11') / 4, whose largest
# eigenvalue is 5/4, along (1, 1, 1, 1). A gradient step multiplies v's component along it by
# 1 - 5 lr / 4 (plus a bounded term): -1.5 at lr = 2, -11.5 at lr = 10; beyond lr = 1.6 it grows
# until v or w leaves the float range (YIN_DIVERGED).
@pytest.mark.parametrize(("lr", "growth"), [(2.0, -1.5), (10.0, -11.5)])
def test_a_yin_run_above_lr_1_6_diverges_with_v_growing_by_1_minus_5_lr_over_4(lr, growth):
    history = presets.yin2019("identity", steps=400, lr=lr)
    _stopped_early_at_a_finite_state(history, 400)
    along_ones = history[[f"v_{i}" for i in range(1, 5)]].sum(axis=1).to_numpy()[-10:]
    np.testing.assert_allclose(along_ones[1:] / along_ones[:-1], growth, rtol=1e-9)
    assert np.abs(along_ones[-1]) > 1e40


def test_a_yin_run_whose_w_lands_on_exactly_zero_stops_there():
    lr = 1.3055355597036459  # below 1.6 (v does not diverge), found so that the second step lands w on 0
    history = presets.yin2019("identity", steps=400, lr=lr)
    _stopped_early_at_a_finite_state(history, 400)
    last = history.iloc[-1]
    # the step from the last row, w -= lr * g, has the length of w itself (and w != 0): it lands on 0,
    # where theta is undefined
    assert last["w_norm"] == pytest.approx(lr * last["grad_w_norm"], rel=1e-12)


def test_yin_at_the_papers_rate_does_not_diverge():
    summary = presets.yin2019_summary({"relu": presets.yin2019("relu", steps=50)}, steps=50).iloc[0]
    assert not summary["diverged"] and summary["steps"] == 50


def test_a_state_s_session_has_every_control_and_the_data_set_tasks_make_gives():
    setup = train.TrainState(
        task="moons", n=128, noise=0.2, width=8, depth=3, optimizer="sgd", learning_rate=0.05, batch_size=32,
        seed=7, runs=(train.Run("atan"), train.Run(None)),
    )  # fmt: skip
    session = train.Session(setup)
    assert (session.width, session.depth, session.optimizer, session.learning_rate, session.batch_size, session.seed) == (
        8, 3, "sgd", 0.05, 32, 7,
    )  # fmt: skip
    assert [run.label for run in session.runs] == [run.label for run in setup.runs] and session.epoch == 0
    reference = tasks.make("moons", n=128, noise=0.2, seed=7)
    np.testing.assert_array_equal(session.dataset.x, reference.x)
    np.testing.assert_array_equal(session.dataset.y, reference.y)
