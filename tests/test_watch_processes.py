"""The watch callback where a process of its own is needed: two virtual CPU devices under MirroredStrategy (set
before TensorFlow starts its devices), a run killed mid-training, other Keras backends (fixed per process), and
MultiWorkerMirroredStrategy with two worker processes on loopback (slow)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from explorer.watch.run_folder import Run

ROOT = Path(__file__).resolve().parent.parent
CHILD_SECONDS = 300

COMMON = textwrap.dedent(
    """
    import json, os, signal, sys, warnings
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np

    def data():
        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, 6)).astype("float32")
        y = (x[:, :1] * 0.5 - x[:, 1:2]).astype("float32")
        return x, y

    def build(keras, ops):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([
            keras.Input((6,)), keras.layers.Dense(8, name="d1"), ops.SurrogateLayer("triangle", name="spike"),
            keras.layers.Dense(8, name="d2"), ops.SurrogateLayer("ste_sign", name="sign"), keras.layers.Dense(1)],
            name="mlp")
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        return model

    def rows(callback):
        return callback.layers.to_dict("records")
    """
)

MIRRORED = COMMON + textwrap.dedent(
    """
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import ops
    import explorer
    root = sys.argv[1]
    x, y = data()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        mirrored = build(keras, ops)
    watched = explorer.Watch(root, every=2, name="mirrored")  # the default probe: the first batch
    mirrored.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[watched])
    one = build(keras, ops)  # the same model on one device, the same start, data and steps
    alone = explorer.Watch(root, every=2, name="one-device")
    one.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[alone])
    copied = build(keras, ops)
    copied.set_weights(mirrored.get_weights())
    again = explorer.watch(copied, (x[:16], y[:16]))
    result = {"replicas": strategy.num_replicas_in_sync, "mirrored": rows(watched), "one": rows(alone),
              "copied": rows(again), "mirrored_last": rows(watched)[-2:]}

    class Kill(keras.callbacks.Callback):  # after Watch in the list: Watch has recorded the step when this runs
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) >= 5:
                print(json.dumps(result, default=float), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

    killed = build(keras, ops)
    killed.fit(x, y, batch_size=8, epochs=5, verbose=0,
               callbacks=[explorer.Watch(root, every=1, name="killed", flush_seconds=0), Kill()])
    """
)


def _run_child(code: str, *args: str, env: dict | None = None, timeout: float = CHILD_SECONDS):
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          env=environment, cwd=ROOT)  # fmt: skip


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    finished = _run_child(MIRRORED, str(root))
    lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the child printed no result (exit {finished.returncode}): {finished.stderr[-3000:]}"
    return json.loads(lines[-1]), root, finished


CONTINUOUS = ("mean", "std", "min", "p1", "p50", "p99", "max", "grad_norm", "mismatch_cosine", "mismatch_norm_ratio")
SHARES = ("count", "zero_grad_share", "special_share", "below_share", "above_share", "firing_rate", "flip_ratio")


def _frame(rows) -> pd.DataFrame:
    return pd.DataFrame(rows).set_index(["step", "layer"]).sort_index()


@pytest.mark.slow  # one child process: about 30 s
def test_mirrored_statistics_are_of_the_whole_probe_batch_and_equal_one_device(mirrored):
    result, root, _ = mirrored
    assert result["replicas"] == 2
    both, one = _frame(result["mirrored"]), _frame(result["one"])
    assert list(both.index) == list(one.index) and len(both) == 2 * 5  # steps 0, 2, 4, 6, 8; two layers
    assert (both["count"] == 16 * 8).all()  # the whole probe batch, not one replica's 8 rows
    for column in SHARES:
        np.testing.assert_allclose(both[column], one[column], rtol=0, atol=1e-12, err_msg=column)
    for column in CONTINUOUS:
        np.testing.assert_allclose(both[column], one[column], rtol=1e-4, atol=1e-6, err_msg=column)
    # on the same weights, the mirrored record equals the one-device one to float32 rounding
    last, copied = _frame(result["mirrored_last"]), _frame(result["copied"]).droplevel("step")
    for column in (*SHARES, *CONTINUOUS):
        if column == "flip_ratio":
            continue  # NaN at a run's first record
        np.testing.assert_allclose(last[column].to_numpy(), copied[column].to_numpy(), rtol=1e-5, atol=1e-7,
                                   err_msg=column)  # fmt: skip
    run = Run(root, "mirrored")
    assert run.state() == "finished" and run.recorded_steps() == [0, 2, 4, 6, 8]


@pytest.mark.slow
def test_a_killed_run_reads_back_up_to_its_last_record(mirrored):
    _, root, finished = mirrored
    assert finished.returncode == -9  # SIGKILL, mid-training
    run = Run(root, "killed")
    assert run.info["status"] == "running" and run.info["ended"] is None
    assert run.state(now=time.time() + 120) == "stopped before its end"
    assert run.recorded_steps() == [0, 1, 2, 3, 4, 5]
    layers = run.read("layers")
    assert layers.problems == [] and len(layers.frame) == 12
    assert len(run.read("histograms").frame) == 12


OTHER_BACKEND = textwrap.dedent(
    """
    import json, sys, warnings
    import numpy as np
    import keras
    import explorer

    @keras.ops.custom_gradient
    def clip(x):
        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return upstream * keras.ops.cast(keras.ops.abs(x) <= 1.0, x.dtype)
        return keras.ops.clip(x, -1.0, 1.0), grad

    class Clip(keras.layers.Layer):
        def call(self, x):
            return clip(x)

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="pre"), Clip(name="clip"),
                              keras.layers.Dense(1, name="post")])
    model.compile(optimizer="sgd", loss="mse")
    x = (np.random.default_rng(0).normal(size=(16, 3)) * 2).astype("float32")
    target = x[:, :1]
    callback = explorer.Watch(sys.argv[1], every=2, name="other")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, target, batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    # by hand, at the end (the last record's weights): the first batch of 4 is the probe
    w1, b1 = model.get_layer("pre").get_weights()
    w2, b2 = model.get_layer("post").get_weights()
    probe, probe_target = x[:4].astype(np.float64), target[:4].astype(np.float64)
    x1 = probe @ w1 + b1
    local = (np.abs(x1) <= 1).astype(np.float64)
    out = np.clip(x1, -1, 1) @ w2 + b2
    dx1 = ((2 * (out - probe_target) / out.size) @ w2.T) * local
    last = callback.layers.iloc[-1]
    print(json.dumps({"warnings": [str(w.message) for w in caught if "Watch" in str(w.message)],
                      "steps": callback.steps["step"].tolist(), "layers": callback.layers["layer"].tolist(),
                      "zero": float(last["zero_grad_share"]), "zero_by_hand": float(np.mean(local == 0)),
                      "norm": float(last["grad_norm"]), "norm_by_hand": float(np.sqrt(np.sum(dx1 ** 2))),
                      "p50": float(last["p50"]), "p50_by_hand": float(np.percentile(x1, 50)),
                      "loss": float(callback.steps["loss"].iloc[-1]), "loss_by_hand": float(np.mean((out - probe_target) ** 2)),
                      "above": float(last["above_share"]), "mismatch": float(last["mismatch_cosine"])}))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_backends_record_the_same_statistics_and_name_what_they_cannot(tmp_path, backend):
    finished = _run_child(OTHER_BACKEND, str(tmp_path), env={"KERAS_BACKEND": backend})
    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert result["steps"] == [0, 2, 4] and result["layers"] == ["clip"] * 3
    for key in ("zero", "norm", "p50", "loss"):
        assert result[key] == pytest.approx(result[f"{key}_by_hand"], rel=1e-5, abs=1e-7), key
    assert 0 < result["zero_by_hand"] < 1  # some inputs beyond the clip, some inside
    assert np.isnan(result["above"]) and np.isnan(result["mismatch"])  # no declared boundary; no mismatch here
    (message,) = result["warnings"]
    assert message == (f"Watch under KERAS_BACKEND={backend} records every statistic but the mismatch (its "
                       "reference backward is TensorFlow code); run the model under KERAS_BACKEND=tensorflow for it")
    run = Run(tmp_path, "other")
    assert run.info["keras_backend"] == backend and run.read("layers").frame["step"].tolist() == [0, 2, 4]


