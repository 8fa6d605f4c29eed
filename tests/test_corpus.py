"""Issue 44, part 9: the checker on custom gradients copied from public repositories (tests/corpus/, each file
citing repository, path and commit).

Each function's truth is worked out here by hand (NumPy formulas of its forward and backward, written from the
source, at hand-picked points and the special points), then the checker's verdict on it is compared with what
that truth implies: no fail or warn where the function is right, every real problem found (float16 that breaks,
an overflowing forward, a gradient wider than its input, a backward written for one backend), and the advice
that fits it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.corpus import keras_docstring, pquant_pruning, quantizers_binary, quantizers_fixed_point

CORPUS = Path(__file__).resolve().parent / "corpus"
HAS_JAX = importlib.util.find_spec("jax") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None


def value_and_grads(fn, *values, upstream=None):
    xs = [tf.constant(np.asarray(v, np.float32)) for v in values]
    with tf.GradientTape() as tape:
        for x in xs:
            tape.watch(x)
        y = fn(*xs)
    grads = tape.gradient(y, xs, output_gradients=None if upstream is None else tf.constant(upstream, tf.float32))
    return y.numpy(), [None if g is None else g.numpy() for g in grads]


# -- the truth of each function, by hand ---------------------------------------------------------------------------
X = np.array([-3.0, -1.0, -0.5, -0.4, -0.2, 0.0, 0.2, 0.4, 0.5, 0.7, 1.0, 1.5, 3.0])


def test_binary_and_ternary_quantize_are_steps_with_the_tanh_surrogate():
    sech2 = 1.0 - np.tanh(X) ** 2
    y, (g,) = value_and_grads(quantizers_binary._binary_quantize, X)
    np.testing.assert_array_equal(y, np.where(X > 0, 1.0, -1.0))
    np.testing.assert_allclose(g, sech2, rtol=1e-5, atol=1e-7)
    y, (g,) = value_and_grads(quantizers_binary._ternary_quantize, X)
    np.testing.assert_array_equal(y, np.where(X > 0.5, 1.0, np.where(X < -0.5, -1.0, 0.0)))  # 0.5 itself: 0
    np.testing.assert_allclose(g, sech2, rtol=1e-5, atol=1e-7)


def test_dst_binary_step_surrogate_pieces():
    a = np.abs(X)
    hand = np.where(a <= 0.4, 2 - 4 * a, np.where(a <= 1.0, 0.4, 0.0))  # at |w| = 1 still 0.4, beyond 0
    y, (g,) = value_and_grads(pquant_pruning.binary_step, X)
    np.testing.assert_array_equal(y, (X > 0).astype(np.float32))
    np.testing.assert_allclose(g, hand, rtol=1e-6)


def test_log1pexp_is_softplus_with_the_sigmoid_gradient_and_overflows_in_float32():
    y, (g,) = value_and_grads(keras_docstring.log1pexp, X)
    np.testing.assert_allclose(y, np.log1p(np.exp(X)), rtol=1e-6)
    np.testing.assert_allclose(g, 1.0 / (1.0 + np.exp(-X)), rtol=1e-6)
    y, _ = value_and_grads(keras_docstring.log1pexp, [100.0])
    assert np.isinf(y[0])  # exp(100) overflows float32 although log(1 + e^100) = 100 fits: a real problem


def test_clip_gives_scalar_bounds_the_upstream_of_each_element_unreduced():
    """At x = [-3, 0.5, 3], min -1, max 1, upstream [1, 2, 3]: dx = [0, 2, 0]; the true dmin is 1 (the sum over
    the elements below), dmax 3; the backward returns them per element, [1, 0, 0] and [0, 0, 3]."""
    _, (dx, dmin, dmax) = value_and_grads(quantizers_fixed_point._clip, [-3.0, 0.5, 3.0], -1.0, 1.0,
                                          upstream=[1.0, 2.0, 3.0])
    np.testing.assert_array_equal(dx, [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(dmin, [1.0, 0.0, 0.0])  # shape (3,) for a scalar input: not summed back
    np.testing.assert_array_equal(dmax, [0.0, 0.0, 3.0])


def test_round_scaled_passes_x_through_and_gives_f_the_scaled_rounding_error():
    x, f = np.array([0.3, -0.7, 1.26]), np.array([1.0, 2.0, 3.0])
    xq = np.floor(x * 2**f) / 2**f
    y, (dx, df) = value_and_grads(quantizers_fixed_point._round_scaled, x, f)
    np.testing.assert_allclose(y, xq, rtol=1e-6)
    np.testing.assert_allclose(dx, np.ones(3))
    np.testing.assert_allclose(df, -np.log(2.0) * (xq - x), rtol=1e-5)


def test_autosparse_cannot_run_on_tensorflow_and_the_torch_style_backward_cannot_either():
    with pytest.raises(TypeError, match="Cannot convert 0.5"):
        value_and_grads(pquant_pruning.autosparse_prune, [-1.0, 0.5], [0.4, 0.4])  # int32 size * 0.5
    with pytest.raises(TypeError, match="keyword-only argument: 'upstream'"):
        value_and_grads(keras_docstring.log1pexp_torch, [0.5])


# -- the checker on the corpus ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus_rows():
    """verify tests/corpus/ --backends (every installed backend) --jobs 2, once for the module."""
    from explorer.checker import backends, runner

    chosen = ["tensorflow"] + (["jax"] if HAS_JAX else []) + (["torch"] if HAS_TORCH else [])
    frame, problems = runner.check_targets([str(CORPUS)], chosen, jobs=2)
    yield {(r["op"], r["check"]): r for r in frame.to_dict(orient="records")}, problems
    backends.close_workers()


# (function, its TensorFlow checks that must fail: the real problems found by hand above)
FAILS = {
    "_binary_quantize": {"finite", "shape_dtype"},  # float16: a float32 constant meets a half tensor
    "_ternary_quantize": {"finite", "shape_dtype"},
    "binary_step": {"finite", "shape_dtype"},
    "log1pexp": {"finite"},  # the float32 and float16 forward overflows where its value fits
    "log1pexp_tensorflow": {"finite"},
    "_clip": {"shape_dtype", "keras_fit", "saved_model"},  # scalar bounds get (4, 3) gradients
    "_round_scaled": {"shape_dtype"},  # float64: -log(2.0) is a float32 constant
}


@pytest.mark.slow
def test_every_row_of_a_right_function_passes_and_every_real_problem_fails(corpus_rows):
    rows, problems = corpus_rows
    assert problems == []
    for name, failing in FAILS.items():
        for check in ("finite", "shape_dtype", "graph", "keras_fit", "vs_autodiff", "saved_model", "second_order"):
            row = rows[(name, check)]
            if check in failing:
                assert row["level"] == "fail", (name, check, row["message"])
            elif check in ("vs_autodiff", "second_order") and name == "_clip":
                assert "not meaningful: the gradient has the wrong shape" in row["message"]
            else:
                assert row["level"] == "pass", (name, check, row["message"])
    for name in ("log1pexp_torch", "autosparse_prune"):  # TensorFlow cannot run them: nothing passes there
        assert all(rows[(name, check)]["level"] == "fail" for check in ("finite", "graph", "keras_fit"))


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_JAX and HAS_TORCH), reason="needs JAX and torch: pip install -e '.[backends]' torch")
def test_the_backends_rows_blame_the_backend_that_goes_wrong_with_the_fix_for_the_case(corpus_rows):
    rows, _ = corpus_rows
    for name in ("_binary_quantize", "_ternary_quantize", "binary_step", "log1pexp", "fake_quant", "_round_scaled"):
        assert rows[(name, "backends")]["level"] == "pass", rows[(name, "backends")]["message"]
    expected = {  # name: (who goes wrong, a phrase of its fix)
        "_clip": ("tensorflow and jax", "dmin = ops.sum(dmin)"),
        "autosparse_prune": ("tensorflow", "math.prod(x.shape)"),
        "log1pexp_torch": ("tensorflow and jax", "def grad(*args, upstream=None)"),
        "log1pexp_tensorflow": ("torch", "def grad(*args, upstream=None)"),
    }
    for name, (wrong, fix) in expected.items():
        message = rows[(name, "backends")]["message"]
        assert message.startswith(f"goes wrong on {wrong} ("), message
        assert fix in message.split("Fix: ")[1] and "make it agree" not in message
    assert "torch: torch eager runs, each gradient of its input's shape and dtype" in rows[("_clip", "backends")][
        "message"]  # torch sums the wider gradient back itself
