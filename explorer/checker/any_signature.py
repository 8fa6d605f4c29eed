"""The checks of a function that is not one input, elementwise: several tensor inputs, several outputs,
outputs of another shape (norms, sums, matrix products), captured variables.

They run at the input assignments the function accepts (:func:`ops.inputs.find_inputs`, found once by the plan
and held by the :class:`~explorer.checker.common.Subject`), at least two where there are two, so a missing
transpose or a broadcast gradient that was not summed back shows up as a wrong shape; every flag value is
checked. Where the float64 forward is NaN for values in [-2, 2] (outside the function's domain, e.g. log of a
negative number) the assignment's values are in [0.1, 2] and the message says so. :mod:`explorer.checker.checks`
calls them for a subject with input assignments.

``vs_autodiff`` is a directional check (the idea of ``torch.autograd.gradcheck``'s fast mode and
``jax.test_util.check_grads``): for random directions u (inputs) and v (outputs), vᵀJu from float64 central
differences of the forward against Σᵢ ⟨uᵢ, gradᵢ(v)⟩ from the custom backward, per input. A difference whose
finite difference does not settle as the step shrinks sits on a kink or jump of the forward and is reported as
such, not as a wrong gradient.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from explorer.checker.common import (
    COMPARE_TOLERANCE,
    GRAPH_TOLERANCE,
    HARD_VALUES,
    RATIO_TOLERANCE,
    UPSTREAM,
    Check,
    Subject,
    flag_text,
    fmt,
    guarded,
    passed_text,
    result,
    undeclared_difference,
)
from ops.inputs import WIDEST_FIRST, Assignment, as_list, error_text, tensors

DIRECTIONS = 2  # random (u, v) pairs per assignment and input
STEP = 1e-5  # float64 central difference: truncation ~h^2, rounding ~1e-16/h
DIRECTIONAL_TOLERANCE = {"rtol": 1e-5, "atol": 1e-7}  # custom vᵀJu against the float64 central difference
DIRECTIONAL_TOLERANCE_BELOW_FLOAT64 = {"rtol": 1e-2, "atol": 1e-3}  # a function that does not run in float64
SETTLED = {"rtol": 1e-3, "atol": 1e-6}  # central differences at h and h/10 agree: the forward is smooth there
ONE_SIDED_SETTLED = {"rtol": 1e-2, "atol": 1e-4}  # and so do the two one-sided ones (else: a kink)
KERAS_FIT_ASSIGNMENTS = 2  # models built and fitted, at different input shapes where the function has them


# -- calling the function on several inputs ---------------------------------------------------------------
@dataclass
class Evaluation:
    """One call and its gradients: ``outputs`` as a list, one gradient per input (None allowed) and per
    variable the forward read."""

    outputs: list[tf.Tensor]
    input_grads: list[tf.Tensor | None]
    variables: list[tf.Variable]
    variable_grads: list[tf.Tensor | None]


def evaluate(
    call: Callable[[Sequence[tf.Tensor]], Any], inputs: Sequence[tf.Tensor], upstream: float | Sequence | None = None
) -> Evaluation:
    """``call(inputs)`` and the gradient of its outputs (upstream ``upstream`` each, default 1) with respect
    to every input and every variable the call read."""
    with tf.GradientTape() as tape:
        for tensor in inputs:
            tape.watch(tensor)
        outputs = as_list(call(inputs))
    variables = [v for v in tape.watched_variables() if v.trainable]
    if upstream is None or isinstance(upstream, (int, float)):
        value = 1.0 if upstream is None else upstream
        upstreams = [tf.fill(tf.shape(o), tf.constant(value, o.dtype)) for o in outputs]
    else:
        upstreams = list(upstream)
    grads = tape.gradient(outputs, [*inputs, *variables], output_gradients=upstreams)
    return Evaluation(outputs, list(grads[: len(inputs)]), variables, list(grads[len(inputs) :]))


# -- the checks ---------------------------------------------------------------------------------------------
def _names(user, ev: Evaluation | None = None) -> list[str]:
    names = list(user.inputs)
    if ev is not None:
        names += [f"variable {v.name.split(':')[0]}" for v in ev.variables]
    return names


@guarded("shape_dtype")
def shape_dtype_at_assignments(subject: Subject) -> Check:
    """Every gradient has its input's shape and dtype at each working assignment, in each dtype the forward runs in."""
    user, found, call_for = subject.user, subject.found, subject.call_all
    problems: list[str] = []
    notes: set[str] = set()
    cases = 0
    for flags in user.flag_settings():
        call = call_for(flags)
        at_flags = f" ({flag_text(flags)})" if flags else ""
        for assignment in found.working:
            for dtype in WIDEST_FIRST:
                where = f"{dtype}, {assignment.describe(user.inputs)}{at_flags}"
                inputs = tensors(assignment.values(1), dtype)
                try:
                    outputs = as_list(call(inputs))
                except Exception:  # noqa: BLE001 - the forward does not run in this dtype: skipped
                    notes.add(f"the forward does not run in {dtype}")
                    continue
                cases += 1
                try:
                    ev = evaluate(call, inputs)
                except Exception as error:  # noqa: BLE001
                    problems.append(f"{where}: the backward raised {error_text(error)}")
                    continue
                for index, out in enumerate(outputs):
                    if out.dtype.name != dtype:
                        problems.append(f"{where}: output {index} dtype is {out.dtype.name}")
                for name, tensor, grad in zip(_names(user, ev), [*inputs, *ev.variables], [*ev.input_grads, *ev.variable_grads], strict=True):
                    if grad is None:
                        notes.add(f"no gradient (None) for {name}")
                        continue
                    if tuple(grad.shape) != tuple(tensor.shape):
                        problems.append(
                            f"{where}: input {name}: gradient has shape {tuple(grad.shape)}, expected "
                            f"{tuple(tensor.shape)}"
                        )
                    if grad.dtype != tensor.dtype:
                        problems.append(f"{where}: input {name}: gradient dtype is {grad.dtype.name}, expected {tensor.dtype.name}")
                if all(g is None for g in ev.input_grads):
                    problems.append(f"{where}: every input gradient is None: nothing upstream learns")
    rules = sorted({a.rule for a in found.working})
    if problems:
        shown = "; ".join(problems[:2]) + (f"; and {len(problems) - 2} more" if len(problems) > 2 else "")
        fix = ""
        if "has shape" in shown:
            fix = (
                ". Each gradient must have its input's shape: sum a broadcast input's gradient back over the "
                "broadcast axes, transpose in a matrix product's gradient (da = dy @ b^T, db = a^T @ dy)"
            )
        return result("shape_dtype", "fail", f"{shown}{fix}")
    note = f"; noted: {'; '.join(sorted(notes))}" if notes else ""
    return result(
        "shape_dtype",
        "pass",
        f"every gradient has its input's shape and dtype in {cases} cases ({len(found.working)} input assignments: "
        f"{'; '.join(a.describe(user.inputs) for a in found.working[:3])}; rules: {', '.join(rules)}){note}",
    )


