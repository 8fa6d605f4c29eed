"""User ops: :func:`compile_op` and the checks of its name, parameters and declared points."""

from __future__ import annotations

import ast
import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tensorflow as tf

import ops
from explorer.expr.backends import evaluate_number, to_tf
from explorer.expr.latex import to_latex
from explorer.expr.parse import MAX_EXPONENT, check_param_name, parse
from explorer.expr.tree import ExpressionError, column_of, exponent_parameter, walk

MAX_PARAMS = 3
MAX_POINTS = 20
_NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")


def _check_params(params: Mapping[str, Sequence[float]] | None) -> tuple[ops.Param, ...]:
    if params is None:
        return ()
    if not isinstance(params, Mapping):
        raise ExpressionError("params must map a name to (default, low, high)", expression="params")
    if len(params) > MAX_PARAMS:
        raise ExpressionError(f"{len(params)} parameters given; at most {MAX_PARAMS} are allowed", expression="params")
    checked = []
    for name, triple in params.items():
        check_param_name(name)
        if isinstance(triple, (str, bytes)) or not isinstance(triple, Sequence) or len(triple) != 3:
            raise ExpressionError("must be (default, low, high)", expression=name)
        if any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in triple):
            raise ExpressionError("default, low and high must be numbers", expression=name)
        default, low, high = (float(v) for v in triple)
        if not all(math.isfinite(v) for v in (default, low, high)):
            raise ExpressionError("default, low and high must be finite", expression=name)
        if not low < high:
            raise ExpressionError(f"low ({low:g}) must be below high ({high:g})", expression=name)
        if not low <= default <= high:
            raise ExpressionError(f"default {default:g} is outside [{low:g}, {high:g}]", expression=name)
        checked.append(ops.Param(name, default, low, high, help=f"user parameter in [{low:g}, {high:g}]"))
    return tuple(checked)


def _check_op_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME_PATTERN.fullmatch(name):
        raise ExpressionError(
            f"op name {name!r} is not allowed; use 1-40 ASCII letters, digits or '_', starting with a letter",
            expression="name",
        )
    if name in ops.names():
        raise ExpressionError(f"op name {name!r} is not allowed: a built-in op has that name", expression="name")
    return name


def _check_parameter_exponents(tree: ast.AST, params: Mapping[str, ops.Param], expression: str) -> None:
    """A parameter used as an exponent must keep |exponent| <= 16 over its whole slider range."""
    for node in walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            name = exponent_parameter(node.right)
            if name is not None and name in params:
                param = params[name]
                if max(abs(param.low), abs(param.high)) > MAX_EXPONENT:
                    raise ExpressionError(
                        f"parameter {name!r} is an exponent, so its range [{param.low:g}, {param.high:g}] must lie "
                        f"within [-{MAX_EXPONENT:g}, {MAX_EXPONENT:g}]; this is not allowed",
                        expression,
                        column_of(node),
                    )


def _check_points(points: Iterable[Any] | None, names: tuple[str, ...], defaults: Mapping[str, float]):
    """Normalise declared points to (value or expression text, kind, parsed tree or None)."""
    checked = []
    for index, point in enumerate(points or ()):
        label = f"points[{index}]"
        if index >= MAX_POINTS:
            raise ExpressionError(f"at most {MAX_POINTS} points are allowed", expression="points")
        kind = "jump"
        value = point
        if isinstance(point, Mapping):
            value, kind = point.get("x"), point.get("kind", "jump")
        elif isinstance(point, Sequence) and not isinstance(point, (str, bytes)):
            if len(point) != 2:
                raise ExpressionError("a point is a number, an expression or (x, kind)", expression=label)
            value, kind = point
        if kind not in ops.KINDS:
            raise ExpressionError(f"kind {kind!r} is not allowed; one of {', '.join(ops.KINDS)}", expression=label)
        if isinstance(value, str):
            tree = parse(value, names, expression=label, allow_x=False)
            at_defaults = evaluate_number(tree, defaults)
            if not math.isfinite(at_defaults):
                raise ExpressionError(
                    f"is {at_defaults} at the default parameters, not a finite number", expression=label
                )
            checked.append((value, kind, tree))
        elif isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value)):
            checked.append((float(value), kind, None))
        else:
            raise ExpressionError(f"a point must be a finite number or an expression, got {value!r}", expression=label)
    return checked


def compile_op(
    name: str,
    forward: str,
    gradient: str,
    params: Mapping[str, Sequence[float]] | None = None,
    points: Iterable[Any] | None = (),
    *,
    title: str | None = None,
) -> ops.OpSpec:
    """A user op as an :class:`ops.OpSpec` (``builtin=False``, family "override").

    ``params`` maps up to three names to ``(default, low, high)``; ``points`` are numbers,
    expressions of the parameters (``"k"``, ``"-1/k"``) or ``(x, kind)`` pairs (kind defaults
    to "jump"). ``compile_op(spec.key, **spec.source)`` rebuilds the same op, and ``spec.source``
    holds only JSON types (for URLs and export). Every rejection is an :class:`ExpressionError`.
    """
    key = _check_op_name(name)
    param_list = _check_params(params)
    by_name = {p.name: p for p in param_list}
    names = tuple(by_name)
    forward_tree = parse(forward, names, expression="forward")
    gradient_tree = parse(gradient, names, expression="gradient")
    _check_parameter_exponents(forward_tree, by_name, "forward")
    _check_parameter_exponents(gradient_tree, by_name, "gradient")
    declared = _check_points(points, names, {p.name: p.default for p in param_list})

    def forward_fn(x: tf.Tensor, values: Mapping[str, tf.Tensor]) -> tf.Tensor:
        return to_tf(forward_tree, x, values)

    def surrogate(x: tf.Tensor, values: Mapping[str, tf.Tensor]) -> tf.Tensor:
        return to_tf(gradient_tree, x, values)

    def declared_points(values: Mapping[str, float], _dtype: str) -> list[ops.Point]:
        found = []
        for value, kind, tree in declared:
            at = value if tree is None else evaluate_number(tree, {k: float(v) for k, v in values.items()})
            if math.isfinite(at):  # e.g. -1/k at k = 0: no such point
                found.append(ops.Point(float(at), kind, "declared by the user"))
        return found

    source = {
        "forward": forward,
        "gradient": gradient,
        "params": {p.name: [p.default, p.low, p.high] for p in param_list},
        "points": [value if kind == "jump" else [value, kind] for value, kind, _ in declared],
    }
    return ops.OpSpec(
        key=key,
        title=title or key,
        family="override",
        params=param_list,
        forward_fn=forward_fn,
        surrogate=surrogate,
        forward_tex=to_latex(forward_tree),
        grad_tex=to_latex(gradient_tree),
        why="A user-defined op: the forward and the custom gradient were written as expressions.",
        reference="User expression (Editor page).",
        declared_points=declared_points,
        builtin=False,
        source=source,
    )
