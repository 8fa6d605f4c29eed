"""User ops from expressions: a small, safe language compiled to TensorFlow.

A user writes a forward and a custom gradient g(x) as expressions in ``x`` and up to three named
parameters; :func:`compile_op` turns them into an ordinary :class:`ops.OpSpec` (backward
``dy * g(x)``) that every view, the trainer and the exporter use like a built-in op::

    spec = compile_op("my_spike", "where(x > 0, 1, 0)", "1 / (k * abs(x) + 1) ** 2",
                      params={"k": (25.0, 1.0, 100.0)}, points=[0.0])

The language: numbers, ``x``, parameter names, ``pi``, ``e``, ``+ - * / **``, unary ``-``/``+``,
comparisons ``< <= > >= == !=`` (chains such as ``0 < x < 1`` allowed) and the functions in
:data:`FUNCTIONS`. Text is parsed with :func:`ast.parse` (which only parses) and every node is
checked against an allowlist; nothing is ever evaluated by Python (no eval/exec, no compiled code
object). Trees are then walked by small back ends that build TensorFlow ops, NumPy values, Python
source text or LaTeX from the same structure.

Semantics, identical in every back end:

- A comparison used as a number is 0.0 or 1.0 in the input dtype; ``where(c, a, b)`` picks ``a``
  where ``c`` holds (a comparison) or is non-zero (any other expression).
- ``sign`` is ``tf.sign`` (``sign(0) = 0``); ``round`` rounds half to even (``tf.round``);
  ``clip(v, lo, hi) = minimum(maximum(v, lo), hi)``, so its gradient passes AT both bounds.
- Sub-expressions without ``x`` or parameters are folded in float64 first (``2 * pi`` becomes one
  number), then cast to the input dtype.
- An expression that does not depend on ``x`` is broadcast to x's shape and dtype
  (``tf.ones_like(x) * value``); a gradient written as ``1`` is a tensor shaped like ``x``.
- Exponents must not depend on ``x``: a number (after folding) with ``|p| <= 16``, or a parameter
  (``k``, ``-k``) whose slider range lies within [-16, 16]. ``2 ** x`` is written ``exp(x * log(2))``.
- Values may be finite, NaN or +-inf (``exp(exp(x))`` overflows float32, ``log(x)`` is NaN for
  ``x < 0``): compiling never fails on the values, the gradient checker flags them later.
"""

from __future__ import annotations

import ast
import keyword
import math
import numbers
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import ops

MAX_LENGTH = 500
MAX_DEPTH = 30
MAX_NODES = 200
MAX_EXPONENT = 16.0
MAX_PARAMS = 3
MAX_POINTS = 20

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

# name -> number of arguments
FUNCTIONS: dict[str, int] = {
    "abs": 1,
    "exp": 1,
    "log": 1,
    "log1p": 1,
    "sqrt": 1,
    "sin": 1,
    "cos": 1,
    "tanh": 1,
    "sigmoid": 1,
    "erf": 1,
    "sign": 1,
    "floor": 1,
    "round": 1,
    "where": 3,
    "minimum": 2,
    "maximum": 2,
    "clip": 3,
}

# The TensorFlow function each one-argument function (and minimum/maximum) maps to, as source text.
_TF_SOURCE = {
    "abs": "tf.abs",
    "exp": "tf.exp",
    "log": "tf.math.log",
    "log1p": "tf.math.log1p",
    "sqrt": "tf.sqrt",
    "sin": "tf.sin",
    "cos": "tf.cos",
    "tanh": "tf.tanh",
    "sigmoid": "tf.math.sigmoid",
    "erf": "tf.math.erf",
    "sign": "tf.sign",
    "floor": "tf.floor",
    "round": "tf.round",
    "minimum": "tf.minimum",
    "maximum": "tf.maximum",
}
_TF_FUNCTIONS: dict[str, Callable[..., tf.Tensor]] = {
    "abs": tf.abs,
    "exp": tf.exp,
    "log": tf.math.log,
    "log1p": tf.math.log1p,
    "sqrt": tf.sqrt,
    "sin": tf.sin,
    "cos": tf.cos,
    "tanh": tf.tanh,
    "sigmoid": tf.math.sigmoid,
    "erf": tf.math.erf,
    "sign": tf.sign,
    "floor": tf.floor,
    "round": tf.round,
    "minimum": tf.minimum,
    "maximum": tf.maximum,
}

