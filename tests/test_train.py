"""Training: fairness (weights, batches), true vs custom gradients, divergence, streaming, bounds, speed.

References are NumPy re-implementations of the network, its loss and its surrogate backward.
"""


import keras
import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

import ops
from explorer.train import tasks
from explorer.train import trainer as train
from tests.messages import assert_tells

SEED = 0
BATCH = 128
SGD_RATE = 0.5
ATAN_ALPHA = ops.get("atan").defaults()["alpha"]


# -- NumPy reference of Input -> Dense -> op -> Dense(1) ---------------------------------------
def heaviside(h):
    return (h > 0).astype(np.float64)  # spike convention: the value at the threshold is 0


def sign_plus(h):
    return np.where(h >= 0, 1.0, -1.0)  # Larq convention: sign(0) = +1


def atan_surrogate(h):
    return (ATAN_ALPHA / 2) / (1 + (np.pi * ATAN_ALPHA * h / 2) ** 2)


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def bce_with_logits(z, y):
    return np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z))))


def forward(weights, x, activation):
    w1, b1, w2, b2 = (np.asarray(w, np.float64) for w in weights)
    h = x @ w1 + b1
    return h, activation(h) @ w2 + b2


def bce_gradients(weights, x, y, activation, surrogate):
    """Mean BCE gradients of the one-hidden-layer net, backward through ``surrogate(h)``."""
    w1, b1, w2, b2 = (np.asarray(w, np.float64) for w in weights)
    h = x @ w1 + b1
    a = activation(h)
    dz = (sigmoid(a @ w2 + b2) - y[:, None]) / len(y)
    dh = (dz @ w2.T) * surrogate(h)
    return [x.T @ dh, dh.sum(0), a.T @ dz, dz.sum(0)]


def reference_order(n, batch_size, seed, epoch):
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


# -- shared sessions -------------------------------------------------------------------------
FAIR_RUNS = [
    train.Run("atan"),
    train.Run("atan"),
    train.Run("ste_sign", gradient="true"),
    train.Run("fast_sigmoid", gradient="true"),
]


@pytest.fixture(scope="module")
def fair():
    """Mini-batch SGD for 2 epochs; weights recorded before training."""
    session = train.Session(task="xor", runs=FAIR_RUNS, optimizer="sgd", learning_rate=SGD_RATE, batch_size=BATCH, seed=SEED)
    before = [state.net.get_weights() for state in session._states]
    results = session.step(2)
    return session, before, results


def test_batch_order_is_a_seeded_permutation_per_epoch():
    n = 100
    for epoch in range(3):
        got = train.batch_order(n, 32, SEED, epoch)
        expected = reference_order(n, 32, SEED, epoch)
        assert [len(b) for b in got] == [32, 32, 32, 4]
        assert all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
    assert not np.array_equal(train.batch_order(n, 32, SEED, 0)[0], train.batch_order(n, 32, SEED, 1)[0])
    assert not np.array_equal(train.batch_order(n, 32, 0, 0)[0], train.batch_order(n, 32, 1, 0)[0])
    full = train.batch_order(n, None, SEED, 5)
    assert len(full) == 1 and np.array_equal(full[0], np.arange(n))


def test_every_run_starts_from_the_same_seeded_weights(fair):
    session, before, _ = fair
    for weights in before:
        assert all(np.array_equal(w, v) for w, v in zip(weights, session.initial_weights, strict=True))
    other_seed = train.build_model(2, None, seed=SEED + 1).get_weights()
    assert not np.array_equal(other_seed[0], session.initial_weights[0])
    same_seed = train.build_model(2, None, seed=SEED).get_weights()
    assert all(np.array_equal(w, v) for w, v in zip(same_seed, session.initial_weights, strict=True))