def _float64_forward_of(user, params, flags, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """The undecorated forward in float64 (None if it does not run in float64)."""
    try:
        return [o.numpy() for o in as_list(user.forward_all(tensors(inputs, "float64"), params, flags))]
    except Exception:  # noqa: BLE001
        return None


@guarded("finite")
def finite_at_assignments(subject: Subject) -> Check:
    """Finite outputs and gradients at random values and with each input, in turn, at each hard value (and its
    negative) of each dtype, at two working assignments; inputs outside the domain are not counted."""
    user, found, call_for, params = subject.user, subject.found, subject.call_all, subject.params
    problems: list[str] = []
    domain: set[str] = set()
    largest = 0.0
    chosen = found.working[:2]
    for flags in user.flag_settings():
        call = call_for(flags)
        at_flags = f" ({flag_text(flags)})" if flags else ""
        for assignment in chosen:
            base = assignment.values(2)
            for dtype, hard in HARD_VALUES.items():
                cases = [("random values", base)]
                for label, value in hard.items():
                    for index, name in enumerate(user.inputs):
                        for sign in (1.0, -1.0) if value else (1.0,):
                            if assignment.positive and sign < 0:
                                continue
                            values = [v.copy() for v in base]
                            values[index] = np.full(assignment.shapes[index], sign * value)
                            what = "the zero vector" if value == 0 else f"{'-' if sign < 0 else '+'}{label} ({sign * value:g})"
                            cases.append((f"{name} = {what}", values))
                for case, values in cases:
                    inputs = tensors(values, dtype)
                    try:
                        ev = evaluate(call, inputs)
                    except Exception:  # noqa: BLE001 - a dtype the function does not run in (shape_dtype says)
                        break
                    forward = [np.asarray(o.numpy(), np.float64) for o in ev.outputs]
                    truth = _float64_forward_of(user, params, flags, values)
                    outside = truth is not None and any(np.isnan(t).any() for t in truth)
                    if outside:
                        domain.add(case)
                        continue
                    where = f"{dtype}, {case}{at_flags}"
                    for index, out in enumerate(forward):
                        if np.isnan(out).any():
                            problems.append(f"{where}: output {index} is NaN (its float64 value is not)")
                    forward_finite = all(np.isfinite(o).all() for o in forward)
                    for name, grad in zip(_names(user, ev), [*ev.input_grads, *ev.variable_grads], strict=True):
                        if grad is None:
                            continue
                        g = np.asarray(grad.numpy(), np.float64)
                        if np.isnan(g).any():
                            problems.append(f"{where}: the gradient of {name} is NaN")
                        elif np.isinf(g).any() and forward_finite:
                            problems.append(f"{where}: the gradient of {name} is infinite where the forward is finite")
                        finite = g[np.isfinite(g)]
                        if finite.size:
                            largest = max(largest, float(np.abs(finite).max()))
    if problems:
        unique = list(dict.fromkeys(problems))
        shown = "; ".join(unique[:4]) + (f"; and {len(unique) - 4} more" if len(unique) > 4 else "")
        return result("finite", "fail", f"{shown}. Use a stable formula (see RUNBOOK.md, NaN gradient)")
    note = ""
    if domain or any(a.positive for a in chosen):
        note = (
            "; the float64 forward is NaN for some inputs in [-2, 2] (outside the function's domain): checked inside "
            "it, those inputs not counted"
        )
    return result(
        "finite",
        "pass",
        f"finite for every input at random values, 0 (the zero vector), +-tiny, +-1e4 and exp-overflow values "
        f"(float16, float32, float64; {len(chosen)} input assignments); max |g| = {fmt(largest)}{note}",
    )


@guarded("graph")
def graph_at_assignments(subject: Subject) -> Check:
    """Eager, ``tf.function`` (two assignments) and ``jit_compile=True`` (the first) agree on every output and
    every input's gradient, at every flag value."""
    user, found, call_for = subject.user, subject.found, subject.call_all
    problems: list[str] = []
    chosen = found.working[:2]
    for flags in user.flag_settings():
        call = call_for(flags)
        passed = passed_text(user, {}, flags)
        for number, assignment in enumerate(chosen):
            inputs = tensors(assignment.values(3), assignment.dtype)
            where = f"{assignment.describe(user.inputs)}{passed}"
            # XLA at the first assignment only: compiling it again for other shapes costs much and finds little
            modes = (("tf.function", False), ("jit_compile=True", True)) if number == 0 else (("tf.function", False),)
            try:
                eager = evaluate(call, inputs, UPSTREAM)
            except Exception as error:  # noqa: BLE001
                problems.append(f"eager call at {where} raised {error_text(error)}")
                continue
            for label, jit in modes:

                @tf.function(jit_compile=jit, autograph=False)
                def compiled(*inputs, call=call):
                    ev = evaluate(call, inputs, UPSTREAM)
                    grads = [tf.fill(tf.shape(t), tf.constant(np.nan, t.dtype)) if g is None else g
                             for t, g in zip(inputs, ev.input_grads, strict=True)]
                    return ev.outputs, grads

                try:
                    outputs, grads = compiled(*inputs)
                except Exception as error:  # noqa: BLE001
                    problems.append(f"{label} at {where} raised {error_text(error)}")
                    break
                want = [*eager.outputs, *[
                    tf.fill(tf.shape(t), tf.constant(np.nan, t.dtype)) if g is None else g
                    for t, g in zip(inputs, eager.input_grads, strict=True)
                ]]
                labels = [f"output {i}" for i in range(len(outputs))] + [f"the gradient of {n}" for n in user.inputs]
                for what, got, expected in zip(labels, [*outputs, *grads], want, strict=True):
                    a, b = got.numpy(), expected.numpy()
                    if a.shape != b.shape or not np.allclose(a, b, equal_nan=True, **GRAPH_TOLERANCE):
                        gap = "a different shape" if a.shape != b.shape else f"up to {fmt(float(np.nanmax(np.abs(a - b))))}"
                        problems.append(f"{label} {what} differs from eager by {gap} at {where}")
        if problems:
            break  # the same error at the other flag values says nothing new
    if problems:
        return result("graph", "fail", "; ".join(dict.fromkeys(problems[:3])))
    flags_text = f", at {' and '.join(flag_text(f) for f in user.flag_settings())}" if user.flags else ""
    return result(
        "graph",
        "pass",
        f"eager, tf.function and jit_compile=True agree on every output and every input's gradient (upstream "
        f"{UPSTREAM:g}; {len(chosen)} input assignments, XLA at the first{flags_text})",
    )


def directional_rows(user, params, flags, call, assignment: Assignment, seed: int) -> list[dict[str, Any]]:
    """Per input and direction: vᵀJu by central differences (steps h and h/10) and from the backward."""
    rng = np.random.default_rng(seed)
    base = assignment.values(seed)
    found = []
    dtype = assignment.dtype
    step = STEP if dtype == "float64" else 1e-2
    forward = user.forward_all if dtype == "float64" else None
    for index, name in enumerate(user.inputs):
        for _ in range(DIRECTIONS):
            u = rng.normal(size=assignment.shapes[index])
            outputs = [np.asarray(o.numpy()) for o in as_list(call(tensors(base, dtype)))]
            v = [rng.normal(size=o.shape) for o in outputs]

            def phi(t: float, index: int = index, u: np.ndarray = u, v: list[np.ndarray] = v) -> float:
                """Σ_k ⟨v_k, y_k(inputs with input ``index`` moved by t u)⟩."""
                moved = [b.copy() for b in base]
                moved[index] = moved[index] + t * u
                y = as_list((forward or (lambda i, p, f: call(i)))(tensors(moved, dtype), params, flags))
                return float(sum(np.sum(np.asarray(o.numpy(), np.float64) * w) for o, w in zip(y, v, strict=True)))

            numerical = [(phi(h) - phi(-h)) / (2 * h) for h in (step, step / 10)]
            one_sided = ((phi(step) - phi(0.0)) / step, (phi(0.0) - phi(-step)) / step)
            ev = evaluate(call, tensors(base, dtype), [tf.constant(w, dtype) for w in v])
            grad = ev.input_grads[index]
            custom = 0.0 if grad is None else float(np.sum(np.asarray(grad.numpy(), np.float64) * u))
            smooth = np.isclose(numerical[0], numerical[1], **SETTLED) and np.isclose(
                one_sided[0], one_sided[1], **ONE_SIDED_SETTLED
            )
            found.append(
                {"input": name, "numerical": numerical[0], "custom": custom, "smooth": bool(smooth), "none": grad is None}
            )
    return found


def _differences_text(user, rows: list[dict[str, Any]], differs: list[dict[str, Any]]) -> str:
    """Per input, how the backward's vᵀJu differs from the numerical one in the ``differs`` directions: a
    constant factor (a flipped sign named), else the first direction's two values."""
    by_input: dict[str, list[dict[str, Any]]] = {}
    for r in differs:
        by_input.setdefault(r["input"], []).append(r)
    parts = []
    for name, found_rows in by_input.items():
        r = found_rows[0]
        ratio = r["custom"] / r["numerical"] if abs(r["numerical"]) > 1e-9 else None
        ratios = [x["custom"] / x["numerical"] for x in found_rows if abs(x["numerical"]) > 1e-9]
        constant = ratio is not None and len(ratios) == len(found_rows) and np.allclose(ratios, ratios[0], rtol=RATIO_TOLERANCE)
        extra = f", a constant {fmt(ratios[0])} times the numerical one" if constant else ""
        if constant and ratios[0] < 0:
            extra += ": its sign is flipped"
        none = " (its gradient is None)" if r["none"] else ""
        parts.append(
            f"input {name}{none}: vᵀJu is {fmt(r['custom'])} from the backward vs {fmt(r['numerical'])} numerical "
            f"(in {len(found_rows)} of {sum(1 for x in rows if x['input'] == name)} directions{extra})"
        )
    return "; ".join(parts)


@guarded("vs_autodiff")
def vs_autodiff_directional(subject: Subject) -> Check:
    """The op's ``why`` is the declared justification ("" without one; a docstring is not one). Undeclared, a
    difference from an informative true derivative (not zero) warns; one where the true derivative is zero (a
    step) is a surrogate and passes."""
    user, found, call_for, params, why = subject.user, subject.found, subject.call_all, subject.params, subject.spec.why
    rows: list[dict[str, Any]] = []
    for flags in user.flag_settings():
        call = call_for(flags)
        for seed, assignment in enumerate(found.working[:2], start=10):
            rows += directional_rows(user, params, flags, call, assignment, seed)
    tolerance = DIRECTIONAL_TOLERANCE if found.working[0].dtype == "float64" else DIRECTIONAL_TOLERANCE_BELOW_FLOAT64
    differs = [r for r in rows if r["smooth"] and not np.isclose(r["custom"], r["numerical"], **tolerance)]
    kinks = [r for r in rows if not r["smooth"]]
    count = len(rows)
    kink_note = (
        f"; {len(kinks)} direction(s) sit on a kink or jump of the forward (the finite difference does not settle), "
        "not compared" if kinks else ""
    )
    if not differs:
        return result(
            "vs_autodiff",
            "pass",
            f"the custom gradient equals the numerical one in {count - len(kinks)} random directions (vᵀJu, float64 "
            f"central differences, per input: {', '.join(user.inputs)}){kink_note}",
        )
    if why.strip():
        text = "the custom gradient differs from the numerical one: " + _differences_text(user, rows, differs) + kink_note
        return result("vs_autodiff", "pass", f"intentional: {text}. Why: {' '.join(why.split())}")
    informative = [r for r in differs if abs(r["numerical"]) > tolerance["atol"]]
    if informative:
        text = "the custom gradient differs from the numerical one: " + _differences_text(user, rows, informative)
        return result("vs_autodiff", "warn", f"{text}{kink_note}. {undeclared_difference(user, subject.spec.key)}")
    return result(
        "vs_autodiff",
        "pass",
        "a surrogate: the custom gradient lets a gradient through where the true one is zero (the forward is flat "
        f"there): {_differences_text(user, rows, differs)}{kink_note}",
    )


def not_elementwise(
    subject: Subject, name: str = "special_points", why: str = "special points are points of an elementwise curve"
) -> Check:
    """The ``name`` row (``special_points``, ``kink``) of a function that is not one input, elementwise: a skip."""
    user, found = subject.user, subject.found
    shape = found.working[0].describe(user.inputs) if found.working else "no working inputs"
    return result(
        name, "skip", f"does not apply: {user.name} is not one input, elementwise (inputs {shape}); {why}"
    )


# -- Keras and SavedModel ---------------------------------------------------------------------------------
def _flat(outputs: Sequence[tf.Tensor], batch: int) -> tf.Tensor:
    """Every output as (batch, features): a scalar is repeated, one with the batch's leading axis reshaped."""
    columns = []
    for out in outputs:
        if out.shape.rank and out.shape[0] == batch:
            columns.append(tf.reshape(out, (batch, -1)))
        else:
            columns.append(tf.tile(tf.reshape(out, (1, -1)), (batch, 1)))
    return tf.concat([tf.cast(c, tf.float32) for c in columns], axis=1)


@guarded("keras_fit")
def keras_fit_at_assignments(subject: Subject) -> Check:
    """:func:`_fit_once` at the first :data:`KERAS_FIT_ASSIGNMENTS` working assignments of different shapes
    with a batch axis for x (a missing transpose or an unreduced broadcast often fits one shape only)."""
    user, found, call = subject.user, subject.found, subject.call_all(None)
    chosen: list[Assignment] = []
    for assignment in found.working:
        if assignment.dtype in ("float32", "float64") and assignment.shapes[0]:
            if all(assignment.shapes != other.shapes for other in chosen):
                chosen.append(assignment)
        if len(chosen) == KERAS_FIT_ASSIGNMENTS:
            break
    if not chosen:
        return result("keras_fit", "warn", "not run: no assignment with a batch axis for x that runs in float32")
    results = [_fit_once(user, assignment, call) for assignment in chosen]
    for level in ("fail", "warn"):
        for fitted in results:
            if fitted.level == level:
                return fitted
    if len(results) == 1:
        return results[0]
    first, *others = results
    also = "; ".join(fitted.message.removeprefix("one Model.fit step: ") for fitted in others)
    return result("keras_fit", "pass", f"{first.message}; and at another input assignment: {also}")


def _fit_once(user, assignment: Assignment, call: Callable) -> Check:
    """A model fitting the signature: x comes from a Dense layer (batch = x's leading axis), every other input
    is a trainable weight of its shape, outputs are flattened into a Dense(1); the variables the function
    reads are trained too (Keras does not track a plain tf.Variable, so the train step adds them) and put
    back afterwards."""
    import keras

    keras.utils.set_random_seed(0)
    batch, features = assignment.shapes[0][0], int(np.prod(assignment.shapes[0][1:], dtype=int))
    spread = _across_bounds(assignment)
    probe = evaluate(call, tensors(assignment.values(4), "float32"))
    variables = probe.variables
    saved = [v.numpy() for v in variables]

    class Signature(keras.layers.Layer):
        def build(self, input_shape):
            self.extra = [
                self.add_weight(shape=shape, initializer=keras.initializers.Constant(v), name=f"input_{name}")
                for name, shape, v in zip(user.inputs[1:], assignment.shapes[1:], assignment.values(5)[1:], strict=True)
            ]

        def call(self, z):
            x = tf.reshape(z, assignment.shapes[0])
            if assignment.positive:
                x = tf.nn.softplus(x) + 0.1  # inside the domain
            if spread is not None:  # x across and beyond a range's bounds: every gradient path gets elements
                x = x + tf.constant(spread, x.dtype)
            return _flat(as_list(call([x, *[tf.convert_to_tensor(w) for w in self.extra]])), batch)

    class FitsVariables(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            grads = tape.gradient(loss, [*self.trainable_variables, *variables])
            count = len(self.trainable_variables)
            self.optimizer.apply(grads[:count], self.trainable_variables)
            for variable, grad in zip(variables, grads[count:], strict=True):
                if grad is not None:
                    variable.assign_sub(0.01 * tf.cast(grad, variable.dtype))
            return {"loss": loss}

    rng = np.random.default_rng(0)
    features_in = rng.normal(size=(batch, 4)).astype("float32")
    targets = rng.normal(size=(batch, 1)).astype("float32")
    inputs = keras.Input(shape=(4,), batch_size=batch)
    before = keras.layers.Dense(max(features, 1), name="before_op")
    layer = Signature()
    model = FitsVariables(inputs, keras.layers.Dense(1)(layer(before(inputs))))
    # no XLA here: the graph check covers jit_compile, and compiling the train step with it costs seconds
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01), loss="mse", jit_compile=False)
    start = [w.copy() for w in before.get_weights()]
    extra_start = None
    try:
        model.build((batch, 4))
        extra_start = [w.numpy().copy() for w in layer.extra]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Gradients do not exist" for an input whose gradient is None: said below
            model.fit(features_in, targets, batch_size=batch, epochs=1, verbose=0)
        # this train step keeps no loss metric: the loss after the step, computed eagerly
        loss = float(np.mean((model(features_in).numpy() - targets) ** 2))
        moved_variables = [not np.array_equal(v.numpy(), s) for v, s in zip(variables, saved, strict=True)]
    finally:
        for variable, value in zip(variables, saved, strict=True):
            variable.assign(value)
    if not np.isfinite(loss):
        return result("keras_fit", "fail", f"Model.fit ran but the loss after it is {loss}")
    moved = {"x": any(not np.array_equal(a, b) for a, b in zip(start, before.get_weights(), strict=True))}
    for name, weight, first in zip(user.inputs[1:], layer.extra, extra_start, strict=True):
        moved[name] = not np.array_equal(weight.numpy(), first)
    for variable, flag in zip(variables, moved_variables, strict=True):
        moved[f"variable {variable.name.split(':')[0]}"] = flag
    no_gradient = {name for name, grad in zip(_names(user, probe), [*probe.input_grads, *probe.variable_grads], strict=True) if grad is None}
    still = [name for name, flag in moved.items() if not flag and name not in no_gradient]
    where = f"inputs {assignment.describe(user.inputs)}"
    if spread is not None:
        where += f", x spread over [{fmt(spread.min())}, {fmt(spread.max())}] across the bounds"
    if no_gradient:
        where += f"; {', '.join(sorted(no_gradient))} has no gradient (None), so it is not trained"
    conventions = _learns_elsewhere(user, assignment, call, still)
    if conventions:
        still = [name for name in still if name not in conventions]
        where += "; " + "; ".join(conventions.values())
    if still:
        return result(
            "keras_fit",
            "warn",
            f"one Model.fit step ran (loss {fmt(loss)}, {where}), but no gradient reached {', '.join(still)}",
        )
    extra = f"; variable(s) {', '.join(v.name.split(':')[0] for v in variables)} updated by the fit" if variables else ""
    return result(
        "keras_fit",
        "pass",
        f"one Model.fit step: loss {fmt(loss)} after it (finite); every input's branch with a gradient moved "
        f"({where}){extra}",
    )


