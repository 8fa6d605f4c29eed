"""Export any op, built-in or user, as a standalone Python module and a pytest file for it.

``module_source(op, **params)`` writes a module that imports only TensorFlow and Keras (NumPy is
allowed but not needed) with:

* ``forward(x, *params)`` and ``surrogate(x, *params)`` (or ``backward(x, dy, *params)`` for an op
  that acts on the upstream gradient, such as ``clip_gradient``) written out as TensorFlow code;
* a ``@tf.custom_gradient`` function whose hyper-parameters are passed positionally as tensors,
  never as keyword arguments (those are rejected in graph mode and silently ignored in eager mode),
  and whose gradient returns one value per positional input (``None`` for the hyper-parameters);
* a public wrapper ``<key>(x, <param>=<value>, ...)`` that checks parameter ranges, computes
  half-precision inputs in float32 and casts back;
* a Keras layer class with ``get_config``, registered for serialisation.

``test_source(op, module_name=..., **params)`` writes a pytest file that checks the module with
``tf.GradientTape`` at the special points and on a grid against the SAME formulas rendered to NumPy
(evaluated in x's dtype, so tie conventions such as round-half-to-even agree), plus shape/dtype,
graph-mode, retracing and save/load checks. ``files(op, **params)`` returns both, keyed by file name.

Both come from one expression tree per formula (:mod:`explorer.expr`): a user op's own source, or
for a built-in op its ``spec.expression`` (declared in ``ops/catalogue.py``). A parameter whose name would shadow a
name the generated code uses (``tf``, ``dy``, ``name``, a Python builtin...) is renamed with a
trailing ``_`` everywhere in the generated files.
"""

from __future__ import annotations

import ast
import builtins
import copy
import keyword
import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ops
from explorer import expr

DY = "dy"  # the name a built-in op's ``backward`` expression uses for the upstream gradient
POINT_LIMIT = 1e3  # declared points further out are left out of the generated tests
GRID = (-3.0, 3.0, 121)
_GENERATED_NAMES = frozenset(
    {
        "tf",
        "np",
        "keras",
        "pytest",
        "math",
        "dy",
        "x",
        "y",
        "grad",
        "self",
        "kwargs",
        "inputs",
        "config",
        "cls",
        "compute",
        "op_module",
        "forward",
        "surrogate",
        "backward",
        "name",
        "dtype",
        "trainable",
        "autocast",
        "input_shape",
        "PARAMS",
        "PARAM_RANGES",
        "SPECIAL_POINTS",
    }
)
_RESERVED = _GENERATED_NAMES | frozenset(dir(builtins))


@dataclass(frozen=True)
class _Formulas:
    spec: ops.OpSpec
    params: dict[str, float]  # resolved values, keyed by the op's parameter names
    names: dict[str, str]  # op parameter name -> name in the generated code
    forward: ast.Expression
    gradient: ast.Expression | None
    backward: ast.Expression | None
    texts: dict[str, str]  # the expressions as written, for docstrings

    @property
    def function_name(self) -> str:
        key = self.spec.key
        return key if key.isidentifier() and not keyword.iskeyword(key) and key not in _RESERVED else f"{key}_op"

    @property
    def layer_name(self) -> str:
        return "".join(part[:1].upper() + part[1:] for part in self.spec.key.split("_") if part) + "Layer"

    @property
    def code_params(self) -> list[str]:
        return [self.names[name] for name in self.spec.param_names]


