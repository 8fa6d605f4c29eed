"""Source back ends: the expression as TensorFlow code (exported modules) or NumPy code (their tests).

Both are driven by :func:`explorer.expr.backends.emit`, like the evaluators, and parenthesise
by Python precedence only where needed.
"""

from __future__ import annotations

import ast
import math

from explorer.expr.backends import emit, expansion_tree
from explorer.expr.functions import CONDITION, FUNCTIONS, Function
from explorer.expr.tree import ATOM, COMPARISON, POWER, PRECEDENCE, PRODUCT, UNARY, body, depends_on_x, functions_used


class _Source:
    """Rendered source text with its precedence; ``literal`` marks a plain Python number."""

    def __init__(self, text: str, precedence: int, literal: bool = False):
        self.text = text
        self.precedence = precedence
        self.literal = literal

    def wrap(self, minimum: int) -> str:
        return self.text if self.precedence >= minimum else f"({self.text})"


class _PythonText:
    """What TensorFlow and NumPy source share: names and operators."""

    def name(self, name: str) -> _Source:
        return _Source(name, ATOM)

    def negate(self, value: _Source) -> _Source:
        inner = value.wrap(UNARY)
        return _Source(f"-{inner}" if not inner.startswith("-") else f"-({inner})", UNARY)

    def binary(self, op: str, left: _Source, right: _Source) -> _Source:
        precedence = PRECEDENCE[op]
        if op == "**":  # right-associative; the base of ** binds tighter than unary minus
            return _Source(f"{left.wrap(POWER + 1)} ** {right.wrap(UNARY)}", POWER)
        return _Source(f"{left.wrap(precedence)} {op} {right.wrap(precedence + 1)}", precedence)

    def ordering(self, op: str, left: _Source, right: _Source) -> _Source:
        return _Source(f"{left.wrap(COMPARISON + 1)} {op} {right.wrap(COMPARISON + 1)}", COMPARISON)


def _python_number(value: float) -> _Source:
    if math.isnan(value):
        return _Source('float("nan")', ATOM, literal=True)
    if math.isinf(value):
        text = 'float("inf")' if value > 0 else '-float("inf")'
        return _Source(text, ATOM if value > 0 else UNARY, literal=True)
    text = repr(float(value))
    return _Source(text, UNARY if value < 0 or text.startswith("-") else ATOM, literal=True)


class TensorFlowSource(_PythonText):
    """TensorFlow source text. ``x`` is a float tensor; parameters are tensors of x's dtype."""

    def const(self, value: float) -> _Source:
        return _python_number(value)

    def compare(self, op: str, left: _Source, right: _Source) -> _Source:
        if op in ("==", "!="):
            if left.literal:  # put the tensor first so the number takes its dtype
                left, right = right, left
            function = "tf.equal" if op == "==" else "tf.not_equal"
            return _Source(f"{function}({left.text}, {right.text})", ATOM)
        return self.ordering(op, left, right)

    def all_true(self, conditions: list[_Source]) -> _Source:
        result = conditions[0]
        for condition in conditions[1:]:
            result = _Source(f"tf.logical_and({result.text}, {condition.text})", ATOM)
        return result

    def as_number(self, condition: _Source) -> _Source:
        return _Source(f"tf.cast({condition.text}, x.dtype)", ATOM)

    def nonzero(self, value: _Source) -> _Source:
        if value.literal:
            return _Source(f"tf.not_equal(tf.constant({value.text}, x.dtype), 0.0)", ATOM)
        return _Source(f"tf.not_equal({value.text}, 0.0)", ATOM)

    def call(self, function: Function, args: list[_Source]) -> _Source:
        values = [index for index, name in enumerate(function.args) if name != CONDITION]
        if values and all(
            args[index].literal for index in values
        ):  # tf.maximum(1.0, 2.0) would be float32: keep x's dtype
            args = list(args)
            args[values[0]] = _Source(f"tf.constant({args[values[0]].text}, x.dtype)", ATOM)
        return _Source(f"{function.tf_source}({', '.join(arg.text for arg in args)})", ATOM)


class NumpySource(_PythonText):
    """NumPy source text in x's dtype: every number is ``_D(value)`` with ``_D = x.dtype.type``."""

    def const(self, value: float) -> _Source:
        if math.isnan(value):
            return _Source('_D(float("nan"))', ATOM)
        if math.isinf(value):
            return _Source('_D(float("inf"))' if value > 0 else '_D(-float("inf"))', ATOM)
        return _Source(f"_D({float(value)!r})", ATOM)

    def compare(self, op: str, left: _Source, right: _Source) -> _Source:
        if op in ("==", "!="):
            function = "np.equal" if op == "==" else "np.not_equal"
            return _Source(f"{function}({left.text}, {right.text})", ATOM)
        return self.ordering(op, left, right)

    def all_true(self, conditions: list[_Source]) -> _Source:
        joined = ", ".join(condition.text for condition in conditions)
        return _Source(f"np.logical_and.reduce(np.broadcast_arrays({joined}))", ATOM)

    def as_number(self, condition: _Source) -> _Source:
        return _Source(f"np.asarray({condition.text}).astype(_D)", ATOM)

    def nonzero(self, value: _Source) -> _Source:
        return _Source(f"np.not_equal({value.text}, 0)", ATOM)

    def call(self, function: Function, args: list[_Source]) -> _Source:
        return _Source(f"np.asarray({function.numpy_source}({', '.join(arg.text for arg in args)})).astype(_D)", ATOM)


def to_python_source(tree: ast.AST) -> str:
    """TensorFlow source text computing the expression, shaped like ``x``.

    The text assumes ``tf`` (tensorflow), a float tensor ``x`` and the parameters as tensors of
    x's dtype are in scope, e.g. ``tf.where(x > 0.0, tf.constant(1.0, x.dtype), 0.0)``. It
    builds the same TensorFlow ops as :func:`explorer.expr.to_tf`.
    """
    node = body(tree)
    rendered = emit(node, TensorFlowSource())
    if not depends_on_x(node):
        return f"tf.ones_like(x) * {rendered.wrap(PRODUCT + 1)}"
    return rendered.text


def to_numpy_source(tree: ast.AST) -> str:
    """NumPy source text of the expression (not yet broadcast to x's shape).

    Assumes ``np``, an array ``x``, ``_D = x.dtype.type``, the parameters as ``_D`` scalars and
    the definitions of :func:`numpy_helpers` are in scope.
    """
    return emit(body(tree), NumpySource()).text


def numpy_helpers(*trees: ast.AST | None) -> tuple[list[str], list[str]]:
    """(standard-library modules to import, helper definitions) that the NumPy source of ``trees`` needs."""
    needed: set[str] = set()
    pending = set().union(*(functions_used(tree) for tree in trees if tree is not None))
    while pending:  # an expansion calls the functions it is built from
        name = pending.pop()
        needed.add(name)
        if FUNCTIONS[name].expansion:
            pending |= functions_used(expansion_tree(FUNCTIONS[name].expansion)) - needed
    functions = [function for name, function in FUNCTIONS.items() if name in needed]
    imports = sorted({module for function in functions for module in function.numpy_imports})
    helpers = [function.numpy_helper for function in functions if function.numpy_helper]
    return imports, helpers
