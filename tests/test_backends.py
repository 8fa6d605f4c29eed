"""The ``backends`` check (issue 38): one keras.ops custom gradient on TensorFlow, JAX and torch, compared.

The values each backend reports are checked against NumPy formulas worked out by hand (the fast-sigmoid
surrogate, the straight-through clip, Keras's fake quantisation at a tie), not against another run of the
checker. JAX comes with the ``backends`` extra (.ci/run installs it); without torch its tests skip, with the
reason and how to install it in pytest's summary; with CI=true they fail instead (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from explorer.checker import backends
from explorer.checker.backends import Difference, compare, parse_backends, verdict
from tests.conftest import IN_CI, installed, require

ROOT = Path(__file__).resolve().parent.parent
PORTABLE = str(ROOT / "examples" / "backends_portable.py")
PITFALLS = str(ROOT / "examples" / "backends_pitfalls.py")
JAX_WHY = "the TensorFlow-vs-JAX comparisons need it: pip install -e '.[backends]'"
TORCH_WHY = "the torch comparisons need it: pip install torch==2.13.0 (the CPU build; README, .ci/run installs it)"
HAS_JAX, HAS_TORCH = installed("jax"), installed("torch")
needs_jax = pytest.mark.requires("jax", JAX_WHY)
needs_torch = pytest.mark.requires("torch", TORCH_WHY)


def upstream(shape) -> np.ndarray:
    """The upstream gradient every backend is given: 1.5 + 0.25 sin(i) over the elements, in C order."""
    size = int(np.prod(shape))
    return (1.5 + 0.25 * np.sin(np.arange(size))).reshape(shape)


# -- the comparison, on results made here (no worker) ---------------------------------------------------------
PLAN = {"inputs": ["x"], "keywords": {}, "positional": {}, "order": ["x"],
        "assignments": [{"values": [np.array([-1.0, 0.0, 2.0], np.float32)], "dtype": "float32"}]}


def ran(grad, output=(1.0, 2.0, 3.0)):
    return {"outputs": [np.asarray(output, np.float32)], "gradients": [None if grad is None else np.asarray(grad)]}


def test_agreeing_results_have_no_difference_and_pass():
    same = {"eager": [ran(np.float32([1, 2, 3]))], "compiled": [ran(np.float32([1, 2, 3]))]}
    assert compare(PLAN, {"tensorflow": same, "jax": same}) == []
    assert verdict("f", PLAN, {"tensorflow": same, "jax": same}).level == "pass"


def test_a_nan_gradient_without_error_is_a_difference_naming_backend_and_mode():
    good = {"eager": [ran(np.float32([1, 2, 3]))], "compiled": [ran(np.float32([1, 2, 3]))]}
    silent = {"eager": [ran(np.float32([np.nan, 2, 3]))], "compiled": [ran(np.float32([1, 2, 3]))]}
    found = compare(PLAN, {"tensorflow": good, "torch": silent})
    assert found == [Difference("torch", "eager", "gradient of x", found[0].gets, "nan")]
    assert "NaN at 1 of 3 elements, without an error" in found[0].gets


def test_shape_dtype_error_and_tolerance_are_told_apart():
    reference = {"eager": [ran(np.float32([1, 2, 3]))], "compiled": [ran(np.float32([1, 2, 3]))]}
    other = {
        "eager": [ran(np.float16([1, 2, 3]))],  # the input is float32
        "compiled": [ran(np.float32(2.0))],  # a scalar for a (3,) input
    }
    third = {"eager": [{"error": "TypeError: grad() got multiple values for argument 'upstream'"}],
             "compiled": [ran(np.float32([1, 2, 3 + 3e-5]))]}  # inside float32's rtol 1e-4
    found = {(d.backend, d.mode): d.kind for d in compare(PLAN, {"tensorflow": reference, "jax": other, "torch": third})}
    assert found == {("jax", "eager"): "dtype", ("jax", "compiled"): "shape", ("torch", "eager"): "error"}


def test_values_outside_the_tolerance_are_listed_with_where():
    reference = {"eager": [ran(np.float32([1, 2, 3]))], "compiled": [ran(np.float32([1, 2, 3]))]}
    other = {"eager": [ran(np.float32([1, 4, 3]))], "compiled": [ran(np.float32([1, 2, 3]))]}
    (found,) = compare(PLAN, {"tensorflow": reference, "jax": other})
    assert found.kind == "values" and "[4] where tensorflow eager gives [2]" in found.gets and "(1,)" in found.gets


def test_parse_backends():
    assert parse_backends("torch, tensorflow") == ["tensorflow", "torch"]
    assert parse_backends("all") == ["tensorflow", "jax", "torch"]
    with pytest.raises(ValueError, match="allowed: all or a comma-separated list of tensorflow, jax, torch"):
        parse_backends("tensorflow,mxnet")


def test_a_backend_not_installed_is_a_skip_with_how_to_install(monkeypatch):
    monkeypatch.setattr(backends, "installed", lambda name: name == "tensorflow")
    row = backends.check_backends(PORTABLE, "spike", ["tensorflow", "jax"])
    assert row.level == "skip" and row.passed and "jax: pip install 'gradient-explorer[backends]'" in row.message


# -- each backend in its worker, against hand-computed values --------------------------------------------------
@pytest.fixture(scope="module")
def workers():
    yield
    backends.close_workers()


def installed_backends() -> list[str]:
    return ["tensorflow"] + (["jax"] if HAS_JAX else []) + (["torch"] if HAS_TORCH else [])


@pytest.mark.slow  # a worker process per backend
@needs_jax
def test_spike_on_every_backend_and_mode_is_the_fast_sigmoid_surrogate(workers):
    names = installed_backends()
    plan, results = backends.run_backends(PORTABLE, "spike", names)
    assert set(results) == set(names)
    for backend in names:
        for mode in ("eager", "compiled"):
            for assignment, got in zip(plan["assignments"], results[backend][mode], strict=True):
                assert "error" not in got, (backend, mode, got)
                (x,) = assignment["values"]
                np.testing.assert_allclose(got["outputs"][0], (x > 0).astype(np.float32))
                expected = upstream(x.shape) / (1.0 + 10.0 * np.abs(x)) ** 2  # d/dx by hand; at x = 0: the upstream
                np.testing.assert_allclose(got["gradients"][0], expected, rtol=1e-5, err_msg=f"{backend} {mode}")
                assert got["gradients"][0].dtype == np.float32
    grid = plan["assignments"][-1]["values"][0]
    assert 0.0 in grid and 1.0 in grid and -3.0 in grid  # the special point and the range ends are sampled


@pytest.mark.slow  # a worker process per backend
@needs_jax
def test_a_layer_gets_tensorflows_weights_on_every_backend_and_its_input_gradient_is_the_surrogate(workers):
    names = installed_backends()
    plan, results = backends.run_backends(PORTABLE, "SpikeLayer", names, layer=True)
    for index, assignment in enumerate(plan["assignments"]):
        (x,) = assignment["values"]
        (gain,) = assignment["weights"]
        np.testing.assert_array_equal(gain, np.ones(x.shape[-1], np.float32))  # the layer's initial weights
        expected = gain * upstream(x.shape) / (1.0 + 10.0 * np.abs(gain * x)) ** 2  # chain rule by hand
        for backend in names:
            for mode in ("eager", "compiled"):
                got = results[backend][mode][index]
                assert "error" not in got, (backend, mode, got)
                np.testing.assert_allclose(got["gradients"][0], expected, rtol=1e-5, err_msg=f"{backend} {mode}")


@pytest.mark.slow  # a worker process per backend
@needs_jax
def test_keras_fake_quant_tie_gives_1_on_tensorflow_and_2_on_jax_and_torch(workers):
    """fake_quant(x, 0, max(x)): at x = max(x) x's own gradient is 1 everywhere; through max(x) it is 0 on
    TensorFlow and 1 on JAX and torch (Keras's range gradient at a tie)."""
    names = installed_backends()
    plan, results = backends.run_backends(PITFALLS, "fake_quant_learned_range", names)
    for index, assignment in enumerate(plan["assignments"]):
        (x,) = assignment["values"]
        up = upstream(x.shape)
        on_tensorflow = np.where((x >= 0) & (x <= x.max()), up, 0.0)  # straight through inside [0, max]
        elsewhere = on_tensorflow + np.where(x == x.max(), up, 0.0)  # plus the range's gradient at the tie
        np.testing.assert_allclose(results["tensorflow"]["eager"][index]["gradients"][0], on_tensorflow, rtol=1e-5)
        for backend in names[1:]:
            np.testing.assert_allclose(results[backend]["eager"][index]["gradients"][0], elsewhere, rtol=1e-5)
    row = verdict("fake_quant_learned_range", plan, results)
    assert row.level == "fail" and "jax eager" in row.message and "stop_gradient" in row.message
    assert "tensorflow eager:" not in row.message and "tf.function:" not in row.message  # TensorFlow is not blamed


@pytest.mark.slow  # a worker process per backend
@needs_torch
def test_silent_nan_on_torch_becomes_a_named_failure(workers):
    """The forward forgets to return grad: Keras's torch backend gives a NaN gradient and no error."""
    plan, results = backends.run_backends(PITFALLS, "forgotten_grad", ["tensorflow", "torch"])
    scalar = next(i for i, a in enumerate(plan["assignments"]) if a["values"][0].shape == ())
    torch_eager = results["torch"]["eager"][scalar]
    assert "error" not in torch_eager and np.isnan(torch_eager["gradients"][0])  # what the user gets: silence
    assert "error" in results["tensorflow"]["eager"][scalar]  # TensorFlow raises
    row = verdict("forgotten_grad", plan, results)
    assert row.level == "fail"
    assert "torch eager: gradient of x NaN at 1 of 1 elements, without an error" in row.message
    assert "Fix: return y, grad from the forward" in row.message


@pytest.mark.slow  # a worker process per backend
@needs_jax
def test_verify_rows_of_the_examples(workers):
    """The portable functions pass; each pitfall fails naming the backend(s), mode and fix (TF vs JAX always;
    the torch-only pitfall when torch is there)."""
    if not HAS_TORCH and IN_CI:  # locally the TensorFlow-vs-JAX rows run alone (test_silent_nan_... says torch is missing)
        require("torch", TORCH_WHY)
    names = installed_backends()
    every = backends.backend_rows([PORTABLE, PITFALLS], [], names)
    rows = {row["op"]: row for row in every if row["check"] == "backends"}
    for name in ("spike", "clip_ste", "scaled_norm_grad", "SpikeLayer"):
        assert rows[name]["level"] == "pass", rows[name]["message"]
        assert rows[name]["backend"] == ",".join(names)
    expected = {
        "keyword_slope": ("jax eager", "make a factory"),
        "two_outputs": ("jax eager", "one output per custom op"),
        "mean_upstream": ("jax eager", "ops.broadcast_to(g, ops.shape(x))"),
        "python_if": ("jax eager", "ops.where, ops.minimum"),
        "float16_backward": ("jax eager", "ops.cast(g, x.dtype)"),
        "fake_quant_learned_range": ("jax eager", "stop_gradient"),
    }
    if HAS_TORCH:
        expected["tf_style_backward"] = ("torch eager", "def grad(*args, upstream=None)")
        expected["forgotten_grad"] = ("torch eager", "return y, grad")
        expected["TFStyleLayer"] = ("torch eager", "def grad(*args, upstream=None)")
    for name, (place, fix) in expected.items():
        message = rows[name]["message"]
        assert rows[name]["level"] == "fail" and place in message and fix in message.split("Fix: ")[1], (name, message)
    assert "tf.function: raises ValueError: The custom_gradient decorator currently supports keywords" in rows[
        "keyword_slope"]["message"]
    if HAS_TORCH:
        assert "jax" not in rows["tf_style_backward"]["message"].split("Compared:")[0]  # JAX agrees with TF there


def test_without_backends_a_keras_function_gets_a_skip_row_not_a_verdict():
    from explorer.checker import discover

    found = discover.discover(PORTABLE)
    rows = backends.backend_rows([PORTABLE], found.functions, None)
    assert [row["op"] for row in rows] == ["spike", "clip_ste", "scaled_norm_grad"]
    assert all(row["level"] == "skip" and "--backends all" in row["message"] for row in rows)


# -- the figure and the shaded inputs (no worker) ---------------------------------------------------------------
def test_differing_marks_only_the_inputs_where_a_backend_differs():
    x = np.linspace(-1, 1, 5).astype(np.float32)
    tf_curve = {"forward": x, "gradient": np.ones(5, np.float32)}
    jax_curve = {"forward": x, "gradient": np.float32([1, 1, 2, 1, np.nan])}  # differs at 0 and NaN at 1
    mask = backends._differing(x, {"tensorflow": tf_curve, "jax": jax_curve})
    assert mask.tolist() == [False, False, True, False, True]
    raised = backends._differing(x, {"tensorflow": tf_curve, "jax": {"error": "TypeError: no"}})
    assert raised.all()


def test_backends_figure_draws_each_backend_over_tensorflow_and_shades_the_differences():
    from explorer.explore.backend_figure import DIFFER_LABEL, backends_figure

    x = np.linspace(-1, 1, 5)
    curves = {"tensorflow": {"forward": x, "gradient": np.ones(5)}, "jax": {"forward": x, "gradient": np.ones(5)},
              "torch": {"error": "TypeError: grad() got multiple values for argument 'upstream'"}}
    differs = np.array([False, True, True, False, True])
    figure = backends_figure(x, curves, differs, "backends fail: ...", "f")
    names = [trace.name for trace in figure.data]
    assert names.count("tensorflow") == 2 and names.count("jax") == 2  # forward and gradient panels
    assert any(name.startswith("torch: TypeError") for name in names) and DIFFER_LABEL in names
    shaded = [(shape.x0, shape.x1) for shape in figure.layout.shapes]
    assert len(shaded) == 4  # two runs (x in [-0.5, 0] and x = 1), in both panels
    assert shaded[0] == pytest.approx((-0.75, 0.25)) and shaded[2] == pytest.approx((0.75, 1.25))


def test_the_explore_panel_is_for_loaded_keras_ops_functions_only():
    from explorer import loaded
    from explorer.ui import backends_panel

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(loaded.OPS_ENV, f"{PORTABLE}, {ROOT / 'examples' / 'spike.py'}")
        loaded.reset()
        try:
            assert backends_panel.keras_function("spike") == (PORTABLE, "spike")  # keras.ops.custom_gradient
            assert backends_panel.keras_function("fast_sigmoid_spike") is None  # @tf.custom_gradient
            assert backends_panel.keras_function("atan") is None  # a built-in
        finally:
            loaded.reset()


def test_the_explore_panel_keeps_the_newest_32_comparisons_and_computes_an_evicted_one_again(monkeypatch):
    """A team server sees many ranges: the panel's results stay bounded (least recently used forgotten)."""
    from explorer.ui import backends_panel

    calls = []
    monkeypatch.setattr(backends_panel.across, "sweep_backends", lambda *args: calls.append(args) or len(calls))
    monkeypatch.setattr(backends_panel, "_RESULTS", type(backends_panel._RESULTS)("test", limit=32))
    for hi in range(1, 41):  # 40 ranges
        backends_panel._future("mod.py", "f", -1.0, float(hi)).result(timeout=10)
    assert len(backends_panel._RESULTS) == 32 and len(calls) == 40
    backends_panel._future("mod.py", "f", -1.0, 40.0).result(timeout=10)  # kept: not computed again
    assert len(calls) == 40
    assert backends_panel._future("mod.py", "f", -1.0, 1.0).result(timeout=10) == 41  # forgotten: computed again
