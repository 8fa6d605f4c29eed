"""LaTeX of an expression as written (no folding), for the formula panels; functions from the table."""

from __future__ import annotations

import ast
from string import Template

from explorer.expr.functions import CONDITION, FUNCTIONS
from explorer.expr.tree import ATOM, BINARY_OPS, POWER, PRECEDENCE, UNARY, ExpressionError, body

_GREEK = frozenset(
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi rho sigma tau phi chi psi omega".split()
)
_COMPARE_SYMBOLS = {ast.Lt: "<", ast.LtE: r"\le", ast.Gt: ">", ast.GtE: r"\ge", ast.Eq: "=", ast.NotEq: r"\ne"}


def to_latex(tree: ast.AST) -> str:
    """A LaTeX rendering of the expression as written (no folding), for the formula panels."""
    return _latex(body(tree))[0]


def _latex(node: ast.AST) -> tuple[str, int]:
    """(LaTeX, precedence of its outermost operator)."""
    if isinstance(node, ast.Constant):
        text = f"{float(node.value):g}" if isinstance(node.value, float) else str(node.value)
        if "e" in text:
            mantissa, power = text.split("e")
            scale = rf"10^{{{int(power)}}}"
            text = scale if mantissa == "1" else rf"{mantissa} \cdot {scale}"
        return text, ATOM
    if isinstance(node, ast.Name):
        if node.id == "pi" or node.id in _GREEK:
            return "\\" + node.id, ATOM
        if len(node.id) == 1:
            return node.id, ATOM
        return r"\mathit{" + node.id.replace("_", r"\_") + "}", ATOM
    if isinstance(node, ast.UnaryOp):
        inner, precedence = _latex(node.operand)
        inner = inner if precedence >= UNARY else rf"\left({inner}\right)"
        return ("-" if isinstance(node.op, ast.USub) else "+") + inner, UNARY
    if isinstance(node, ast.BinOp):
        left, left_precedence = _latex(node.left)
        right, right_precedence = _latex(node.right)
        if isinstance(node.op, ast.Div):
            return rf"\frac{{{left}}}{{{right}}}", ATOM
        if isinstance(node.op, ast.Pow):
            base = left if left_precedence > POWER else rf"\left({left}\right)"
            return f"{base}^{{{right}}}", POWER
        symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: r"\cdot"}[type(node.op)]
        precedence = PRECEDENCE[BINARY_OPS[type(node.op)]]
        left = left if left_precedence >= precedence else rf"\left({left}\right)"
        right = right if right_precedence > precedence else rf"\left({right}\right)"
        return f"{left} {symbol} {right}", precedence
    if isinstance(node, ast.Compare):
        return rf"[\,{_latex_condition(node)}\,]", ATOM
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        function = FUNCTIONS[node.func.id]
        if len(node.args) != function.arity:
            raise ExpressionError(f"{function.signature} takes {function.arity} arguments")
        args = {
            name: _latex_condition(argument) if name == CONDITION else _latex(argument)[0]
            for name, argument in zip(function.args, node.args, strict=True)
        }
        return Template(function.latex).substitute(args), ATOM
    raise ExpressionError(f"{type(node).__name__} is not allowed")


def _latex_condition(node: ast.AST) -> str:
    if isinstance(node, ast.Compare):
        parts = [_latex(node.left)[0]]
        for op, operand in zip(node.ops, node.comparators, strict=True):
            parts += [_COMPARE_SYMBOLS[type(op)], _latex(operand)[0]]
        return " ".join(parts)
    return rf"{_latex(node)[0]} \ne 0"