WORKER = COMMON + textwrap.dedent(
    """
    import tensorflow as tf
    import keras
    import ops
    import explorer
    root = sys.argv[1]
    keras.config.disable_traceback_filtering()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = data()
    with strategy.scope():
        model = build(keras, ops)
        # Keras 3's own fit under this strategy fails before any callback runs (keras-team/keras#20585: its
        # symbolic build reduces a tuple of per-replica batches); build here, as that step would, and skip it
        model._symbolic_build(data_batch=(x[:16], y[:16]))
    model._maybe_symbolic_build = lambda *args, **kwargs: None
    callback = explorer.Watch(root, every=2, name="multi-worker")
    keras_error = None
    try:
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[callback])
    except ValueError as error:  # Keras 3's train step under this strategy (keras-team/keras#20585)
        keras_error = str(error)
        callback.close()
    one = build(keras, ops)
    one.set_weights(model.get_weights())
    alone = explorer.watch(one, (x[:16], y[:16]))
    print(json.dumps({"keras_error": keras_error, "chief": callback.chief,
                      "rows": rows(callback), "alone": rows(alone), "wrote": str(callback.run_path)}, default=float))
    """
)


def _free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        handle = socket.socket()
        handle.bind(("127.0.0.1", 0))
        sockets.append(handle)
    ports = [handle.getsockname()[1] for handle in sockets]
    for handle in sockets:
        handle.close()
    return ports


