"""explorer.loaded: the ops of GRADIENT_EXPLORER_OPS, keys, load errors, guarded sweeps, the export round trip."""

import textwrap
from pathlib import Path

import numpy as np
import pytest

import ops
from explorer import export, loaded
from explorer.explore import sweeps
from explorer.loaded import catalogue
from explorer.loaded import sweeps as loaded_sweeps

pytestmark = pytest.mark.slow  # loaded ops run in worker processes, restarted per set of modules (~10 s each)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def examples():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(loaded.OPS_ENV, f"{EXAMPLES}, no_such_module_for_tests")
        loaded.reset()
        yield loaded.current()
    loaded.reset()



def _use(patch: pytest.MonkeyPatch, result: loaded.Loaded) -> None:
    """Make ``result`` the loaded ops of this process while ``patch`` lasts."""
    patch.setattr(catalogue, "_CURRENT", type(catalogue._CURRENT)())
    catalogue.keep(result)

def test_examples_load_by_function_name_with_their_layer_and_the_missing_module(examples):
    assert set(examples.ops) == {
        "square_with_scaled_grad", "stable_softplus", "fast_sigmoid_spike", "identity_with_float64_grad",
        "scaled_identity", "tanh_with_numpy_grad", "double_with_summed_grad", "softplus_naive_grad",
        "clipped_identity", "binarize", "sign_ste", "log_sinh",
        # several inputs, reductions, two outputs, matrix products, a variable: drawn by their views
        "grad_reverse", "bias_add", "bias_add_unreduced", "matmul", "matmul_no_transpose", "product_one_gradient",
        "safe_norm.safe_norm", "norm_naive_grad", "sin_cos", "scaled", "gained",
        # keras.ops.custom_gradient functions (examples/backends_*.py, issue 38)
        "spike", "clip_ste", "scaled_norm_grad", "tf_style_backward", "keyword_slope", "two_outputs", "forgotten_grad",
        "mean_upstream", "python_if", "float16_backward",
        # right at first order, wrong beyond it (issue 39)
        "abs_five_at_zero", "spike_detached", "sine_closure", "sine_second_order",
    }  # fmt: skip
    assert examples.ops["square_with_scaled_grad"].module == "square"
    assert examples.layers["CustomSquareLayer"].op_key == "square_with_scaled_grad"
    [error] = examples.errors
    assert (error.target, error.error) == ("no_such_module_for_tests", "ModuleNotFoundError")
    # the built-in registry is untouched; the pages' lookup knows both
    assert len(ops.names()) == 26 and "square_with_scaled_grad" not in ops.names()
    assert loaded.names()[:26] == ops.names() and loaded.get("square_with_scaled_grad").family == "yours"
    with pytest.raises(KeyError, match="square_with_scaled_grad"):
        loaded.get("not_an_op")


def test_square_sweeps_to_the_numpy_reference(examples):
    result = loaded.sweep("square_with_scaled_grad", -2.0, 2.0, 401)
    x = result["x"].to_numpy(np.float64)
    np.testing.assert_allclose(result["forward"], x * x, rtol=1e-6)
    np.testing.assert_allclose(result["custom_grad"], x, rtol=1e-6, atol=1e-7)  # half of 2x, on purpose
    np.testing.assert_allclose(result["true_grad"], 2 * x, rtol=1e-4, atol=1e-4)  # numerical
    assert result.true_gradient_label == "true gradient (numerical)"


def test_numpy_backward_is_swept_eagerly_and_the_graph_failure_is_kept(examples):
    result = loaded.sweep("tanh_with_numpy_grad", -2.0, 2.0, 201)
    x = result["x"].to_numpy(np.float64)
    np.testing.assert_allclose(result["custom_grad"], 1 - np.tanh(x) ** 2, rtol=1e-5, atol=1e-6)
    assert not sweeps.is_eager(loaded.get("tanh_with_numpy_grad"))  # swept eagerly in the worker, not here
    assert "numpy" in loaded.graph_failure("tanh_with_numpy_grad") and "Fix:" in loaded.graph_failure("tanh_with_numpy_grad")
    assert loaded.graph_failure("square_with_scaled_grad") is None
    assert "slope" in loaded.keyword_note("scaled_identity") and loaded.keyword_note("square_with_scaled_grad") is None


@pytest.mark.parametrize(
    ("key", "words"),
    [("double_with_summed_grad", "gradient has shape ()"), ("identity_with_float64_grad", "gradient has dtype float64")],
)
def test_wrong_shape_or_dtype_is_a_user_op_error_naming_it(examples, key, words):
    with pytest.raises(loaded.UserOpError, match=words.replace("(", r"\(").replace(")", r"\)")):
        loaded.sweep(key)


