"""Checking code this project did not write: examples/, discovery, the CLI and the pytest guardrail.

The whole of ``examples/`` is checked once per session through the command line
(``python -m explorer verify examples/ --json``); each test reads its rows. The rest call single
checks on small hand-written functions, so that the file stays fast.
"""

import contextlib
import io
import json
import textwrap
import threading
from pathlib import Path

import keras
import pytest
import tensorflow as tf

import ops
from explorer import testing
from explorer.checker import checks, discover, guardrail, layer, plan, runner
from explorer.checker.common import LEVELS, Check, Subject

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GOOD = ("square_with_scaled_grad", "stable_softplus", "fast_sigmoid_spike", "sine_second_order", "CustomSquareLayer")
# the correct functions of every other signature (tests/test_signatures.py checks their verdicts in detail)
GOOD_SHAPES = ("grad_reverse", "safe_norm", "bias_add", "matmul", "sin_cos", "scaled", "binarize", "log_sinh")
# each broken example and the check that must fail for it, with what its message must name
BROKEN = {
    "double_with_summed_grad": ("shape_dtype", ["gradient has shape ()", "no reductions"]),
    "identity_with_float64_grad": ("shape_dtype", ["gradient dtype is float64", "no casts to another dtype"]),
    "tanh_with_numpy_grad": ("graph", ["tf.function", "AttributeError", "numpy", "Fix:"]),
    "scaled_identity": ("graph", ["slope=", "by keyword", "ValueError", "keywords arguments only when eager", "/)"]),
    "softplus_naive_grad": ("finite", ["float32: the gradient is NaN at x = 100,", "stable formula"]),
    "bias_add_unreduced": ("shape_dtype", ["input bias: gradient has shape (4, 3), expected ()", "sum a broadcast"]),
    "product_one_gradient": ("shape_dtype", ["x (4, 3), y (4, 3)", "expected to return 2 gradients", "Fix:"]),
    "matmul_no_transpose": ("shape_dtype", ["a (2, 3), b (3, 4)", "Matrix size-incompatible", "db = a^T @ dy"]),
    "gained": ("shape_dtype", ["grad_fn must accept keyword argument 'variables'", "variables=None"]),
    "sign_ste": ("graph", ["at clip=True", "clip=True by keyword", "keywords arguments only when eager"]),
    "norm_naive_grad": ("finite", ["x = the zero vector: the gradient of x is NaN", "float32"]),
    "abs_five_at_zero": ("kink", ["x = 0: slopes -1 (left) and 1 (right), custom value 5, outside [-1, 1]", "subgradient"]),
}
# each example that only warns (right at first order, wrong beyond it), the check and what its message names
WARNED = {
    "clipped_identity": ("vs_autodiff", ["No justification declared:"]),
    "spike_detached": ("second_order", ["None through the custom gradient (eager and tf.function)", "tf.stop_gradient"]),
    "sine_closure": ("second_order", ["but tf.function gives None", "closes over an input", "as an argument"]),
}
# examples/backends_*.py (issue 38): keras.ops.custom_gradient functions, compared across backends with --backends
# (tests/test_backends.py); here, on TensorFlow alone, each also gets a `backends` skip row
BACKEND_EXAMPLES = ("spike", "clip_ste", "scaled_norm_grad", "tf_style_backward", "keyword_slope", "two_outputs",
                    "forgotten_grad", "mean_upstream", "python_if", "float16_backward")
BACKEND_LAYERS = ("SpikeLayer", "TFStyleLayer")