def test_training_follows_the_shared_batch_order(fair):
    """The custom-gradient run equals NumPy SGD over the reference batches; another order does not."""
    session, _, results = fair
    data = session.dataset
    x, y = data.x.astype(np.float64), data.y.astype(np.float64)

    def numpy_sgd(batches_per_epoch):
        weights = [np.asarray(w, np.float64) for w in session.initial_weights]
        for batches in batches_per_epoch:
            for index in batches:
                grads = bce_gradients(weights, x[index], y[index], heaviside, atan_surrogate)
                weights = [w - SGD_RATE * g for w, g in zip(weights, grads, strict=True)]
        return weights

    orders = [reference_order(data.n, BATCH, SEED, epoch) for epoch in range(2)]
    trained = results[0].model.get_weights()
    for got, expected in zip(trained, numpy_sgd(orders), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    shuffled = numpy_sgd([order[::-1] for order in orders])
    assert not all(np.allclose(got, other, rtol=1e-4, atol=1e-5) for got, other in zip(trained, shuffled, strict=True))
    # two identical runs saw identical batches: bit-identical weights and history
    assert all(np.array_equal(a, b) for a, b in zip(trained, results[1].model.get_weights(), strict=True))
    pd.testing.assert_frame_equal(results[0].history, results[1].history)


def test_first_history_row_matches_numpy_on_the_full_data(fair):
    session, _, results = fair
    data = session.dataset
    x, y = data.x.astype(np.float64), data.y.astype(np.float64)
    weights = session.initial_weights
    for result, activation, surrogate in (
        (results[0], heaviside, atan_surrogate),
        (results[2], sign_plus, lambda h: np.zeros_like(h)),
    ):
        row = result.history.iloc[0]
        _, logits = forward(weights, x, activation)
        assert row["epoch"] == 1
        assert row["loss"] == pytest.approx(bce_with_logits(logits[:, 0], y), rel=1e-5)
        assert row["accuracy"] == pytest.approx(np.mean((logits[:, 0] > 0) == (y > 0.5)), abs=1e-6)
        kernel_grad, _, output_grad, _ = bce_gradients(weights, x, y, activation, surrogate)
        assert row["grad_norm"] == pytest.approx(np.linalg.norm(kernel_grad), rel=1e-4, abs=1e-12)
        assert row["grad_norm_1"] == row["grad_norm"]  # the same first-layer norm, as a layer column
        assert row["grad_norm_output"] == pytest.approx(np.linalg.norm(output_grad), rel=1e-4)
    assert results[0].history["dead_fraction"].iloc[0] == 0.0  # atan's surrogate is positive everywhere
    assert list(results[0].history.columns) == [
        "epoch", "loss", "accuracy", "grad_norm", "dead_fraction", "grad_norm_1", "grad_norm_output"
    ]


def two_layer_gradients(weights, x, y, surrogate):
    """Mean BCE kernel gradients of Input -> Dense -> step -> Dense -> step -> Dense(1), by hand:
    dz = (s(z) - y)/n; dW3 = a2' dz; dh2 = (dz W3') * g(h2); dW2 = a1' dh2; dh1 = (dh2 W2') * g(h1); dW1 = x' dh1."""
    w1, b1, w2, b2, w3, b3 = (np.asarray(w, np.float64) for w in weights)
    h1 = x @ w1 + b1
    a1 = heaviside(h1)
    h2 = a1 @ w2 + b2
    a2 = heaviside(h2)
    dz = (sigmoid(a2 @ w3 + b3) - y[:, None]) / len(y)
    dh2 = (dz @ w3.T) * surrogate(h2)
    dh1 = (dh2 @ w2.T) * surrogate(h1)
    return x.T @ dh1, a1.T @ dh2, a2.T @ dz


def test_per_layer_gradient_norms_equal_a_hand_computed_backward_pass():
    session = train.Session(task="moons", runs=[train.Run("atan"), train.Run("atan", gradient="true")], depth=2, width=5, seed=2)
    custom, true = session.step(1)
    x, y = session.dataset.x.astype(np.float64), session.dataset.y.astype(np.float64)
    row = custom.history.iloc[0]
    assert list(row.index[-3:]) == ["grad_norm_1", "grad_norm_2", "grad_norm_output"]
    expected = [np.linalg.norm(g) for g in two_layer_gradients(session.initial_weights, x, y, atan_surrogate)]
    got = [row["grad_norm_1"], row["grad_norm_2"], row["grad_norm_output"]]
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    assert abs(expected[0] - expected[1]) > 1e-2 * expected[1]  # distinct values: swapped columns would fail
    # true gradient of the step: nothing reaches either hidden kernel; the output layer still learns
    zero = [np.linalg.norm(g) for g in two_layer_gradients(session.initial_weights, x, y, np.zeros_like)]
    first = true.history.iloc[0]
    assert (first["grad_norm_1"], first["grad_norm_2"]) == (0.0, 0.0) == (zero[0], zero[1])
    assert first["grad_norm_output"] == pytest.approx(zero[2], rel=1e-4) and zero[2] > 0


def test_networks_of_depth_up_to_three_keep_their_initial_weights_and_deeper_layers_get_new_seeds():
    """Raising MAX_DEPTH did not move the weights of the networks the page trained before (seed s,
    layer l: GlorotUniform(seed = 4 s + l), l = 0 the output layer)."""
    for seed, depth in ((0, 1), (3, 3)):
        weights = train.build_model(2, None, width=8, depth=depth, seed=seed).get_weights()
        for layer in range(1, depth + 1):
            fan_in = 2 if layer == 1 else 8
            expected = keras.initializers.GlorotUniform(seed=4 * seed + layer)((fan_in, 8))
            np.testing.assert_array_equal(weights[2 * (layer - 1)], expected)
        np.testing.assert_array_equal(weights[-2], keras.initializers.GlorotUniform(seed=4 * seed)((8, 1)))
    deep = train.build_model(2, None, width=8, depth=6, seed=0).get_weights()
    square = [deep[2 * index] for index in range(1, 6)]  # kernels of hidden layers 2..6
    assert all(not np.array_equal(a, b) for i, a in enumerate(square) for b in square[i + 1 :])
    shifted = train.build_model(2, None, width=8, depth=6, seed=1).get_weights()  # layer 5 of seed 0 vs layer 1 of seed 1
    assert not any(np.array_equal(deep[2 * 4], shifted[2 * index]) for index in range(1, 6))


@pytest.mark.parametrize("run_index", [2, 3], ids=["ste_sign-true", "fast_sigmoid-true"])
def test_true_gradient_of_a_step_leaves_the_first_layer_untouched(fair, run_index):
    session, _, results = fair
    result = results[run_index]
    kernel, bias, out_kernel, out_bias = result.model.get_weights()
    w1, b1, w2, b2 = session.initial_weights
    assert np.array_equal(kernel, w1) and np.array_equal(bias, b1)
    assert not np.array_equal(out_kernel, w2) and not np.array_equal(out_bias, b2)  # the output layer learns
    assert result.status == "no_gradient"
    assert (result.history["grad_norm"] == 0.0).all() and (result.history["dead_fraction"] == 1.0).all()
    # the custom-gradient run moved its first layer, so the check above can fail
    assert not np.array_equal(results[0].model.get_weights()[0], w1)
    assert results[0].status == "ok"


def test_predict_grid_2d_matches_numpy_forward(fair):
    session, _, results = fair
    model, data = results[0].model, session.dataset
    grid = train.predict_grid(model, data, resolution=30)
    assert grid.values.shape == (30, 30) and grid.x.shape == (30,) and grid.y.shape == (30,)
    assert grid.x[0] < data.x[:, 0].min() and grid.x[-1] > data.x[:, 0].max()
    assert grid.y[0] < data.x[:, 1].min() and grid.y[-1] > data.x[:, 1].max()
    weights = model.get_weights()
    for ix, iy in ((0, 0), (29, 0), (3, 17), (29, 29)):
        _, logit = forward(weights, np.array([[grid.x[ix], grid.y[iy]]], np.float64), heaviside)
        assert grid.values[iy, ix] == pytest.approx(sigmoid(logit[0, 0]), abs=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_custom_ste_sign_learns_xor(seed):
    result = train.compare(task="xor", runs=[train.Run("ste_sign")], epochs=300, width=16, seed=seed)[0]
    assert result.status == "ok"
    assert len(result.history) == 300
    assert result.history["accuracy"].iloc[-1] >= 0.85


def test_huge_learning_rate_diverges_without_raising():
    results = train.compare(task="xor", runs=[train.Run("ste_sign"), train.Run(None)], epochs=100, learning_rate=1e6)
    for result in results:
        assert result.status == "diverged"
        history = result.history
        assert result.diverged_epoch == history["epoch"].iloc[-1] == len(history) < 100
        last, first = history["loss"].iloc[-1], history["loss"].iloc[0]
        assert not np.isfinite(last) or last > 1e3 * max(1.0, first)


def test_nan_loss_is_diverged_at_that_epoch():
    clean = tasks.make("square", n=64)
    broken = tasks.Dataset("square", clean.x, np.full_like(clean.y, np.nan), "regression", 1, 0.0, 0)
    result = train.compare(dataset=broken, runs=[train.Run("atan")], epochs=10)[0]
    assert (result.status, result.diverged_epoch, len(result.history)) == ("diverged", 1, 1)
    assert np.isnan(result.history["loss"].iloc[0])


def test_regression_fits_the_square_and_grid_follows_the_model():
    data = tasks.make("square", n=512, noise=0.0, seed=0)
    result = train.compare(dataset=data, runs=[train.Run(None)], epochs=300, learning_rate=0.03)[0]
    history = result.history
    assert list(history.columns) == ["epoch", "loss", "grad_norm", "dead_fraction", "grad_norm_1", "grad_norm_output"]
    assert history["loss"].iloc[-1] < 0.01 and history["loss"].iloc[-1] < 0.1 * history["loss"].iloc[0]
    grid = train.predict_grid(result.model, data, resolution=50)
    assert grid.y is None and grid.values.shape == (50,)
    _, expected = forward(result.model.get_weights(), grid.x[:, None].astype(np.float64), lambda h: np.maximum(h, 0))
    np.testing.assert_allclose(grid.values, expected[:, 0], rtol=1e-4, atol=1e-5)
    inside = np.abs(grid.x) <= 0.95
    assert np.abs(grid.values[inside] - grid.x[inside] ** 2).max() < 0.15


def test_on_epoch_streams_every_epoch_in_order_interleaving_runs():
    calls = []
    results = train.compare(
        task="circles",
        runs=[train.Run("atan"), train.Run("triangle")],
        epochs=12,
        epochs_per_chunk=5,
        on_epoch=lambda run_index, epoch, row: calls.append((run_index, epoch, row)),
    )
    assert [c[0] for c in calls] == [0] * 5 + [1] * 5 + [0] * 5 + [1] * 5 + [0] * 2 + [1] * 2
    for index, result in enumerate(results):
        streamed = [(epoch, row) for run_index, epoch, row in calls if run_index == index]
        assert [epoch for epoch, _ in streamed] == list(range(1, 13))
        assert [row["epoch"] for _, row in streamed] == list(range(1, 13))
        pd.testing.assert_frame_equal(pd.DataFrame([row for _, row in streamed]), result.history, check_dtype=False)


def test_should_stop_marks_runs_stopped_after_the_current_chunk():
    asked = []

    def should_stop():
        asked.append(True)
        return True

    session = train.Session(task="sine", runs=[train.Run("atan"), train.Run("ste_sign")], epochs_per_chunk=4)
    results = session.step(20, should_stop=should_stop)
    assert [r.status for r in results] == ["stopped", "stopped"]
    assert len(results[0].history) == 4 and len(results[1].history) == 0  # run 1 never started
    assert asked == [True] and session.finished
    assert len(session.step(5)[0].history) == 4  # a stopped session trains no more


def test_a_time_budget_pauses_without_changing_status():
    session = train.Session(task="sine", runs=[train.Run("atan")], epochs_per_chunk=5)
    results = session.step(100, seconds=0.0)  # past the budget after the first chunk (not yet timed)
    assert session.epoch == 5 and len(results[0].history) == 5
    assert results[0].status == "ok" and not session.finished
    session.step(100, seconds=60.0)  # a budget that is not reached: all the epochs asked for
    assert session.epoch == 105


def test_a_time_budget_sizes_the_chunk_from_the_fastest_measured_speed():
    session = train.Session(task="sine", runs=[train.Run("atan")], epochs_per_chunk=50)
    session.step(100)  # a cold chunk, then a warm one: the speed is known
    session.step(100, seconds=1e-9)  # less than any epoch takes: exactly one epoch, not a chunk of 50
    assert session.epoch == 101
    session.step(100, seconds=1e-9)  # a one-epoch fit is mostly overhead, but the speed stays the fastest seen
    rates = [sec / steps for sec, steps in zip(session._states[0].fit_seconds[1:], session._states[0].fit_steps[1:], strict=True)]
    assert session._seconds_per_epoch() == pytest.approx(min(rates))


@pytest.mark.slow  # two sessions of two runs, each traced and XLA-compiled again after reset: ~30 s
def test_the_move_to_xla_is_at_a_fixed_epoch_so_stepping_does_not_change_the_numbers(monkeypatch):
    monkeypatch.setattr(train, "XLA_AFTER_STEPS", 12)  # 4 mini-batches per epoch: XLA from epoch 3
    runs = [train.Run("atan"), train.Run("ste_sign", gradient="true")]
    stepped = train.Session(task="moons", runs=runs, batch_size=128, epochs_per_chunk=5, seed=1)
    whole = train.Session(task="moons", runs=runs, batch_size=128, epochs_per_chunk=5, seed=1)
    assert stepped.xla_from_epoch == 3
    for _ in range(7):
        stepped.step(1)
    whole.step(7)
    assert [state.jit_compile for state in whole._states] == [True, True]
    for a, b in zip(stepped.results(), whole.results(), strict=True):
        pd.testing.assert_frame_equal(a.history, b.history)
        assert all(np.array_equal(x, y) for x, y in zip(a.model.get_weights(), b.model.get_weights(), strict=True))
    first = whole.results()[0].history
    whole.reset()  # back before the switch: the plain step again, then XLA at the same epoch
    pd.testing.assert_frame_equal(whole.step(7)[0].history, first)


def test_step_by_step_equals_one_call_and_reset_replays():
    runs = [train.Run("triangle")]
    stepped = train.Session(task="moons", runs=runs, epochs_per_chunk=3, seed=4)
    for _ in range(4):
        stepped.step(1)
    stepped.step(3)
    whole = train.Session(task="moons", runs=runs, epochs_per_chunk=3, seed=4)
    first = whole.step(7)[0]
    pd.testing.assert_frame_equal(stepped.results()[0].history, first.history)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(stepped.results()[0].model.get_weights(), first.model.get_weights(), strict=True)
    )
    whole.reset()
    assert all(np.array_equal(a, b) for a, b in zip(first.model.get_weights(), whole.initial_weights, strict=True))
    again = whole.step(7)[0]
    pd.testing.assert_frame_equal(again.history, first.history)


@pytest.mark.parametrize(
    ("kwargs", "argument", "bounds", "allowed"),
    [
        ({"epochs": 0}, "epochs", (1, train.MAX_EPOCHS), ()),
        ({"epochs": train.MAX_EPOCHS + 1}, "epochs", (1, train.MAX_EPOCHS), ()),
        ({"width": 0}, "width", (1, train.MAX_WIDTH), ()),
        ({"width": train.MAX_WIDTH + 1}, "width", (1, train.MAX_WIDTH), ()),
        ({"depth": train.MAX_DEPTH + 1}, "depth", (1, train.MAX_DEPTH), ()),
        ({"depth": 0}, "depth", (1, train.MAX_DEPTH), ()),
        ({"batch_size": 0}, "batch_size", (1,), ()),
        ({"width": 2.5}, "width", (1, train.MAX_WIDTH), ()),
        ({"learning_rate": 0.0}, "learning_rate", (0, train.MAX_LEARNING_RATE), ()),
        ({"learning_rate": 1.1e7}, "learning_rate", (0, train.MAX_LEARNING_RATE), ()),
        ({"optimizer": "nadam"}, "optimizer", (), tuple(train.OPTIMIZERS)),
        ({"task": "blobs"}, "blobs", (), ("xor", "moons")),
        ({"runs": []}, "runs", (), ()),
    ],
)
def test_bounds_are_refused_with_value_error(kwargs, argument, bounds, allowed):
    arguments = {"task": "xor", "runs": [train.Run("atan")], "epochs": 5, **kwargs}
    with pytest.raises(ValueError) as raised:
        train.compare(**arguments)
    assert_tells(str(raised.value), argument, bounds, allowed)


def test_runs_are_validated():
    with pytest.raises(ValueError, match="unknown op 'nope'"):
        train.Run("nope")
    with pytest.raises(ValueError, match="gradient must be one of"):
        train.Run("atan", gradient="surrogate")
    with pytest.raises(ValueError, match="alpha"):
        train.Run("atan", params={"alpha": -5.0})
    assert train.Run("atan").params == ops.get("atan").defaults()
    assert train.Run("atan", {"alpha": 3.0}).label == "atan (custom, alpha=3)"


def test_user_op_that_xla_cannot_compile_still_trains():
    """An editor op is an OpSpec; a forward XLA rejects (here a NumPy call) falls back to plain graph mode."""

    def numpy_step(x, _params):
        y = tf.numpy_function(lambda a: (a > 0).astype(np.float32), [x], tf.float32, stateful=False)
        return tf.ensure_shape(y, x.shape)

    spec = ops.OpSpec(
        key="numpy_step",
        title="NumPy step",
        family="spike",
        params=(),
        forward_fn=numpy_step,
        surrogate=lambda x, _params: 1.0 / tf.square(10.0 * tf.abs(x) + 1.0),
        forward_tex="",
        grad_tex="",
        why="",
        reference="",
        builtin=False,
    )
    result = train.compare(task="xor", runs=[train.Run(spec)], epochs=20)[0]
    assert result.status == "ok" and len(result.history) == 20
    assert (result.history["grad_norm"] > 0).all()


def test_train_to_never_passes_the_target_and_a_reader_waits_for_a_whole_chunk():
    import threading

    session = train.Session(task="xor", runs=[train.Run("atan"), train.Run("ste_sign")], epochs_per_chunk=50)
    seen = []

    def read_while_training():
        epoch, results = session.snapshot()
        seen.append((epoch, [len(r.history) for r in results]))

    trainer = threading.Thread(target=session.train_to, args=(150,))
    trainer.start()
    for _ in range(20):
        read_while_training()
    trainer.join()
    assert session.train_to(150) == 150 and session.train_to(120) == 150  # already there: nothing more
    # every snapshot is between chunks: both runs have exactly `epoch` rows
    assert all(rows == [epoch, epoch] for epoch, rows in seen), seen