_BINARY_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_COMPARE_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_FORBIDDEN_BINARY = {
    ast.FloorDiv: "floor division '//' (use floor(a / b))",
    ast.Mod: "the modulo operator '%'",
    ast.MatMult: "matrix multiplication '@'",
    ast.LShift: "bit shift '<<'",
    ast.RShift: "bit shift '>>'",
    ast.BitOr: "bitwise '|'",
    ast.BitXor: "bitwise '^' (for powers write '**')",
    ast.BitAnd: "bitwise '&'",
}
_FORBIDDEN_NODES = {
    ast.Attribute: "attribute access ('.name')",
    ast.Subscript: "subscripts ('[...]')",
    ast.Slice: "slices",
    ast.Lambda: "lambda",
    ast.IfExp: "conditional expressions ('a if c else b'; use where(c, a, b))",
    ast.BoolOp: "'and' / 'or' (multiply comparisons instead, or use where)",
    ast.NamedExpr: "assignment expressions (':=')",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
    ast.List: "lists",
    ast.Tuple: "tuples (a comma outside a function call)",
    ast.Set: "sets",
    ast.Dict: "dicts",
    ast.JoinedStr: "strings and f-strings",
    ast.FormattedValue: "f-strings",
    ast.Starred: "starred arguments ('*')",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}
# AST nodes that carry no structure of their own (operators, load/store markers).
_LEAF_MARKERS = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)
_NAME_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")
_PARAM_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,19}")
_RESERVED = frozenset({"x", *CONSTANTS, *FUNCTIONS})


class ExpressionError(ValueError):
    """A rejected expression or op declaration.

    ``expression`` names the input ("forward", "gradient", "points[0]", "params", a parameter
    name or "name"); ``column`` is the 1-based column of the offending text (None if unknown)
    and ``fragment`` that text.
    """

    def __init__(
        self, message: str, expression: str = "expression", column: int | None = None, fragment: str | None = None
    ):
        self.expression = expression
        self.column = column
        self.fragment = fragment
        self.reason = message
        where = f" at column {column}" if column is not None else ""
        shown = f": {fragment!r}" if fragment else ""
        super().__init__(f"{expression}: {message}{where}{shown}")


# -- parsing and validation ------------------------------------------------------------------


def parse(
    text: str, params: Iterable[str] = (), *, expression: str = "expression", allow_x: bool = True
) -> ast.Expression:
    """Parse ``text`` into a validated ``ast.Expression`` or raise :class:`ExpressionError`.

    ``params`` are the parameter names the text may use; ``allow_x=False`` is for expressions
    that must not depend on x (declared points).
    """
    names = tuple(params.keys() if isinstance(params, Mapping) else params)
    for name in names:
        _check_param_name(name)
    _check_raw_text(text, expression)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        column = error.offset if error.offset and error.offset > 0 else None
        raise ExpressionError(f"syntax error ({error.msg})", expression, column, _fragment_at(text, column)) from None
    except (RecursionError, MemoryError, ValueError):
        raise ExpressionError(f"the expression is too deeply nested (at most {MAX_DEPTH} levels)", expression) from None
    _check_size(tree, text, expression)
    _Validator(text, expression, frozenset(names), allow_x).check(tree.body)
    return tree


