"""The function table: every function of the language, declared once.

The validator, the back ends (TensorFlow, NumPy, TensorFlow source, NumPy source), LaTeX, the
exporter and the Editor's help all read :data:`FUNCTIONS`. To add a function, add one entry to
``_TABLE``; ``tests/test_expr_functions.py`` then checks it in every one of those places.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

CONDITION = "condition"  # an argument with this name takes a condition, like where's first


@dataclass(frozen=True)
class Function:
    """One function of the language.

    ``args`` name the arguments (the arity is their number); an argument named ``condition`` is
    read as a condition: a comparison, or any value (true where non-zero). ``meaning`` is the
    help line; ``latex`` a :class:`string.Template` over the argument names (``r"\\sqrt{$v}"``).

    A function is either *direct*: ``tf`` / ``numpy`` are called with the evaluated arguments and
    ``tf_source`` / ``numpy_source`` name the same callables in generated code (``numpy_helper``
    defines a helper the NumPy source names, importing the standard modules in ``numpy_imports``);
    or an *expansion*: an expression in the argument names, built from direct functions
    (``clip`` is ``minimum(maximum(v, lo), hi)``), which every back end emits instead.
    """

    name: str
    args: tuple[str, ...]
    meaning: str
    latex: str
    tf: Callable[..., Any] | None = None
    tf_source: str = ""
    numpy: Callable[..., Any] | None = None
    numpy_source: str = ""
    numpy_helper: str = ""
    numpy_imports: tuple[str, ...] = ()
    expansion: str = ""

    @property
    def arity(self) -> int:
        return len(self.args)

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join(self.args)})"


def _numpy_sigmoid(values: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(np.zeros_like(values), -values))  # stable for large |v|


def _numpy_erf(values: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(values)


_SIGMOID_HELPER = '''def _sigmoid(v):
    """1 / (1 + exp(-v)), stable for large |v|."""
    return np.exp(-np.logaddexp(np.zeros_like(v), -v))'''
_ERF_HELPER = '''def _erf(v):
    """math.erf element-wise (NumPy has no erf)."""
    return np.vectorize(math.erf, otypes=[np.float64])(v)'''


# fmt: off
_TABLE = (
    Function("abs", ("v",), "absolute value |v|", r"\left|$v\right|",
             tf=tf.abs, tf_source="tf.abs", numpy=np.abs, numpy_source="np.abs"),
    Function("exp", ("v",), "e to the power v", r"\exp\left($v\right)",
             tf=tf.exp, tf_source="tf.exp", numpy=np.exp, numpy_source="np.exp"),
    Function("log", ("v",), "natural logarithm; NaN below 0, -inf at 0", r"\log\left($v\right)",
             tf=tf.math.log, tf_source="tf.math.log", numpy=np.log, numpy_source="np.log"),
    Function("log1p", ("v",), "log(1 + v), accurate for small v", r"\operatorname{log1p}\left($v\right)",
             tf=tf.math.log1p, tf_source="tf.math.log1p", numpy=np.log1p, numpy_source="np.log1p"),
    Function("sqrt", ("v",), "square root; NaN below 0", r"\sqrt{$v}",
             tf=tf.sqrt, tf_source="tf.sqrt", numpy=np.sqrt, numpy_source="np.sqrt"),
    Function("sin", ("v",), "sine (radians)", r"\sin\left($v\right)",
             tf=tf.sin, tf_source="tf.sin", numpy=np.sin, numpy_source="np.sin"),
    Function("cos", ("v",), "cosine (radians)", r"\cos\left($v\right)",
             tf=tf.cos, tf_source="tf.cos", numpy=np.cos, numpy_source="np.cos"),
    Function("tanh", ("v",), "hyperbolic tangent", r"\tanh\left($v\right)",
             tf=tf.tanh, tf_source="tf.tanh", numpy=np.tanh, numpy_source="np.tanh"),
    Function("sigmoid", ("v",), "logistic function 1 / (1 + exp(-v))", r"\sigma\left($v\right)",
             tf=tf.math.sigmoid, tf_source="tf.math.sigmoid", numpy=_numpy_sigmoid, numpy_source="_sigmoid",
             numpy_helper=_SIGMOID_HELPER),
    Function("erf", ("v",), "Gauss error function", r"\operatorname{erf}\left($v\right)",
             tf=tf.math.erf, tf_source="tf.math.erf", numpy=_numpy_erf, numpy_source="_erf",
             numpy_helper=_ERF_HELPER, numpy_imports=("math",)),
    Function("sign", ("v",), "-1, 0 or +1, with sign(0) = 0 (as tf.sign)", r"\operatorname{sign}\left($v\right)",
             tf=tf.sign, tf_source="tf.sign", numpy=np.sign, numpy_source="np.sign"),
    Function("floor", ("v",), "largest integer <= v", r"\operatorname{floor}\left($v\right)",
             tf=tf.floor, tf_source="tf.floor", numpy=np.floor, numpy_source="np.floor"),
    Function("round", ("v",), "nearest integer, halves to even: round(0.5) = 0, round(1.5) = 2 (as tf.round)",
             r"\operatorname{round}\left($v\right)",
             tf=tf.round, tf_source="tf.round", numpy=np.round, numpy_source="np.round"),
    Function("where", (CONDITION, "a", "b"),
             "a where the condition holds (a comparison) or is non-zero (any other value), else b",
             r"\begin{cases} $a & $condition \\ $b & \text{otherwise} \end{cases}",
             tf=tf.where, tf_source="tf.where", numpy=np.where, numpy_source="np.where"),
    Function("minimum", ("a", "b"), "the smaller of a and b, element-wise", r"\min\left($a, $b\right)",
             tf=tf.minimum, tf_source="tf.minimum", numpy=np.minimum, numpy_source="np.minimum"),
    Function("maximum", ("a", "b"), "the larger of a and b, element-wise", r"\max\left($a, $b\right)",
             tf=tf.maximum, tf_source="tf.maximum", numpy=np.maximum, numpy_source="np.maximum"),
    Function("clip", ("v", "lo", "hi"),
             "minimum(maximum(v, lo), hi): v limited to [lo, hi]; the gradient passes AT both bounds",
             r"\operatorname{clip}\left($v, $lo, $hi\right)",
             expansion="minimum(maximum(v, lo), hi)"),
)
# fmt: on

FUNCTIONS: dict[str, Function] = {function.name: function for function in _TABLE}


def help_table() -> list[dict[str, str]]:
    """One row per function for the Editor's help: ``{"function": signature, "meaning": ...}``."""
    return [{"function": function.signature, "meaning": function.meaning} for function in FUNCTIONS.values()]
