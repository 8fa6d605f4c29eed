"""Code export: the expression sources of the built-in ops, and the generated module + tests.

The generated files for every built-in op and two user ops are written to one temporary folder
and their own tests run once, in-process (TensorFlow is already imported), through pytest.main.
"""

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import ops
from explorer import export, expr
from tests.reference import assert_close, declared_points_via, param_sets, sweep_grid, tolerances

OP_KEYS = ops.names()
REPO = Path(__file__).resolve().parents[1]
ALLOWED_IMPORTS = {"tensorflow", "keras", "numpy"}
USER_OPS = {
    # the editor's default example
    "my_spike": dict(
        forward="where(x > 0, 1, 0)",
        gradient="1 / (k * abs(x) + 1) ** 2",
        params={"k": (25.0, 1.0, 100.0)},
        points=[0.0],
    ),
    # parameters whose names the generated code uses itself: they must be renamed, not shadow tf / Layer(name=)
    "shadowing": dict(
        forward="where(x > tf, 1, 0) * name",
        gradient="name * exp(-abs(x - tf))",
        params={"tf": (0.5, -1.0, 1.0), "name": (2.0, 0.5, 4.0)},
        points=["tf"],
    ),
}


def user_op(key):
    return expr.compile_op(key, **USER_OPS[key])


def _cases():
    return [pytest.param(key, name, id=f"{key}-{name}") for key in OP_KEYS for name in param_sets(key)]


# -- spec.expression: every built-in op, written a second time, agrees with its OpSpec --------------------
@pytest.mark.parametrize("key", OP_KEYS)
def test_every_builtin_op_has_an_expression_source(key):
    source = ops.get(key).expression
    assert isinstance(source, ops.Expression) and source.forward


def test_missing_source_names_where_to_declare_it():
    bare = ops.OpSpec(
        key="bare", title="bare", family="override", params=(), forward_fn=lambda x, p: x,
        surrogate=lambda x, p: tf.ones_like(x), forward_tex="x", grad_tex="1", why="test", reference="test",
    )
    with pytest.raises(ValueError, match="ops/catalogue.py"):
        export.module_source(bare)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("key,set_name", _cases())
def test_expression_source_agrees_with_the_registry(key, set_name, dtype):
    spec = ops.get(key)
    params = spec.resolve(param_sets(key)[set_name])
    source = spec.expression
    names = spec.param_names
    points = declared_points_via(spec, -3.0, 3.0, dtype, params)
    x_values = sweep_grid([p.x for p in points], dtype)
    x = tf.constant(x_values)
    dy_values = np.resize(np.array([1.5, -0.75, 2.0, 0.5]), x_values.shape).astype(dtype)
    rtol, atol = tolerances(dtype, scale=10.0)
    # the parameter tensors exactly as the registry computes with them (so that a rounding of the
    # parameters, e.g. float64 values cast through float32, cannot hide or fake a formula difference)
    _, tensors = spec._compute_inputs(x, params)

    forward = expr.to_tf(expr.parse(source.forward, names), x, tensors)
    assert_close(
        forward.numpy(), spec.forward(x, **params).numpy(), x_values, rtol=rtol, atol=atol, what=f"{key} forward"
    )

    with tf.GradientTape() as tape:
        tape.watch(x)
        y = spec.apply(x, **params)
    expected = tape.gradient(y, x, output_gradients=tf.constant(dy_values)).numpy()
    if source.gradient is not None:
        got = dy_values * expr.to_tf(expr.parse(source.gradient, names), x, tensors).numpy()
    else:
        with_dy = {**tensors, export.DY: tf.constant(dy_values)}
        got = expr.to_tf(expr.parse(source.backward, (*names, export.DY)), x, with_dy).numpy()
    assert_close(got, expected, x_values, rtol=rtol, atol=atol, what=f"{key} custom gradient")


def test_clip_gradient_source_acts_on_dy():
    """With dy inside [-c, c] nothing changes; outside, dy is clipped to +-c (not scaled by x)."""
    source = ops.get("clip_gradient").expression
    tree = expr.parse(source.backward, ("clip_value", export.DY))
    x = tf.constant([-2.0, 0.0, 2.0, 5.0])
    dy = tf.constant([0.5, -3.0, 3.0, 1.0])
    got = expr.to_tf(tree, x, {"clip_value": 1.0, export.DY: dy}).numpy()
    np.testing.assert_array_equal(got, [0.5, -1.0, 1.0, 1.0])


# -- the generated module's shape ------------------------------------------------------------------------
def _imports(source):
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    return found


@pytest.mark.parametrize("key", [*OP_KEYS, "my_spike"])
def test_module_imports_only_tensorflow_keras_numpy(key):
    op = user_op(key) if key in USER_OPS else key
    assert _imports(export.module_source(op)) <= ALLOWED_IMPORTS


@pytest.mark.parametrize("key", ["atan", "leaky_clip", "my_spike"])
def test_custom_gradient_function_takes_parameters_positionally(key):
    """The decorated function has only positional parameters (positional-only with the exported defaults when
    it has any, so that GRADIENT_EXPLORER_OPS loads it as an op) and is never called with keywords."""
    op = user_op(key) if key in USER_OPS else key
    tree = ast.parse(export.module_source(op))
    decorated = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d) == "tf.custom_gradient" for d in node.decorator_list)
    ]
    assert len(decorated) == 1
    function = decorated[0]
    spec = ops.get(op)
    assert [a.arg for a in function.args.posonlyargs + function.args.args] == ["x", *spec.param_names]
    assert len(function.args.defaults) == len(spec.param_names)
    assert not function.args.kwonlyargs and function.args.vararg is None and function.args.kwarg is None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == function.name]
    assert calls and all(not call.keywords for call in calls)