def _check_raw_text(text: Any, expression: str) -> None:
    """Checks made before ast.parse: the parser itself must never see hostile sizes."""
    if not isinstance(text, str):
        raise ExpressionError(f"must be text, got {type(text).__name__}", expression)
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"{len(text)} characters long is not allowed; at most {MAX_LENGTH}", expression)
    if not text.strip():
        raise ExpressionError("an empty expression is not allowed; write one such as 'x' or '1'", expression)
    depth = 0
    for index, char in enumerate(text):
        column = index + 1
        if ord(char) > 127:
            name = unicodedata.name(char, f"U+{ord(char):04X}")
            raise ExpressionError(
                f"non-ASCII character {char!r} ({name}) is not allowed; names are plain ASCII "
                "(is it a look-alike of a Latin letter?)",
                expression,
                column,
                char,
            )
        if char in "\r\n":
            raise ExpressionError("line breaks are not allowed; write one expression on one line", expression, column)
        if char != "\t" and not char.isprintable():
            raise ExpressionError(f"control character {char!r} is not allowed", expression, column)
        if char == ";":
            raise ExpressionError("';' (more than one statement) is not allowed", expression, column, char)
        if char == "#":
            raise ExpressionError("comments ('#') are not allowed", expression, column, char)
        if char in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ExpressionError(
                    f"brackets are nested more than {MAX_DEPTH} deep, which is not allowed", expression, column, char
                )
        elif char in ")]}":
            depth -= 1


def _check_size(tree: ast.Expression, text: str, expression: str) -> None:
    """Node count and depth, computed without recursion (the tree may still be deep here)."""
    count = 0
    stack = [(child, 1) for child in ast.iter_child_nodes(tree)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, _LEAF_MARKERS):
            continue
        count += 1
        if depth > MAX_DEPTH:
            raise ExpressionError(
                f"the expression is nested more than {MAX_DEPTH} levels deep, which is not allowed",
                expression,
                _column(node),
                _segment(text, node),
            )
        if count > MAX_NODES:
            raise ExpressionError(f"the expression has more than {MAX_NODES} parts, which is not allowed", expression)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _column(node: ast.AST) -> int | None:
    offset = getattr(node, "col_offset", None)  # ASCII-only text: byte offset == character offset
    return None if offset is None else offset + 1


def _segment(text: str, node: ast.AST) -> str | None:
    try:
        segment = ast.get_source_segment(text, node)
    except Exception:  # noqa: BLE001 - a missing position only loses the quote in the message
        return None
    if segment and len(segment) > 60:
        segment = segment[:57] + "..."
    return segment


def _fragment_at(text: str, column: int | None) -> str | None:
    if column is None:
        return None
    return text[column - 1 : column + 19] or None


