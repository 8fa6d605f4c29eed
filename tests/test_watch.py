"""The watch callback: every statistic against NumPy by hand, the run folder it writes, the layers it finds, the
alarm and bad input. Distribution, killed runs and other backends: tests/test_watch_processes.py."""

from __future__ import annotations

import json
import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import explorer
import ops
from explorer.watch import statistics
from explorer.watch.callback import DeadGradientWarning, Watch, check_writable
from explorer.watch.run_folder import Run

SIGMA = 0.5
# The probe's inputs to the sign layer (the first Dense is the identity): 0 is the jump of sign, -1 and 1 the
# closed clip boundaries of ste_sign (the gradient passes AT them: the PyTorch ao case), the rest either side.
PROBE_X = np.array(
    [[0.0, 1.0, -1.0, 0.3], [-2.0, 1.5, 0.1, -0.6], [0.9, -1.2, 2.5, 0.0], [-0.2, 0.7, -1.0, 1.0],
     [0.05, -0.45, 1.1, -0.8]], np.float32,
)  # fmt: skip
PROBE_Y = np.array([[0.5], [-1.0], [1.0], [0.0], [2.0]], np.float32)
K2 = np.array([[0.5, -0.25, 0.75], [0.25, 0.5, -0.5], [-0.5, 0.25, 0.25], [0.75, -0.5, 0.5]], np.float32)
B2 = np.array([0.1, -0.2, 0.3], np.float32)
K3 = np.array([[1.0], [-0.5], [0.25]], np.float32)
B3 = np.array([0.2], np.float32)


@tf.custom_gradient
def window_spike(x):
    """A team's own spike: the step [x > 0], the gradient a box |x| < 0.5 (open)."""

    def grad(dy):
        return dy * tf.cast(tf.abs(x) < 0.5, x.dtype)

    return tf.cast(x > 0, x.dtype), grad


class WindowSpike(keras.layers.Layer):
    def call(self, x):
        return window_spike(x)


def smooth_forward(x):
    """The plain forward the team gives as its reference: autodiff of sigmoid(4x)."""
    return tf.sigmoid(4.0 * x)


def _hand_model() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(4, name="pre"),
            ops.SurrogateLayer("ste_sign", clip_value=1.0, name="sgn"),
            keras.layers.Dense(3, name="mid"),
            WindowSpike(name="mine"),
            keras.layers.Dense(1, name="out"),
        ],
        name="hand",
    )
    model.get_layer("pre").set_weights([np.eye(4, dtype=np.float32), np.zeros(4, np.float32)])
    model.get_layer("mid").set_weights([K2, B2])
    model.get_layer("out").set_weights([K3, B3])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _by_hand(x_in: np.ndarray, w1: np.ndarray, b1: np.ndarray) -> dict:
    """Forward and backward of the hand model in float64 NumPy, from the formulas (not from the code)."""
    x1 = x_in.astype(np.float64) @ w1 + b1
    y1 = np.where(x1 >= 0, 1.0, -1.0)  # sign(0) = +1
    local1 = (np.abs(x1) <= 1.0).astype(np.float64)  # closed clip window
    x2 = y1 @ K2 + B2
    y2 = (x2 > 0).astype(np.float64)
    local2 = (np.abs(x2) < 0.5).astype(np.float64)
    out = y2 @ K3 + B3
    loss = np.mean((out - PROBE_Y) ** 2)
    d_out = 2.0 * (out - PROBE_Y) / out.size
    dy2 = d_out @ K3.T
    dx2 = dy2 * local2
    dy1 = dx2 @ K2.T
    dx1 = dy1 * local1
    # references: ste_sign's true gradient is 0 everywhere -> the Gaussian-smoothed sign (a jump of 2 at 0)
    ref_local1 = 2.0 * np.exp(-0.5 * (x1 / SIGMA) ** 2) / (SIGMA * math.sqrt(2 * math.pi))
    ref_dx1 = dy1 * ref_local1
    s = 1.0 / (1.0 + np.exp(-4.0 * x2))
    ref_dx2 = dy2 * 4.0 * s * (1.0 - s)
    # weight gradients upstream of each layer: sgn <- pre; mine <- mid, and pre through sgn's custom backward
    w_sgn = np.concatenate([(x_in.T @ dx1).ravel(), dx1.sum(0)])
    w_sgn_ref = np.concatenate([(x_in.T @ ref_dx1).ravel(), ref_dx1.sum(0)])

    def through_mid(dx):
        back = (dx @ K2.T) * local1
        return np.concatenate([(x_in.T @ back).ravel(), back.sum(0), (y1.T @ dx).ravel(), dx.sum(0)])

    return dict(x1=x1, y1=y1, local1=local1, x2=x2, y2=y2, local2=local2, loss=loss, dx1=dx1, dx2=dx2,
                w_sgn=w_sgn, w_sgn_ref=w_sgn_ref, w_mine=through_mid(dx2), w_mine_ref=through_mid(ref_dx2))  # fmt: skip