def _import_file(path):
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_module_parameters_are_the_ones_asked_for(tmp_path):
    path = tmp_path / "atan_alpha_op.py"
    path.write_text(export.module_source("atan", alpha=3.5), encoding="utf-8")
    module = _import_file(path)
    assert module.PARAMS == {"alpha": 3.5, "threshold": 0.0}
    x = tf.constant([0.0, 0.5])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = module.atan(x)
    # (alpha / 2) / (1 + (pi alpha x / 2)^2) with alpha = 3.5, by hand
    expected = [1.75, 1.75 / (1 + (np.pi * 3.5 * 0.5 / 2) ** 2)]
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="alpha"):
        module.atan(x, alpha=50.0)


def test_invalid_parameter_is_rejected_at_export():
    with pytest.raises(ValueError, match="alpha"):
        export.module_source("atan", alpha=-1.0)


def test_module_name_must_be_an_identifier():
    with pytest.raises(ValueError, match="module_name"):
        export.test_source("atan", module_name="not a name")


def test_numpy_source_follows_the_tie_conventions():
    """The NumPy rendering evaluates in x's dtype: round half to even, comparisons as 0/1."""
    tree = expr.parse("round(x * 3) / 3 + (x >= 0.5)")
    source = expr.to_numpy_source(tree)
    x = np.array([0.5 / 3, 1.5 / 3, 0.5], dtype=np.float32)
    namespace = {"np": np, "x": x, "_D": x.dtype.type}
    got = eval(source, namespace)  # noqa: S307 - our own generated source, not user text
    np.testing.assert_array_equal(got, expr.to_numpy(tree, x))
    assert got.dtype == np.float32


# -- generated code is checked code ------------------------------------------------------------------------
def _ruff():
    """The ruff of requirements-dev.txt: next to this Python, else on PATH."""
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff not found next to sys.executable or on PATH; install requirements-dev.txt")
    return found


def test_generated_files_pass_ruff(tmp_path):
    """Every built-in op and a user op: module and test file have no ruff findings under the repo's config.

    A canary file with an unused import proves ruff really checked the folder."""
    for op in [*OP_KEYS, user_op("my_spike")]:
        for name, text in export.files(op).items():
            (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "canary.py").write_text("import os\n", encoding="utf-8")
    result = subprocess.run(
        [_ruff(), "check", "--no-cache", "--config", str(REPO / "pyproject.toml"), "--output-format", "json", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode in (0, 1), result.stderr
    findings = [(Path(item["filename"]).name, item["code"], item["message"]) for item in json.loads(result.stdout)]
    assert ("canary.py", "F401") in {(name, code) for name, code, _ in findings}
    generated = [finding for finding in findings if finding[0] != "canary.py"]
    assert not generated, "\n".join(f"{name}: {code} {message}" for name, code, message in generated)
    assert len(list(tmp_path.glob("*.py"))) == 2 * (len(OP_KEYS) + 1) + 1


# -- generated tests, run for every built-in op and two user ops ------------------------------------------
class _Collector:
    def __init__(self):
        self.reports = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.reports.append(report)


def _run_generated(folder):
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    collector = _Collector()
    code = pytest.main(
        [str(folder), "-q", "-p", "no:cacheprovider", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder)],
        plugins=[collector],
    )
    return code, collector.reports


@pytest.fixture(scope="module")
def generated_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exported")
    for op in [*OP_KEYS, *(user_op(key) for key in USER_OPS)]:
        for name, text in export.files(op).items():
            (folder / name).write_text(text, encoding="utf-8")
    code, reports = _run_generated(folder)
    return code, reports


@pytest.mark.slow
@pytest.mark.parametrize("key", [*OP_KEYS, *USER_OPS])
def test_generated_tests_pass(generated_run, key):
    code, reports = generated_run
    mine = [r for r in reports if r.nodeid.split("::")[0] == f"test_{key}_op.py"]
    failed = [f"{r.nodeid}:\n{r.longreprtext[-1500:]}" for r in mine if r.failed]
    assert not failed, "\n\n".join(failed)
    assert sum(r.passed for r in mine) >= 10, f"only {len(mine)} generated tests ran for {key}"


def test_generated_tests_catch_a_clip_boundary_off_by_one(tmp_path):
    """The generated tests can fail: `<=` turned into `<` at ste_sign's clip boundary is caught AT the point."""
    module_name = "ste_sign_off_by_one"
    module = export.module_source("ste_sign")
    broken = module.replace("tf.abs(x) <= clip_value", "tf.abs(x) < clip_value")
    assert broken != module
    (tmp_path / f"{module_name}.py").write_text(broken, encoding="utf-8")
    (tmp_path / f"test_{module_name}.py").write_text(
        export.test_source("ste_sign", module_name=module_name), encoding="utf-8"
    )
    code, reports = _run_generated(tmp_path)
    failed = {r.nodeid.split("::")[1] for r in reports if r.failed}
    assert code == pytest.ExitCode.TESTS_FAILED
    assert {
        "test_forward_and_gradient_match_numpy[special_points-float32]",
        "test_forward_and_gradient_match_numpy[special_points-float64]",
    } <= failed
    assert all(name.startswith("test_forward_and_gradient_match_numpy") for name in failed)