class _Validator:
    def __init__(self, text: str, expression: str, params: frozenset[str], allow_x: bool):
        self.text = text
        self.expression = expression
        self.params = params
        self.allow_x = allow_x

    def fail(self, node: ast.AST, what: str, suffix: str = "is not allowed") -> ExpressionError:
        raise ExpressionError(f"{what} {suffix}", self.expression, _column(node), _segment(self.text, node))

    def allowed_names(self) -> str:
        return ", ".join((["x"] if self.allow_x else []) + sorted(self.params) + list(CONSTANTS))

    def check(self, node: ast.AST) -> None:
        kind = type(node)
        if kind in _FORBIDDEN_NODES:
            what = _FORBIDDEN_NODES[kind]
            if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
                what = f"attribute access ('.{node.attr}', a double-underscore name)"
            elif isinstance(node, ast.Attribute):
                what = f"attribute access ('.{node.attr}')"
            self.fail(node, what)
        elif isinstance(node, ast.Constant):
            self.check_constant(node)
        elif isinstance(node, ast.Name):
            self.check_name(node)
        elif isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                self.fail(node, "'not'")
            if isinstance(node.op, ast.Invert):
                self.fail(node, "bitwise '~'")
            self.check(node.operand)
        elif isinstance(node, ast.BinOp):
            if type(node.op) in _FORBIDDEN_BINARY:
                self.fail(node, _FORBIDDEN_BINARY[type(node.op)])
            self.check(node.left)
            self.check(node.right)
            if isinstance(node.op, ast.Pow):
                self.check_exponent(node)
        elif isinstance(node, ast.Compare):
            for op in node.ops:
                if type(op) not in _COMPARE_OPS:
                    self.fail(node, "'is' / 'in' comparisons")
            for operand in (node.left, *node.comparators):
                self.check(operand)
        elif isinstance(node, ast.Call):
            self.check_call(node)
        else:
            self.fail(node, f"{kind.__name__} expressions")

    def check_constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bool) or value is None or value is Ellipsis:
            self.fail(node, f"the constant {value!r}")
        if isinstance(value, (str, bytes)):
            self.fail(node, "strings and bytes")
        if isinstance(value, complex):
            self.fail(node, "complex numbers")
        if not isinstance(value, (int, float)):
            self.fail(node, f"the constant {type(value).__name__}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            self.fail(node, "a number this large (it is inf in floating point)")

    def check_name(self, node: ast.Name) -> None:
        name = node.id
        if name.startswith("_"):
            self.fail(node, f"the name {name!r} (names starting with '_')")
        if name in FUNCTIONS:
            self.fail(node, f"the function '{name}' without a call", suffix=f"is not allowed; write {name}(...)")
        if name == "x" and not self.allow_x:
            self.fail(node, "'x' here", suffix="is not allowed (this value must not depend on x)")
        if name != "x" and name not in self.params and name not in CONSTANTS:
            self.fail(node, f"the name {name!r}", suffix=f"is not allowed; known names: {self.allowed_names()}")

    def check_call(self, node: ast.Call) -> None:
        if not isinstance(node.func, ast.Name):
            self.check(node.func)  # attribute access, subscripts... get their own message
            self.fail(node, "calling the result of an expression")
        name = node.func.id
        if name not in FUNCTIONS:
            self.fail(
                node,
                f"calling {name!r}",
                suffix=f"is not allowed; functions: {', '.join(FUNCTIONS)}",
            )
        if node.keywords:
            self.fail(node, "keyword arguments ('name=value')")
        for argument in node.args:
            if isinstance(argument, ast.Starred):
                self.fail(argument, "starred arguments ('*')")
        arity = FUNCTIONS[name]
        if len(node.args) != arity:
            plural = "s" if arity != 1 else ""
            self.fail(
                node,
                f"{name}() takes {arity} argument{plural}, got {len(node.args)};",
                suffix=f"this is not allowed ({_SIGNATURES[name]})",
            )
        for argument in node.args:
            self.check(argument)

    def check_exponent(self, node: ast.BinOp) -> None:
        exponent = node.right
        used = _names(exponent)
        if "x" in used:
            self.fail(node, "an exponent that depends on x", suffix="is not allowed; write exp(... * log(...))")
        if not used - set(CONSTANTS):
            value = _fold(exponent)
            if not abs(value) <= MAX_EXPONENT:  # also rejects NaN
                self.fail(exponent, f"the exponent {value:g}", suffix=f"is not allowed; |exponent| <= {MAX_EXPONENT:g}")
            return
        if _exponent_parameter(exponent) is None:
            self.fail(
                node,
                "this exponent",
                suffix="is not allowed; an exponent is a number, a parameter or minus a parameter",
            )


_SIGNATURES = {name: f"{name}(v)" for name, arity in FUNCTIONS.items() if arity == 1}
_SIGNATURES.update(
    where="where(condition, a, b)", minimum="minimum(a, b)", maximum="maximum(a, b)", clip="clip(v, lo, hi)"
)


def _walk(node: ast.AST) -> list[ast.AST]:
    """Every node under ``node`` (ast.walk without its lazy import, so parsing imports nothing)."""
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(ast.iter_child_nodes(current))
    return found


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in _walk(node) if isinstance(n, ast.Name)}


def _depends_on_x(tree: ast.AST) -> bool:
    return "x" in _names(tree)


def _is_constant(node: ast.AST) -> bool:
    return _names(node) <= set(CONSTANTS)


def _exponent_parameter(node: ast.AST) -> str | None:
    """The parameter name of an exponent written ``k``, ``-k`` or ``+k``; None otherwise."""
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if isinstance(node, ast.Name) and node.id not in CONSTANTS and node.id != "x":
        return node.id
    return None


