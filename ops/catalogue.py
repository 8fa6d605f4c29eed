"""The 26 built-in ops of ``shared/op-catalogue.md``, declared once each.

Conventions (tested in tests/test_ops_*.py):

* spike family: forward ``H(x - threshold) = [x > threshold]``, so the value AT the threshold is 0;
  the surrogate is ``g(x - threshold)``;
* sign family: ``sign(0) = +1`` (Larq), written ``sign(sign(x) + 0.1)`` because ``tf.sign(0) = 0``;
* clipping boundaries are closed (``[|x| <= clip_value]``) unless a note says "open";
* true gradients are whatever autodiff gives: ``tf.sign`` -> 0, ``tf.cast``/``tf.round`` -> None.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf

from ops.registry import Expression, OpSpec, Param, Point, compute_dtype, register

Params = Mapping[str, tf.Tensor]
Surrogate = Callable[[tf.Tensor, Params], tf.Tensor]


# -- shared pieces --------------------------------------------------------------------------------
def heaviside(x: tf.Tensor, threshold: tf.Tensor | float = 0.0) -> tf.Tensor:
    """``[x > threshold]``: H(0) = 0. Built on ``tf.cast``, so autodiff returns None."""
    return tf.cast(x > threshold, x.dtype)


def sign_plus_at_zero(x: tf.Tensor) -> tf.Tensor:
    """``sign(x)`` with ``sign(0) = +1``. Built on ``tf.sign``, so autodiff returns 0."""
    return tf.sign(tf.sign(x) + tf.constant(0.1, x.dtype))


def closed_window(x: tf.Tensor, low: tf.Tensor, high: tf.Tensor) -> tf.Tensor:
    """``[low <= x <= high]`` as x.dtype: the gradient passes AT both boundaries."""
    return tf.cast(tf.logical_and(x >= low, x <= high), x.dtype)


def clip_mask(x: tf.Tensor, clip_value: tf.Tensor) -> tf.Tensor:
    """``[|x| <= clip_value]`` (closed, as Larq and ``tf.clip_by_value``)."""
    return tf.cast(tf.abs(x) <= clip_value, x.dtype)


def sech_squared(z: tf.Tensor) -> tf.Tensor:
    """``sech(z)^2`` without overflow: ``(2 e^{-|z|} / (1 + e^{-2|z|}))^2``."""
    decay = tf.exp(-tf.abs(z))
    return tf.square(2.0 * decay / (1.0 + tf.square(decay)))


def _points(*make: Callable[[Mapping[str, float]], list[Point]]) -> Callable[[Mapping[str, float], str], list[Point]]:
    def declared(params: Mapping[str, float], _dtype: str) -> list[Point]:
        return [point for fn in make for point in fn(params)]

    return declared


def _threshold_jump(params: Mapping[str, float]) -> list[Point]:
    return [
        Point(params["threshold"], "jump", "H(0) = 0: the value AT the threshold is 0 (forward is [x > threshold])")
    ]


THRESHOLD = Param("threshold", 0.0, -1.0, 1.0, "firing threshold: the step is at x = threshold")
SPIKE_FORWARD_TEX = r"H(x - \theta) = [\,x > \theta\,],\quad H(0) = 0"
# The same formulas in the editor's expression language, for code export (explorer/export.py).
# tests/test_export.py checks each expression against the TensorFlow functions numerically.
SPIKE_FORWARD_EXPR = "where(x > threshold, 1, 0)"
SIGN_FORWARD_EXPR = "where(x >= 0, 1, -1)"  # sign(0) = +1; the language's sign is tf.sign
CLIP_MASK_EXPR = "where(abs(x) <= clip_value, 1, 0)"


def spike(
    key: str,
    title: str,
    params: tuple[Param, ...],
    g: Surrogate,
    grad_tex: str,
    why: str,
    reference: str,
    extra_points: Callable[[Mapping[str, float]], list[Point]] | None = None,
    *,
    expression: Expression,
) -> OpSpec:
    """A spike op: forward ``[x > threshold]``, surrogate ``g(x - threshold)``."""
    point_makers = (_threshold_jump,) if extra_points is None else (_threshold_jump, extra_points)
    return register(
        OpSpec(
            key=key,
            title=title,
            family="spike",
            params=(*params, THRESHOLD),
            forward_fn=lambda x, p: heaviside(x, p["threshold"]),
            surrogate=lambda x, p: g(x - p["threshold"], p),
            forward_tex=SPIKE_FORWARD_TEX,
            grad_tex=grad_tex,
            why=why,
            reference=reference,
            declared_points=_points(*point_makers),
            expression=expression,
        )
    )


def _alpha(
    default: float, low: float = 0.1, high: float = 10.0, help: str = "sharpness: larger is narrower and taller"
) -> Param:
    return Param("alpha", default, low, high, help)


# -- spike family ------------------------------------------------------------------------------------
spike(
    "atan",
    "Arctangent surrogate",
    (_alpha(2.0),),
    lambda u, p: (p["alpha"] / 2.0) / (1.0 + tf.square(math.pi * p["alpha"] * u / 2.0)),
    r"\frac{\alpha / 2}{1 + \left(\frac{\pi}{2} \alpha (x - \theta)\right)^2}",
    "The true derivative of the step is a Dirac delta: zero almost everywhere, so nothing upstream learns. "
    "The surrogate is the exact derivative of the smooth primitive arctan(pi*alpha*x/2)/pi + 1/2, "
    "so it integrates to the jump size 1 and keeps heavy tails that still reach far-off units.",
    "snnTorch `atan`; SpikingJelly `ATan` (identical formulas). Fang et al. 2021.",
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="(alpha / 2) / (1 + (pi * alpha * (x - threshold) / 2) ** 2)"),
)
spike(
    "fast_sigmoid",
    "Fast sigmoid (SuperSpike)",
    (Param("slope", 25.0, 0.5, 100.0, "steepness: larger is narrower and taller"),),
    lambda u, p: 1.0 / tf.square(p["slope"] * tf.abs(u) + 1.0),
    r"\frac{1}{(k\,|x - \theta| + 1)^2},\quad k = \text{slope}",
    "Derivative of the fast sigmoid x/(1+|x|) scaled by slope: cheap (no exp) and bounded. "
    "It is not normalised: its area is 2/slope, not the jump size 1, which scales the effective learning rate.",
    "snnTorch `fast_sigmoid`; Norse `super` (Zenke & Ganguli 2018, SuperSpike).",
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="1 / (slope * abs(x - threshold) + 1) ** 2"),
)
spike(
    "sigmoid",
    "Sigmoid surrogate",
    (Param("slope", 25.0, 0.5, 100.0, "steepness: larger is narrower and taller"),),
    lambda u, p: p["slope"] * tf.math.sigmoid(p["slope"] * u) * tf.math.sigmoid(-p["slope"] * u),
    r"k\,s(k(x - \theta))\,s(-k(x - \theta)),\quad s(z) = \frac{1}{1 + e^{-z}}",
    "Exact derivative of the smooth primitive s(slope*x), so it integrates to the jump size 1. "
    "Written with tf.math.sigmoid: the exp-form returns NaN in float32 for x < -3.55 at slope 25.",
    "snnTorch `sigmoid`; SpikingJelly `Sigmoid`.",
    expression=Expression(
        SPIKE_FORWARD_EXPR, gradient="slope * sigmoid(slope * (x - threshold)) * sigmoid(-slope * (x - threshold))"
    ),
)
spike(
    "triangle",
    "Triangle (piecewise quadratic)",
    (_alpha(1.0, help="half-width is 1/alpha, peak height alpha"),),
    lambda u, p: tf.maximum(tf.zeros_like(u), p["alpha"] - tf.square(p["alpha"]) * tf.abs(u)),
    r"\max\left(0,\ \alpha - \alpha^2 |x - \theta|\right)",
    "Derivative of a piecewise-quadratic primitive; integrates to 1 with compact support: units further than "
    "1/alpha from the threshold get exactly zero gradient (a dead zone).",
    "SpikingJelly `PiecewiseQuadratic` (Esser et al. 2016; Bellec et al. 2018).",
    lambda p: [
        Point(p["threshold"] - 1.0 / p["alpha"], "kink", "custom gradient reaches 0 (kink): dead beyond"),
        Point(p["threshold"] + 1.0 / p["alpha"], "kink", "custom gradient reaches 0 (kink): dead beyond"),
    ],
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="maximum(0, alpha - alpha ** 2 * abs(x - threshold))"),
)
spike(
    "gaussian",
    "Gaussian (erf) surrogate",
    (_alpha(2.0),),
    lambda u, p: p["alpha"] / math.sqrt(math.pi) * tf.exp(-tf.square(p["alpha"] * u)),
    r"\frac{\alpha}{\sqrt{\pi}}\, e^{-\alpha^2 (x - \theta)^2}",
    "Exact derivative of the primitive (1 + erf(alpha*x))/2: integrates to 1 with the lightest tails.",
    "SpikingJelly `Erf`.",
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="alpha / sqrt(pi) * exp(-(alpha * (x - threshold)) ** 2)"),
)
spike(
    "exponential",
    "Exponential (Laplace) surrogate",
    (_alpha(1.0),),
    lambda u, p: p["alpha"] / 2.0 * tf.exp(-p["alpha"] * tf.abs(u)),
    r"\frac{\alpha}{2}\, e^{-\alpha |x - \theta|}",
    "Exact derivative of a piecewise-exponential primitive: integrates to 1; has a cusp at the threshold.",
    "SpikingJelly `PiecewiseExp`.",
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="alpha / 2 * exp(-alpha * abs(x - threshold))"),
)
spike(
    "softsign",
    "Softsign surrogate",
    (_alpha(2.0),),
    lambda u, p: p["alpha"] / (2.0 * tf.square(1.0 + p["alpha"] * tf.abs(u))),
    r"\frac{\alpha}{2\,(1 + \alpha |x - \theta|)^2}",
    "Exact derivative of the primitive (softsign(alpha*x) + 1)/2: integrates to 1, heavy quadratic tails.",
    "SpikingJelly `SoftSign`.",
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="alpha / (2 * (1 + alpha * abs(x - threshold)) ** 2)"),
)
spike(
    "q_pseudo_spike",
    "q-PseudoSpike",
    (_alpha(2.0, low=1.1, help="tail factor (must be > 1): smaller is heavier-tailed"),),
    lambda u, p: tf.pow(1.0 + 2.0 * tf.abs(u) / (p["alpha"] - 1.0), -p["alpha"]),
    r"\left(1 + \frac{2|x - \theta|}{\alpha - 1}\right)^{-\alpha},\quad \alpha > 1",
    "Derivative of a heavy-tailed primitive whose tail weight is tunable; integrates to 1 for every alpha > 1.",
    "SpikingJelly `QPseudoSpike` (Sun et al. 2022).",
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="(1 + 2 * abs(x - threshold) / (alpha - 1)) ** -alpha"),
)
spike(
    "rect",
    "Rectangular (box) surrogate",
    (_alpha(1.0, help="box height alpha, half-width 0.5/alpha"),),
    lambda u, p: p["alpha"] * tf.cast(tf.abs(u) < 0.5 / p["alpha"], u.dtype),
    r"\alpha\,[\,|x - \theta| < \tfrac{1}{2\alpha}\,]\quad\text{(open box)}",
    "Straight-through inside a box of area 1 around the threshold, zero outside: the cheapest normalised "
    "surrogate. The box is open: no gradient exactly at |x - threshold| = 0.5/alpha.",
    "SpikingJelly `Rect`.",
    lambda p: [
        Point(p["threshold"] - 0.5 / p["alpha"], "boundary", "open: no gradient AT |x - threshold| = 0.5/alpha"),
        Point(p["threshold"] + 0.5 / p["alpha"], "boundary", "open: no gradient AT |x - threshold| = 0.5/alpha"),
    ],
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="alpha * where(abs(x - threshold) < 0.5 / alpha, 1, 0)"),
)
spike(
    "piecewise_leaky_relu",
    "Piecewise leaky ReLU",
    (
        Param("w", 1.0, 0.05, 3.0, "half-width of the box"),
        Param("c", 0.01, 0.0, 1.0, "leak: gradient outside the box"),
    ),
    lambda u, p: tf.where(tf.abs(u) < p["w"], 1.0 / (2.0 * p["w"]) * tf.ones_like(u), p["c"] * tf.ones_like(u)),
    r"\begin{cases} \frac{1}{2w} & |x - \theta| < w \\ c & \text{otherwise} \end{cases}\quad\text{(open box)}",
    "A box of area 1 plus a small leak c outside, so units far from the threshold are never fully dead. "
    "The box is open: the gradient is c exactly at |x - threshold| = w.",
    "SpikingJelly `PiecewiseLeakyReLU` (current code).",
    lambda p: [
        Point(p["threshold"] - p["w"], "boundary", "open: gradient is the leak c AT |x - threshold| = w"),
        Point(p["threshold"] + p["w"], "boundary", "open: gradient is the leak c AT |x - threshold| = w"),
    ],
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="where(abs(x - threshold) < w, 1 / (2 * w), c)"),
)
spike(
    "spike_rate_escape",
    "Spike-rate escape",
    (
        Param("beta", 1.0, 0.1, 10.0, "decay rate of the escape noise"),
        Param("slope", 25.0, 0.5, 100.0, "height of the peak"),
    ),
    lambda u, p: p["slope"] * tf.exp(-p["beta"] * tf.abs(u - 1.0)),
    r"k\, e^{-\beta |x - \theta - 1|},\quad k = \text{slope}",
    "Escape-noise model of stochastic firing. A faithful port peaks at threshold + 1, not at the threshold, "
    "and integrates to 2*slope/beta: a good example of why the area and the peak position are worth seeing.",
    "snnTorch `spike_rate_escape`.",
    lambda p: [Point(p["threshold"] + 1.0, "kink", "custom gradient peaks in a cusp at x = threshold + 1")],
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="slope * exp(-beta * abs(x - threshold - 1))"),
)
spike(
    "straight_through",
    "Straight-through estimator",
    (),
    lambda u, p: tf.ones_like(u),
    r"1",
    "Pretend the step is the identity in the backward pass (Bengio et al. 2013). Unbounded support: "
    "far-off units get the same gradient as those at the threshold.",
    "snnTorch `straight_through_estimator`; Bengio, Leonard & Courville 2013.",
    expression=Expression(SPIKE_FORWARD_EXPR, gradient="1"),
)


# -- sign and quantizer family -------------------------------------------------------------------------
def _sign_jump(params: Mapping[str, float]) -> list[Point]:
    return [Point(0.0, "jump", "sign(0) = +1 (Larq convention; plain tf.sign(0) = 0)")]


def _clip_boundaries(params: Mapping[str, float]) -> list[Point]:
    c = params["clip_value"]
    note = f"closed: gradient passes AT |x| = {c:g}"
    return [Point(-c, "boundary", note), Point(c, "boundary", note)]


CLIP_VALUE = Param("clip_value", 1.0, 0.1, 3.0, "gradient passes where |x| <= clip_value")

register(
    OpSpec(
        key="ste_sign",
        title="Straight-through sign",
        family="sign",
        params=(CLIP_VALUE,),
        forward_fn=lambda x, p: sign_plus_at_zero(x),
        surrogate=lambda x, p: clip_mask(x, p["clip_value"]),
        forward_tex=r"\operatorname{sign}(x),\quad \operatorname{sign}(0) = +1",
        grad_tex=r"[\,|x| \le c\,],\quad c = \text{clip\_value}",
        why="The true gradient of sign is 0 everywhere (and undefined at 0): a binary network could not learn. "
        "The straight-through estimator passes the gradient where |x| <= clip_value, the derivative of hard "
        "tanh, and cancels it outside so weights that saturate stop moving.",
        reference="Larq `ste_sign`; BinaryNet (Courbariaux et al. 2016).",
        declared_points=_points(_sign_jump, _clip_boundaries),
        expression=Expression(SIGN_FORWARD_EXPR, gradient=CLIP_MASK_EXPR),
    )
)
register(
    OpSpec(
        key="approx_sign",
        title="ApproxSign (Bi-Real Net)",
        family="sign",
        params=(),
        forward_fn=lambda x, p: sign_plus_at_zero(x),
        surrogate=lambda x, p: tf.where(tf.abs(x) <= 1.0, 2.0 - 2.0 * tf.abs(x), tf.zeros_like(x)),
        forward_tex=r"\operatorname{sign}(x),\quad \operatorname{sign}(0) = +1",
        grad_tex=r"\begin{cases} 2 - 2|x| & |x| \le 1 \\ 0 & \text{otherwise} \end{cases}",
        why="Derivative of a piecewise-quadratic approximation of sign: closer to the true sign than hard tanh, "
        "so the gradient mismatch is smaller than the straight-through estimator's. Integrates to 2, the jump size.",
        reference="Larq `approx_sign`; Bi-Real Net (Liu et al. 2018).",
        declared_points=_points(
            _sign_jump,
            lambda p: [
                Point(-1.0, "kink", "custom gradient reaches 0 (kink) at |x| = 1"),
                Point(1.0, "kink", "custom gradient reaches 0 (kink) at |x| = 1"),
            ],
        ),
        expression=Expression(SIGN_FORWARD_EXPR, gradient="where(abs(x) <= 1, 2 - 2 * abs(x), 0)"),
    )
)


def _swish_sign_grad(x: tf.Tensor, p: Params) -> tf.Tensor:
    beta = p["beta"]
    z = beta * x
    # 1 + cosh(z) = 2 cosh(z/2)^2, so the catalogue formula is beta/2 (2 - z tanh(z/2)) sech(z/2)^2,
    # which never overflows cosh into inf/inf.
    return beta / 2.0 * (2.0 - z * tf.tanh(z / 2.0)) * sech_squared(z / 2.0)


register(
    OpSpec(
        key="swish_sign",
        title="SwishSign (BNN+)",
        family="sign",
        params=(Param("beta", 5.0, 0.5, 20.0, "steepness of the swish approximation"),),
        forward_fn=lambda x, p: sign_plus_at_zero(x),
        surrogate=_swish_sign_grad,
        forward_tex=r"\operatorname{sign}(x),\quad \operatorname{sign}(0) = +1",
        grad_tex=r"\frac{\beta\left(2 - \beta x \tanh(\beta x / 2)\right)}{1 + \cosh(\beta x)}",
        why="Derivative of 2*sigmoid(beta*x)*(1 + beta*x*(1 - sigmoid(beta*x))) - 1, a swish-shaped approximation "
        "of sign. Its negative side lobes push saturated values back towards 0. Computed through sech^2 so that "
        "cosh cannot overflow into NaN.",
        reference="Larq `swish_sign`; BNN+ (Darabi et al. 2018).",
        declared_points=_points(_sign_jump),
        # 1 + cosh(z) = 2 cosh(z/2)^2 and sech(u)^2 = (2 e^{-|u|} / (1 + e^{-2|u|}))^2: nothing overflows
        expression=Expression(
            SIGN_FORWARD_EXPR,
            gradient="beta / 2 * (2 - beta * x * tanh(beta * x / 2)) * (2 * exp(-abs(beta * x / 2)) / (1 + exp(-abs(beta * x / 2)) ** 2)) ** 2",
        ),
    )
)
register(
    OpSpec(
        key="ste_heaviside",
        title="Straight-through Heaviside",
        family="sign",
        params=(CLIP_VALUE,),
        forward_fn=lambda x, p: heaviside(x),
        surrogate=lambda x, p: clip_mask(x, p["clip_value"]),
        forward_tex=r"[\,x > 0\,],\quad H(0) = 0",
        grad_tex=r"[\,|x| \le c\,],\quad c = \text{clip\_value}",
        why="A {0, 1} binarisation whose true gradient does not exist (autodiff returns None); the straight-through "
        "estimator passes it inside the closed clip window.",
        reference="Larq `ste_heaviside`.",
        declared_points=_points(
            lambda p: [Point(0.0, "jump", "H(0) = 0: the value AT 0 is 0 (forward is [x > 0])")],
            _clip_boundaries,
        ),
        expression=Expression("where(x > 0, 1, 0)", gradient=CLIP_MASK_EXPR),
    )
)


def _tern_forward(x: tf.Tensor, p: Params) -> tf.Tensor:
    t = p["threshold_value"]
    return tf.sign(tf.sign(x + t) + tf.sign(x - t))


register(
    OpSpec(
        key="ste_tern",
        title="Straight-through ternarisation",
        family="sign",
        params=(
            Param("threshold_value", 0.05, 0.01, 0.5, "|x| below this maps to 0"),
            CLIP_VALUE,
        ),
        forward_fn=_tern_forward,
        surrogate=lambda x, p: clip_mask(x, p["clip_value"]),
        forward_tex=r"\begin{cases} -1 & x < -t \\ 0 & |x| < t \\ +1 & x > t \end{cases},\quad \pm1 \text{ AT } x = \pm t",
        grad_tex=r"[\,|x| \le c\,],\quad c = \text{clip\_value}",
        why="Ternary weights {-1, 0, +1}: two steps with zero true gradient. The straight-through estimator "
        "treats the quantiser as the identity inside the closed clip window.",
        reference="Larq `ste_tern` (Li et al. 2016, Ternary Weight Networks).",
        declared_points=_points(
            lambda p: [
                Point(-p["threshold_value"], "jump", "the value AT x = -t is -1"),
                Point(p["threshold_value"], "jump", "the value AT x = +t is +1"),
            ],
            _clip_boundaries,
        ),
        expression=Expression(
            "where(x >= threshold_value, 1, where(x <= -threshold_value, -1, 0))", gradient=CLIP_MASK_EXPR
        ),
    )
)


def _dorefa_levels(k_bit: tf.Tensor) -> tf.Tensor:
    return tf.pow(tf.constant(2.0, k_bit.dtype), k_bit) - 1.0


def _dorefa_points(params: Mapping[str, float]) -> list[Point]:
    levels = 2 ** int(params["k_bit"]) - 1
    jumps = []
    for j in range(levels):
        even = j if j % 2 == 0 else j + 1  # round half to even
        jumps.append(
            Point((j + 0.5) / levels, "jump", f"round half to even: the value AT the midpoint is {even}/{levels}")
        )
    return [
        Point(0.0, "boundary", "closed: gradient passes AT x = 0"),
        *jumps,
        Point(1.0, "boundary", "closed: gradient passes AT x = 1"),
    ]


register(
    OpSpec(
        key="dorefa",
        title="DoReFa k-bit quantiser",
        family="sign",
        params=(Param("k_bit", 2, 1, 8, "bits: 2^k_bit levels in [0, 1]", integer=True),),
        forward_fn=lambda x, p: (
            tf.round(tf.clip_by_value(x, 0.0, 1.0) * _dorefa_levels(p["k_bit"])) / _dorefa_levels(p["k_bit"])
        ),
        surrogate=lambda x, p: closed_window(x, tf.zeros_like(x), tf.ones_like(x)),
        forward_tex=r"\frac{\operatorname{round}(n \cdot \operatorname{clip}(x, 0, 1))}{n},\quad n = 2^{k} - 1"
        r"\ \text{(round half to even)}",
        grad_tex=r"[\,0 \le x \le 1\,]",
        why="k-bit activations: a staircase whose true gradient does not exist (tf.round has none). "
        "The straight-through estimator passes the gradient inside [0, 1] (closed), where the clip is the identity.",
        reference="Larq `DoReFa` (activations); Zhou et al. 2016, DoReFa-Net.",
        declared_points=_points(_dorefa_points),
        expression=Expression(
            "round(clip(x, 0, 1) * (2 ** k_bit - 1)) / (2 ** k_bit - 1)", gradient="where(0 <= x <= 1, 1, 0)"
        ),
    )
)


# -- clipping ---------------------------------------------------------------------------------------------
def _leaky_clip_constraint(params: Mapping[str, float]) -> None:
    if not params["lo"] < params["hi"]:
        raise ValueError(f"leaky_clip: parameter 'lo' ({params['lo']:g}) must be below 'hi' ({params['hi']:g})")


def _leaky_clip_points(params: Mapping[str, float]) -> list[Point]:
    """Boundaries of the clip window; with leak = 1 the custom gradient is continuous, only the forward kinks."""
    kind = "kink" if params["leak"] == 1.0 else "boundary"
    return [
        Point(params[end], kind, f"closed: gradient 1 AT x = {end} = {params[end]:g} (the forward kinks here)")
        for end in ("lo", "hi")
    ]


register(
    OpSpec(
        key="leaky_clip",
        title="Leaky clip",
        family="clip",
        params=(
            Param("lo", -1.0, -3.0, 2.9, "lower clipping bound (must be below hi)"),
            Param("hi", 1.0, -2.9, 3.0, "upper clipping bound (must be above lo)"),
            Param("leak", 0.1, 0.0, 1.0, "gradient outside [lo, hi]"),
        ),
        forward_fn=lambda x, p: tf.clip_by_value(x, p["lo"], p["hi"]),
        surrogate=lambda x, p: tf.where(
            tf.logical_and(x >= p["lo"], x <= p["hi"]), tf.ones_like(x), p["leak"] * tf.ones_like(x)
        ),
        forward_tex=r"\operatorname{clip}(x, \text{lo}, \text{hi})",
        grad_tex=r"\begin{cases} 1 & \text{lo} \le x \le \text{hi} \\ \text{leak} & \text{otherwise} \end{cases}",
        why="Clipping kills the gradient outside [lo, hi]: a unit that saturates never comes back (a dead unit). "
        "A small leak outside keeps it trainable while the forward stays clipped.",
        reference="The idea behind Larq's `leaky_tanh`; tf.clip_by_value's closed boundaries.",
        declared_points=_points(_leaky_clip_points),
        constraint=_leaky_clip_constraint,
        expression=Expression("clip(x, lo, hi)", gradient="where(lo <= x <= hi, 1, leak)"),
    )
)
register(
    OpSpec(
        key="clip_gradient",
        title="Gradient clipping",
        family="clip",
        params=(Param("clip_value", 1.0, 0.01, 3.0, "largest |dy| passed back"),),
        forward_fn=lambda x, p: tf.identity(x),
        surrogate=None,
        backward=lambda x, dy, p: tf.clip_by_value(dy, -p["clip_value"], p["clip_value"]),
        forward_tex=r"x",
        grad_tex=r"\operatorname{clip}(dy, -c, c),\quad c = \text{clip\_value}",
        why="Bounds the upstream gradient element-wise to stop one exploding step from wrecking the weights. "
        "It acts on dy, not on x: with an upstream gradient of 1 it changes nothing; raise the upstream gradient "
        "above clip_value to see it.",
        reference="Element-wise gradient clipping (Pascanu et al. 2013); tf.clip_by_value.",
        expression=Expression("x", backward="clip(dy, -clip_value, clip_value)"),
    )
)


# -- intentional overrides ---------------------------------------------------------------------------
register(
    OpSpec(
        key="scaled_square",
        title="Square with scaled gradient",
        family="override",
        params=(Param("scale", 0.5, 0.0, 2.0, "factor on the true gradient 2x"),),
        forward_fn=lambda x, p: tf.square(x),
        surrogate=lambda x, p: p["scale"] * 2.0 * x,
        forward_tex=r"x^2",
        grad_tex=r"\text{scale} \cdot 2x",
        why="The canonical first custom gradient: the forward is exact, the backward deliberately scaled "
        "(the default halves it). Differences from autodiff here are intentional, not a bug.",
        reference="The tf.custom_gradient tutorial's first example.",
        expression=Expression("x ** 2", gradient="scale * 2 * x"),
    )
)
register(
    OpSpec(
        key="gradient_reversal",
        title="Gradient reversal",
        family="override",
        params=(Param("lam", 1.0, 0.0, 5.0, "strength of the reversed gradient"),),
        forward_fn=lambda x, p: tf.identity(x),
        surrogate=lambda x, p: -p["lam"] * tf.ones_like(x),
        forward_tex=r"x",
        grad_tex=r"-\lambda",
        why="Identity forward, negated backward: the feature extractor is trained to maximise the domain "
        "classifier's loss, learning features that do not reveal the domain.",
        reference="Ganin & Lempitsky 2015, domain-adversarial training.",
        expression=Expression("x", gradient="-lam"),
    )
)
register(
    OpSpec(
        key="scale_gradient",
        title="Gradient scaling",
        family="override",
        params=(Param("factor", 0.1, 0.0, 2.0, "factor on the upstream gradient"),),
        forward_fn=lambda x, p: tf.identity(x),
        surrogate=lambda x, p: p["factor"] * tf.ones_like(x),
        forward_tex=r"x",
        grad_tex=r"\text{factor}",
        why="Identity forward, scaled backward: slows (or speeds) one branch of a network without touching the "
        "optimiser or the forward values.",
        reference="A common trick, e.g. for a shared trunk with several heads.",
        expression=Expression("x", gradient="factor"),
    )
)


def _relu_at_zero_grad(x: tf.Tensor, p: Params) -> tf.Tensor:
    return tf.where(x > 0, tf.ones_like(x), tf.where(tf.equal(x, 0), p["at_zero"] * tf.ones_like(x), tf.zeros_like(x)))


register(
    OpSpec(
        key="relu_at_zero",
        title="ReLU with an explicit gradient at 0",
        family="override",
        params=(Param("at_zero", 0.5, 0.0, 1.0, "the gradient exactly at x = 0"),),
        forward_fn=lambda x, p: tf.maximum(x, tf.zeros_like(x)),
        surrogate=_relu_at_zero_grad,
        forward_tex=r"\max(x, 0)",
        grad_tex=r"[\,x > 0\,] \text{ and } \text{at\_zero} \text{ AT } x = 0",
        why="ReLU has no derivative at 0; any value in [0, 1] is a valid subgradient. Autodiff picks one "
        "silently (tf.maximum sends ties to its first argument: 1; tf.nn.relu gives 0). This makes the choice explicit.",
        reference="The subgradient convention made explicit.",
        declared_points=_points(
            lambda p: [
                Point(
                    0.0,
                    "kink",
                    f"custom gradient is at_zero = {p['at_zero']:g} AT 0; autodiff of tf.maximum(x, 0) gives 1",
                )
            ]
        ),
        expression=Expression("maximum(x, 0)", gradient="where(x > 0, 1, where(x == 0, at_zero, 0))"),
    )
)


# -- numerically unstable autodiff ------------------------------------------------------------------------
def _overflow_onset(dtype: str) -> float:
    """log of the largest finite value: where exp overflows. Half types are computed in float32."""
    return float(np.log(np.finfo(compute_dtype(dtype)).max))


register(
    OpSpec(
        key="log1pexp",
        title="log(1 + exp(x)) with a stable gradient",
        family="stability",
        params=(),
        forward_fn=lambda x, p: tf.math.log(1.0 + tf.exp(x)),
        surrogate=lambda x, p: tf.math.sigmoid(x),
        forward_tex=r"\log(1 + e^{x})",
        grad_tex=r"s(x) = 1 - \frac{1}{1 + e^{x}}",
        why="Autodiff computes exp(x) / (1 + exp(x)), which is inf/inf = NaN once exp(x) overflows. The true "
        "derivative is the logistic s(x), finite everywhere; the custom gradient returns exactly that.",
        reference="The tf.custom_gradient documentation's own example.",
        declared_points=lambda p, dtype: [
            Point(
                _overflow_onset(dtype),
                "singular",
                f"autodiff is NaN from x = {_overflow_onset(dtype):.2f} on: exp(x) overflows (inf/inf); "
                "just below, 1/(1 + exp(x)) is flushed to 0 and autodiff already returns 0",
            )
        ],
        expression=Expression("log(1 + exp(x))", gradient="sigmoid(x)"),
    )
)
register(
    OpSpec(
        key="safe_norm",
        title="Norm with a safe gradient at 0",
        family="stability",
        params=(Param("eps", 1e-12, 1e-30, 1e-2, "floor of the norm in the gradient's denominator"),),
        forward_fn=lambda x, p: tf.sqrt(tf.square(x)),
        surrogate=lambda x, p: x / tf.maximum(tf.sqrt(tf.square(x)), p["eps"]),
        forward_tex=r"\sqrt{x^2} = |x|",
        grad_tex=r"\frac{x}{\max(\sqrt{x^2}, \varepsilon)},\quad 0 \text{ AT } x = 0",
        why="Autodiff of sqrt(x^2) at 0 computes 0 * inf = NaN, and one NaN poisons every weight it reaches. "
        "The custom gradient is the true derivative sign(x) away from 0 and the subgradient 0 at 0.",
        reference="The tf.custom_gradient documentation, norm example.",
        declared_points=_points(
            lambda p: [
                Point(-p["eps"], "kink", "custom gradient kinks where |x| = eps: x/eps inside, sign(x) outside"),
                Point(0.0, "singular", "autodiff is NaN AT 0 (0 * inf); the custom gradient is 0 there"),
                Point(p["eps"], "kink", "custom gradient kinks where |x| = eps: x/eps inside, sign(x) outside"),
            ]
        ),
        expression=Expression("sqrt(x ** 2)", gradient="x / maximum(sqrt(x ** 2), eps)"),
    )
)
