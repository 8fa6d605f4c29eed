"""Beyond the first derivative, for both signatures: ``second_order`` (the derivative of the custom gradient,
as a gradient penalty, a Hessian-vector product or meta-learning takes it) and ``forward_mode`` (the JVP that
``tf.autodiff.ForwardAccumulator`` gives, against the custom VJP).

* ``second_order``: the second derivative through the custom gradient (nested tapes, eager and ``tf.function``)
  against central differences of the custom first derivative, where that derivative is smooth (central
  differences at steps h and h/10 and the two one-sided ones agree; its own kinks and jumps are not compared).
  TensorFlow differentiates whatever ops the backward runs: a ``tf.stop_gradient``, a comparison, a bool cast,
  ``tf.sign`` or ``tf.round`` between x and the gradient gives None. None where the reference is 0 is right and
  passes (a constant surrogate); None where it is not, a different value, or eager != ``tf.function`` (an inner
  custom gradient that closes over an input: in a graph only its arguments are differentiated) warns.
  Elementwise: on :data:`POINTS` points of the sweep, each its own derivative (a diagonal Jacobian). Any other
  signature: vᵀ(∂/∂x_i ⟨u, Jᵀw⟩) for random u, w and a random direction v of one input at a time, at the
  first two input assignments.
* ``forward_mode`` (opt-in): the transpose identity uᵀ(Jv) = (uᵀJ)v, Jv from ``ForwardAccumulator`` and uᵀJ from
  the custom backward, for random u, v, eager and ``tf.function``. TensorFlow takes the JVP of the forward's own
  ops wherever they have one, so a surrogate, a reversal or a scaling is not what forward mode sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from explorer.checker.common import Check, Subject, fmt, guarded, result, value_and_grad
from explorer.checker.elementwise import near_special_points, sweep_grid
from ops.inputs import Assignment, as_list, tensors

POINTS = 61  # elementwise: points of the sweep, as the graph check
DIRECTIONS = 2  # any signature: random directions per assignment and input
STEPS = {"float64": 1e-5, "float32": 1e-2}  # central differences of the custom gradient (and a tenth of it)
SECOND_TOLERANCE = {
    "float64": {"rtol": 1e-3, "atol": 1e-6},
    "float32": {"rtol": 2e-2, "atol": 2e-3},
}  # the second derivative against central differences of the first
SETTLED = {"rtol": 1e-2, "atol": 1e-5}  # steps h and h/10 (and the one-sided ones) agree: smooth there
NOISE_ULPS = 4.0  # a difference of two rounded gradients is off by up to 2 ulps of each
ZERO_SECOND = 1e-5  # a reference second derivative this small is 0 (None is then right)
JVP_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}  # uᵀ(Jv) against (uᵀJ)v, one float32/64 computation each
NONE_CAUSE = (
    "a tf.stop_gradient or a non-differentiable op (a comparison, a bool cast, tf.sign, tf.round) between x and "
    "the gradient in the backward"
)
NONE_FIX = (
    "Fix: compute the gradient from x with differentiable ops (tf.abs, tf.square, tf.math.sigmoid; tf.where "
    "keeps the derivative of the branch it picks), without tf.stop_gradient"
)
CLOSURE_CAUSE = (
    "an inner @tf.custom_gradient that closes over an input: inside tf.function only its arguments are "
    "differentiated. Fix: pass the input to it as an argument and return its gradient too"
)
FORWARD_WHY = (
    "ForwardAccumulator does not use the custom gradient wherever the forward's ops have a JVP of their own "
    "(inside tf.function a sign's or a step's is 0), so forward-mode training and JVP-based Hessian products see "
    "the forward's own derivative, not your backward. Fix: use reverse mode; for a JVP that follows the custom "
    "gradient, take the double-VJP trick: with a tape over u, tape.gradient(sum(vjp(u) * v), u) = J v"
)


def widest_dtype(run: Callable[[str], Any]) -> str:
    """float64 if ``run(dtype)`` works in it, else float32 (whose error, if any, is raised)."""
    try:
        run("float64")
        return "float64"
    except Exception:  # noqa: BLE001 - a function that does not run in float64
        run("float32")
        return "float32"


# -- second order, elementwise ------------------------------------------------------------------------------
def second_through(call: Callable[[tf.Tensor], tf.Tensor], x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor | None]:
    """The custom gradient g(x) (upstream 1) and its derivative through the backward (nested tapes; elementwise,
    the gradient of Σ g is g' at each point); None when TensorFlow finds no path from x to g."""
    with tf.GradientTape() as outer:
        outer.watch(x)
        _, first = value_and_grad(call, x)
    if first is None:
        raise ValueError("the custom gradient is None (see the finite check)")
    return first, outer.gradient(first, x)


def central_second(call: Callable[[tf.Tensor], tf.Tensor], x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The derivative of the custom gradient by central differences (step h) and where it is smooth: steps h and
    h/10 agree, and the one-sided differences' gap shrinks with the step (h·g'' at a smooth point, the same
    slope change at a kink of the custom gradient). Each comparison allows the dtype's rounding noise of g
    divided by the step (:func:`rounding_noise`), so a smooth float32 gradient is not read as kinked."""
    h = STEPS[dtype]
    shifts = np.array([-h, h, -h / 10, h / 10, 0.0])
    moved = (x[None, :] + shifts[:, None]).astype(dtype)
    _, grad = value_and_grad(call, tf.constant(moved))
    g = np.asarray(grad.numpy(), np.float64)
    steps = moved.astype(np.float64) - moved[4].astype(np.float64)
    central = (g[1] - g[0]) / (steps[1] - steps[0])
    fine = (g[3] - g[2]) / (steps[3] - steps[2])
    gap = (g[1] - g[4]) / steps[1] - (g[4] - g[0]) / -steps[0]
    fine_gap = (g[3] - g[4]) / steps[3] - (g[4] - g[2]) / -steps[2]
    with np.errstate(invalid="ignore", over="ignore"):
        noise = rounding_noise(g, dtype, h / 10)
        settled = np.abs(central - fine) <= SETTLED["rtol"] * np.abs(fine) + SETTLED["atol"] + noise
        no_kink = np.abs(fine_gap) <= 0.5 * np.abs(gap) + SETTLED["atol"] + 2 * noise
        smooth = settled & no_kink & np.isfinite(central)
    return central, smooth


def rounding_noise(g: np.ndarray, dtype: str, step: float) -> np.ndarray:
    """What rounding alone can put into a difference quotient of the custom gradient ``g`` (rows: the shifted
    samples) at ``step``: :data:`NOISE_ULPS` units in the last place of the curve's scale (its largest |g|; a
    small g computed as 1 - tanh(x)^2 carries the rounding of the 1), over the step."""
    finite = np.abs(g[np.isfinite(g)])
    largest = float(finite.max()) if finite.size else 0.0
    return np.full(g.shape[1:], NOISE_ULPS * float(np.finfo(dtype).eps) * largest / step)


def _listing(x: np.ndarray, values: np.ndarray, mask: np.ndarray, limit: int = 5) -> str:
    chosen = np.flatnonzero(mask)
    step = max(1, len(chosen) // limit)
    shown = ", ".join(f"{fmt(values[i])} at x = {fmt(x[i])}" for i in chosen[::step][:limit])
    return shown + (f" ({len(chosen)} points)" if len(chosen) > limit else "")


def _second_order_on_sweep(subject: Subject) -> Check:
    """``second_order`` of a function of one input, elementwise (see the module docstring)."""
    call = subject.call(None)
    x_grid = sweep_grid(subject.spec, subject.params, n=POINTS).astype(np.float64)
    dtype = widest_dtype(lambda d: value_and_grad(call, tf.constant(x_grid[:2], d)))
    x = tf.constant(x_grid, dtype)
    if value_and_grad(call, x)[1] is None:
        return result("second_order", "skip", "does not apply: the custom gradient is None (see finite)")
    _, eager = second_through(call, x)

    @tf.function(autograph=False)
    def compiled(x):
        return second_through(call, x)

    _, graph = compiled(x)
    reference, smooth = central_second(call, x_grid, dtype)
    compared = int(smooth.sum())
    zero = smooth & (np.abs(reference) <= ZERO_SECOND)
    skipped = f"; {POINTS - compared} point(s) at a kink or jump of the custom gradient not compared (or not finite there)" if compared < POINTS else ""
    where = f"{compared} of {POINTS} points of the sweep, {dtype}"
    if eager is None and graph is None:
        if zero[smooth].all():
            return result(
                "second_order",
                "pass",
                f"None through the custom gradient (eager and tf.function), and right: the custom gradient's own "
                f"derivative is 0 at all {where} (central differences){skipped}",
            )
        return result(
            "second_order",
            "warn",
            f"None through the custom gradient (eager and tf.function) where its derivative is not 0: "
            f"{_listing(x_grid, reference, smooth & ~zero)} by central differences of the custom gradient. A "
            f"gradient penalty or Hessian-vector product silently gets nothing (or zeros) there. Cause: {NONE_CAUSE}. "
            f"{NONE_FIX}{skipped}",
        )
    tolerance = SECOND_TOLERANCE[dtype]
    values = {"eager": eager, "tf.function": graph}
    problems = []
    if (eager is None) != (graph is None):
        missing = "tf.function" if graph is None else "eager"
        present = np.asarray(values["eager" if graph is None else "tf.function"].numpy(), np.float64)
        if (np.abs(present[smooth]) > ZERO_SECOND).any():
            given = "eager" if graph is None else "tf.function"
            return result(
                "second_order",
                "warn",
                f"{given} gives the second derivative ({_listing(x_grid, present, smooth & (np.abs(present) > ZERO_SECOND))}) "
                f"but {missing} gives None at the same x: the cause is {CLOSURE_CAUSE}{skipped}",
            )
    for label, value in values.items():
        got = np.zeros_like(x_grid) if value is None else np.asarray(value.numpy(), np.float64)
        wrong = smooth & ~np.isclose(got, reference, **tolerance)
        if wrong.any():
            worst = int(np.argmax(np.where(wrong, np.abs(got - reference), -1.0)))
            none = " (None: zero)" if value is None else ""
            problems.append(
                f"{label} gives {fmt(got[worst])}{none} at x = {fmt(x_grid[worst])} where central differences of the "
                f"custom gradient give {fmt(reference[worst])} ({int(wrong.sum())} of {compared} points)"
            )
    if problems:
        return result(
            "second_order",
            "warn",
            f"the second derivative through the custom gradient is not the derivative of the custom gradient: "
            f"{'; '.join(problems)}. Cause: part of the backward is detached ({NONE_CAUSE}) or it closes over an "
            f"input inside an inner custom gradient. {NONE_FIX}{skipped}",
        )
    largest = float(np.abs(reference[smooth]).max()) if compared else 0.0
    return result(
        "second_order",
        "pass",
        f"the second derivative through the custom gradient (eager and tf.function) equals central differences "
        f"of the custom gradient at {where}; max |g'| = {fmt(largest)}{skipped}",
    )


second_order_on_sweep = guarded("second_order")(_second_order_on_sweep)  # not a decorator: mutmut mutates only undecorated functions


# -- second order, any signature -----------------------------------------------------------------------------
def _contracted_gradient(call, inputs: Sequence[tf.Tensor], upstream: Sequence[tf.Tensor], u: Sequence[tf.Tensor]):
    """Σ_i ⟨u_i, gradient_i⟩ of the custom backward with upstream ``upstream`` (None gradients count 0)."""
    with tf.GradientTape() as tape:
        for tensor in inputs:
            tape.watch(tensor)
        outputs = as_list(call(list(inputs)))
    grads = tape.gradient(outputs, list(inputs), output_gradients=list(upstream))
    terms = [tf.reduce_sum(g * w) for g, w in zip(grads, u, strict=True) if g is not None]
    return tf.add_n(terms) if terms else tf.constant(0.0, inputs[0].dtype)


def hessian_rows(call, inputs: Sequence[tf.Tensor], upstream, u) -> list[tf.Tensor | None]:
    """∂/∂x_i Σ ⟨u, Jᵀ upstream⟩ for each input i, through the custom backward (None: no path)."""
    with tf.GradientTape() as outer:
        for tensor in inputs:
            outer.watch(tensor)
        contracted = _contracted_gradient(call, inputs, upstream, u)
    return outer.gradient(contracted, list(inputs))


def _second_rows(subject: Subject, assignment: Assignment, seed: int) -> list[dict[str, Any]]:
    """Per input and direction: the second derivative through the backward, eager and in tf.function, against
    central differences (h and h/10, one-sided) of the contracted custom gradient."""
    call, names = subject.call_all(None), subject.user.inputs
    rng = np.random.default_rng(seed)
    base = assignment.values(seed)
    dtype = "float64" if assignment.dtype == "float64" else "float32"
    h = STEPS[dtype]
    outputs = as_list(call(tensors(base, dtype)))
    upstream = [tf.constant(rng.normal(size=o.shape), dtype) for o in outputs]
    u = [tf.constant(rng.normal(size=b.shape), dtype) for b in base]

    @tf.function(autograph=False)
    def compiled(*inputs):
        return hessian_rows(call, inputs, upstream, u)

    eager = hessian_rows(call, tensors(base, dtype), upstream, u)
    graph = compiled(*tensors(base, dtype))
    rows = []
    for index, name in enumerate(names):
        for _ in range(DIRECTIONS):
            v = rng.normal(size=base[index].shape)

            def phi(t: float, index: int = index, v: np.ndarray = v) -> float:
                moved = [b.copy() for b in base]
                moved[index] = moved[index] + t * v
                return float(_contracted_gradient(call, tensors(moved, dtype), upstream, u).numpy())

            at = {t: phi(t) for t in (-h, h, -h / 10, h / 10, 0.0)}
            central, fine = (at[h] - at[-h]) / (2 * h), (at[h / 10] - at[-h / 10]) / (h / 5)
            gap = (at[h] - at[0.0]) / h - (at[0.0] - at[-h]) / h
            fine_gap = (at[h / 10] - at[0.0]) / (h / 10) - (at[0.0] - at[-h / 10]) / (h / 10)
            noise = NOISE_ULPS * float(np.finfo(dtype).eps) * max(abs(value) for value in at.values()) / (h / 10)
            smooth = bool(  # as central_second: rounding noise allowed, a kink's slope gap does not shrink with h
                abs(central - fine) <= SETTLED["rtol"] * abs(fine) + SETTLED["atol"] + noise
                and abs(fine_gap) <= 0.5 * abs(gap) + SETTLED["atol"] + 2 * noise
            )
            got = {
                label: None if rows_of[index] is None else float(np.sum(rows_of[index].numpy() * v))
                for label, rows_of in (("eager", eager), ("tf.function", graph))
            }
            rows.append({"input": name, "reference": central, "smooth": smooth, **got, "dtype": dtype})
    return rows


def _second_order_directional(subject: Subject) -> Check:
    """``second_order`` of any other signature, at the first two input assignments (see the module docstring)."""
    user, found = subject.user, subject.found
    rows: list[dict[str, Any]] = []
    for seed, assignment in enumerate(found.working[:2], start=20):
        rows += _second_rows(subject, assignment, seed)
    compared = [r for r in rows if r["smooth"]]
    skipped = f"; {len(rows) - len(compared)} direction(s) on a kink or jump of the custom gradient not compared" if len(compared) < len(rows) else ""
    closure, none, wrong = [], [], []
    for r in compared:
        tolerance = SECOND_TOLERANCE[r["dtype"]]
        informative = abs(r["reference"]) > ZERO_SECOND
        if (r["eager"] is None) != (r["tf.function"] is None) and informative:
            closure.append(r)
        elif r["eager"] is None and informative:
            none.append(r)
        else:
            for label in ("eager", "tf.function"):
                got = 0.0 if r[label] is None else r[label]
                if not np.isclose(got, r["reference"], **tolerance):
                    wrong.append({**r, "label": label, "got": got})
                    break
    shapes = "; ".join(a.describe(user.inputs) for a in found.working[:2])
    if closure:
        r = closure[0]
        given = "eager" if r["tf.function"] is None else "tf.function"
        missing = "tf.function" if given == "eager" else "eager"
        inputs = sorted({x["input"] for x in closure})
        return result(
            "second_order",
            "warn",
            f"input(s) {', '.join(inputs)}: {given} gives the second derivative ({fmt(r[given])} in a random "
            f"direction, central differences {fmt(r['reference'])}) but {missing} gives None ({shapes}): the cause is "
            f"{CLOSURE_CAUSE}{skipped}",
        )
    if none:
        inputs = sorted({x["input"] for x in none})
        r = none[0]
        return result(
            "second_order",
            "warn",
            f"input(s) {', '.join(inputs)}: the second derivative through the custom gradient is None (eager and "
            f"tf.function) where central differences of the custom gradient give {fmt(r['reference'])} in a random "
            f"direction ({shapes}). Cause: {NONE_CAUSE}. {NONE_FIX}{skipped}",
        )
    if wrong:
        r = wrong[0]
        inputs = sorted({x["input"] for x in wrong})
        return result(
            "second_order",
            "warn",
            f"input(s) {', '.join(inputs)}: {r['label']} gives {fmt(r['got'])} in a random direction where central "
            f"differences of the custom gradient give {fmt(r['reference'])} ({shapes}). Cause: part of the backward "
            f"is detached ({NONE_CAUSE}). {NONE_FIX}{skipped}",
        )
    nones = sum(1 for r in compared if r["eager"] is None)
    note = f"; None in {nones} direction(s) where the reference is 0 (right)" if nones else ""
    return result(
        "second_order",
        "pass",
        f"the second derivative through the custom gradient (eager and tf.function) equals central differences of "
        f"the custom gradient in {len(compared)} random directions (per input: {', '.join(user.inputs)}; "
        f"{shapes}){note}{skipped}",
    )


second_order_directional = guarded("second_order")(_second_order_directional)  # not a decorator: mutmut mutates only undecorated functions


# -- forward mode ---------------------------------------------------------------------------------------------
def jvp_and_vjp(call, inputs: Sequence[tf.Tensor], tangents, cotangents) -> tuple[list[tf.Tensor | None], list[tf.Tensor | None]]:
    """Jv from ``tf.autodiff.ForwardAccumulator`` (one per output) and uᵀJ from the custom backward (one per input)."""
    with tf.autodiff.ForwardAccumulator(list(inputs), list(tangents)) as accumulator:
        outputs = as_list(call(list(inputs)))
    jvps = [accumulator.jvp(o) for o in outputs]
    with tf.GradientTape() as tape:
        for tensor in inputs:
            tape.watch(tensor)
        outputs = as_list(call(list(inputs)))
    vjps = tape.gradient(outputs, list(inputs), output_gradients=list(cotangents))
    return jvps, list(vjps)


def _both_sides(jvps, vjps, tangents, cotangents) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per element of the first input: u·(Jv) and (uᵀJ)·v (an elementwise function's Jacobian is diagonal); summed
    over everything otherwise. Also whether the JVP is None (no JVP path)."""
    left = [np.zeros(np.shape(u)) if j is None else np.asarray(j.numpy(), np.float64) * u for j, u in zip(jvps, cotangents, strict=True)]
    right = [np.zeros(np.shape(v)) if g is None else np.asarray(g.numpy(), np.float64) * v for g, v in zip(vjps, tangents, strict=True)]
    if len(left) == 1 and len(right) == 1 and left[0].shape == right[0].shape:
        return left[0].ravel(), right[0].ravel(), all(j is None for j in jvps)
    total_left = np.array([sum(float(x.sum()) for x in left)])
    total_right = np.array([sum(float(x.sum()) for x in right)])
    return total_left, total_right, all(j is None for j in jvps)