def _body(tree: ast.AST) -> ast.expr:
    return tree.body if isinstance(tree, ast.Expression) else tree


# -- back ends -------------------------------------------------------------------------------
#
# One walk (_emit) drives every back end, so TensorFlow, NumPy and the exported source agree by
# construction. A back end maps: const, name, negate, binary (+ - * / **), compare (a boolean),
# all_true (chained comparisons), as_number (boolean -> 0/1), nonzero, call, where.


def _emit(node: ast.AST, backend: Any, fold: bool = True) -> Any:
    if fold and not isinstance(node, ast.Constant) and _is_constant(node):
        return backend.const(_fold(node))
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return backend.const(float(node.value))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return backend.const(CONSTANTS[node.id])
        return backend.name(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _emit(node.operand, backend, fold)
        return backend.negate(operand) if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left = _emit(node.left, backend, fold)
        right = _emit(node.right, backend, fold)
        return backend.binary(_BINARY_OPS[type(node.op)], left, right)
    if isinstance(node, ast.Compare):
        return backend.as_number(_emit_condition(node, backend, fold))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        name = node.func.id
        if len(node.args) != FUNCTIONS[name] or node.keywords:
            raise ExpressionError(f"{name}() takes {FUNCTIONS[name]} arguments", column=_column(node))
        if name == "where":
            condition, if_true, if_false = node.args
            return backend.where(
                _emit_condition(condition, backend, fold), _emit(if_true, backend, fold), _emit(if_false, backend, fold)
            )
        args = [_emit(argument, backend, fold) for argument in node.args]
        if name == "clip":
            value, low, high = args
            return backend.call("minimum", [backend.call("maximum", [value, low]), high])
        return backend.call(name, args)
    raise ExpressionError(f"{type(node).__name__} is not allowed (was the tree made by parse()?)", column=_column(node))


def _emit_condition(node: ast.AST, backend: Any, fold: bool) -> Any:
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE_OPS for op in node.ops):
        operands = [_emit(operand, backend, fold) for operand in (node.left, *node.comparators)]
        checks = [
            backend.compare(_COMPARE_OPS[type(op)], left, right)
            for op, left, right in zip(node.ops, operands, operands[1:], strict=False)
        ]
        return checks[0] if len(checks) == 1 else backend.all_true(checks)
    return backend.nonzero(_emit(node, backend, fold))


def _fold(node: ast.AST) -> float:
    """Value of a sub-expression without x or parameters, computed in float64."""
    with np.errstate(all="ignore"):
        return float(_emit(node, _NumpyBackend(None, {}, np.dtype(np.float64)), fold=False))


class _TensorFlowBackend:
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
        return _apply_binary(op, left, right)

    def compare(self, op: str, left, right):
        if op == "==":
            return tf.equal(left, right)
        if op == "!=":
            return tf.not_equal(left, right)
        return _apply_binary(op, left, right)

    def all_true(self, conditions):
        result = conditions[0]
        for condition in conditions[1:]:
            result = tf.logical_and(result, condition)
        return result

    def as_number(self, condition):
        return tf.cast(condition, self.dtype)

    def nonzero(self, value):
        return tf.not_equal(value, tf.constant(0.0, dtype=self.dtype))

    def call(self, name: str, args):
        return _TF_FUNCTIONS[name](*args)

    def where(self, condition, if_true, if_false):
        return tf.where(condition, if_true, if_false)


def _apply_binary(op: str, left, right):
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


def _numpy_erf(values: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(values)


def _numpy_sigmoid(values: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(np.zeros_like(values), -values))  # stable for large |v|


_NUMPY_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sigmoid": _numpy_sigmoid,
    "erf": _numpy_erf,
    "sign": np.sign,
    "floor": np.floor,
    "round": np.round,  # half to even, like tf.round
    "minimum": np.minimum,
    "maximum": np.maximum,
}


