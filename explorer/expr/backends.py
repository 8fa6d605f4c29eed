"""The one tree walk (:func:`emit`) and the back ends that evaluate it with TensorFlow and NumPy.

Every back end, including the source back ends in :mod:`explorer.expr.source`, is driven by
:func:`emit`, so they agree by construction. A back end maps: ``const``, ``name``, ``negate``,
``binary`` (``+ - * / **``), ``compare`` (a boolean), ``all_true`` (chained comparisons),
``as_number`` (boolean -> 0/1), ``nonzero`` and ``call`` (a direct :class:`Function`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

import ops
from explorer.expr.functions import CONDITION, FUNCTIONS, Function
from explorer.expr.tree import (
    BINARY_OPS,
    COMPARE_OPS,
    CONSTANTS,
    ExpressionError,
    body,
    column_of,
    depends_on_x,
    is_constant,
)


def emit(node: ast.AST, backend: Any, fold: bool = True, bound: Mapping[str, Any] | None = None) -> Any:
    """Walk a validated tree into ``backend``; ``bound`` maps an expansion's argument names to values."""
    if fold and not isinstance(node, ast.Constant) and is_constant(node):
        return backend.const(fold_constant(node))
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return backend.const(float(node.value))
    if isinstance(node, ast.Name):
        if bound is not None and node.id in bound:
            return bound[node.id]
        if node.id in CONSTANTS:
            return backend.const(CONSTANTS[node.id])
        return backend.name(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = emit(node.operand, backend, fold, bound)
        return backend.negate(operand) if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY_OPS:
        left = emit(node.left, backend, fold, bound)
        right = emit(node.right, backend, fold, bound)
        return backend.binary(BINARY_OPS[type(node.op)], left, right)
    if isinstance(node, ast.Compare):
        return backend.as_number(emit_condition(node, backend, fold, bound))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        function = FUNCTIONS[node.func.id]
        if len(node.args) != function.arity or node.keywords:
            raise ExpressionError(f"{function.signature} takes {function.arity} arguments", column=column_of(node))
        args = [
            emit_condition(argument, backend, fold, bound)
            if name == CONDITION
            else emit(argument, backend, fold, bound)
            for name, argument in zip(function.args, node.args, strict=True)
        ]
        if function.expansion:
            return emit(expansion_tree(function.expansion), backend, fold, dict(zip(function.args, args, strict=True)))
        return backend.call(function, args)
    raise ExpressionError(
        f"{type(node).__name__} is not allowed (was the tree made by parse()?)", column=column_of(node)
    )


def emit_condition(node: ast.AST, backend: Any, fold: bool, bound: Mapping[str, Any] | None = None) -> Any:
    """A boolean: a comparison (chains joined with all_true), else ``value != 0``."""
    if isinstance(node, ast.Compare) and all(type(op) in COMPARE_OPS for op in node.ops):
        operands = [emit(operand, backend, fold, bound) for operand in (node.left, *node.comparators)]
        checks = [
            backend.compare(COMPARE_OPS[type(op)], left, right)
            for op, left, right in zip(node.ops, operands, operands[1:], strict=False)
        ]
        return checks[0] if len(checks) == 1 else backend.all_true(checks)
    return backend.nonzero(emit(node, backend, fold, bound))


@functools.cache
def expansion_tree(text: str) -> ast.expr:
    """The tree of a table entry's expansion (our own text, checked by the tests, never user text)."""
    return ast.parse(text, mode="eval").body


def fold_constant(node: ast.AST) -> float:
    """Value of a sub-expression without x or parameters, computed in float64."""
    with np.errstate(all="ignore"):
        return float(emit(node, NumpyBackend(None, {}, np.dtype(np.float64)), fold=False))


def apply_binary(op: str, left, right):
    """``+ - * / **`` and the ordering comparisons, on tensors or arrays."""
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "/":
        return left / right
    if op == "**":
        return left**right
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    raise ExpressionError(f"operator {op!r} is not allowed")


class TensorFlowBackend:
    def __init__(self, x: tf.Tensor, params: Mapping[str, tf.Tensor]):
        self.x = x
        self.dtype = x.dtype
        self.params = params

    def const(self, value: float) -> tf.Tensor:
        return tf.constant(value, dtype=self.dtype)

    def name(self, name: str) -> tf.Tensor:
        if name == "x":
            return self.x
        if name not in self.params:
            raise ExpressionError(f"no value given for parameter {name!r}", expression=name)
        return self.params[name]

    def negate(self, value):
        return -value

    def binary(self, op: str, left, right):
        return apply_binary(op, left, right)

    def compare(self, op: str, left, right):
        if op == "==":
            return tf.equal(left, right)
        if op == "!=":
            return tf.not_equal(left, right)
        return apply_binary(op, left, right)

    def all_true(self, conditions):
        result = conditions[0]
        for condition in conditions[1:]:
            result = tf.logical_and(result, condition)
        return result

    def as_number(self, condition):
        return tf.cast(condition, self.dtype)

    def nonzero(self, value):
        return tf.not_equal(value, tf.constant(0.0, dtype=self.dtype))

    def call(self, function: Function, args):
        return function.tf(*args)


class NumpyBackend:
    """Every value is a NumPy array or scalar of ``dtype`` (never a Python float: 1/0 is inf)."""

    def __init__(self, x: np.ndarray | None, params: Mapping[str, float], dtype: np.dtype):
        self.x = x
        self.params = params
        self.dtype = dtype

    def const(self, value: float):
        return self.dtype.type(value)

    def name(self, name: str):
        if name == "x":
            if self.x is None:
                raise ExpressionError("'x' has no value here (this value must not depend on x)", expression="x")
            return self.x
        if name not in self.params:
            raise ExpressionError(f"no value given for parameter {name!r}", expression=name)
        return self.dtype.type(self.params[name])

    def negate(self, value):
        return -value

    def binary(self, op: str, left, right):
        return apply_binary(op, left, right)

    def compare(self, op: str, left, right):
        if op == "==":
            return np.equal(left, right)
        if op == "!=":
            return np.not_equal(left, right)
        return apply_binary(op, left, right)

    def all_true(self, conditions):
        return np.logical_and.reduce(np.broadcast_arrays(*conditions))

    def as_number(self, condition):
        return np.asarray(condition).astype(self.dtype)[()]

    def nonzero(self, value):
        return np.not_equal(value, 0)

    def call(self, function: Function, args):
        return np.asarray(function.numpy(*args)).astype(self.dtype)[()]


def to_tf(tree: ast.AST, x: Any, params: Mapping[str, Any] | None = None) -> tf.Tensor:
    """The expression as TensorFlow ops on ``x``; the result has x's shape and dtype.

    ``params`` maps parameter names to numbers or scalar tensors (cast to x's dtype). Pure
    TensorFlow: works eagerly, in ``tf.function`` and with ``jit_compile=True``.
    """
    x = ops.as_float_tensor(x)
    values = {name: tf.cast(value, x.dtype) for name, value in (params or {}).items()}
    node = body(tree)
    result = emit(node, TensorFlowBackend(x, values))
    if not depends_on_x(node):
        result = tf.ones_like(x) * result
    return result


def to_numpy(tree: ast.AST, x: Any, params: Mapping[str, float] | None = None) -> np.ndarray:
    """The same expression evaluated with NumPy in x's dtype (float64 for Python lists)."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        result = emit(body(tree), NumpyBackend(x, dict(params or {}), x.dtype))
        return np.array(np.broadcast_to(result, x.shape), dtype=x.dtype)


def evaluate_number(tree: ast.AST, params: Mapping[str, float] | None = None) -> float:
    """Value of an expression without x (a declared point) as a Python float, in float64."""
    with np.errstate(all="ignore"):
        return float(emit(body(tree), NumpyBackend(None, dict(params or {}), np.dtype(np.float64))))
