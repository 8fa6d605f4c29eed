"""Every built-in op written in the editor's expression language (:mod:`explorer.expr`).

The exporter renders these to TensorFlow and NumPy source, so a built-in op and a user op are
exported by the same code. ``tests/test_export.py`` checks that each entry agrees numerically with
the op's :class:`ops.OpSpec` (forward and custom gradient, at the special points and on a grid, for
the default and another parameter set): a second, independent writing of every formula.

``SOURCES[key]`` is an :class:`OpSource`: ``forward`` and ``gradient`` (g(x), so that the custom
backward is ``dy * g(x)``) are expressions in ``x`` and the op's parameters. An op whose backward
acts on the upstream gradient itself (``clip_gradient``) has ``gradient=None`` and a ``backward``
expression in ``x``, ``dy`` and the parameters instead.

Conventions the expressions must reproduce (see ``shared/op-catalogue.md``): the spike forward is
``[x > threshold]`` (0 AT the threshold); ``sign(0) = +1`` is written ``where(x >= 0, 1, -1)``
because the language's ``sign`` is ``tf.sign`` (``sign(0) = 0``); ``round`` rounds half to even;
clipping windows are closed (``<=``) unless the catalogue says open (``rect``,
``piecewise_leaky_relu``); ``log1pexp`` and ``safe_norm`` keep their naive forwards.

This table could move into the registry (one ``OpSpec`` field per expression); until then a new
built-in op fails ``tests/test_export.py`` until it has an entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

DY = "dy"  # the name a ``backward`` expression uses for the upstream gradient


@dataclass(frozen=True)
class OpSource:
    forward: str
    gradient: str | None
    backward: str | None = None

    def __post_init__(self) -> None:
        if (self.gradient is None) == (self.backward is None):
            raise ValueError("give exactly one of gradient (g(x)) or backward (in x and dy)")


SPIKE_FORWARD = "where(x > threshold, 1, 0)"
SIGN_FORWARD = "where(x >= 0, 1, -1)"
CLIP_MASK = "where(abs(x) <= clip_value, 1, 0)"

SOURCES: dict[str, OpSource] = {
    # -- spike family: surrogate g(x - threshold) --------------------------------------------------
    "atan": OpSource(SPIKE_FORWARD, "(alpha / 2) / (1 + (pi * alpha * (x - threshold) / 2) ** 2)"),
    "fast_sigmoid": OpSource(SPIKE_FORWARD, "1 / (slope * abs(x - threshold) + 1) ** 2"),
    "sigmoid": OpSource(SPIKE_FORWARD, "slope * sigmoid(slope * (x - threshold)) * sigmoid(-slope * (x - threshold))"),
    "triangle": OpSource(SPIKE_FORWARD, "maximum(0, alpha - alpha ** 2 * abs(x - threshold))"),
    "gaussian": OpSource(SPIKE_FORWARD, "alpha / sqrt(pi) * exp(-(alpha * (x - threshold)) ** 2)"),
    "exponential": OpSource(SPIKE_FORWARD, "alpha / 2 * exp(-alpha * abs(x - threshold))"),
    "softsign": OpSource(SPIKE_FORWARD, "alpha / (2 * (1 + alpha * abs(x - threshold)) ** 2)"),
    "q_pseudo_spike": OpSource(SPIKE_FORWARD, "(1 + 2 * abs(x - threshold) / (alpha - 1)) ** -alpha"),
    "rect": OpSource(SPIKE_FORWARD, "alpha * where(abs(x - threshold) < 0.5 / alpha, 1, 0)"),
    "piecewise_leaky_relu": OpSource(SPIKE_FORWARD, "where(abs(x - threshold) < w, 1 / (2 * w), c)"),
    "spike_rate_escape": OpSource(SPIKE_FORWARD, "slope * exp(-beta * abs(x - threshold - 1))"),
    "straight_through": OpSource(SPIKE_FORWARD, "1"),
    # -- sign and quantizer family ------------------------------------------------------------------
    "ste_sign": OpSource(SIGN_FORWARD, CLIP_MASK),
    "approx_sign": OpSource(SIGN_FORWARD, "where(abs(x) <= 1, 2 - 2 * abs(x), 0)"),
    # beta (2 - beta x tanh(beta x / 2)) / (1 + cosh(beta x)), with 1 + cosh(z) = 2 cosh(z/2)^2 and
    # sech(u)^2 = (2 exp(-|u|) / (1 + exp(-2|u|)))^2, so nothing overflows into inf/inf.
    "swish_sign": OpSource(
        SIGN_FORWARD,
        "beta / 2 * (2 - beta * x * tanh(beta * x / 2)) "
        "* (2 * exp(-abs(beta * x / 2)) / (1 + exp(-abs(beta * x / 2)) ** 2)) ** 2",
    ),
    "ste_heaviside": OpSource("where(x > 0, 1, 0)", CLIP_MASK),
    "ste_tern": OpSource(
        "where(x >= threshold_value, 1, where(x <= -threshold_value, -1, 0))",
        CLIP_MASK,
    ),
    "dorefa": OpSource("round(clip(x, 0, 1) * (2 ** k_bit - 1)) / (2 ** k_bit - 1)", "where(0 <= x <= 1, 1, 0)"),
    # -- clipping -------------------------------------------------------------------------------------
    "leaky_clip": OpSource("clip(x, lo, hi)", "where(lo <= x <= hi, 1, leak)"),
    "clip_gradient": OpSource("x", None, backward=f"clip({DY}, -clip_value, clip_value)"),
    # -- intentional overrides -------------------------------------------------------------------------
    "scaled_square": OpSource("x ** 2", "scale * 2 * x"),
    "gradient_reversal": OpSource("x", "-lam"),
    "scale_gradient": OpSource("x", "factor"),
    "relu_at_zero": OpSource("maximum(x, 0)", "where(x > 0, 1, where(x == 0, at_zero, 0))"),
    # -- numerically unstable autodiff: naive forwards on purpose -----------------------------------------
    "log1pexp": OpSource("log(1 + exp(x))", "sigmoid(x)"),
    "safe_norm": OpSource("sqrt(x ** 2)", "x / maximum(sqrt(x ** 2), eps)"),
}


def source_for(key: str) -> OpSource:
    """The expression source of a built-in op; KeyError says where to add a missing one."""
    try:
        return SOURCES[key]
    except KeyError:
        raise KeyError(
            f"built-in op {key!r} has no expression source: add it to SOURCES in explorer/op_sources.py"
        ) from None