def _across_bounds(assignment: Assignment) -> np.ndarray | None:
    """For a function with a pair of bounds (a clip's min and max): an offset for x running evenly over
    [-3, 3], so the fit's batch has elements below, inside and above any range drawn (ops.inputs.LOWER_BOUND,
    UPPER_BOUND), and a bound learns in the one step; None for any other function (its batch as it was)."""
    if not any(d and d[2].startswith(("below ", "above ")) for d in assignment.domains):
        return None
    shape = assignment.shapes[0]
    return np.linspace(-3.0, 3.0, int(np.prod(shape, dtype=int))).reshape(shape)


def _learns_elsewhere(user, assignment: Assignment, call: Callable, still: Sequence[str]) -> dict[str, str]:
    """Of the inputs that did not move in the fit, those whose gradient is 0 at the fit's values but not for x
    spread over [-4, 4] (a range that learns only from elements outside it, a threshold from those near it):
    a convention of the function, said in words, not a problem. name -> the sentence."""
    names = [name for name in still if name in user.inputs[1:]]
    if not names:
        return {}
    values = assignment.values(5)
    wide = np.linspace(-4.0, 4.0, values[0].size).reshape(values[0].shape)
    at_fit = evaluate(call, tensors(values, "float32"))
    spread = evaluate(call, tensors([wide, *values[1:]], "float32"))
    found = {}
    for name in names:
        index = user.inputs.index(name)
        here, there = at_fit.input_grads[index], spread.input_grads[index]
        if here is None or there is None or np.any(here.numpy() != 0) or not np.any(there.numpy() != 0):
            continue
        found[name] = (
            f"{name} learns only from some values of x (its gradient is 0 at this batch's x and not at x spread "
            "over [-4, 4], e.g. a range that learns from the elements outside it): a convention of the function, "
            "not a missing gradient"
        )
    return found