class _NumpyBackend:
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
        return _apply_binary(op, left, right)

    def compare(self, op: str, left, right):
        if op == "==":
            return np.equal(left, right)
        if op == "!=":
            return np.not_equal(left, right)
        return _apply_binary(op, left, right)

    def all_true(self, conditions):
        return np.logical_and.reduce(np.broadcast_arrays(*conditions))

    def as_number(self, condition):
        return np.asarray(condition).astype(self.dtype)[()]

    def nonzero(self, value):
        return np.not_equal(value, 0)

    def call(self, name: str, args):
        return np.asarray(_NUMPY_FUNCTIONS[name](*args)).astype(self.dtype)[()]

    def where(self, condition, if_true, if_false):
        return np.asarray(np.where(condition, if_true, if_false)).astype(self.dtype)[()]


# Python operator precedence, for parenthesising rendered source.
_ATOM, _POWER, _UNARY, _PRODUCT, _SUM, _COMPARISON = 100, 16, 14, 12, 11, 6
_PRECEDENCE = {"+": _SUM, "-": _SUM, "*": _PRODUCT, "/": _PRODUCT, "**": _POWER}


class _Source:
    """Rendered source text with its precedence; ``literal`` marks a plain Python number."""

    def __init__(self, text: str, precedence: int, literal: bool = False):
        self.text = text
        self.precedence = precedence
        self.literal = literal

    def wrap(self, minimum: int) -> str:
        return self.text if self.precedence >= minimum else f"({self.text})"


def _python_number(value: float) -> _Source:
    if math.isnan(value):
        return _Source('float("nan")', _ATOM, literal=True)
    if math.isinf(value):
        text = 'float("inf")' if value > 0 else '-float("inf")'
        return _Source(text, _ATOM if value > 0 else _UNARY, literal=True)
    text = repr(float(value))
    return _Source(text, _UNARY if value < 0 or text.startswith("-") else _ATOM, literal=True)


class _SourceBackend:
    """TensorFlow source text. ``x`` is a float tensor; parameters are tensors of x's dtype."""

    def const(self, value: float) -> _Source:
        return _python_number(value)

    def name(self, name: str) -> _Source:
        return _Source(name, _ATOM)

    def negate(self, value: _Source) -> _Source:
        inner = value.wrap(_UNARY)
        return _Source(f"-{inner}" if not inner.startswith("-") else f"-({inner})", _UNARY)

    def binary(self, op: str, left: _Source, right: _Source) -> _Source:
        precedence = _PRECEDENCE[op]
        if op == "**":  # right-associative; the base of ** binds tighter than unary minus
            return _Source(f"{left.wrap(_POWER + 1)} ** {right.wrap(_UNARY)}", _POWER)
        return _Source(f"{left.wrap(precedence)} {op} {right.wrap(precedence + 1)}", precedence)

    def compare(self, op: str, left: _Source, right: _Source) -> _Source:
        if op in ("==", "!="):
            if left.literal:  # put the tensor first so the number takes its dtype
                left, right = right, left
            function = "tf.equal" if op == "==" else "tf.not_equal"
            return _Source(f"{function}({left.text}, {right.text})", _ATOM)
        return _Source(f"{left.wrap(_COMPARISON + 1)} {op} {right.wrap(_COMPARISON + 1)}", _COMPARISON)

    def all_true(self, conditions: list[_Source]) -> _Source:
        result = conditions[0]
        for condition in conditions[1:]:
            result = _Source(f"tf.logical_and({result.text}, {condition.text})", _ATOM)
        return result

    def as_number(self, condition: _Source) -> _Source:
        return _Source(f"tf.cast({condition.text}, x.dtype)", _ATOM)

    def nonzero(self, value: _Source) -> _Source:
        if value.literal:
            return _Source(f"tf.not_equal(tf.constant({value.text}, x.dtype), 0.0)", _ATOM)
        return _Source(f"tf.not_equal({value.text}, 0.0)", _ATOM)

    def call(self, name: str, args: list[_Source]) -> _Source:
        if all(arg.literal for arg in args):  # only after clip's expansion; keep the dtype
            args = [_Source(f"tf.constant({args[0].text}, x.dtype)", _ATOM), *args[1:]]
        return _Source(f"{_TF_SOURCE[name]}({', '.join(arg.text for arg in args)})", _ATOM)

    def where(self, condition: _Source, if_true: _Source, if_false: _Source) -> _Source:
        if if_true.literal and if_false.literal:  # tf.where(c, 1.0, 0.0) would be float32
            if_true = _Source(f"tf.constant({if_true.text}, x.dtype)", _ATOM)
        return _Source(f"tf.where({condition.text}, {if_true.text}, {if_false.text})", _ATOM)


