"""User ops from expressions: a small, safe language compiled to TensorFlow.

A user writes a forward and a custom gradient g(x) as expressions in ``x`` and up to three named
parameters; :func:`compile_op` turns them into an ordinary :class:`ops.OpSpec` (backward
``dy * g(x)``) that every view, the trainer and the exporter use like a built-in op::

    spec = compile_op("my_spike", "where(x > 0, 1, 0)", "1 / (k * abs(x) + 1) ** 2",
                      params={"k": (25.0, 1.0, 100.0)}, points=[0.0])

The language: numbers, ``x``, parameter names, ``pi``, ``e``, ``+ - * / **``, unary ``-``/``+``,
comparisons ``< <= > >= == !=`` (chains such as ``0 < x < 1`` allowed) and the functions of
:data:`FUNCTIONS`, the one table that the validator, every back end, LaTeX, the exporter and the
Editor's help read. Text is parsed with :func:`ast.parse` (which only parses) and every node is
checked against an allowlist; nothing is ever evaluated by Python (no eval/exec, no compiled code
object). Trees are then walked by one function (``backends.emit``) into TensorFlow ops, NumPy
values, TensorFlow or NumPy source text; LaTeX is rendered from the same trees.

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

Modules: ``functions`` (the table), ``parse`` (text checks and validation), ``backends`` (the walk,
TensorFlow and NumPy), ``source`` (TensorFlow and NumPy source text), ``latex``, ``user_ops``.
"""

from explorer.expr.backends import evaluate_number, to_numpy, to_tf
from explorer.expr.functions import FUNCTIONS, Function, help_table
from explorer.expr.latex import to_latex
from explorer.expr.parse import MAX_DEPTH, MAX_EXPONENT, MAX_LENGTH, MAX_NODES, parse
from explorer.expr.source import numpy_helpers, to_numpy_source, to_python_source
from explorer.expr.tree import CONSTANTS, ExpressionError
from explorer.expr.user_ops import MAX_PARAMS, MAX_POINTS, compile_op

__all__ = [
    "CONSTANTS",
    "FUNCTIONS",
    "MAX_DEPTH",
    "MAX_EXPONENT",
    "MAX_LENGTH",
    "MAX_NODES",
    "MAX_PARAMS",
    "MAX_POINTS",
    "ExpressionError",
    "Function",
    "compile_op",
    "evaluate_number",
    "help_table",
    "numpy_helpers",
    "parse",
    "to_latex",
    "to_numpy",
    "to_numpy_source",
    "to_python_source",
    "to_tf",
]