def _cosine_ratio(c, r):
    return c @ r / (np.linalg.norm(c) * np.linalg.norm(r)), np.linalg.norm(c) / np.linalg.norm(r)


@pytest.fixture(scope="module")
def hand_run(tmp_path_factory):
    """Two records of the hand model: step 0, then after the first Dense's bias moves by -0.25 (some signs flip
    and inputs leave the first record's histogram range)."""
    root = tmp_path_factory.mktemp("runs")
    model = _hand_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeadGradientWarning)
        callback = explorer.watch(model, (PROBE_X, PROBE_Y), root, name="hand", bins=8, reference_sigma=SIGMA,
                                  references={"mine": smooth_forward}, events=True)  # fmt: skip
        model.get_layer("pre").set_weights([np.eye(4, dtype=np.float32), np.full(4, -0.25, np.float32)])
        callback.record(7)
    callback.close()
    return callback, Run(root, "hand")


def test_layers_found_by_what_they_do_and_described_in_info(hand_run):
    callback, run = hand_run
    assert [(w.name, w.source, w.depth) for w in callback.watched] == [("sgn", "catalogue", 0), ("mine", "yours", 1)]
    sgn, mine = run.info["layers"]
    assert sgn["op"] == "ste_sign" and sgn["params"] == {"clip_value": 1.0}
    assert sorted((p["x"], p["kind"]) for p in sgn["special_points"]) == [(-1.0, "boundary"), (0.0, "jump"),
                                                                           (1.0, "boundary")]  # fmt: skip
    assert sgn["clip_bounds"] == [-1.0, 1.0] and sgn["family"] == "sign"
    assert mine["op"] is None and mine["source"] == "yours" and mine["clip_bounds"] is None
    info = run.info
    assert info["status"] == "finished" and info["keras_backend"] == "tensorflow" and info["user"] is None
    assert info["probe_size"] == 5 and "tensorflow" in info["versions"] and info["command"]
    assert "pre" in info["model_summary"] and info["model"] == "hand"