def _module(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


BAD_OPS = """
    import os
    import time
    import tensorflow as tf

    @tf.custom_gradient
    def raises_in_forward(x):
        raise RuntimeError("boom in forward")

    @tf.custom_gradient
    def nan_everywhere(x):
        return x * float("nan"), lambda dy: dy

    @tf.custom_gradient
    def hangs(x):
        with open(__file__ + ".calls", "a") as calls:  # counted in a file: seen from any process
            calls.write("called\\n")
        for _ in range(1200):  # hangs until the test releases it (at most 60 s)
            if os.path.exists(__file__ + ".release"):
                break
            time.sleep(0.05)
        return x, lambda dy: dy

    @tf.custom_gradient
    def atan(x):
        return x, lambda dy: dy

    @tf.custom_gradient
    def badly_declared(x, slope=2.0):
        return x * slope, lambda dy: dy * slope

    GRADIENT_EXPLORER = {"badly_declared": {"ranges": {"slope": (5.0, 1.0)}}}
"""


def test_bad_ops_fail_with_a_message_and_clashing_names_are_qualified(tmp_path):
    _module(tmp_path, "bad_ops", BAD_OPS)
    _module(tmp_path, "other", "import tensorflow as tf\n\n@tf.custom_gradient\ndef hangs(x):\n    return x, lambda dy: dy\n")
    _module(tmp_path, "broken", "import tensorflow as tf\nraise ImportError('a missing dependency')\n")
    result = loaded.load("bad_ops.py,other.py,broken.py,gone.py", cwd=tmp_path)
    assert {"raises_in_forward", "nan_everywhere", "bad_ops.hangs", "other.hangs", "bad_ops.atan"} == set(result.ops)
    assert [(e.target, e.error) for e in result.errors] == [
        ("broken.py", "ImportError"), ("gone.py", "FileNotFoundError"), ("bad_ops.badly_declared", "ValueError"),
    ]  # fmt: skip
    assert "low < high" in result.errors[-1].message
    with pytest.MonkeyPatch.context() as patch:
        _use(patch, result)
        patch.setattr(loaded_sweeps, "_FAILURES", type(loaded_sweeps._FAILURES)())
        with pytest.raises(loaded.UserOpError, match="forward raised RuntimeError: boom in forward"):
            loaded.sweep("raises_in_forward")
        with pytest.raises(loaded.UserOpError, match="output is NaN on every one"):
            loaded.sweep("nan_everywhere")
        with pytest.raises(loaded.UserOpError, match=r"bad_ops.hangs did not return within 0.5 s"):
            loaded.sweep("bad_ops.hangs", time_limit=0.5)
        calls = tmp_path / "bad_ops.py.calls"
        assert calls.read_text().count("called") == 1
        with pytest.raises(loaded.UserOpError, match="did not return"):  # remembered: not run again
            loaded.sweep("bad_ops.hangs", time_limit=0.5)
        assert calls.read_text().count("called") == 1  # the op was not called a second time
        np.testing.assert_array_equal(loaded.sweep("other.hangs", -1.0, 1.0, 11)["custom_grad"], np.ones(11))
        loaded.stop_workers()
    (tmp_path / "bad_ops.py.release").touch()  # the worker that ran it was stopped; nothing else waits on it


def test_an_exported_op_loads_back_with_the_same_curves(tmp_path):
    params = {"alpha": 3.5}
    _module(tmp_path, "atan_export", export.module_source("atan", **params))
    result = loaded.load("atan_export.py", cwd=tmp_path)
    assert not result.errors
    [key] = result.ops
    assert key == "atan_export.atan"  # "atan" is a built-in key
    spec = result.ops[key].spec
    assert spec.true_gradient == "autodiff" and spec.param_names == ("alpha", "threshold")
    with pytest.MonkeyPatch.context() as patch:  # the layer is called in a worker that loads the same module
        _use(patch, result)
        patch.setattr(catalogue, "_LAYER_OPS", type(catalogue._LAYER_OPS)())
        assert result.layers["AtanLayer"].op_key == key
        loaded.stop_workers()
    mine = sweeps.sweep(spec, -3.0, 3.0, 1001, params=params)
    builtin = sweeps.sweep("atan", -3.0, 3.0, 1001, params=params)
    for column in ("x", "forward", "true_grad", "custom_grad"):
        np.testing.assert_allclose(mine[column], builtin[column], rtol=1e-6, atol=1e-7, err_msg=column)
    assert list(mine["point"]) == list(builtin["point"])
    # a slider value other than the exported one: still the same curve
    other = {"alpha": 2.0}  # the declared points are those of the export: keep its threshold
    np.testing.assert_allclose(
        sweeps.sweep(spec, params=other)["custom_grad"], sweeps.sweep("atan", params=other)["custom_grad"], rtol=1e-6
    )


def test_a_loaded_layer_trains_like_the_function_it_calls_in_both_modes(examples):
    """Same data and initial weights for every run; the first history row against a NumPy net with
    square forward and its half-of-autodiff backward (custom) or the numerical true gradient 2h (true)."""
    from explorer.train import trainer as train
    from tests.test_train import bce_gradients, bce_with_logits, forward

    layer = examples.layers["CustomSquareLayer"]
    spec = loaded.get(layer.op_key)
    runs = [
        train.Run(spec),
        train.Run(None, layer=layer.layer_class),
        train.Run(spec, gradient="true"),
        train.Run(spec, gradient="true", layer=layer.layer_class),
    ]
    assert [run.label for run in runs][1::2] == ["CustomSquareLayer (custom)", "CustomSquareLayer (true)"]
    session = train.Session(task="xor", runs=runs, optimizer="sgd", learning_rate=0.1, width=4, seed=3)
    results = session.step(2)
    data = session.dataset
    x, y = data.x.astype(np.float64), data.y.astype(np.float64)
    weights = session.initial_weights
    _, logits = forward(weights, x, np.square)
    for result, surrogate in zip(results, (lambda h: h, lambda h: h, lambda h: 2 * h, lambda h: 2 * h), strict=True):
        row = result.history.iloc[0]
        assert row["loss"] == pytest.approx(bce_with_logits(logits[:, 0], y), rel=1e-5)
        kernel_grad, *_ = bce_gradients(weights, x, y, np.square, surrogate)
        assert row["grad_norm"] == pytest.approx(np.linalg.norm(kernel_grad), rel=1e-3), result.run.label
    with pytest.raises(ValueError, match="true mode for CustomSquareLayer needs the function it calls"):
        train.Run(None, gradient="true", layer=layer.layer_class)
    with pytest.raises(ValueError, match="no params"):
        train.Run(spec, {"x": 1.0}, layer=layer.layer_class)


def test_a_run_whose_op_raises_while_training_fails_alone_with_the_message(examples):
    from explorer.train import trainer as train

    session = train.Session(
        task="xor", runs=[train.Run(loaded.get("tanh_with_numpy_grad")), train.Run("atan")], learning_rate=0.1, seed=1
    )
    failed, fine = session.step(2)
    assert failed.status == "failed" and "numpy" in failed.error and len(failed.history) == 0
    assert fine.status == "ok" and len(fine.history) == 2 and fine.error is None
    assert session.finished is False and session.step(1)[1].history["epoch"].tolist() == [1, 2, 3]


GRAPH_ONLY_VALUE_ERROR = """
    import tensorflow as tf

    @tf.custom_gradient
    def eager_only(x):
        if not tf.executing_eagerly():
            raise ValueError("this function refuses graph mode")
        return 3.0 * x, lambda dy: 3.0 * dy
"""


def test_a_value_error_inside_tf_function_is_a_graph_failure_and_bad_inputs_stay_value_errors(tmp_path):
    _module(tmp_path, "eager_only_ops", GRAPH_ONLY_VALUE_ERROR)
    result = loaded.load("eager_only_ops.py", cwd=tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        _use(patch, result)
        patch.setattr(loaded_sweeps, "_GRAPH_FAILURES", type(loaded_sweeps._GRAPH_FAILURES)())
        swept = loaded.sweep("eager_only", -1.0, 1.0, 21)
        np.testing.assert_allclose(swept["custom_grad"], np.full(21, 3.0))
        assert "refuses graph mode" in loaded.graph_failure("eager_only")
        with pytest.raises(ValueError, match="lo .* must be below hi") as raised:
            loaded.sweep("eager_only", 1.0, -1.0)
        assert not isinstance(raised.value, loaded.UserOpError)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_a_loaded_op_sweeps_in_every_dtype(examples, dtype):
    result = loaded.sweep("fast_sigmoid_spike", -1.0, 1.0, 201, params={"slope": 10.0}, dtype=dtype)
    x = result["x"].to_numpy(np.float64)
    expected = 1 / (10 * np.abs(x) + 1) ** 2
    tolerance = 1e-12 if dtype == "float64" else 1e-2  # half precision: computed in float32, rounded back
    np.testing.assert_allclose(result["custom_grad"], expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_array_equal(result["forward"], (x > 0).astype(float))


def test_problem_says_why_an_op_cannot_be_trained(examples):
    assert "gradient has shape ()" in loaded.problem("double_with_summed_grad")
    assert "dtype float64" in loaded.problem("identity_with_float64_grad")
    assert loaded.problem("square_with_scaled_grad") is None and loaded.problem("atan") is None
    assert loaded.problem("fast_sigmoid_spike", {"slope": 50.0}) is None
