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

Both files are filled in from templates, ``explorer/export_templates/*.py.tmpl`` (package data: a
build backend must ship them), with formulas from one expression tree each (:mod:`explorer.expr`):
a user op's own source, or a built-in op's ``spec.expression`` (declared in ``ops/catalogue.py``).
A parameter whose name would shadow a name the generated code uses (``tf``, ``dy``, ``name``, a
Python builtin...) is renamed with a trailing ``_`` everywhere in the generated files.
"""

from __future__ import annotations

import ast
import builtins
import copy
import importlib.resources
import keyword
import math
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from string import Template
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


# -- templates --------------------------------------------------------------------------------------------
_TEMPLATES = importlib.resources.files("explorer") / "export_templates"
_BLOCK = re.compile(r"([ \t]*)\$\{(\w+)\}")


def _render(template_name: str, **values: str) -> str:
    """Fill ``explorer/export_templates/<template_name>`` (:class:`string.Template` syntax).

    A placeholder alone on its line is a block: each of its lines is indented like the placeholder,
    and an empty block removes the line. Every placeholder must be given, and nothing else.
    """
    text = (_TEMPLATES / template_name).read_text(encoding="utf-8")
    wanted = set(Template(text).get_identifiers())
    if wanted != set(values):
        raise ValueError(
            f"{template_name}: missing {sorted(wanted - set(values))}, unused {sorted(set(values) - wanted)}"
        )
    lines = []
    for line in text.split("\n"):
        block = _BLOCK.fullmatch(line)
        if block is None:
            lines.append(Template(line).substitute(values))
        elif values[block[2]]:
            lines.extend(block[1] + part if part else "" for part in values[block[2]].split("\n"))
    return "\n".join(lines)


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
    names = f.code_params
    args = ", ".join(["x", *names])
    if f.gradient is not None:
        gradient = {
            "gradient_name": "surrogate",
            "gradient_args": args,
            "gradient_doc": "g(x): the custom backward is dy * g(x).",
            "gradient_source": expr.to_python_source(f.gradient),
            "grad_expression": f"dy * surrogate({args})",
        }
    else:
        gradient = {
            "gradient_name": "backward",
            "gradient_args": ", ".join(["x", "dy", *names]),
            "gradient_doc": "The custom dx, computed from the upstream gradient dy itself.",
            "gradient_source": expr.to_python_source(f.backward),
            "grad_expression": f"backward({', '.join(['x', 'dy', *names])})",
        }
    gradient["grad_expression"] += "".join(", None" for _ in names)
    points = "".join(f"\n    ({x!r}, {kind!r}, {note!r})," for x, kind, note in _special_points(f))
    return _render(
        "op_module.py.tmpl",
        header="\n".join(_header(f, "as a standalone module")),
        param_values=", ".join(f"{name!r}: {f.params[p.name]!r}" for name, p in zip(names, f.spec.params, strict=True)),
        param_ranges=", ".join(
            f"{name!r}: ({float(p.low)!r}, {float(p.high)!r})" for name, p in zip(names, f.spec.params, strict=True)
        ),
        special_points=points + ("\n" if points else ""),
        args=args,
        forward_source=expr.to_python_source(f.forward),
        **gradient,
        custom=f"_{f.function_name}_custom",
        # positional-only with defaults: the parameters are tensors in graph mode, and the function
        # loads as an op with parameters (explorer.loaded, ops.from_function)
        custom_params=", ".join(["x", *(f"{name}={f.params[p.name]!r}" for name, p in zip(names, f.spec.params, strict=True))])
        + (", /" if names else ""),
        function=f.function_name,
        defaults="".join(f", {name}={f.params[p.name]!r}" for name, p in zip(names, f.spec.params, strict=True)),
        title=_docstring_text(f.spec.title),
        title_literal=repr(str(f.spec.title)),
        range_checks="\n".join(f"_check_range({name!r}, {name})" for name in names),
        tensor_params="".join(f", _as_tensor({name}, compute)" for name in names),
        layer=f.layer_name,
        layer_attributes="\n".join(f"_check_range({name!r}, {name})\nself.{name} = {name}" for name in names),
        layer_params="".join(f", self.{name}" for name in names),
        layer_config="".join(f", {name!r}: self.{name}" for name in names),
    )


# -- the test file ------------------------------------------------------------------------------------------
def default_module_name(op: str | ops.OpSpec) -> str:
    return f"{ops.get(op).key}_op"


def test_source(op: str | ops.OpSpec, /, module_name: str | None = None, **params: Any) -> str:
    """A pytest file for the module of :func:`module_source` (importable as ``module_name``)."""
    f = _formulas(op, params)
    module_name = module_name or default_module_name(f.spec)
    if not module_name.isidentifier() or keyword.iskeyword(module_name):
        raise ValueError(f"module_name must be a Python identifier, got {module_name!r}")
    helper_imports, helpers = expr.numpy_helpers(f.forward, f.gradient, f.backward)
    if f.gradient is not None:
        gradient_doc = "dx = dy * g(x), in NumPy."
        gradient_reference = f"dy * {_shaped_like_x(expr.to_numpy_source(f.gradient))}"
    else:
        gradient_doc = "dx computed from the upstream gradient dy, in NumPy."
        gradient_reference = _shaped_like_x(expr.to_numpy_source(f.backward))
    return _render(
        "test_op_module.py.tmpl",
        header="\n".join(_header(f, "pytest checks")),
        module_name=module_name,
        stdlib_imports="\n".join(f"import {module}" for module in sorted({"importlib", *helper_imports})),
        special_points=repr([x for x, _, _ in _special_points(f)]),
        grid=f"{GRID[0]!r}, {GRID[1]!r}, {GRID[2]}",
        numpy_helpers="\n\n\n".join(helpers) + "\n\n" if helpers else "",
        params="".join(f", {name}" for name in f.code_params),
        forward_reference=expr.to_numpy_source(f.forward),
        gradient_reference_doc=gradient_doc,
        gradient_reference=gradient_reference,
        function=f.function_name,
        layer=f.layer_name,
    )


def _shaped_like_x(numpy_source: str) -> str:
    return f"np.asarray(np.broadcast_to({numpy_source}, x.shape), dtype=x.dtype)"


def files(op: str | ops.OpSpec, /, module_name: str | None = None, **params: Any) -> dict[str, str]:
    """``{"<module_name>.py": module source, "test_<module_name>.py": test source}``."""
    module_name = module_name or default_module_name(op)
    return {
        f"{module_name}.py": module_source(op, **params),
        f"test_{module_name}.py": test_source(op, module_name=module_name, **params),
    }