@pytest.fixture(scope="session")
def examples_run():
    """(exit code, {(op, check): row}) of ``python -m explorer verify examples/ --json --jobs 2`` (two functions
    at once: ``test_jobs_2_gives_the_rows_of_one_at_a_time`` compares it with one at a time)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = runner.main([str(EXAMPLES), "--json", "--jobs", "2"])
    rows = json.loads(out.getvalue())
    return code, {(row["op"], row["check"]): row for row in rows}


def rows_of(run, op):
    return {check: row for (name, check), row in run[1].items() if name == op}


# -- examples/ ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_verify_examples_exits_1_and_checks_every_function_and_layer(examples_run):
    code, rows = examples_run
    assert code == 1  # the pitfalls fail
    assert {op for op, _ in rows} == {*GOOD, *GOOD_SHAPES, *BROKEN, *BACKEND_EXAMPLES, *BACKEND_LAYERS, *WARNED}
    assert all(rows[(op, "backends")]["level"] == "skip" for op in BACKEND_EXAMPLES)
    assert list(rows_of(examples_run, "stable_softplus")) == list(plan.FUNCTION_CHECKS)
    assert list(rows_of(examples_run, "CustomSquareLayer")) == list(plan.LAYER_CHECKS)


@pytest.mark.slow
@pytest.mark.parametrize("op", GOOD + GOOD_SHAPES)
def test_good_example_passes(examples_run, op):
    failed = {check: row["message"] for check, row in rows_of(examples_run, op).items() if not row["passed"]}
    assert not failed


@pytest.mark.slow
def test_checks_broken_by_a_wrong_gradient_shape_point_at_shape_dtype(examples_run):
    rows = rows_of(examples_run, "double_with_summed_grad")
    consequences = [row for check, row in rows.items() if check != "shape_dtype" and not row["passed"]]
    assert consequences  # keras_fit, special_points, saved_model trip over the scalar gradient
    assert all("shape_dtype" in row["message"][:100] for row in consequences)  # visible in the cut table too
    assert "fix shape_dtype first" not in rows["shape_dtype"]["message"]
    dtype_only = rows_of(examples_run, "identity_with_float64_grad")["vs_autodiff"]
    assert dtype_only["level"] == "pass"  # a wrong dtype alone leaves the values comparable
    assert rows["vs_autodiff"]["level"] == "warn" and "wrong shape" in rows["vs_autodiff"]["message"]
    unreduced = rows_of(examples_run, "bias_add_unreduced")["second_order"]  # its own numbers agree, on wrong shapes
    assert unreduced["level"] == "warn" and unreduced["message"].startswith("not meaningful: the gradient has the wrong shape")


@pytest.mark.slow
def test_textbook_example_is_half_of_autodiff_and_declares_why(examples_run):
    row = rows_of(examples_run, "square_with_scaled_grad")["vs_autodiff"]
    assert row["level"] == "pass" and row["message"].startswith("intentional: ")  # its GRADIENT_EXPLORER dict
    assert "half of autodiff" in row["message"] and "0.5 x the true gradient (numerical)" in row["message"]
    assert row["message"].endswith("Why: a textbook example: the gradient is deliberately half of autodiff")
    saved = rows_of(examples_run, "square_with_scaled_grad")["saved_model"]
    assert saved["level"] == "pass" and "equal the custom ones" in saved["message"]


@pytest.mark.slow
def test_textbook_layer_calls_the_custom_gradient_and_is_not_registered(examples_run):
    rows = rows_of(examples_run, "CustomSquareLayer")
    assert "square_with_scaled_grad" in rows["input_gradient"]["message"]
    assert rows["keras_save"]["level"] == "warn"
    assert "@keras.saving.register_keras_serializable" in rows["keras_save"]["message"]
    assert rows["saved_model"]["level"] == "pass"


@pytest.mark.slow
@pytest.mark.parametrize("op", list(BROKEN))
def test_broken_example_fails_the_named_check(examples_run, op):
    check, names = BROKEN[op]
    row = rows_of(examples_run, op)[check]
    assert row["level"] == "fail"
    for name in names:
        assert name in row["message"], (name, row["message"])


@pytest.mark.slow
@pytest.mark.parametrize("op", list(WARNED))
def test_warned_example_warns_at_the_named_check_and_fails_nothing(examples_run, op):
    check, names = WARNED[op]
    rows = rows_of(examples_run, op)
    assert rows[check]["level"] == "warn"
    for name in names:
        assert name in rows[check]["message"], (name, rows[check]["message"])
    assert all(row["passed"] for row in rows.values())


@pytest.mark.slow
def test_positional_parameter_passes_graph_with_a_new_value_and_the_jump_is_listed(examples_run):
    rows = rows_of(examples_run, "fast_sigmoid_spike")
    assert "slope=137.5 positionally" in rows["graph"]["message"]  # halfway from 25 to the range's top, 250
    assert "x = 0 (jump)" in rows["special_points"]["message"]
    # undeclared, and still a pass: its true gradient is 0 off the step, and at the step not defined
    vs = rows["vs_autodiff"]
    assert vs["level"] == "pass" and vs["message"].startswith("a surrogate: ")
    assert "is 0 at x in [-3, -0.003] (1000 points), x in [0.003, 3] (1000 points)" in vs["message"]
    assert "at x = 0, a jump or kink of the forward" in vs["message"]


@pytest.mark.slow
def test_softplus_pitfall_is_fine_on_the_sweep_range(examples_run):
    rows = rows_of(examples_run, "softplus_naive_grad")
    assert rows["vs_autodiff"]["passed"] and rows["graph"]["passed"]
    assert "x in [-3, 3]" not in rows["finite"]["message"]


@pytest.mark.slow
def test_undocumented_override_warns(examples_run):
    row = rows_of(examples_run, "clipped_identity")["vs_autodiff"]
    assert row["level"] == "warn" and "No justification declared:" in row["message"]
    assert 'GRADIENT_EXPLORER = {"clipped_identity": {"justification": "<why>"}}' in row["message"]
    assert "its docstring" not in row["message"]  # it has none
    assert all(r["passed"] for r in rows_of(examples_run, "clipped_identity").values())


@pytest.mark.slow
def test_a_documented_straight_through_sign_stays_clean(examples_run):
    rows = rows_of(examples_run, "binarize")
    assert {row["level"] for row in rows.values()} == {"pass"}
    assert rows["vs_autodiff"]["message"].startswith("a surrogate: ")


@pytest.mark.slow
def test_only_functions_of_one_input_elementwise_have_special_points_the_others_skip(examples_run):
    for op in GOOD_SHAPES:
        row = rows_of(examples_run, op)["special_points"]
        elementwise = op in ("binarize", "log_sinh")
        assert row["level"] == ("pass" if elementwise else "skip"), (op, row)
        assert row["passed"] and ("does not apply" in row["message"]) != elementwise


# -- single checks on hand-written functions -----------------------------------------------------------
@tf.custom_gradient
def raising_backward(x):
    def grad(dy):
        raise RuntimeError("backward exploded")

    return x, grad


@tf.custom_gradient
def none_backward(x):
    return x * 2.0, lambda dy: None


@tf.custom_gradient
def two_gradients(x):
    return x, lambda dy: (dy, dy)


@tf.custom_gradient
def naive_log1pexp(x):
    """log(1 + exp(x)) written naively: the forward itself overflows at x = 100 in float32."""
    e = tf.exp(x)
    return tf.math.log(1.0 + e), lambda dy: dy * tf.math.sigmoid(x)


@tf.custom_gradient
def exp_op(x):
    """exp: its true value at 100 does not fit float16 or float32."""
    y = tf.exp(x)
    return y, lambda dy: dy * y


@pytest.mark.parametrize(
    "fn,names",
    [
        (raising_backward, ["RuntimeError", "backward exploded"]),
        (none_backward, ["None"]),
        (two_gradients, ["expected to return 1 gradients", "returned 2"]),
    ],
)
def test_a_broken_backward_fails_finite_and_names_why(fn, names):
    result = plan.run_limited("finite", lambda: checks.check_finite(Subject.of(fn)))
    assert result.level == "fail"
    for name in names:
        assert name in result.message


def test_a_forward_overflow_with_a_representable_true_value_fails():
    result = checks.check_finite(Subject.of(naive_log1pexp))
    assert result.level == "fail"
    assert "float32: the forward overflows to inf at x = 100" in result.message
    assert "100" in result.message.split("true value")[1]  # log(1 + e^100) = 100 fits float32


def test_a_forward_overflow_of_an_unrepresentable_value_is_only_noted():
    result = checks.check_finite(Subject.of(exp_op))
    assert result.level == "pass"
    assert "noted" in result.message and "float32 forward overflows" in result.message


def test_a_hung_check_fails_within_the_time_limit():
    release = threading.Event()

    @tf.custom_gradient
    def hung_backward(x):
        def grad(dy):
            release.wait(60)  # hangs until the test has its result
            return dy

        return x, grad

    # No stopwatch: the backward hangs until released after the result, so a check that waited for it
    # would only come back after 60 s, and with a pass, not a TimeoutError.
    try:
        result = plan.run_limited("finite", lambda: checks.check_finite(Subject.of(hung_backward)), 0.3)
    finally:
        release.set()
    assert result.level == "fail" and "TimeoutError" in result.message and "0.3 s" in result.message


def test_after_a_timeout_the_remaining_checks_are_not_run():
    ran = []
    release = threading.Event()

    def slow() -> Check:
        release.wait(60)  # hangs until the plan has come back, however slow the machine
        return Check("finite", True, "ok")

    def later() -> Check:
        ran.append("later")
        return Check("graph", True, "ok")

    try:
        results = plan.run_plan([("finite", slow), ("graph", later), ("keras_fit", later)], time_limit=0.2)
    finally:
        release.set()
    assert [r.level for r in results] == ["fail", "warn", "warn"] and not ran
    assert all("finite check timed out" in r.message for r in results[1:])


def test_graph_passes_a_keyword_parameter_even_when_its_range_ends_at_the_default():
    from examples.pitfall_keyword_parameter import scaled_identity

    spec = ops.from_function(scaled_identity, ranges={"slope": (1.0, 25.0)})  # (value + high) / 2 == default
    result = checks.check_graph(Subject.of(spec))
    assert result.level == "fail" and "by keyword" in result.message and "ValueError" in result.message
    assert "slope=25 " not in result.message  # a value other than the default was passed


def test_a_layer_that_needs_constructor_arguments_is_not_checked_and_fails():
    class Scaled(keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units

        def call(self, inputs):
            return inputs * self.units

    results = plan.check_layer(Scaled, functions=[])
    assert [r.name for r in results] == list(plan.LAYER_CHECKS)
    # nothing checked is not a pass: each row fails, naming the argument to give a default
    assert all(r.level == "fail" and r.message.startswith("not checked: Scaled() needs") for r in results)
    assert all("units" in r.message for r in results)


def test_run_limited_turns_any_exception_into_a_failed_check():
    def boom():
        raise SystemExit(3)

    result = plan.run_limited("graph", boom)
    assert result.name == "graph" and result.level == "fail" and "SystemExit" in result.message


def test_declared_points_that_disagree_with_the_data_warn():
    @tf.custom_gradient
    def step(x):
        """A step at 0.5 with a straight-through backward."""
        return tf.cast(x > 0.5, x.dtype), lambda dy: dy

    listed = checks.check_special_points(Subject.of(step))
    assert listed.level == "pass" and "x = 0.5 (jump)" in listed.message and "none declared" in listed.message
    wrong = checks.check_special_points(Subject.of(ops.from_function(step, points=[(0.0, "jump")])))
    assert wrong.level == "warn"
    assert "detected but not declared: x = 0.5 (jump)" in wrong.message
    assert "declared but not detected: x = 0 (jump)" in wrong.message


def test_a_declared_forward_that_is_not_the_functions_forward_fails_vs_autodiff():
    spec = ops.from_function(exp_op, forward=lambda x: x * x)
    result = checks.check_vs_autodiff(Subject.of(spec))
    assert result.level == "fail" and "declared forward differs" in result.message


@keras.saving.register_keras_serializable(package="tests")
class RegisteredSquare(keras.layers.Layer):
    def call(self, inputs):
        return square_for_layers(inputs)


class BypassingSquare(keras.layers.Layer):
    def call(self, inputs):
        return inputs * inputs  # forgets the custom gradient


@tf.custom_gradient
def square_for_layers(x):
    return x * x, lambda dy: dy * x


def test_a_registered_layer_saves_and_loads():
    result = layer.check_keras_save(RegisteredSquare)
    assert result.level == "pass" and "same output and input gradient" in result.message


def test_a_layer_that_bypasses_the_custom_gradient_fails_input_gradient():
    functions = [("square_for_layers", square_for_layers)]
    assert layer.check_input_gradient(RegisteredSquare, functions).level == "pass"
    result = layer.check_input_gradient(BypassingSquare, functions)
    assert result.level == "fail" and "bypasses square_for_layers" in result.message


# -- discovery --------------------------------------------------------------------------------------------
def write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def test_discover_finds_module_level_functions_and_layers_only(tmp_path):
    path = write(
        tmp_path,
        "mine_a.py",
        """
        import tensorflow as tf
        from examples.softplus import stable_softplus  # imported: not this module's

        def helper(x):
            return x

        @tf.custom_gradient
        def mine(x):
            return x, lambda dy: dy

        class MyLayer(tf.keras.layers.Layer):
            def call(self, inputs):
                return mine(inputs)
        """,
    )
    found = discover.discover(path)
    assert [f.name for f in found.functions] == ["mine"] and [f.name for f in found.layers] == ["MyLayer"]
    assert not found.errors


def test_discover_a_module_name_and_a_directory():
    by_name = discover.discover("examples.square")
    assert [f.name for f in by_name.functions] == ["square_with_scaled_grad"]
    directory = discover.discover(EXAMPLES)
    assert len(directory.functions) == 27 + len(BACKEND_EXAMPLES)
    assert [f.name for f in directory.layers] == ["TFStyleLayer", "SpikeLayer", "CustomSquareLayer"]
    assert not directory.errors


@pytest.mark.parametrize(
    "target,error,says",
    [
        ("no_such_dir/mine.py", "FileNotFoundError", "no such file"),
        ("no_such_module_xyz", "ModuleNotFoundError", "no_such_module_xyz"),
        ("", "ValueError", "empty target"),
        ("  ", "ValueError", "empty target"),
    ],
)
def test_discover_reports_missing_targets_as_values(target, error, says):
    (problem,) = discover.discover(target).errors
    assert problem.error == error and says in problem.message


def test_discover_reports_import_errors_and_empty_modules(tmp_path):
    broken = write(tmp_path, "broken_mod.py", "import tensorflow as tf\nraise RuntimeError('cannot load this')\n")
    (problem,) = discover.discover(broken).errors
    assert (problem.error, problem.message) == ("RuntimeError", "cannot load this")
    empty = write(tmp_path, "empty_mod.py", "def helper(x):\n    return x\n")
    (problem,) = discover.discover(empty).errors
    assert problem.error == "NothingToCheck" and "@tf.custom_gradient" in problem.message


# -- the command line on bad input: one line, exit 2, no traceback -------------------------------------------
@pytest.mark.parametrize(
    "source,says",
    [
        (None, "no such file"),
        ("raise ImportError('missing dependency foo')\n", "ImportError: missing dependency foo"),
        ("def helper(x):\n    return x\n", "no module-level @tf.custom_gradient"),
    ],
)
def test_cli_bad_input_is_one_clear_line_and_exit_2(tmp_path, capsys, source, says):
    path = tmp_path / "target_mod.py"
    if source is not None:
        path.write_text(source)
    assert runner.main([str(path)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert "Traceback" not in captured.err + captured.out and captured.out == ""


def test_cli_through_python_dash_m_explorer(tmp_path, capsys):
    from explorer.__main__ import main

    assert main(["verify", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err


# -- the pytest guardrail ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_assert_custom_gradient_passes_a_good_function_and_layer():
    from examples.softplus import stable_softplus
    from examples.square import CustomSquareLayer

    results = testing.assert_custom_gradient(stable_softplus)
    assert [r.name for r in results] == list(plan.FUNCTION_CHECKS)
    with pytest.warns(testing.GradientCheckWarning, match="^CustomSquareLayer: keras_save: not registered"):
        layer_results = testing.assert_custom_gradient(CustomSquareLayer)  # its keras_save warning is allowed
    assert [r.name for r in layer_results if r.level == "warn"] == ["keras_save"]


@pytest.mark.slow
def test_assert_custom_gradient_lists_each_failed_check():
    from examples.pitfall_reduce_sum import double_with_summed_grad

    with pytest.raises(AssertionError) as error:
        testing.assert_custom_gradient(double_with_summed_grad)
    text = str(error.value)
    assert text.startswith("double_with_summed_grad:")
    assert "\n  shape_dtype: " in text and "gradient has shape ()" in text


def test_testing_does_not_import_streamlit():
    """Neither explorer.testing nor any checker module imports streamlit (lazy imports included)."""
    import ast

    paths = [Path(testing.__file__), *sorted(Path(guardrail.__file__).parent.glob("*.py"))]
    imported = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    assert {"tensorflow", "keras", "explorer"} <= imported and "streamlit" not in imported


@pytest.mark.slow
def test_checker_rows_have_the_check_record_fields(examples_run):
    for row in examples_run[1].values():
        assert set(row) == {"op", "check", "level", "passed", "message", "backend"}
        assert row["level"] in LEVELS and row["passed"] == (row["level"] != "fail") and row["message"]


@pytest.mark.slow
def test_a_gradient_that_cannot_be_saved_names_the_cause(examples_run):
    row = rows_of(examples_run, "tanh_with_numpy_grad")["saved_model"]
    assert row["level"] == "fail" and "model.export raised AttributeError" in row["message"]


def test_verify_check_runs_the_user_checks_on_a_user_op(monkeypatch):
    calls = []

    def fake(spec, /, **params):
        calls.append((spec.key, params))
        return [Check("finite", True, "ok")]

    monkeypatch.setattr(plan, "check_function", fake)
    spec = ops.from_function(exp_op)
    assert runner.check(spec) == [Check("finite", True, "ok")]
    assert calls == [("exp_op", {"forward_mode": False})]  # the opt-in check, not asked for


def test_cli_table_for_a_target_exits_0_when_only_warnings(monkeypatch, capsys):
    def function_checks(spec, /, **params):
        return [Check("vs_autodiff", True, "the custom gradient is half of autodiff", "warn")]

    def layer_checks(layer_class, functions=None, **kwargs):
        assert [name for name, _ in functions] == ["square_with_scaled_grad"]
        return [Check("keras_save", True, "not registered", "warn")]

    monkeypatch.setattr(plan, "check_function", function_checks)
    monkeypatch.setattr(plan, "check_layer", layer_checks)
    monkeypatch.setattr(runner, "ISOLATE", False)  # the replaced checks exist in this process only
    assert runner.main([str(EXAMPLES / "square.py")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["op", "check", "result", "message"]
    assert lines[1].split()[:3] == ["square_with_scaled_grad", "vs_autodiff", "warn"]
    assert lines[2].split()[:3] == ["CustomSquareLayer", "keras_save", "warn"]
    assert lines[-1].startswith("2 op(s), 2 checks: 0 pass, 2 warn, 0 fail")


def test_cli_refuses_targets_and_op_together(capsys):
    assert runner.main([str(EXAMPLES), "--op", "atan"]) == 2
    assert "not both" in capsys.readouterr().err


def test_cli_refuses_jobs_outside_1_to_16_and_jobs_without_targets(capsys):
    for bad in ("0", "17", "two", "-1", "1.5"):
        with pytest.raises(SystemExit) as exited:
            runner.main([str(EXAMPLES / "square.py"), "--jobs", bad])
        assert exited.value.code == 2
        assert f"{bad!r}: allowed a whole number from 1 to 16" in capsys.readouterr().err
    assert runner.main(["--jobs", "2"]) == 2
    assert "--jobs checks your functions in worker processes: give TARGETs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="allowed: 1 to 16"):
        runner.check_targets([str(EXAMPLES / "square.py")], jobs=0)


MEETING = textwrap.dedent("""
    import pathlib
    import time

    import tensorflow as tf

    HERE = pathlib.Path(__file__).parent


    def _meet(me, other):
        \"\"\"Mark that ``me`` runs, then wait for ``other``: both pass only if their checks overlap.\"\"\"
        (HERE / me).touch()
        while not (HERE / other).exists():
            time.sleep(0.05)


    @tf.custom_gradient
    def first(x):
        _meet("first", "second")
        return tf.identity(x), lambda dy: dy


    @tf.custom_gradient
    def second(x):
        _meet("second", "first")
        return tf.identity(x), lambda dy: dy
