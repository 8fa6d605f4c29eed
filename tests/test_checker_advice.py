"""Issue 44: nothing skipped in silence, advice that blames the right backend and fits the case, inputs in the
function's domain, conventions said as such, hints that work, kinks counted right, progress on a terminal.

The expected values are worked out here, independently of the checker: hand formulas evaluated with NumPy
(1 - tanh(x)^2 and its derivative, the DST surrogate's pieces and where they break), hand-built backend
results, hand-listed names, and a fake clock and terminal for the progress lines.
"""

from __future__ import annotations

import importlib.util
import io
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import ops
from explorer.checker import backend_run, backends, discover, higher_order, plan
from explorer.checker.backends import verdict
from explorer.checker.common import Subject
from explorer.checker.progress import SILENT, Progress, for_terminal
from ops.inputs import LOWER_BOUND, UPPER_BOUND, Assignment, bound_pairs, domains_for
from tests.corpus import pquant_pruning, quantizers_binary

HAS_JAX = importlib.util.find_spec("jax") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _module(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return discover.discover(str(path)), path


# -- 1. private names get rows ------------------------------------------------------------------------------------
def test_private_keras_functions_are_compared_and_a_tf_only_function_gets_a_skip_row_saying_why(tmp_path):
    found, path = _module(tmp_path, "private_helpers", """
        import tensorflow as tf
        from keras import ops

        @ops.custom_gradient
        def _helper(x):
            def grad(*args, upstream=None):
                return (args[-1] if upstream is None else upstream) * 2.0
            return 2.0 * x, grad

        def public(x):
            return _helper(x)

        @tf.custom_gradient
        def tf_only(x):
            return tf.identity(x), lambda dy: dy
        """)
    import sys

    module = sys.modules[found.functions[0].module]
    assert backend_run.keras_names_in(module) == ["_helper"]  # by hand: the one keras.ops function, private
    assert [f.name for f in found.functions] == ["_helper", "tf_only"]
    without = backends.backend_rows([str(path)], found.functions, None)
    assert [(r["op"], r["level"]) for r in without] == [("_helper", "skip")]
    skipped = [r for r in backends.backend_rows([], found.functions, ["tensorflow", "jax"]) if r["op"] == "tf_only"]
    assert skipped and skipped[0]["level"] == "skip" and "tf.custom_gradient" in skipped[0]["message"]


def test_a_private_module_of_a_folder_is_checked_too(tmp_path):
    (tmp_path / "_fixed_point_ops.py").write_text(textwrap.dedent("""
        import tensorflow as tf

        @tf.custom_gradient
        def _round_ste(x):
            return tf.round(x), lambda dy: dy
        """), encoding="utf-8")
    (tmp_path / "__init__.py").write_text("raise RuntimeError('a package file is not a target')\n", encoding="utf-8")
    found = discover.discover(str(tmp_path))
    assert [f.name for f in found.functions] == ["_round_ste"] and not found.errors
    assert backends._files(str(tmp_path)) == [str(tmp_path / "_fixed_point_ops.py")]


# -- 5. hints name what works --------------------------------------------------------------------------------------
FACTORY = """
    import tensorflow as tf

    def make(scale):
        @tf.custom_gradient
        def inner_scaled(x):
            return tf.identity(x), lambda dy: scale * dy
        return inner_scaled

    doubled = make(2.0)
    GRADIENT_EXPLORER = DECLARED
    """


@pytest.mark.parametrize("key", ["doubled", "inner_scaled"])
def test_a_justification_is_read_under_the_module_level_name_and_the_functions_own(tmp_path, key):
    source = FACTORY.replace("DECLARED", f'{{"{key}": {{"justification": "twice the gradient, on purpose"}}}}')
    found, _ = _module(tmp_path, f"factory_{key}", source)
    (item,) = found.functions
    assert item.name == "doubled"
    assert discover.declarations(item) == {"justification": "twice the gradient, on purpose"}
    assert discover.declared_for(item.obj) == {"justification": "twice the gradient, on purpose"}


def test_the_hint_names_the_module_level_name(tmp_path):
    found, _ = _module(tmp_path, "factory_hint", FACTORY.replace("DECLARED", "{}"))
    (item,) = found.functions
    from explorer.checker.guardrail import custom_gradient_checks

    rows = {c.name: c for c in custom_gradient_checks(item.obj)}
    message = rows["vs_autodiff"].message
    assert rows["vs_autodiff"].level == "warn" and "twice autodiff" in message  # 2 dy against dy, by hand
    assert 'GRADIENT_EXPLORER = {"doubled": {"justification"' in message and "inner_scaled" not in message


# -- 7. kinks and jumps counted right ------------------------------------------------------------------------------
def test_a_smooth_float32_surrogate_has_no_kink_and_its_second_derivative_is_the_hand_one():
    """1 - tanh(x)^2 is smooth: every point of the sweep is compared; its derivative -2 tanh(x) (1 - tanh(x)^2)."""
    subject = Subject.of(quantizers_binary._binary_quantize)
    x = higher_order.sweep_grid(subject.spec, subject.params, n=higher_order.POINTS).astype(np.float64)
    central, smooth = higher_order.central_second(subject.call(None), x, "float32")
    assert smooth.all()
    hand = -2.0 * np.tanh(x) * (1.0 - np.tanh(x) ** 2)
    np.testing.assert_allclose(central, hand, atol=2e-3)
    row = higher_order.second_order_on_sweep(subject)
    assert row.level == "pass" and "at a kink or jump" not in row.message


def test_the_dst_surrogate_is_not_smooth_exactly_at_its_five_hand_points():
    """2 - 4|w| for |w| <= 0.4, 0.4 up to 1, then 0: a cusp at 0, kinks at +-0.4, jumps at +-1."""
    subject = Subject.of(pquant_pruning.binary_step)
    x = np.linspace(-3.0, 3.0, 61)
    _, smooth = higher_order.central_second(subject.call(None), x, "float32")
    np.testing.assert_allclose(np.sort(x[~smooth]), [-1.0, -0.4, 0.0, 0.4, 1.0], atol=1e-9)


def test_special_points_list_both_jumps_of_the_surrogate_and_the_kink_check_counts_two_forward_jumps():
    rows = {c.name: c for c in plan.check_function(pquant_pruning.binary_step)}
    listed = rows["special_points"].message
    assert "x = -1 (boundary)" in listed and "x = 1 (boundary)" in listed  # the custom gradient's two jumps
    ternary = {c.name: c for c in plan.check_function(quantizers_binary._ternary_quantize)}
    assert "2 jump(s) of the forward not judged" in ternary["kink"].message  # steps at x = -0.5 and 0.5


@tf.custom_gradient
def tanh_times(x, y):
    """tanh(x) * y, smooth, float32 only (a float32 constant in the backward)."""
    def grad(dy):
        one = tf.constant(1.0, tf.float32)
        return dy * y * (one - tf.tanh(x) ** 2), dy * tf.tanh(x)

    return tf.tanh(x) * y, grad


def test_a_smooth_function_of_two_inputs_has_every_direction_compared():
    """2 assignments x 2 inputs x 2 random directions = 8, none on a kink: the rounding noise of float32 sums
    read as kinks before."""
    rows = {c.name: c for c in plan.check_function(ops.from_function(tanh_times))}
    assert rows["second_order"].level == "pass"
    assert "in 8 random directions" in rows["second_order"].message and "not compared" not in rows["second_order"].message


# -- 2. blame and fixes, on hand-made results ---------------------------------------------------------------------
def _ran(outputs, gradients):
    return {"outputs": [np.asarray(o, np.float32) for o in outputs],
            "gradients": [None if g is None else np.asarray(g, np.float32) for g in gradients]}


CLIP_PLAN = {"inputs": ["x", "min_value", "max_value"], "keywords": {}, "positional": {}, "order": [],
             "assignments": [{"values": [np.array([[-3.0, 0.5, 3.0]], np.float32), np.float32(-1.0),
                                         np.float32(1.0)], "dtype": "float32"}]}


def test_a_gradient_wider_than_its_input_blames_who_returns_or_refuses_it_and_says_sum_it_back():
    """clip(x, -1, 1) at x = [-3, 0.5, 3], upstream 1: dx = [0, 1, 0]; dmin = 1 and dmax = 1 summed (torch sums
    the wider gradient back itself); TensorFlow returns [1, 0, 0] and [0, 0, 1] unreduced; JAX raises."""
    y = [[-1.0, 0.5, 1.0]]
    wide = _ran([y], [[[0, 1, 0]], [[1, 0, 0]], [[0, 0, 1]]])
    right = _ran([y], [[[0, 1, 0]], 1.0, 1.0])
    jax_error = {"error": "ValueError: Custom VJP bwd rule must produce an output with the same type as the args"}
    results = {"tensorflow": {"eager": [wide], "compiled": [wide]}, "jax": {"eager": [jax_error], "compiled": [jax_error]},
               "torch": {"eager": [right], "compiled": [right]}}
    row = verdict("_clip", CLIP_PLAN, results)
    blamed, fix = row.message.split(" (compared with")[0], row.message.split("Fix: ")[1]
    assert row.level == "fail" and blamed == "goes wrong on tensorflow and jax"
    assert "ops.sum" in fix and "broadcast_to" not in fix.split("Compared:")[0]
    each = row.message.split("what each does: ")[1]
    assert "torch: torch eager runs, each gradient of its input's shape and dtype" in each
    assert "tensorflow: tensorflow eager returns gradient of min_value has shape (1, 3), its input scalar" in each
    assert "jax: jax eager raises ValueError" in each
    assert "agree with TensorFlow" not in row.message


def test_where_tensorflow_raises_and_the_others_run_tensorflow_is_blamed_never_matched():
    error = {"error": "TypeError: Cannot convert 0.5 to EagerTensor of dtype int32"}
    runs = _ran([[0.0, 0.5]], [[0.4, 1.0]])
    plan_ = {"inputs": ["x"], "keywords": {}, "positional": {}, "order": ["x"],
             "assignments": [{"values": [np.array([-1.0, 0.5], np.float32)], "dtype": "float32"}]}
    results = {"tensorflow": {"eager": [error], "compiled": [error]}, "jax": {"eager": [runs], "compiled": [runs]},
               "torch": {"eager": [runs], "compiled": [runs]}}
    row = verdict("autosparse_prune", plan_, results)
    assert row.message.startswith("goes wrong on tensorflow (")
    assert "math.prod(x.shape)" in row.message.split("Fix: ")[1]
    assert "make it agree" not in row.message and "agree with TensorFlow" not in row.message


def test_a_narrower_gradient_gets_broadcast_to_and_a_keyword_only_upstream_its_own_fix():
    narrow = _ran([[2.0, 4.0]], [3.0])
    good = _ran([[2.0, 4.0]], [[2.0, 2.0]])
    plan_ = {"inputs": ["x"], "keywords": {}, "positional": {}, "order": ["x"],
             "assignments": [{"values": [np.array([1.0, 2.0], np.float32)], "dtype": "float32"}]}
    row = verdict("mean_upstream", plan_, {"tensorflow": {"eager": [narrow], "compiled": [narrow]},
                                          "torch": {"eager": [good], "compiled": [good]}})
    assert "ops.broadcast_to(g, ops.shape(x))" in row.message.split("Fix: ")[1]
    assert row.message.startswith("goes wrong on tensorflow (")
    missing = {"error": "TypeError: grad() missing 1 required keyword-only argument: 'upstream'"}
    row = verdict("log1pexp_torch", plan_, {"tensorflow": {"eager": [missing], "compiled": [missing]},
                                           "jax": {"eager": [missing], "compiled": [missing]},
                                           "torch": {"eager": [good], "compiled": [good]}})
    assert row.message.startswith("goes wrong on tensorflow and jax (")
    assert "def grad(*args, upstream=None)" in row.message.split("Fix: ")[1]


# -- 3. inputs in the domain ----------------------------------------------------------------------------------------
def test_bound_pairs_are_read_from_the_names():
    assert bound_pairs(["x", "min_value", "max_value"]) == [(1, 2)]
    assert bound_pairs(["inputs", "min_vals", "max_vals"]) == [(1, 2)]
    assert bound_pairs(["x", "vmin", "vmax"]) == [(1, 2)]
    assert bound_pairs(["x", "lo", "hi"]) == [(1, 2)]
    assert bound_pairs(["x", "alpha"]) == [] and bound_pairs(["x", "minimum", "y"]) == []


def test_bounds_are_drawn_ordered_and_a_declared_domain_is_drawn_from_and_said():
    domains = domains_for(["x", "min_value", "max_value", "scale"], {"scale": (0.5, 1.5)})
    assignment = Assignment(((50,), (50,), (50,), (50,)), "declared", domains=domains)
    x, low, high, scale = assignment.values(3)
    assert (low <= LOWER_BOUND[1]).all() and (high >= UPPER_BOUND[0]).all() and (low < high).all()
    assert ((scale >= 0.5) & (scale <= 1.5)).all() and ((x >= -2) & (x <= 2)).all()
    said = assignment.describe(["x", "min_value", "max_value", "scale"])
    assert "scale (50,) in [0.5, 1.5] (its declared domain)" in said and "(below max_value)" in said
    with pytest.raises(ValueError, match="low < high"):
        ops.from_function(quantizers_binary._binary_quantize, domain={"x": (1.0, 0.0)})
    with pytest.raises(ValueError, match="not a tensor input"):
        ops.from_function(quantizers_binary._binary_quantize, domain={"y": (0.0, 1.0)})


@tf.custom_gradient
def clip_with_bounds(x, min_value, max_value):
    """clip(x, min, max), its true gradient written by hand: 1 inside, the bounds get the elements outside."""
    y = tf.clip_by_value(x, min_value, max_value)

    def grad(dy):
        below, above, zero = x < min_value, x > max_value, tf.zeros_like(dy)
        return (tf.where(below | above, zero, dy), tf.reduce_sum(tf.where(below, dy, zero)),
                tf.reduce_sum(tf.where(above, dy, zero)))

    return y, grad


def test_forward_mode_and_vs_autodiff_agree_for_ordered_bounds():
    """With min <= max the forward-mode JVP of clip (1 inside, the bound's tangent outside) equals the custom VJP;
    with random bounds min > max happened and forward mode warned (issue 44)."""
    spec = ops.from_function(clip_with_bounds, input_shapes=[((4, 3), (), ())])
    rows = {c.name: c for c in plan.check_function(spec, forward_mode=True)}
    assert rows["forward_mode"].level == "pass", rows["forward_mode"].message
    assert rows["vs_autodiff"].level == "pass", rows["vs_autodiff"].message
    assert "(below max_value)" in rows["shape_dtype"].message


# -- 4. conventions are not warnings --------------------------------------------------------------------------------
@tf.custom_gradient
def learns_beyond(x, threshold):
    """Identity in x; the threshold's gradient is the upstream of the elements above 3.5 (none in [-2, 2])."""
    def grad(dy):
        return dy, tf.reduce_sum(tf.where(x > 3.5, dy, tf.zeros_like(dy)))

    return tf.identity(x) + 0.0 * threshold, grad


def test_keras_fit_spreads_x_across_a_ranges_bounds_and_both_bounds_learn():
    spec = ops.from_function(clip_with_bounds, input_shapes=[((4, 3), (), ())])
    row = {c.name: c for c in plan.check_function(spec)}["keras_fit"]
    assert row.level == "pass" and "x spread over [-3, 3] across the bounds" in row.message


def test_a_parameter_that_learns_only_from_values_outside_the_batch_is_a_convention_not_a_warning():
    spec = ops.from_function(learns_beyond, input_shapes=[((4, 3), ())])
    row = {c.name: c for c in plan.check_function(spec)}["keras_fit"]
    assert row.level == "pass" and "threshold learns only from some values of x" in row.message


# -- 8. progress ------------------------------------------------------------------------------------------------------
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_say_done_of_total_the_current_one_elapsed_and_each_verdict():
    clock = iter([0.0, 1.0, 4.0, 5.0, 9.0]).__next__
    stream = io.StringIO()
    progress = Progress(0, stream, clock)
    progress.add(2)
    progress.start("spike")
    progress.done("spike", ["pass", "pass", "warn"])
    progress.start("_clip on tensorflow,jax")
    progress.done("_clip on tensorflow,jax", ["fail"])
    assert stream.getvalue() == (
        "\r\x1b[K[0/2] checking spike ... 1 s"
        "\r\x1b[K[1/2] spike: 1 warn, 2 pass (4 s)\n"
        "\r\x1b[K[1/2] checking _clip on tensorflow,jax ... 5 s"
        "\r\x1b[K[2/2] _clip on tensorflow,jax: 1 fail (9 s)\n"
    )


def test_no_progress_with_json_or_off_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stdout", Terminal())
    assert isinstance(for_terminal(0, False, Terminal()), Progress)
    assert for_terminal(0, True, Terminal()) is SILENT
    assert for_terminal(0, False, io.StringIO()) is SILENT
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert for_terminal(0, False, Terminal()) is SILENT


# -- 6. second order and forward mode across backends ---------------------------------------------------------------
CORPUS_DOCS = str(Path(__file__).resolve().parent / "corpus" / "keras_docstring.py")
CORPUS_BINARY = str(Path(__file__).resolve().parent / "corpus" / "quantizers_binary.py")


@pytest.fixture(scope="module")
def backend_workers():
    yield
    backends.close_workers()


def _higher(target: str, name: str, backend: str, which=("second", "forward")):
    plan_ = backends._call("tensorflow", "plan_for", target, name, time_limit=300)
    return plan_, backends._call(backend, "higher_once", target, name, plan_, list(which), time_limit=300)


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_JAX and HAS_TORCH), reason="needs JAX and torch: pip install -e '.[backends]' torch")
def test_torch_loses_log1pexps_second_derivative_and_jax_and_torch_refuse_forward_mode(backend_workers):
    """d/dx of w·sigmoid(x)·u is w·u·s(1 - s) (w, u the fixed upstream and tangent); torch's backward reads e,
    saved by its forward without a graph, so torch finds no path: None."""
    plan_, on_tf = _higher(CORPUS_DOCS, "log1pexp", "tensorflow")
    x = plan_["assignments"][0]["values"][0].astype(np.float64)
    w = backend_run.upstream_for(x.shape, "float64")
    sigmoid = 1.0 / (1.0 + np.exp(-x))
    hand = w * w * sigmoid * (1.0 - sigmoid)
    np.testing.assert_allclose(on_tf["second"], hand, rtol=1e-4)
    np.testing.assert_allclose(on_tf["forward"], sigmoid * w, rtol=1e-4)  # TensorFlow's JVP of log(1 + e^x)
    _, on_jax = _higher(CORPUS_DOCS, "log1pexp", "jax")
    np.testing.assert_allclose(on_jax["second"], hand, rtol=1e-4)
    assert "forward-mode" in on_jax["forward"]["error"]
    _, on_torch = _higher(CORPUS_DOCS, "log1pexp", "torch")
    assert on_torch["second"] is None and "jvp" in on_torch["forward"]["error"]
    second, forward = backends.check_higher(CORPUS_DOCS, "log1pexp", ["tensorflow", "jax", "torch"],
                                            ["second", "forward"])
    assert second.name == "backends_second_order" and second.message.startswith("goes wrong on torch: torch gives None")
    assert forward.name == "backends_forward_mode" and forward.message.startswith("goes wrong on jax and torch:")