@pytest.mark.parametrize("record", [0, 1])
def test_every_statistic_equals_numpy_by_hand(hand_run, record):
    callback, run = hand_run
    bias = 0.0 if record == 0 else -0.25
    hand = _by_hand(PROBE_X, np.eye(4), np.full(4, bias))
    rows = run.read("layers").frame
    step = (0, 7)[record]
    sgn = rows[(rows.step == step) & (rows.layer == "sgn")].iloc[0]
    mine = rows[(rows.step == step) & (rows.layer == "mine")].iloc[0]
    for row, x, local, dx in ((sgn, hand["x1"], hand["local1"], hand["dx1"]), (mine, hand["x2"], hand["local2"], hand["dx2"])):
        assert row["count"] == x.size
        assert row["mean"] == pytest.approx(x.mean(), abs=1e-6) and row["std"] == pytest.approx(x.std(), abs=1e-6)
        assert row["min"] == pytest.approx(x.min(), abs=1e-6) and row["max"] == pytest.approx(x.max(), abs=1e-6)
        for column, q in (("p0_1", 0.1), ("p1", 1), ("p25", 25), ("p50", 50), ("p75", 75), ("p99", 99), ("p99_9", 99.9)):
            assert row[column] == pytest.approx(np.percentile(x, q), abs=1e-6), column
        assert row["zero_grad_share"] == pytest.approx(np.mean(local == 0))
        assert row["grad_norm"] == pytest.approx(np.sqrt(np.sum(dx**2)), rel=1e-5)
    # sign: exactly on 0 (jump) or +-1 (boundaries); strictly beyond -1 / 1
    on_point = np.isin(hand["x1"].astype(np.float32), np.float32([-1, 0, 1]))
    assert sgn["special_share"] == pytest.approx(on_point.mean())
    assert on_point.sum() == (6 if record == 0 else 0)  # 0, 0, 1, 1, -1, -1 in PROBE_X; none once shifted by -0.25
    assert sgn["below_share"] == pytest.approx(np.mean(hand["x1"] < -1))
    assert sgn["above_share"] == pytest.approx(np.mean(hand["x1"] > 1))
    # the closed boundaries pass the gradient: only |x| > 1 has a zero custom gradient
    assert sgn["zero_grad_share"] == pytest.approx(np.mean(np.abs(hand["x1"]) > 1))
    previous = np.where(PROBE_X >= 0, 1.0, -1.0)
    expected_flip = np.nan if record == 0 else np.mean(hand["y1"] != previous)
    assert sgn["flip_ratio"] == pytest.approx(expected_flip, nan_ok=True)
    if record == 1:
        assert expected_flip > 0  # 0.0, 0.1, 0.05 flip to -1
    assert math.isnan(sgn["firing_rate"])
    # the team's spike: outputs in {0, 1} -> a firing rate; no declared points -> no special point, no clip bounds
    assert mine["firing_rate"] == pytest.approx(hand["y2"].mean())
    assert mine["special_share"] == 0 and math.isnan(mine["below_share"]) and math.isnan(mine["flip_ratio"])
    # mismatch: weight gradients upstream with the custom backward vs the reference backward
    cosine, ratio = _cosine_ratio(hand["w_sgn"], hand["w_sgn_ref"])
    assert sgn["mismatch_cosine"] == pytest.approx(cosine, rel=1e-4)
    assert sgn["mismatch_norm_ratio"] == pytest.approx(ratio, rel=1e-4)
    assert sgn["reference"] == "smoothed forward (Gaussian, sigma=0.5)"
    cosine, ratio = _cosine_ratio(hand["w_mine"], hand["w_mine_ref"])
    assert mine["mismatch_cosine"] == pytest.approx(cosine, rel=1e-4)
    assert mine["mismatch_norm_ratio"] == pytest.approx(ratio, rel=1e-4)
    assert mine["reference"] == "autodiff of your forward"
    steps = run.read("steps").frame
    assert steps["loss"].iloc[record] == pytest.approx(hand["loss"], rel=1e-5)


def test_histogram_range_is_fixed_at_the_first_record_with_under_and_overflow(hand_run):
    _, run = hand_run
    histograms = run.read("histograms").frame
    first = _by_hand(PROBE_X, np.eye(4), np.zeros(4))["x1"]
    lo, hi = first.min() - 0.05 * (first.max() - first.min()), first.max() + 0.05 * (first.max() - first.min())
    for step, bias in ((0, 0.0), (7, -0.25)):
        row = histograms[(histograms.step == step) & (histograms.layer == "sgn")].iloc[0]
        assert (row["lo"], row["hi"]) == pytest.approx((lo, hi), abs=1e-6)
        x = _by_hand(PROBE_X, np.eye(4), np.full(4, bias))["x1"].ravel()
        inside = x[(x >= lo) & (x <= hi)]
        assert list(row["counts"]) == list(np.histogram(inside, bins=8, range=(lo, hi))[0])
        assert (row["underflow"], row["overflow"]) == (np.sum(x < lo), np.sum(x > hi))
    assert histograms[histograms.step == 7].set_index("layer").loc["sgn", "underflow"] == 1  # -2 - 0.25 < lo