def _forward_mode_at(call, base: Sequence[np.ndarray], dtype: str, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray, bool]]:
    """For eager and tf.function: u·(Jv) and (uᵀJ)·v for random u (outputs) and v (inputs) at ``base``."""
    rng = np.random.default_rng(seed)
    inputs = tensors(base, dtype)
    outputs = as_list(call(list(inputs)))
    tangents = [rng.normal(size=b.shape) for b in base]
    cotangents = [rng.normal(size=o.shape) for o in outputs]
    t_tensors, u_tensors = tensors(tangents, dtype), tensors(cotangents, dtype)

    @tf.function(autograph=False)
    def compiled(*inputs):
        jvps, vjps = jvp_and_vjp(call, inputs, t_tensors, u_tensors)
        return jvps, vjps

    found = {}
    for label, run in (("eager", lambda: jvp_and_vjp(call, inputs, t_tensors, u_tensors)), ("tf.function", lambda: compiled(*inputs))):
        jvps, vjps = run()
        found[label] = _both_sides(jvps, vjps, tangents, cotangents)
    return found


def _forward_mode_of(subject: Subject) -> Check:
    """``forward_mode`` of either signature: elementwise on :data:`POINTS` points of the sweep (each point its own
    term of the identity, so the message says where), else at the first two input assignments."""
    if subject.elementwise:
        one = subject.call(None)
        x_grid = sweep_grid(subject.spec, subject.params, n=POINTS).astype(np.float64)
        dtype = widest_dtype(lambda d: value_and_grad(one, tf.constant(x_grid[:2], d)))
        cases = [("the sweep", [x_grid], dtype, lambda inputs: one(inputs[0]))]
        kinks = near_special_points(subject, x_grid)  # the derivative is not defined there: a convention
    else:
        kinks = np.zeros(1, bool)
        cases = [
            (a.describe(subject.user.inputs), a.values(30 + i), "float64" if a.dtype == "float64" else "float32", subject.call_all(None))
            for i, a in enumerate(subject.found.working[:2])
        ]
    problems = []
    for number, (where, base, dtype, call) in enumerate(cases):
        for label, (jv, vj, none) in _forward_mode_at(call, base, dtype, 40 + number).items():
            wrong = ~np.isclose(jv, vj, **JVP_TOLERANCE) & ~kinks
            if not wrong.any():
                continue
            at = int(np.argmax(np.where(wrong, np.abs(jv - vj), -1.0)))
            point = f"x = {fmt(base[0].ravel()[at])}" if subject.elementwise else where
            nothing = " (the JVP is None: no forward-mode path)" if none else ""
            problems.append(
                f"{label}: uᵀ(Jv) = {fmt(jv[at] + 0.0)} from ForwardAccumulator's JVP{nothing} but (uᵀJ)v = {fmt(vj[at])} from "
                f"the custom gradient at {point} ({int(wrong.sum())} of {wrong.size} {'points' if subject.elementwise else 'sums'})"
            )
    if problems:
        return result("forward_mode", "warn", f"forward mode does not follow the custom gradient: {'; '.join(problems[:2])}. {FORWARD_WHY}")
    what = "; ".join(c[0] for c in cases)
    if subject.elementwise:
        what = f"{POINTS} points of the sweep" + (f", {int(kinks.sum())} at a jump or kink not compared" if kinks.any() else "")
    return result(
        "forward_mode",
        "pass",
        f"forward mode follows the custom gradient: uᵀ(Jv) from ForwardAccumulator equals (uᵀJ)v from the backward "
        f"for random u, v (eager and tf.function; {what})",
    )


forward_mode_of = guarded("forward_mode")(_forward_mode_of)  # not a decorator: mutmut mutates only undecorated functions