@pytest.mark.slow
@pytest.mark.skipif(not (HAS_JAX and HAS_TORCH), reason="needs JAX and torch: pip install -e '.[backends]' torch")
def test_a_backward_that_reads_only_its_input_keeps_the_second_derivative_everywhere(backend_workers):
    """_binary_quantize's backward reads x itself: d/dx of w (1 - tanh(x)^2) u is -2 w u tanh(x) (1 - tanh(x)^2)."""
    plan_, on_torch = _higher(CORPUS_BINARY, "_binary_quantize", "torch", ("second",))
    x = plan_["assignments"][0]["values"][0].astype(np.float64)
    w = backend_run.upstream_for(x.shape, "float64")
    np.testing.assert_allclose(on_torch["second"], -2.0 * w * w * np.tanh(x) * (1.0 - np.tanh(x) ** 2), rtol=1e-4,
                               atol=1e-6)
    (second,) = backends.check_higher(CORPUS_BINARY, "_binary_quantize", ["tensorflow", "jax", "torch"], ["second"])
    assert second.level == "pass"


def test_verify_on_a_terminal_shows_each_function_and_its_verdict_and_with_json_nothing(monkeypatch, capsys):
    from explorer.checker import runner
    from explorer.checker.common import Check

    square = str(Path(__file__).resolve().parent.parent / "examples" / "square.py")
    monkeypatch.setattr(plan, "check_function", lambda spec, /, **params: [Check("finite", True, "ok")])
    monkeypatch.setattr(plan, "check_layer", lambda *args, **kwargs: [Check("keras_save", True, "no", "warn")])
    monkeypatch.setattr(runner, "ISOLATE", False)  # the replaced checks exist in this process only
    monkeypatch.setattr("sys.stdout", Terminal())
    monkeypatch.setattr("sys.stderr", Terminal())
    import sys

    assert runner.main([square]) == 0
    shown = sys.stderr.getvalue()
    assert "[0/2] checking square_with_scaled_grad" in shown and "[1/2] square_with_scaled_grad: 1 pass" in shown
    assert "[2/2] CustomSquareLayer: 1 warn" in shown
    monkeypatch.setattr("sys.stderr", Terminal())
    assert runner.main([square, "--json"]) == 0
    assert "[" not in sys.stderr.getvalue()