def test_tensorboard_events_hold_the_scalars_and_histograms(hand_run):
    _, run = hand_run
    files = list((run.path / "events").glob("events.out.tfevents.*"))
    assert len(files) == 1
    seen = {}
    for event in tf.compat.v1.train.summary_iterator(str(files[0])):
        for value in event.summary.value:
            seen[(event.step, value.tag)] = (value.metadata.plugin_data.plugin_name, tf.make_ndarray(value.tensor))
    layers = run.read("layers").frame.set_index(["step", "layer"])
    plugin, value = seen[(7, "sgn/zero_grad_share")]
    assert plugin == "scalars" and value == pytest.approx(layers.loc[(7, "sgn"), "zero_grad_share"])
    plugin, buckets = seen[(0, "sgn/inputs")]
    assert plugin == "histograms" and buckets.shape == (8, 3) and buckets[:, 2].sum() == PROBE_X.size


def test_statistics_functions_at_their_edges():
    assert statistics.histogram_range(np.array([2.0, 2.0])) == pytest.approx((1.9, 2.1))
    assert statistics.histogram_range(np.array([np.nan])) == (-1.0, 1.0)
    counts, under, over = statistics.histogram(np.array([-np.inf, -1.0, 0.0, 1.0, np.inf, np.nan]), -1.0, 1.0, 2)
    assert (counts, under, over) == ([1, 2], 1, 1)  # the last bin is closed; NaN counted nowhere
    with pytest.raises(ValueError, match="lo < hi"):
        statistics.histogram(np.zeros(3), 1.0, 1.0)
    assert statistics.special_share(np.float32([0.1, 0.2]), [0.1]) == 0.5  # the point rounded to float32
    assert statistics.mismatch(np.zeros(3), np.ones(3)) == (pytest.approx(np.nan, nan_ok=True), 0.0)
    summary = statistics.input_summary(np.array([1.0, np.nan, 3.0, np.inf]))
    assert summary["mean"] == 2.0 and summary["nonfinite_share"] == 0.5 and summary["count"] == 4
    assert statistics.zero_share_alarm(0.6, 0.3, 0.25, None).startswith("up from 30.0%")
    assert statistics.zero_share_alarm(0.5, 0.3, 0.25, None) is None  # a rise of 0.2 is not more than 0.25
    assert statistics.zero_share_alarm(0.9, None, None, 0.9) == "at or above the threshold 0.9"


# -- models of every kind, layers called several times ------------------------------------------------------------
@keras.ops.custom_gradient
def keras_clip(x):
    def grad(*args, upstream=None):
        upstream = args[0] if upstream is None else upstream
        return upstream * keras.ops.cast(keras.ops.abs(x) <= 1.0, x.dtype)

    return keras.ops.clip(x, -1.0, 1.0), grad


class KerasClip(keras.layers.Layer):
    def call(self, x):
        return keras_clip(x)


class Unrolled(keras.Model):
    """A subclassed model that applies one spike layer at each of three time steps."""

    def __init__(self):
        super().__init__(name="unrolled")
        self.dense = keras.layers.Dense(3)
        self.spike = ops.SurrogateLayer("atan", name="spike")
        self.head = keras.layers.Dense(1)

    def call(self, x):
        total = 0.0
        for _ in range(3):
            total = total + self.spike(self.dense(x))
        return self.head(total)