# -- public evaluators -----------------------------------------------------------------------


def to_tf(tree: ast.AST, x: Any, params: Mapping[str, Any] | None = None) -> tf.Tensor:
    """The expression as TensorFlow ops on ``x``; the result has x's shape and dtype.

    ``params`` maps parameter names to numbers or scalar tensors (cast to x's dtype). Pure
    TensorFlow: works eagerly, in ``tf.function`` and with ``jit_compile=True``.
    """
    x = ops.as_float_tensor(x)
    values = {name: tf.cast(value, x.dtype) for name, value in (params or {}).items()}
    body = _body(tree)
    result = _emit(body, _TensorFlowBackend(x, values))
    if not _depends_on_x(body):
        result = tf.ones_like(x) * result
    return result


def to_numpy(tree: ast.AST, x: Any, params: Mapping[str, float] | None = None) -> np.ndarray:
    """The same expression evaluated with NumPy in x's dtype (float64 for Python lists)."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    body = _body(tree)
    with np.errstate(all="ignore"):
        result = _emit(body, _NumpyBackend(x, dict(params or {}), x.dtype))
        return np.array(np.broadcast_to(result, x.shape), dtype=x.dtype)


def evaluate_number(tree: ast.AST, params: Mapping[str, float] | None = None) -> float:
    """Value of an expression without x (a declared point) as a Python float, in float64."""
    with np.errstate(all="ignore"):
        return float(_emit(_body(tree), _NumpyBackend(None, dict(params or {}), np.dtype(np.float64))))


def to_python_source(tree: ast.AST) -> str:
    """TensorFlow source text computing the expression, shaped like ``x``.

    The text assumes ``tf`` (tensorflow), a float tensor ``x`` and the parameters as tensors of
    x's dtype are in scope, e.g. ``tf.where(x > 0.0, tf.constant(1.0, x.dtype), 0.0)``. It
    builds the same TensorFlow ops as :func:`to_tf`.
    """
    body = _body(tree)
    rendered = _emit(body, _SourceBackend())
    if not _depends_on_x(body):
        return f"tf.ones_like(x) * {rendered.wrap(_PRODUCT + 1)}"
    return rendered.text


# -- LaTeX -----------------------------------------------------------------------------------

_GREEK = frozenset(
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi rho sigma tau phi chi psi omega".split()
)
_LATEX_FUNCTIONS = {
    "exp": r"\exp",
    "log": r"\log",
    "sin": r"\sin",
    "cos": r"\cos",
    "tanh": r"\tanh",
    "sigmoid": r"\sigma",
    "minimum": r"\min",
    "maximum": r"\max",
}


def to_latex(tree: ast.AST) -> str:
    """A LaTeX rendering of the expression as written (no folding), for the formula panels."""
    return _latex(_body(tree))[0]


def _latex(node: ast.AST) -> tuple[str, int]:
    if isinstance(node, ast.Constant):
        text = f"{float(node.value):g}" if isinstance(node.value, float) else str(node.value)
        if "e" in text:
            mantissa, power = text.split("e")
            scale = rf"10^{{{int(power)}}}"
            text = scale if mantissa == "1" else rf"{mantissa} \cdot {scale}"
        return text, _ATOM
    if isinstance(node, ast.Name):
        if node.id == "pi" or node.id in _GREEK:
            return "\\" + node.id, _ATOM
        if len(node.id) == 1:
            return node.id, _ATOM
        return r"\mathit{" + node.id.replace("_", r"\_") + "}", _ATOM
    if isinstance(node, ast.UnaryOp):
        inner, precedence = _latex(node.operand)
        inner = inner if precedence >= _UNARY else rf"\left({inner}\right)"
        return ("-" if isinstance(node.op, ast.USub) else "+") + inner, _UNARY
    if isinstance(node, ast.BinOp):
        left, left_precedence = _latex(node.left)
        right, right_precedence = _latex(node.right)
        if isinstance(node.op, ast.Div):
            return rf"\frac{{{left}}}{{{right}}}", _ATOM
        if isinstance(node.op, ast.Pow):
            base = left if left_precedence > _POWER else rf"\left({left}\right)"
            return f"{base}^{{{right}}}", _POWER
        symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: r"\cdot"}[type(node.op)]
        precedence = _PRECEDENCE[_BINARY_OPS[type(node.op)]]
        left = left if left_precedence >= precedence else rf"\left({left}\right)"
        right = right if right_precedence > precedence else rf"\left({right}\right)"
        return f"{left} {symbol} {right}", precedence
    if isinstance(node, ast.Compare):
        return rf"[\,{_latex_condition(node)}\,]", _ATOM
    if isinstance(node, ast.Call):
        name = node.func.id
        args = [_latex(argument)[0] for argument in node.args]
        if name == "abs":
            return rf"\left|{args[0]}\right|", _ATOM
        if name == "sqrt":
            return rf"\sqrt{{{args[0]}}}", _ATOM
        if name == "where":
            condition = _latex_condition(node.args[0])
            return rf"\begin{{cases}} {args[1]} & {condition} \\ {args[2]} & \text{{otherwise}} \end{{cases}}", _ATOM
        function = _LATEX_FUNCTIONS.get(name, rf"\operatorname{{{name}}}")
        return rf"{function}\left({', '.join(args)}\right)", _ATOM
    raise ExpressionError(f"{type(node).__name__} is not allowed")


def _latex_condition(node: ast.AST) -> str:
    if isinstance(node, ast.Compare):
        symbols = {ast.Lt: "<", ast.LtE: r"\le", ast.Gt: ">", ast.GtE: r"\ge", ast.Eq: "=", ast.NotEq: r"\ne"}
        parts = [_latex(node.left)[0]]
        for op, operand in zip(node.ops, node.comparators, strict=True):
            parts += [symbols[type(op)], _latex(operand)[0]]
        return " ".join(parts)
    return rf"{_latex(node)[0]} \ne 0"


# -- user ops --------------------------------------------------------------------------------


def _check_param_name(name: Any) -> str:
    if not isinstance(name, str) or not _PARAM_PATTERN.fullmatch(name):
        raise ExpressionError(
            f"parameter name {name!r} is not allowed; use 1-20 ASCII letters, digits or '_', starting with a letter",
            expression="params",
        )
    if name in _RESERVED or keyword.iskeyword(name):
        raise ExpressionError(
            f"parameter name {name!r} is not allowed: it is taken by x, pi, e, a function or a Python keyword",
            expression="params",
        )
    return name


def _check_params(params: Mapping[str, Sequence[float]] | None) -> tuple[ops.Param, ...]:
    if params is None:
        return ()
    if not isinstance(params, Mapping):
        raise ExpressionError("params must map a name to (default, low, high)", expression="params")
    if len(params) > MAX_PARAMS:
        raise ExpressionError(f"{len(params)} parameters given; at most {MAX_PARAMS} are allowed", expression="params")
    checked = []
    for name, triple in params.items():
        _check_param_name(name)
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
    for node in _walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            name = _exponent_parameter(node.right)
            if name is not None and name in params:
                param = params[name]
                if max(abs(param.low), abs(param.high)) > MAX_EXPONENT:
                    raise ExpressionError(
                        f"parameter {name!r} is an exponent, so its range [{param.low:g}, {param.high:g}] must lie "
                        f"within [-{MAX_EXPONENT:g}, {MAX_EXPONENT:g}]; this is not allowed",
                        expression,
                        _column(node),
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
