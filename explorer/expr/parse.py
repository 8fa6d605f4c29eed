"""Raw-text checks and AST validation: :func:`parse` turns text into a tree every back end accepts.

Text is checked before :func:`ast.parse` (which only parses), then every node against an
allowlist; functions and their arities come from :data:`explorer.expr.functions.FUNCTIONS`.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from explorer.expr.backends import fold_constant
from explorer.expr.functions import FUNCTIONS
from explorer.expr.tree import COMPARE_OPS, CONSTANTS, ExpressionError, column_of, exponent_parameter, names_in

MAX_LENGTH = 500
MAX_DEPTH = 30
MAX_NODES = 200
MAX_EXPONENT = 16.0

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
_PARAM_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,19}")


def parse(
    text: str, params: Iterable[str] = (), *, expression: str = "expression", allow_x: bool = True
) -> ast.Expression:
    """Parse ``text`` into a validated ``ast.Expression`` or raise :class:`ExpressionError`.

    ``params`` are the parameter names the text may use; ``allow_x=False`` is for expressions
    that must not depend on x (declared points).
    """
    names = tuple(params.keys() if isinstance(params, Mapping) else params)
    for name in names:
        check_param_name(name)
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
                column_of(node),
                _segment(text, node),
            )
        if count > MAX_NODES:
            raise ExpressionError(f"the expression has more than {MAX_NODES} parts, which is not allowed", expression)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


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
        raise ExpressionError(f"{what} {suffix}", self.expression, column_of(node), _segment(self.text, node))

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
                if type(op) not in COMPARE_OPS:
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
        function = FUNCTIONS[name]
        arity = function.arity
        if len(node.args) != arity:
            plural = "s" if arity != 1 else ""
            self.fail(
                node,
                f"{name}() takes {arity} argument{plural}, got {len(node.args)};",
                suffix=f"this is not allowed ({function.signature})",
            )
        for argument in node.args:
            self.check(argument)

    def check_exponent(self, node: ast.BinOp) -> None:
        exponent = node.right
        used = names_in(exponent)
        if "x" in used:
            self.fail(node, "an exponent that depends on x", suffix="is not allowed; write exp(... * log(...))")
        if not used - set(CONSTANTS):
            value = fold_constant(exponent)
            if not abs(value) <= MAX_EXPONENT:  # also rejects NaN
                self.fail(exponent, f"the exponent {value:g}", suffix=f"is not allowed; |exponent| <= {MAX_EXPONENT:g}")
            return
        if exponent_parameter(exponent) is None:
            self.fail(
                node,
                "this exponent",
                suffix="is not allowed; an exponent is a number, a parameter or minus a parameter",
            )


def check_param_name(name: Any) -> str:
    """``name`` if it may name a parameter, else ExpressionError saying which names are allowed."""
    if not isinstance(name, str) or not _PARAM_PATTERN.fullmatch(name):
        raise ExpressionError(
            f"parameter name {name!r} is not allowed; use 1-20 ASCII letters, digits or '_', starting with a letter",
            expression="params",
        )
    if name == "x" or name in CONSTANTS or name in FUNCTIONS or keyword.iskeyword(name):
        raise ExpressionError(
            f"parameter name {name!r} is not allowed: it is taken by x, pi, e, a function or a Python keyword",
            expression="params",
        )
    return name