def test_functional_and_subclassed_models_keras_ops_layers_and_repeated_calls():
    x = np.random.default_rng(1).normal(size=(6, 2)).astype("float32")
    inputs = keras.Input((2,))
    hidden = KerasClip(name="kclip")(keras.layers.Dense(4)(inputs))
    functional = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    functional.compile(loss="mse")
    found = explorer.watch(functional, (x, np.zeros((6, 1), "float32")))
    assert [(w.name, w.source) for w in found.watched] == [("kclip", "yours")]
    assert found.layers["count"].tolist() == [24]
    assert found.layers["flip_ratio"].isna().all()  # clip outputs are not a few levels: neither spike nor sign
    unrolled = Unrolled()
    unrolled.compile(loss="mse")
    unrolled(x)
    watched = explorer.watch(unrolled, (x, np.zeros((6, 1), "float32")))
    assert watched.layers["count"].tolist() == [3 * 6 * 3]  # every time step's inputs
    assert watched.layers["op"].tolist() == ["atan"]


# -- bad input ------------------------------------------------------------------------------------------------
def test_an_unwritable_log_dir_is_an_error_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(NotADirectoryError, match="cannot be written"):
        Watch(blocker / "runs")
    assert check_writable(tmp_path / "new" / "runs") == tmp_path / "new" / "runs"
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_a_model_without_custom_gradient_names_what_was_looked_for(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(ValueError, match="SurrogateLayer.*tf.custom_gradient or keras.ops.custom_gradient"):
        model.fit(np.ones((4, 2)), np.ones((4, 1)), verbose=0, callbacks=[Watch(tmp_path)])
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))  # no step was taken
    assert list(tmp_path.iterdir()) == []


def test_a_layer_with_integer_inputs_is_named_and_skipped(tmp_path):
    inputs = keras.Input((3,), dtype="int32")
    embedded = keras.layers.Flatten()(keras.layers.Embedding(10, 2, name="embed")(inputs))
    outputs = keras.layers.Dense(1)(ops.SurrogateLayer("fast_sigmoid", name="spike")(keras.layers.Dense(4)(embedded)))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="mse")
    data = np.arange(24).reshape(8, 3) % 10
    callback = Watch(tmp_path, every=1, name="ints", layers=["embed", "spike"])
    with pytest.warns(UserWarning, match="layer 'embed' takes int32 inputs, not floating point: skipped"):
        model.fit(data, np.ones((8, 1)), batch_size=4, epochs=1, verbose=0, callbacks=[callback])
    run = Run(tmp_path, "ints")
    assert run.recorded_steps() == [0, 1, 2]
    assert set(run.read("layers").frame["layer"]) == {"spike"}
    assert run.info["skipped"] == ["layer 'embed' takes int32 inputs, not floating point: skipped"]


def test_bad_arguments_are_value_errors_with_the_allowed_range(tmp_path):
    for kwargs, message in (({"every": 0}, "every must be"), ({"on_dead": "halt"}, "on_dead must be one of"),
                            ({"dead_threshold": 1.5}, r"share in \(0, 1\]"), ({"bins": 0}, r"\[1, 10000\]"),
                            ({"name": "../x"}, "not allowed")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            Watch(tmp_path, **kwargs)
    model = _hand_model()
    with pytest.raises(ValueError, match="not in model 'hand'; its layers: pre, sgn, mid, mine, out"):
        explorer.watch(model, (PROBE_X, PROBE_Y), layers=["nope"])


# -- the alarm ----------------------------------------------------------------------------------------------
def _narrow_spike_model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, name="dense"),
                              ops.SurrogateLayer("rect", alpha=10.0, name="narrow"), keras.layers.Dense(1)])  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_the_alarm_warns_once_per_layer_and_can_stop_training(tmp_path):
    x = np.random.default_rng(2).normal(size=(32, 4)).astype("float32") * 3
    y = np.ones((32, 1), "float32")
    model = _narrow_spike_model()
    callback = Watch(tmp_path, every=1, name="dead", dead_threshold=0.5, on_dead="stop")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[callback])
    alarms = [str(w.message) for w in caught if issubclass(w.category, DeadGradientWarning)]
    share = callback.layers["zero_grad_share"].iloc[0]
    assert alarms == [f"layer 'narrow' at step 0: the custom gradient is zero for {share:.1%} of its inputs on the "
                      "probe batch (at or above the threshold 0.5)"]  # fmt: skip
    assert int(model.optimizer.iterations.numpy()) == 1  # stopped after the first batch
    info = Run(tmp_path, "dead").info
    assert info["status"] == "stopped" and info["stop_reason"] == alarms[0]
    model = _narrow_spike_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=8, epochs=3, verbose=0,
                  callbacks=[Watch(tmp_path, every=1, name="warned", dead_threshold=0.5)])  # fmt: skip
    assert len([w for w in caught if issubclass(w.category, DeadGradientWarning)]) == 1  # once, not every step
    assert Run(tmp_path, "warned").recorded_steps() == list(range(13))


