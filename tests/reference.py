"""An independent NumPy reference for every built-in op, written from /work/shared/op-catalogue.md.

Nothing here imports ``ops``: the tests compare the op library against these formulas.

``REFERENCES[key]`` is an :class:`OpReference`:

* ``forward(x, params)`` evaluates the forward *in x's dtype* (float32 or float64) with the
  parameters cast to that dtype, as the catalogue requires; that makes tie conventions (sign(0),
  round half to even at dorefa midpoints, the naive log1pexp overflow) come out exactly as in TF.
* ``custom_grad(x, dy, params)`` is the custom dx in float64 (x and params are first rounded to the
  sweep dtype, so every comparison at a special point gives the same answer as in that dtype).
* ``true_grad`` is what TF autodiff of the plain forward must return: ``"zero"`` (tf.sign-based
  forwards), ``"none"`` (tf.cast / tf.round-based forwards: no gradient at all), or a NumPy
  function ``(x, dy, params) -> dx`` evaluated in x's dtype (NaN where autodiff really is NaN).
* ``defaults`` are the catalogue defaults, ``nondefault`` one other valid parameter set with every
  parameter changed (values between the default and ``high`` where possible, dyadic so that the
  special points are exact in every dtype, and a non-zero threshold for spike ops).
* ``expected_points(params)`` lists the special points the catalogue names, as ``(x, kind)``;
  ``kind`` is None where the catalogue does not say which kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

Params = Mapping[str, float]
ForwardFn = Callable[[np.ndarray, Params], np.ndarray]
GradFn = Callable[[np.ndarray, np.ndarray, Params], np.ndarray]

# The 26 catalogue keys in catalogue order, with their family.
CATALOGUE_FAMILIES: dict[str, str] = {
    **dict.fromkeys(
        [
            "atan",
            "fast_sigmoid",
            "sigmoid",
            "triangle",
            "gaussian",
            "exponential",
            "softsign",
            "q_pseudo_spike",
            "rect",
            "piecewise_leaky_relu",
            "spike_rate_escape",
            "straight_through",
        ],
        "spike",
    ),
    **dict.fromkeys(["ste_sign", "approx_sign", "swish_sign", "ste_heaviside", "ste_tern", "dorefa"], "sign"),
    **dict.fromkeys(["leaky_clip", "clip_gradient"], "clip"),
    **dict.fromkeys(["scaled_square", "gradient_reversal", "scale_gradient", "relu_at_zero"], "override"),
    **dict.fromkeys(["log1pexp", "safe_norm"], "stability"),
}


@dataclass(frozen=True)
class OpReference:
    family: str
    defaults: dict[str, float]
    nondefault: dict[str, float]
    forward: ForwardFn
    custom_grad: GradFn
    true_grad: str | GradFn
    expected_points: Callable[[Params], list[tuple[float, str | None]]] = field(default=lambda p: [])


# -- helpers ---------------------------------------------------------------------------------


def _p64(params: Params, dtype: np.dtype) -> dict[str, float]:
    """Parameters rounded to the sweep dtype, then widened to float64."""
    return {k: float(np.asarray(v, dtype=dtype)) for k, v in params.items()}


def _x64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _in_dtype(params: Params, dtype: np.dtype) -> dict[str, np.generic]:
    return {k: np.asarray(v, dtype=dtype)[()] for k, v in params.items()}


def _sigmoid_product(u: np.ndarray) -> np.ndarray:
    """s(u) * s(-u) = exp(-|u|) / (1 + exp(-|u|))^2, with no overflow."""
    e = np.exp(-np.abs(u))
    return e / (1.0 + e) ** 2


def _sigmoid(u: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(u))
    return np.where(u >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _sign_plus(x: np.ndarray) -> np.ndarray:
    """sign(x) with sign(0) = +1 (Larq's convention)."""
    return np.where(x >= 0, 1.0, -1.0).astype(x.dtype)


# -- spike family: forward [x > threshold], custom gradient g(x - threshold) ---------------------


def _spike_forward(x: np.ndarray, p: Params) -> np.ndarray:
    t = _in_dtype(p, x.dtype)["threshold"]
    return (x > t).astype(x.dtype)


def _spike(surrogate: Callable[[np.ndarray, dict[str, float]], np.ndarray]) -> GradFn:
    def grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
        q = _p64(p, x.dtype)
        z = _x64(x) - q["threshold"]
        return _x64(dy) * surrogate(z, q)

    return grad


def _spike_points(extra: Callable[[dict], list[tuple[float, str | None]]] = lambda p: []):
    def points(p: Params) -> list[tuple[float, str | None]]:
        return [(p["threshold"], "jump"), *extra(p)]

    return points


SPIKE_SURROGATES: dict[str, Callable[[np.ndarray, dict[str, float]], np.ndarray]] = {
    "atan": lambda z, q: (q["alpha"] / 2) / (1 + (math.pi * q["alpha"] * z / 2) ** 2),
    "fast_sigmoid": lambda z, q: 1 / (q["slope"] * np.abs(z) + 1) ** 2,
    "sigmoid": lambda z, q: q["slope"] * _sigmoid_product(q["slope"] * z),
    "triangle": lambda z, q: np.maximum(0.0, q["alpha"] - q["alpha"] ** 2 * np.abs(z)),
    "gaussian": lambda z, q: q["alpha"] / math.sqrt(math.pi) * np.exp(-((q["alpha"] * z) ** 2)),
    "exponential": lambda z, q: q["alpha"] / 2 * np.exp(-q["alpha"] * np.abs(z)),
    "softsign": lambda z, q: q["alpha"] / (2 * (1 + q["alpha"] * np.abs(z)) ** 2),
    "q_pseudo_spike": lambda z, q: (1 + 2 * np.abs(z) / (q["alpha"] - 1)) ** (-q["alpha"]),
    # open box: 0 exactly at +-0.5/alpha
    "rect": lambda z, q: q["alpha"] * (np.abs(z) < 0.5 / q["alpha"]),
    # open box: c exactly at +-w
    "piecewise_leaky_relu": lambda z, q: np.where(np.abs(z) < q["w"], 1 / (2 * q["w"]), q["c"]),
    "spike_rate_escape": lambda z, q: q["slope"] * np.exp(-q["beta"] * np.abs(z - 1)),
    "straight_through": lambda z, q: np.ones_like(z),
}

_SPIKE_PARAMS: dict[str, tuple[dict[str, float], dict[str, float]]] = {
    # key: (catalogue defaults without threshold, non-default values)
    "atan": ({"alpha": 2.0}, {"alpha": 4.0}),
    "fast_sigmoid": ({"slope": 25.0}, {"slope": 50.0}),
    "sigmoid": ({"slope": 25.0}, {"slope": 50.0}),
    "triangle": ({"alpha": 1.0}, {"alpha": 4.0}),
    "gaussian": ({"alpha": 2.0}, {"alpha": 4.0}),
    "exponential": ({"alpha": 1.0}, {"alpha": 4.0}),
    "softsign": ({"alpha": 2.0}, {"alpha": 4.0}),
    "q_pseudo_spike": ({"alpha": 2.0}, {"alpha": 4.0}),
    "rect": ({"alpha": 1.0}, {"alpha": 4.0}),
    "piecewise_leaky_relu": ({"w": 1.0, "c": 0.01}, {"w": 2.0, "c": 0.5}),
    "spike_rate_escape": ({"beta": 1.0, "slope": 25.0}, {"beta": 4.0, "slope": 50.0}),
    "straight_through": ({}, {}),
}

_SPIKE_EXTRA_POINTS: dict[str, Callable[[dict], list[tuple[float, str | None]]]] = {
    "triangle": lambda p: [(p["threshold"] + s / p["alpha"], None) for s in (-1, 1)],
    "rect": lambda p: [(p["threshold"] + s * 0.5 / p["alpha"], "boundary") for s in (-1, 1)],
    "piecewise_leaky_relu": lambda p: [(p["threshold"] + s * p["w"], "boundary") for s in (-1, 1)],
}


# -- sign and quantizer family -------------------------------------------------------------------


def _clip_mask(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    """Closed clipping box [|x| <= clip_value]."""
    c = _p64(p, x.dtype)["clip_value"]
    return _x64(dy) * (np.abs(_x64(x)) <= c)


def _approx_sign_grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    a = np.abs(_x64(x))
    return _x64(dy) * np.where(a <= 1, 2 - 2 * a, 0.0)


def _swish_sign_grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    """beta (2 - beta x tanh(beta x / 2)) / (1 + cosh(beta x)), with 1 + cosh(u) = 2 cosh(u/2)^2."""
    beta = _p64(p, x.dtype)["beta"]
    u = beta * _x64(x)
    e = np.exp(-np.abs(u) / 2)
    sech_half = 2 * e / (1 + e * e)
    return _x64(dy) * beta * (2 - u * np.tanh(u / 2)) / 2 * sech_half**2


def _ste_tern_forward(x: np.ndarray, p: Params) -> np.ndarray:
    """-1 below -t, 0 strictly inside (-t, t), +1 above t, and +-1 exactly at +-t."""
    t = _in_dtype(p, x.dtype)["threshold_value"]
    return np.where(x >= t, 1.0, np.where(x <= -t, -1.0, 0.0)).astype(x.dtype)


def _dorefa_forward(x: np.ndarray, p: Params) -> np.ndarray:
    """round(clip(x, 0, 1) * n) / n in x's dtype; np.round rounds half to even like tf.round."""
    n = np.asarray(2 ** int(p["k_bit"]) - 1, dtype=x.dtype)
    return (np.round(np.clip(x, 0, 1) * n) / n).astype(x.dtype)


def _dorefa_grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    x64 = _x64(x)
    return _x64(dy) * ((x64 >= 0) & (x64 <= 1))


def _dorefa_points(p: Params) -> list[tuple[float, str | None]]:
    n = 2 ** int(p["k_bit"]) - 1
    return [(0.0, "boundary"), (1.0, "boundary"), *(((j + 0.5) / n, "jump") for j in range(n))]


# -- clipping ------------------------------------------------------------------------------------


def _leaky_clip_forward(x: np.ndarray, p: Params) -> np.ndarray:
    q = _in_dtype(p, x.dtype)
    return np.clip(x, q["lo"], q["hi"]).astype(x.dtype)


def _leaky_clip_grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    q = _p64(p, x.dtype)
    x64 = _x64(x)
    return _x64(dy) * np.where((x64 >= q["lo"]) & (x64 <= q["hi"]), 1.0, q["leak"])


def _leaky_clip_true(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    q = _p64(p, x.dtype)
    x64 = _x64(x)
    return (_x64(dy) * ((x64 >= q["lo"]) & (x64 <= q["hi"]))).astype(x.dtype)


def _clip_gradient_grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    c = _p64(p, x.dtype)["clip_value"]
    return np.clip(_x64(dy), -c, c) * np.ones_like(_x64(x))


# -- overrides -----------------------------------------------------------------------------------


def _identity(x: np.ndarray, p: Params) -> np.ndarray:
    return x.copy()


def _pass_through(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    """Autodiff of the identity: dx = dy."""
    return (np.asarray(dy, dtype=x.dtype) * np.ones_like(x)).astype(x.dtype)


def _constant_factor(name: str, sign: float = 1.0) -> GradFn:
    def grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
        return _x64(dy) * sign * _p64(p, x.dtype)[name] * np.ones_like(_x64(x))

    return grad


def _relu_at_zero_grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    at_zero = _p64(p, x.dtype)["at_zero"]
    x64 = _x64(x)
    return _x64(dy) * np.where(x64 > 0, 1.0, np.where(x64 == 0, at_zero, 0.0))


def _relu_true(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    """tf.maximum(x, 0) sends the tie at 0 to its first argument: gradient 1 at 0."""
    return (_x64(dy) * (_x64(x) >= 0)).astype(x.dtype)


# -- stability -----------------------------------------------------------------------------------


def _log1pexp_forward(x: np.ndarray, p: Params) -> np.ndarray:
    """The naive formula, in x's dtype: overflows to inf where exp(x) does."""
    with np.errstate(over="ignore"):
        return np.log(1 + np.exp(x)).astype(x.dtype)


def _log1pexp_true(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    """Autodiff of log(1 + exp(x)): dy * reciprocal(1 + exp(x)) * exp(x); inf * 0 = NaN once exp
    overflows. TF on CPU flushes a subnormal reciprocal to 0, so just below the overflow the
    true gradient is 0 rather than 1."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        reciprocal = 1 / (1 + e)
        reciprocal = np.where(np.abs(reciprocal) < np.finfo(x.dtype).tiny, 0, reciprocal).astype(x.dtype)
        return (np.asarray(dy, dtype=x.dtype) * reciprocal * e).astype(x.dtype)


def _safe_norm_forward(x: np.ndarray, p: Params) -> np.ndarray:
    return np.sqrt(x * x).astype(x.dtype)


def _safe_norm_grad(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    """x / max(sqrt(x^2), eps): 0 at 0."""
    eps = _p64(p, x.dtype)["eps"]
    x64 = _x64(x)
    return _x64(dy) * x64 / np.maximum(np.abs(x64), eps)


def _safe_norm_true(x: np.ndarray, dy: np.ndarray, p: Params) -> np.ndarray:
    """Autodiff of sqrt(x^2): 2x * (0.5 / sqrt(x^2)) = 0 * inf = NaN at 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.asarray(dy, dtype=x.dtype) * 0.5 / np.sqrt(x * x) * 2 * x).astype(x.dtype)


# -- the table -----------------------------------------------------------------------------------

REFERENCES: dict[str, OpReference] = {}

for _key, (_defaults, _nondefault) in _SPIKE_PARAMS.items():
    REFERENCES[_key] = OpReference(
        family="spike",
        defaults={**_defaults, "threshold": 0.0},
        nondefault={**_nondefault, "threshold": 0.5},
        forward=_spike_forward,
        custom_grad=_spike(SPIKE_SURROGATES[_key]),
        true_grad="none",  # tf.cast(x > threshold) has no gradient
        expected_points=_spike_points(_SPIKE_EXTRA_POINTS.get(_key, lambda p: [])),
    )

REFERENCES.update(
    {
        "ste_sign": OpReference(
            family="sign",
            defaults={"clip_value": 1.0},
            nondefault={"clip_value": 2.0},
            forward=lambda x, p: _sign_plus(x),
            custom_grad=_clip_mask,
            true_grad="zero",
            expected_points=lambda p: [(0.0, "jump"), (-p["clip_value"], "boundary"), (p["clip_value"], "boundary")],
        ),
        "approx_sign": OpReference(
            family="sign",
            defaults={},
            nondefault={},
            forward=lambda x, p: _sign_plus(x),
            custom_grad=_approx_sign_grad,
            true_grad="zero",
            expected_points=lambda p: [(0.0, "jump"), (-1.0, None), (1.0, None)],
        ),
        "swish_sign": OpReference(
            family="sign",
            defaults={"beta": 5.0},
            nondefault={"beta": 10.0},
            forward=lambda x, p: _sign_plus(x),
            custom_grad=_swish_sign_grad,
            true_grad="zero",
            expected_points=lambda p: [(0.0, "jump")],
        ),
        "ste_heaviside": OpReference(
            family="sign",
            defaults={"clip_value": 1.0},
            nondefault={"clip_value": 2.0},
            forward=lambda x, p: (x > 0).astype(x.dtype),
            custom_grad=_clip_mask,
            true_grad="none",
            expected_points=lambda p: [(0.0, "jump"), (-p["clip_value"], "boundary"), (p["clip_value"], "boundary")],
        ),
        "ste_tern": OpReference(
            family="sign",
            defaults={"threshold_value": 0.05, "clip_value": 1.0},
            nondefault={"threshold_value": 0.25, "clip_value": 2.0},
            forward=_ste_tern_forward,
            custom_grad=_clip_mask,
            true_grad="zero",
            expected_points=lambda p: [
                (-p["threshold_value"], "jump"),
                (p["threshold_value"], "jump"),
                (-p["clip_value"], "boundary"),
                (p["clip_value"], "boundary"),
            ],
        ),
        "dorefa": OpReference(
            family="sign",
            defaults={"k_bit": 2},
            nondefault={"k_bit": 4},
            forward=_dorefa_forward,
            custom_grad=_dorefa_grad,
            true_grad="none",  # tf.round has no gradient
            expected_points=_dorefa_points,
        ),
        "leaky_clip": OpReference(
            family="clip",
            defaults={"lo": -1.0, "hi": 1.0, "leak": 0.1},
            nondefault={"lo": -0.5, "hi": 2.0, "leak": 0.5},
            forward=_leaky_clip_forward,
            custom_grad=_leaky_clip_grad,
            true_grad=_leaky_clip_true,
            expected_points=lambda p: [(p["lo"], None), (p["hi"], None)],
        ),
        "clip_gradient": OpReference(
            family="clip",
            defaults={"clip_value": 1.0},
            nondefault={"clip_value": 2.0},
            forward=_identity,
            custom_grad=_clip_gradient_grad,
            true_grad=_pass_through,
        ),
        "scaled_square": OpReference(
            family="override",
            defaults={"scale": 0.5},
            nondefault={"scale": 1.25},
            forward=lambda x, p: (x * x).astype(x.dtype),
            custom_grad=lambda x, dy, p: _x64(dy) * _p64(p, x.dtype)["scale"] * 2 * _x64(x),
            true_grad=lambda x, dy, p: (np.asarray(dy, dtype=x.dtype) * 2 * x).astype(x.dtype),
        ),
        "gradient_reversal": OpReference(
            family="override",
            defaults={"lam": 1.0},
            nondefault={"lam": 3.0},
            forward=_identity,
            custom_grad=_constant_factor("lam", sign=-1.0),
            true_grad=_pass_through,
        ),
        "scale_gradient": OpReference(
            family="override",
            defaults={"factor": 0.1},
            nondefault={"factor": 1.5},
            forward=_identity,
            custom_grad=_constant_factor("factor"),
            true_grad=_pass_through,
        ),
        "relu_at_zero": OpReference(
            family="override",
            defaults={"at_zero": 0.5},
            nondefault={"at_zero": 0.75},
            forward=lambda x, p: np.maximum(x, np.zeros_like(x)),
            custom_grad=_relu_at_zero_grad,
            true_grad=_relu_true,
            expected_points=lambda p: [(0.0, None)],
        ),
        "log1pexp": OpReference(
            family="stability",
            defaults={},
            nondefault={},
            forward=_log1pexp_forward,
            custom_grad=lambda x, dy, p: _x64(dy) * _sigmoid(_x64(x)),
            true_grad=_log1pexp_true,
        ),
        "safe_norm": OpReference(
            family="stability",
            defaults={"eps": 1e-12},
            nondefault={"eps": 2.0**-10},
            forward=_safe_norm_forward,
            custom_grad=_safe_norm_grad,
            true_grad=_safe_norm_true,
            expected_points=lambda p: [(0.0, None)],
        ),
    }
)


def reference_for(key: str) -> OpReference:
    """The reference for ``key``; a clear failure message if an op was added without one."""
    try:
        return REFERENCES[key]
    except KeyError:
        raise AssertionError(
            f"op {key!r} is registered but has no NumPy reference: add an OpReference for it to "
            "tests/reference.py (forward, custom gradient, true-gradient expectation, parameter sets)"
        ) from None


def param_sets(key: str) -> dict[str, dict[str, float]]:
    """Named parameter sets to test: the catalogue defaults and the non-default set.

    Used at collection time, so an op without a reference gets one empty (= op defaults) set
    here and fails in each test body through :func:`reference_for`, not as a collection error."""
    if key not in REFERENCES:
        return {"default": {}}
    ref = REFERENCES[key]
    sets = {"default": dict(ref.defaults)}
    if ref.nondefault:
        sets["nondefault"] = dict(ref.nondefault)
    return sets


# -- sweep grids ---------------------------------------------------------------------------------

GRID_LO, GRID_HI = -3.0, 3.0
POINT_RANGE = 1e3  # declared points this far out are added too (log1pexp's overflow onset)


def sweep_grid(points: list[float], dtype: str = "float32", num: int = 121) -> np.ndarray:
    """A sorted grid on [-3, 3] in ``dtype`` (a NumPy float dtype name) that contains every given
    special point exactly, its two neighbouring normal floats (just inside / just outside) and
    a few tiny values around 0."""
    dt = np.dtype(dtype)
    tiny = [s * 2.0**e for s in (-1, 1) for e in (-12, -20)]
    base = np.concatenate([np.linspace(GRID_LO, GRID_HI, num), tiny]).astype(dt)
    special = np.asarray(points, dtype=dt)
    neighbours = np.concatenate([np.nextafter(special, dt.type(-np.inf)), np.nextafter(special, dt.type(np.inf))])
    # TF on CPU flushes subnormals to zero, so the float next to 0 is the smallest normal one.
    smallest = np.finfo(dt).tiny
    neighbours = np.where(np.abs(neighbours) < smallest, np.sign(neighbours) * smallest, neighbours).astype(dt)
    return np.unique(np.concatenate([base, special, neighbours]))


def assert_close(actual, expected, x, *, rtol: float, atol: float, what: str) -> None:
    """np.testing-style closeness (NaN == NaN, inf == inf) whose message names the failing x values."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.broadcast_to(np.asarray(expected, dtype=np.float64), actual.shape)
    x = np.broadcast_to(np.asarray(x, dtype=np.float64), actual.shape)
    same_special = (np.isnan(actual) & np.isnan(expected)) | (np.isinf(expected) & (actual == expected))
    with np.errstate(invalid="ignore"):
        ok = same_special | (np.abs(actual - expected) <= atol + rtol * np.abs(expected))
    if not ok.all():
        bad = np.flatnonzero(~ok.ravel())
        rows = "\n".join(f"  x={x.flat[i]!r}: expected {expected.flat[i]!r}, got {actual.flat[i]!r}" for i in bad[:8])
        raise AssertionError(f"{what}: {bad.size} of {actual.size} values differ (rtol={rtol}, atol={atol})\n{rows}")


def tolerances(dtype: str, scale: float = 1.0) -> tuple[float, float]:
    """(rtol, atol): float64 to 1e-12 absolute, float32 to 1e-6 relative with atol 1e-6 * scale."""
    if dtype == "float64":
        return 0.0, 1e-12
    return 1e-6, 1e-6 * max(1.0, scale)


def declared_points_via(spec, lo: float, hi: float, dtype: str, params: Params) -> list:
    """``spec.points(lo, hi, dtype, **params)``; when an op's own parameters are called ``lo`` / ``hi``
    (leaky_clip) and points() cannot take them, the same filter over ``spec.declared_points``.
    test_points_accept_op_params_named_lo_and_hi checks points() itself."""
    try:
        return spec.points(lo, hi, dtype, **params)
    except TypeError:
        found = spec.declared_points(spec.resolve(params), dtype)
        return sorted((p for p in found if lo <= p.x <= hi), key=lambda p: p.x)
