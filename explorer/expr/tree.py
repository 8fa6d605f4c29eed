"""ExpressionError and small helpers over parsed trees, shared by the other modules."""

from __future__ import annotations

import ast
import math

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
BINARY_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
COMPARE_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


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


def column_of(node: ast.AST) -> int | None:
    offset = getattr(node, "col_offset", None)  # ASCII-only text: byte offset == character offset
    return None if offset is None else offset + 1


def body(tree: ast.AST) -> ast.expr:
    return tree.body if isinstance(tree, ast.Expression) else tree


def walk(node: ast.AST) -> list[ast.AST]:
    """Every node under ``node`` (ast.walk without its lazy import, so parsing imports nothing)."""
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(ast.iter_child_nodes(current))
    return found


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in walk(node) if isinstance(n, ast.Name)}


def depends_on_x(tree: ast.AST) -> bool:
    return "x" in names_in(tree)


def is_constant(node: ast.AST) -> bool:
    return names_in(node) <= set(CONSTANTS)


def functions_used(tree: ast.AST) -> set[str]:
    """Names of the functions a validated tree calls."""
    return {n.func.id for n in walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def exponent_parameter(node: ast.AST) -> str | None:
    """The parameter name of an exponent written ``k``, ``-k`` or ``+k``; None otherwise."""
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if isinstance(node, ast.Name) and node.id not in CONSTANTS and node.id != "x":
        return node.id
    return None


# Python operator precedence, for parenthesising rendered source and LaTeX.
ATOM, POWER, UNARY, PRODUCT, SUM, COMPARISON = 100, 16, 14, 12, 11, 6
PRECEDENCE = {"+": SUM, "-": SUM, "*": PRODUCT, "/": PRODUCT, "**": POWER}