""")


@pytest.mark.slow
def test_jobs_2_checks_two_functions_at_the_same_time(tmp_path, monkeypatch):
    """Each function's forward waits until the other's has run: checked one after the other, the first would hang
    until its time limit and fail; with --jobs 2 both pass (no timing is measured)."""
    from explorer import worker

    (tmp_path / "meeting.py").write_text(MEETING)
    monkeypatch.setenv(worker.process.CHECK_SECONDS_ENV, "120")
    rows, problems = runner.check_targets([str(tmp_path / "meeting.py")], jobs=2)
    assert not problems and set(rows["op"]) == {"first", "second"}
    failed = rows[~rows["passed"]]
    assert failed.empty, failed[["op", "check", "message"]].to_string()


@pytest.mark.slow
def test_jobs_2_gives_the_rows_of_one_at_a_time(examples_run):
    """examples_run checked two functions at once; square.py's function and layer, one at a time, give the same
    rows in the same order."""
    one_at_a_time, problems = runner.check_targets([str(EXAMPLES / "square.py")])
    assert not problems and set(one_at_a_time["op"]) == {"square_with_scaled_grad", "CustomSquareLayer"}
    for row in one_at_a_time.itertuples():
        at_once = examples_run[1][(row.op, row.check)]
        assert (at_once["level"], at_once["passed"], at_once["message"]) == (row.level, row.passed, row.message)
    in_examples = [key for key in examples_run[1] if key[0] in {"square_with_scaled_grad", "CustomSquareLayer"}]
    assert in_examples == list(zip(one_at_a_time["op"], one_at_a_time["check"], strict=True))


def test_assert_custom_gradient_refuses_a_layer_instance_and_a_plain_function():
    with pytest.raises(TypeError, match="class RegisteredSquare, not an instance"):
        testing.assert_custom_gradient(RegisteredSquare())
    with pytest.raises(TypeError, match="@tf.custom_gradient"):
        testing.assert_custom_gradient(lambda x: x)


def test_a_layer_of_your_function_explains_how_to_save_it():
    layer = ops.SurrogateLayer(ops.from_function(exp_op))
    with pytest.raises(NotImplementedError, match="register_keras_serializable"):
        layer.get_config()


def test_the_guardrail_leaves_the_callers_random_state_alone():
    import random

    import numpy as np

    from examples.square import square_with_scaled_grad

    random.seed(123)
    np.random.seed(123)
    expected = (random.random(), np.random.random())
    random.seed(123)
    np.random.seed(123)
    guardrail.custom_gradient_checks(square_with_scaled_grad)
    assert (random.random(), np.random.random()) == expected


def test_a_timeout_error_raised_by_the_users_code_is_not_a_time_limit():
    def raises_timeout() -> Check:
        raise TimeoutError("the user's own socket timed out")

    result = plan.run_limited("finite", raises_timeout, time_limit=30)
    assert result.level == "fail" and "the check raised TimeoutError" in result.message
    assert "socket timed out" in result.message and "did not finish" not in result.message


def test_a_gradient_that_is_nan_everywhere_is_not_called_equal_to_the_true_one():
    """Nothing finite to compare is not agreement: vs_autodiff used to pass "on all 0 finite points"."""

    @tf.custom_gradient
    def nan_backward(x):
        def grad(dy):
            return dy * tf.constant(float("nan"), dy.dtype)

        return 2.0 * x, grad

    result = checks.check_vs_autodiff(Subject.of(nan_backward))
    assert result.level == "warn"
    assert "the custom gradient is not finite anywhere on [-3, 3]" in result.message
    assert checks.check_finite(Subject.of(nan_backward)).level == "fail"