def _renamed(tree: ast.Expression, names: Mapping[str, str]) -> ast.Expression:
    tree = copy.deepcopy(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            node.id = names[node.id]
    return tree


def _formulas(op: str | ops.OpSpec, params: Mapping[str, Any]) -> _Formulas:
    spec = ops.get(op)
    resolved = spec.resolve(params)
    if spec.builtin:
        source = spec.expression
        if source is None:
            raise ValueError(
                f"built-in op {spec.key!r} has no expression to export: add expression=Expression(...) to its "
                "declaration in ops/catalogue.py"
            )
        texts = {"forward": source.forward, "gradient": source.gradient, "backward": source.backward}
    else:
        if not spec.source or "forward" not in spec.source or "gradient" not in spec.source:
            raise ValueError(
                f"op {spec.key!r} is a user op without expression source; compile it with explorer.expr.compile_op"
            )
        texts = {"forward": spec.source["forward"], "gradient": spec.source["gradient"], "backward": None}
    names = {name: (f"{name}_" if name in _RESERVED else name) for name in spec.param_names}
    param_names = tuple(spec.param_names)
    forward = _renamed(expr.parse(texts["forward"], param_names, expression="forward"), names)
    gradient = backward = None
    if texts["gradient"] is not None:
        gradient = _renamed(expr.parse(texts["gradient"], param_names, expression="gradient"), names)
    else:
        dy_names = (*param_names, DY)
        backward = _renamed(expr.parse(texts["backward"], dy_names, expression="backward"), names)
    return _Formulas(
        spec,
        {k: float(v) for k, v in resolved.items()},
        names,
        forward,
        gradient,
        backward,
        {k: v for k, v in texts.items() if v is not None},
    )


def _docstring_text(text: str) -> str:
    return " ".join(str(text).replace("\\", "/").replace('"""', "'''").split())


def _special_points(formulas: _Formulas) -> list[tuple[float, str, str]]:
    found: dict[float, tuple[float, str, str]] = {}
    for dtype in ("float32", "float64"):
        for point in formulas.spec.declared_points(formulas.params, dtype):
            if math.isfinite(point.x) and abs(point.x) <= POINT_LIMIT:
                found.setdefault(float(point.x), (float(point.x), point.kind, _docstring_text(point.note)))
    return sorted(found.values())


# -- the module ---------------------------------------------------------------------------------------------
def _header(formulas: _Formulas, what: str) -> list[str]:
    spec = formulas.spec
    kind = "built-in op" if spec.builtin else "user op"
    lines = [f"{spec.key}: {_docstring_text(spec.title)} ({kind}), {what}, exported by Gradient Explorer", ""]
    lines.append(f"Forward:          {formulas.texts['forward']}")
    if "gradient" in formulas.texts:
        lines.append(f"Custom gradient:  dy * g(x), g(x) = {formulas.texts['gradient']}")
    else:
        lines.append(f"Custom gradient:  {formulas.texts['backward']}   (acts on the upstream gradient dy)")
    if spec.params:
        shown = ", ".join(
            f"{formulas.names[p.name]} = {formulas.params[p.name]!r} in [{p.low:g}, {p.high:g}]" for p in spec.params
        )
        lines.append(f"Parameters:       {shown}")
    lines += ["", *textwrap.wrap(f"Why: {_docstring_text(spec.why)}", 100)]
    lines += textwrap.wrap(f"Reference: {_docstring_text(spec.reference)}", 100)
    return lines


def module_source(op: str | ops.OpSpec, /, **params: Any) -> str:
    """A standalone Python module for ``op`` at ``params`` (defaults for the rest)."""
    f = _formulas(op, params)
    spec = f.spec
    names = f.code_params
    args = ", ".join(["x", *names])
    param_list = "".join(f", {name}" for name in names)
    nones = "".join(", None" for _ in names)
    defaults = ", ".join(f"{f.names[p.name]}={f.params[p.name]!r}" for p in spec.params)
    ranges = ", ".join(f"{f.names[p.name]!r}: ({float(p.low)!r}, {float(p.high)!r})" for p in spec.params)
    values = ", ".join(f"{f.names[p.name]!r}: {f.params[p.name]!r}" for p in spec.params)
    function = f.function_name
    custom = f"_{function}_custom"
    points = _special_points(f)
    doc = _header(f, "as a standalone module")
    doc += [
        "",
        "Standalone: imports only TensorFlow and Keras. The hyper-parameters are passed to the",
        "@tf.custom_gradient function positionally as tensors (keyword arguments to it are rejected in",
        "graph mode and silently ignored in eager mode), so a new value does not retrace a tf.function.",
        "float16 and bfloat16 inputs are computed in float32 and cast back; output and gradient keep",
        "the input's shape and dtype.",
    ]
    lines = ['"""' + "\n".join(doc) + '\n"""', "", "import keras", "import tensorflow as tf", ""]
    lines += [f"PARAMS = {{{values}}}", f"PARAM_RANGES = {{{ranges}}}", "# (x, kind, note): where a convention lives"]
    lines.append(
        "SPECIAL_POINTS = ["
        + "".join(f"\n    ({x!r}, {kind!r}, {note!r})," for x, kind, note in points)
        + ("\n]" if points else "]")
    )
    lines += [
        "",
        "",
        f"def forward({args}):",
        '    """The forward; autodiff of it is the true gradient. x and the parameters share one float dtype."""',
        f"    return {expr.to_python_source(f.forward)}",
        "",
        "",
    ]
    if f.gradient is not None:
        lines += [
            f"def surrogate({args}):",
            '    """g(x): the custom backward is dy * g(x)."""',
            f"    return {expr.to_python_source(f.gradient)}",
            "",
            "",
        ]
        grad_expression = f"dy * surrogate({args})"
    else:
        lines += [
            f"def backward(x, dy{param_list}):",
            '    """The custom dx, computed from the upstream gradient dy itself."""',
            f"    return {expr.to_python_source(f.backward)}",
            "",
            "",
        ]
        grad_expression = f"backward(x, dy{param_list})"
    lines += [
        "@tf.custom_gradient",
        f"def {custom}({args}):",
        "    y = forward(" + args + ")",
        "",
        "    def grad(dy):",
        "        # one gradient per positional input; None for the hyper-parameters",
        f"        return {grad_expression}{nones}",
        "",
        "    return y, grad",
        "",
        "",
        "def _as_tensor(value, dtype):",
        '    """A parameter as a tensor of dtype. tf.cast(0.01, tf.float64) would round 0.01 through float32."""',
        "    return tf.cast(value, dtype) if tf.is_tensor(value) else tf.constant(value, dtype)",
        "",
        "",
        "def _check_range(name, value):",
        '    """ValueError naming the parameter and its range (Python numbers only; tensors pass)."""',
        "    if isinstance(value, (int, float)) and not isinstance(value, bool):",
        "        low, high = PARAM_RANGES[name]",
        "        if not low <= value <= high:",
        '            raise ValueError(f"parameter {name!r} = {value!r} is outside the allowed range [{low}, {high}]")',
        "",
        "",
        f"def {function}(x{', ' + defaults if defaults else ''}):",
        f'    """{_docstring_text(spec.title)}: the forward, with the custom gradient as its backward."""',
        "    x = tf.convert_to_tensor(x)",
        "    if not x.dtype.is_floating:",
        '        raise TypeError(f"x must be a float tensor, got {x.dtype.name}; cast it first, e.g. tf.cast(x, tf.float32)")',
        "    compute = tf.float32 if x.dtype in (tf.float16, tf.bfloat16) else x.dtype",
    ]
    for name in names:
        lines.append(f"    _check_range({name!r}, {name})")
    cast_params = "".join(f", _as_tensor({name}, compute)" for name in names)
    lines += [
        f"    return tf.cast({custom}(tf.cast(x, compute){cast_params}), x.dtype)",
        "",
        "",
        f'@keras.saving.register_keras_serializable(package="gradient_explorer_export", name="{f.layer_name}")',
        f"class {f.layer_name}(keras.layers.Layer):",
        f'    """Applies {function} element-wise; get_config holds the parameters, so a saved model reloads with',
        '    the same custom gradient (import this module before keras.saving.load_model)."""',
        "",
        f"    def __init__(self{', ' + defaults if defaults else ''}, **kwargs):",
        "        super().__init__(**kwargs)",
    ]
    for name in names:
        lines += [f"        _check_range({name!r}, {name})", f"        self.{name} = {name}"]
    call_args = "".join(f", self.{name}" for name in names)
    config = ", ".join(f"{name!r}: self.{name}" for name in names)
    lines += [
        "",
        "    def call(self, inputs):",
        f"        return {function}(inputs{call_args})",
        "",
        "    def compute_output_shape(self, input_shape):",
        "        return input_shape",
        "",
        "    def get_config(self):",
        f"        return {{**super().get_config(){', ' + config if config else ''}}}",
        "",
    ]
    return "\n".join(lines)


# -- the test file ------------------------------------------------------------------------------------------
def default_module_name(op: str | ops.OpSpec) -> str:
    return f"{ops.get(op).key}_op"


def test_source(op: str | ops.OpSpec, /, module_name: str | None = None, **params: Any) -> str:
    """A pytest file for the module of :func:`module_source` (importable as ``module_name``)."""
    f = _formulas(op, params)
    module_name = module_name or default_module_name(f.spec)
    if not module_name.isidentifier() or keyword.iskeyword(module_name):
        raise ValueError(f"module_name must be a Python identifier, got {module_name!r}")
    names = f.code_params
    params_args = "".join(f", {name}" for name in names)
    points = [x for x, _, _ in _special_points(f)]
    helper_imports, helpers = expr.numpy_helpers(f.forward, f.gradient, f.backward)
    function = f.function_name
    doc = _header(f, "pytest checks") + [
        "",
        f"Checks {module_name} with tf.GradientTape against the same formulas written with NumPy (in x's",
        "dtype, so tie conventions such as round-half-to-even and closed windows agree exactly).",
    ]
    lines = ['"""' + "\n".join(doc) + '\n"""', ""]
    if helper_imports:
        lines += [*(f"import {module}" for module in helper_imports), ""]
    lines += [
        "import keras",
        "import numpy as np",
        "import pytest",
        "import tensorflow as tf",
        "",
        f"import {module_name} as op_module",
        "",
    ]
    lines += [
        f"SPECIAL_POINTS = {points!r}",
        f"GRID = np.linspace({GRID[0]!r}, {GRID[1]!r}, {GRID[2]})",
        'TOLERANCES = {"float32": {"rtol": 2e-5, "atol": 1e-6}, "float64": {"rtol": 1e-10, "atol": 1e-12}}',
        "",
        "",
    ]
    for helper in helpers:
        lines += [*helper.splitlines(), "", ""]
    lines += [
        f"def forward_reference(x{params_args}):",
        '    """NumPy, in x\'s dtype: the parameters are scalars of that dtype."""',
        "    _D = x.dtype.type",
        f"    return np.asarray(np.broadcast_to({expr.to_numpy_source(f.forward)}, x.shape), dtype=x.dtype)",
        "",
        "",
    ]
    if f.gradient is not None:
        lines += [
            f"def gradient_reference(x, dy{params_args}):",
            '    """dx = dy * g(x), in NumPy."""',
            "    _D = x.dtype.type",
            f"    return dy * np.asarray(np.broadcast_to({expr.to_numpy_source(f.gradient)}, x.shape), dtype=x.dtype)",
            "",
            "",
        ]
    else:
        lines += [
            f"def gradient_reference(x, dy{params_args}):",
            '    """dx computed from the upstream gradient dy, in NumPy."""',
            "    _D = x.dtype.type",
            f"    return np.asarray(np.broadcast_to({expr.to_numpy_source(f.backward)}, x.shape), dtype=x.dtype)",
            "",
            "",
        ]
    lines += [
        "def _params(dtype):",
        "    return {name: np.dtype(dtype).type(value) for name, value in op_module.PARAMS.items()}",
        "",
        "",
        "def _with_neighbours(points, dtype):",
        '    """The points and the floats just below and above each (normal floats: TF flushes subnormals)."""',
        "    points = np.asarray(points, dtype=dtype)",
        "    dt = np.dtype(dtype)",
        "    around = np.concatenate([np.nextafter(points, dt.type(-np.inf)), np.nextafter(points, dt.type(np.inf))])",
        "    around = np.where(np.abs(around) < np.finfo(dt).tiny, np.sign(around) * np.finfo(dt).tiny, around)",
        "    return np.unique(np.concatenate([points, around.astype(dt)]))",
        "",
        "",
        "def _value_and_grad(function, x, dy):",
        "    with tf.GradientTape() as tape:",
        "        tape.watch(x)",
        "        y = function(x)",
        "    return y, tape.gradient(y, x, output_gradients=dy)",
        "",
        "",
        '@pytest.mark.parametrize("dtype", ["float32", "float64"])',
        '@pytest.mark.parametrize("where", ["special_points", "grid"])',
        "def test_forward_and_gradient_match_numpy(where, dtype):",
        '    if where == "special_points" and not SPECIAL_POINTS:',
        '        pytest.skip("no declared special points")',
        '    x_values = _with_neighbours(SPECIAL_POINTS, dtype) if where == "special_points" else GRID.astype(dtype)',
        "    dy_values = np.resize(np.array([1.5, -0.75, 2.0, 0.5]), x_values.shape).astype(dtype)",
        f"    y, grad = _value_and_grad(lambda x: op_module.{function}(x, **op_module.PARAMS), tf.constant(x_values), tf.constant(dy_values))",
        "    assert grad is not None, 'the custom gradient is None'",
        "    params = _params(dtype)",
        "    np.testing.assert_allclose(y.numpy(), forward_reference(x_values, **params), **TOLERANCES[dtype])",
        "    expected = gradient_reference(x_values, dy_values, **params)",
        "    np.testing.assert_allclose(grad.numpy(), expected, **TOLERANCES[dtype])",
        "",
        "",
        '@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])',
        '@pytest.mark.parametrize("shape", [(), (4, 3, 5)])',
        "def test_output_and_gradient_keep_shape_and_dtype(shape, dtype):",
        "    x = tf.constant(np.random.default_rng(0).uniform(-2.0, 2.0, size=shape), dtype=dtype)",
        f"    y, grad = _value_and_grad(lambda v: op_module.{function}(v), x, None)",
        "    assert y.shape == x.shape and y.dtype == x.dtype",
        "    assert grad is not None and grad.shape == x.shape and grad.dtype == x.dtype",
        "",
        "",
        "def test_eager_tf_function_and_xla_agree():",
        "    x = tf.constant(GRID, tf.float32)",
        "    dy = tf.fill(tf.shape(x), 1.5)",
        "",
        "    def run(v):",
        f"        return _value_and_grad(lambda u: op_module.{function}(u), v, dy)",
        "",
        "    eager = run(x)",
        "    for compiled in (tf.function(run), tf.function(run, jit_compile=True)):",
        "        for got, want in zip(compiled(x), eager, strict=True):",
        '            np.testing.assert_allclose(got.numpy(), want.numpy(), **TOLERANCES["float32"])',
        "",
        "",
        "def test_a_new_parameter_value_does_not_retrace():",
        "    names = list(op_module.PARAMS)",
        "",
        "    @tf.function",
        "    def run(x, *values):",
        f"        return op_module.{function}(x, *values)",
        "",
        "    x = tf.constant(GRID, tf.float32)",
        "    run(x, *[tf.constant(op_module.PARAMS[n], tf.float32) for n in names])",
        "    other = [(op_module.PARAMS[n] + op_module.PARAM_RANGES[n][1]) / 2 for n in names]",
        "    run(x, *[tf.constant(value, tf.float32) for value in other])",
        "    assert run.experimental_get_tracing_count() == 1",
        "",
        "",
        "def test_parameters_outside_their_range_are_rejected():",
        "    for name, (low, high) in op_module.PARAM_RANGES.items():",
        "        with pytest.raises(ValueError, match=name):",
        f"            op_module.{function}(tf.constant([0.0]), **{{**op_module.PARAMS, name: high + abs(high - low) + 1.0}})",
        "",
        "",
        "def test_layer_survives_save_and_load_with_its_custom_gradient(tmp_path):",
        f"    layer = op_module.{f.layer_name}(**op_module.PARAMS)",
        "    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))",
        "    assert type(clone) is type(layer) and clone.get_config() == layer.get_config()",
        "    model = keras.Sequential([keras.Input(shape=(GRID.size,)), layer])",
        '    path = tmp_path / "model.keras"',
        "    model.save(path)",
        "    loaded = keras.saving.load_model(path)",
        "    x = tf.constant(GRID[None, :], tf.float32)",
        "    dy = tf.fill(tf.shape(x), 1.5)",
        "    want = _value_and_grad(model, x, dy)",
        "    got = _value_and_grad(loaded, x, dy)",
        "    for a, b in zip(got, want, strict=True):",
        '        np.testing.assert_allclose(a.numpy(), b.numpy(), **TOLERANCES["float32"])',
        "",
    ]
    return "\n".join(lines)


def files(op: str | ops.OpSpec, /, module_name: str | None = None, **params: Any) -> dict[str, str]:
    """``{"<module_name>.py": module source, "test_<module_name>.py": test source}``."""
    module_name = module_name or default_module_name(op)
    return {
        f"{module_name}.py": module_source(op, **params),
        f"test_{module_name}.py": test_source(op, module_name=module_name, **params),
    }