@guarded("saved_model")
def saved_model_at_assignments(subject: Subject) -> Check:
    """``tf.saved_model.save`` of a module with one serving function per input assignment (at most two),
    each calling yours with every input an argument, reloaded: outputs and every input's gradient must be
    the same (NaN equal to NaN)."""
    user, found, call = subject.user, subject.found, subject.call_all(None)
    chosen = found.working[:2]
    module = tf.Module()
    cases = []
    for index, assignment in enumerate(chosen):
        dtype = "float16" if assignment.dtype == "float16" else "float32"
        inputs = tensors(assignment.values(6), dtype)
        want = evaluate(call, inputs)
        module.variables_read = list(want.variables)
        signature = [tf.TensorSpec(t.shape, t.dtype) for t in inputs]
        setattr(module, f"serve_{index}", tf.function(lambda *args: as_list(call(list(args))), input_signature=signature))
        cases.append((index, assignment, inputs, want))
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "saved")
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                tf.saved_model.save(module, path)
                reloaded = tf.saved_model.load(path)
        except Exception as error:  # noqa: BLE001
            return result("saved_model", "fail", f"tf.saved_model.save raised {error_text(error.__cause__ or error)}")
        problems = []
        for index, assignment, inputs, want in cases:
            serve = getattr(reloaded, f"serve_{index}")
            got = evaluate(lambda args, serve=serve: serve(*args), inputs)
            where = assignment.describe(user.inputs)
            for number, (a, b) in enumerate(zip(got.outputs, want.outputs, strict=True)):
                if not np.allclose(a.numpy(), b.numpy(), equal_nan=True, **COMPARE_TOLERANCE):
                    problems.append(f"output {number} differs ({where})")
            for name, a, b in zip(user.inputs, got.input_grads, want.input_grads, strict=True):
                if (a is None) != (b is None):
                    problems.append(f"the gradient of {name} is {'None' if a is None else 'not None'} ({where})")
                elif a is not None and not np.allclose(a.numpy(), b.numpy(), equal_nan=True, **COMPARE_TOLERANCE):
                    problems.append(f"the gradient of {name} differs: the custom gradient was lost ({where})")
    if problems:
        return result("saved_model", "fail", "after tf.saved_model.save and load: " + "; ".join(problems[:3]))
    return result(
        "saved_model",
        "pass",
        "tf.saved_model.save + load: every output and input gradient equals the original's "
        f"({'; '.join(a.describe(user.inputs) for a in chosen)}; NaN equal to NaN)",
    )