@pytest.mark.slow
def test_multi_worker_statistics_equal_one_device_and_only_the_chief_writes(tmp_path):
    """Two worker processes on loopback (TF_CONFIG), each with its own empty runs folder: worker 0 (the chief of a
    cluster without one) writes its run, worker 1 records the same numbers and writes nothing.

    Keras 3.15's own ``fit`` does not train under MultiWorkerMirroredStrategy (keras-team/keras#20585: its symbolic
    build, skipped here, and then its train step fail on per-replica values). The callback's first record, made in
    ``on_train_begin`` on the probe gathered from both workers, comes before that failure and is compared; once
    Keras trains, every record is."""
    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    folders = [tmp_path / "worker0", tmp_path / "worker1"]
    children = []
    for index, folder in enumerate(folders):
        folder.mkdir()
        config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "TF_CONFIG": config}
        children.append(subprocess.Popen([sys.executable, "-c", WORKER, str(folder)], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, env=environment, cwd=ROOT))  # fmt: skip
    results = []
    try:
        for child in children:
            out, err = child.communicate(timeout=CHILD_SECONDS)
            lines = [line for line in out.splitlines() if line.startswith("{")]
            assert child.returncode == 0 and lines, f"worker exit {child.returncode}: {err[-3000:]}"
            results.append(json.loads(lines[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    chief, other = results
    assert chief["chief"] is True and other["chief"] is False
    assert [p.name for p in folders[0].iterdir()] == ["multi-worker"] and list(folders[1].iterdir()) == []
    assert other["wrote"] == "None"
    trained = chief["keras_error"] is None
    if not trained:
        assert "Invalid reduction dimension" in chief["keras_error"]  # the known Keras failure, nothing else
    ours, theirs = _frame(chief["rows"]), _frame(other["rows"])
    assert list(ours.index) == list(theirs.index) and (ours["count"] == 16 * 8).all()  # the whole batch
    for column in (*SHARES, *CONTINUOUS):
        np.testing.assert_allclose(ours[column], theirs[column], rtol=1e-6, atol=1e-9, err_msg=column)
    last, alone = ours.xs(ours.index[-1][0], level="step"), _frame(chief["alone"]).droplevel("step")
    for column in (*SHARES, *CONTINUOUS):
        if column != "flip_ratio":
            np.testing.assert_allclose(last[column].to_numpy(), alone[column].to_numpy(), rtol=1e-5, atol=1e-7,
                                       err_msg=column)  # fmt: skip
    run = Run(folders[0], "multi-worker")
    assert run.recorded_steps() == ([0, 2, 4, 6, 8] if trained else [0])
    assert run.state() == "finished"