def test_the_first_training_batch_is_the_default_probe(tmp_path):
    x = np.arange(40, dtype="float32").reshape(10, 4) / 40
    model = _narrow_spike_model()
    callback = Watch(tmp_path, every=100, write=False)
    model.fit(x, np.ones((10, 1)), batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    assert callback._probe_tensors[0].numpy().tolist() == x[:4].tolist()
    assert callback.steps["step"].tolist() == [0, 3]  # the start and the end (every=100 never comes)
    with open(tmp_path / "unused", "w") as handle:
        json.dump({}, handle)
    assert [p.name for p in tmp_path.iterdir()] == ["unused"]  # write=False: no run folder


class _Resolver:
    def __init__(self, cluster, task_type, task_id):
        self.cluster, self.task_type, self.task_id = cluster, task_type, task_id

    def cluster_spec(self):
        return tf.train.ClusterSpec(self.cluster)


class _Strategy:
    def __init__(self, resolver):
        self.cluster_resolver = resolver


def test_only_the_chief_writes_by_the_multi_worker_convention():
    from explorer.watch.callback import is_chief

    workers = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    assert is_chief(object()) and is_chief(_Strategy(None)) and is_chief(_Strategy(_Resolver({}, None, None)))
    assert is_chief(_Strategy(_Resolver(workers, "worker", 0)))
    assert not is_chief(_Strategy(_Resolver(workers, "worker", 1)))
    with_chief = {**workers, "chief": ["127.0.0.1:3"]}
    assert is_chief(_Strategy(_Resolver(with_chief, "chief", 0)))
    assert not is_chief(_Strategy(_Resolver(with_chief, "worker", 0)))


class _Crash(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 3:
            raise RuntimeError("the user's own callback failed")


def test_a_fit_that_raises_loses_nothing_and_its_run_is_closed_as_stopped(tmp_path):
    x = np.random.default_rng(4).normal(size=(24, 4)).astype("float32")
    model = _narrow_spike_model()
    callback = Watch(tmp_path, every=1, name=None, flush_seconds=3600)
    with pytest.raises(RuntimeError, match="failed"):
        model.fit(x, np.ones((24, 1)), batch_size=4, epochs=1, verbose=0, callbacks=[callback, _Crash()])
    first = callback.run_path.name
    assert Run(tmp_path, first).info["status"] == "running"
    model.fit(x, np.ones((24, 1)), batch_size=4, epochs=1, verbose=0, callbacks=[callback])
    run = Run(tmp_path, first)
    assert run.info["status"] == "stopped" and "without on_train_end" in run.info["stop_reason"]
    assert run.recorded_steps() == [0, 1, 2, 3]  # every record made before the exception, though none was flushed
    assert Run(tmp_path, callback.run_path.name).info["status"] == "finished"
