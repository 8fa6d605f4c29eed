"""Which checks run, in which order: :func:`check_function` (a custom-gradient function, a built-in or editor
op) and :func:`check_layer` (a Keras layer class).

:data:`FUNCTION_PLAN` names each function check, says in one line what it proves and points at the one
function that makes it (:mod:`explorer.checker.checks`, ``(subject) -> Check``); :data:`LAYER_PLAN` does the
same for a layer. Adding a check is one entry here plus one function; an entry with ``opt_in=True``
(``forward_mode``) runs only when asked (``check_function(..., forward_mode=True)``, ``verify --forward-mode``),
and :data:`FUNCTION_CHECKS` lists a default run's rows. An op that declares its forward and
surrogate (a built-in, an editor op: ``spec.declares_surrogate``) is checked as the function
:func:`ops.user.from_spec` makes of it, its declared forward the true one.

Before the checks, the plan finds out what the function is, within the time limit: one input, elementwise
(:meth:`ops.user.UserFunction.is_elementwise`; a declared op is by its declaration), or else which input
assignments it accepts (:func:`ops.inputs.find_inputs`, once for every check). A function for which no
assignment works gets ``fail`` rows, "not checked": nothing checked is not a pass.

A check never raises and never hangs: each runs in a worker thread for at most ``time_limit`` seconds
(:func:`run_limited`). A check that overruns fails and the rest are not run; its thread is a daemon that is
abandoned, not killed (Python cannot stop a thread, and TensorFlow cannot interrupt a running op), so it may use
a core until the process exits (which is why ``verify`` and the guardrail check in a worker process).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import keras

import ops
from explorer.checker import checks, layer
from explorer.checker.common import TIME_LIMIT, Check, Subject, explain_fail, explained, quiet_tensorflow, result
from explorer.checker.timelimit import TimeLimitExceeded, call_with_time_limit
from ops.inputs import Found, find_inputs, no_inputs_message


@dataclass(frozen=True)
class Step:
    """One check of a plan: its name (the row's ``check``), what it proves, and the function that makes it."""

    name: str
    proves: str
    check: Callable[..., Check]
    opt_in: bool = False  # run only when asked (verify --forward-mode, check(fn, forward_mode=True))


FUNCTION_PLAN: tuple[Step, ...] = (
    Step("finite", "forward and gradient finite on the sweep and at each dtype's hard places", checks.check_finite),
    Step(
        "shape_dtype",
        "gradient and output keep x's shape and dtype (float16/32/64; scalar, vector, batch)",
        checks.check_shape_dtype,
    ),
    Step(
        "graph",
        "eager, tf.function and jit_compile=True agree, parameters passed as the signature asks",
        checks.check_graph,
    ),
    Step(
        "keras_fit",
        "one Model.fit step through a layer calling the function: finite loss, gradient flows",
        checks.check_keras_fit,
    ),
    Step("special_points", "declared special points agree with the detected ones", checks.check_special_points),
    Step(
        "vs_autodiff",
        "the custom gradient against the true one (declared forward or numerical), justified",
        checks.check_vs_autodiff,
    ),
    Step(
        "kink",
        "at a kink of the forward the custom value lies between the one-sided slopes (jumps not judged)",
        checks.check_kink,
    ),
    Step("saved_model", "model.export + reload keeps the custom gradient", checks.check_saved_model),
    Step(
        "second_order",
        "the second derivative through the custom gradient (eager, tf.function) is the custom gradient's derivative",
        checks.check_second_order,
    ),
    Step(
        "forward_mode",
        "opt-in: ForwardAccumulator's JVP agrees with the custom VJP, u^T(Jv) = (u^T J)v",
        checks.check_forward_mode,
        opt_in=True,
    ),
)
LAYER_PLAN: tuple[Step, ...] = (  # each check takes (layer_class, functions it may call)
    Step(
        "keras_fit",
        "one Model.fit step with the layer: finite loss, gradient flows",
        lambda layer_class, functions: layer.keras_fit_through(layer_class()),
    ),
    Step(
        "input_gradient",
        "the layer's input gradient equals the custom gradient of the function it calls",
        layer.check_input_gradient,
    ),
    Step(
        "keras_save",
        ".keras save and load give the same output and gradient",
        lambda layer_class, functions: layer.check_keras_save(layer_class),
    ),
    Step(
        "saved_model",
        "model.export + reload keeps the custom gradient",
        lambda layer_class, functions: layer.saved_model_through(layer_class),
    ),
)
FUNCTION_CHECKS: dict[str, str] = {step.name: step.proves for step in FUNCTION_PLAN if not step.opt_in}  # a default run's rows
OPT_IN_CHECKS: dict[str, str] = {step.name: step.proves for step in FUNCTION_PLAN if step.opt_in}
LAYER_CHECKS: dict[str, str] = {step.name: step.proves for step in LAYER_PLAN}


# -- running a plan within a time limit ---------------------------------------------------------------------
def run_limited(name: str, function: Callable[[], Check], time_limit: float = TIME_LIMIT) -> Check:
    """``function()`` in a daemon worker thread; a failed :class:`Check` if it raises or overruns.

    An overrunning thread is abandoned, not stopped (see the module docstring).
    """
    try:
        return call_with_time_limit(function, time_limit, name=f"check-{name}")
    except TimeLimitExceeded:
        return result(
            name,
            "fail",
            f"TimeoutError: the check did not finish within {time_limit:g} s (a hung or very slow forward or "
            "backward); its worker thread was abandoned",
        )
    except BaseException as error:  # noqa: BLE001 - user code may even raise SystemExit
        return result(name, "fail", f"the check raised {explained(error)}")


def run_plan(plan: Sequence[tuple[str, Callable[[], Check]]], time_limit: float) -> list[Check]:
    """Each check in turn; after one overruns its time limit the rest are not run: each would wait as long
    again for the same hung call, and every abandoned worker keeps a core busy."""
    results: list[Check] = []
    timed_out = None
    for name, run in plan:
        if timed_out:
            results.append(result(name, "warn", f"not run: the {timed_out} check timed out before it"))
            continue
        results.append(explain_fail(run_limited(name, run, time_limit)))
        if results[-1].message.startswith("TimeoutError"):
            timed_out = name
    return results


def blame_shape(results: list[Check]) -> list[Check]:
    """A gradient of the wrong shape breaks later checks with errors about arrays (IndexError, "Incompatible
    shapes") and makes the comparison with the true gradient meaningless: say so first, where a cut message
    still shows it. (A wrong dtype alone leaves the values comparable.)"""
    shape = next((found for found in results if found.name == "shape_dtype"), None)
    if shape is None or shape.passed or "has shape" not in shape.message:
        return results
    blamed = []
    for found in results:
        if found.name in ("vs_autodiff", "second_order") and found.passed:  # a pass or a warn compares wrong shapes
            found = result(found.name, "warn", "not meaningful: the gradient has the wrong shape (see shape_dtype)")
        elif not found.passed and "raised" in found.message and "Fix:" not in found.message:
            found = result(found.name, "fail", f"wrong gradient shape (fix shape_dtype first): {found.message}")
        blamed.append(found)
    return blamed


# -- a function --------------------------------------------------------------------------------------------
def _not_checked(user: ops.user.UserFunction, found: Found) -> list[Check]:
    """Every row ``fail`` when no input assignment works: nothing checked is not a pass. ``shape_dtype`` says
    why (and how to declare the inputs); the others point there."""
    message = no_inputs_message(user, found)
    if found.backward_failures:
        why = "the backward raised on the inputs the forward accepts"
    elif message.startswith("the function cannot run"):
        why = "the function cannot run"
        message = f"not checked: {message}"
    else:
        why = f"no input shapes found that {user.name} accepts; declare them with input_shapes"
        message = f"not checked: {message}"
    return [
        explain_fail(result(name, "fail", message)) if name == "shape_dtype"
        else result(name, "fail", f"not checked: {why} (see shape_dtype)")
        for name in FUNCTION_CHECKS
    ]


def _with_inputs(subject: Subject, time_limit: float) -> Subject | list[Check]:
    """The subject with the input assignments the function accepts, found once (within the time limit); or,
    when none can be found, the rows that say why."""
    user, call = subject.user, subject.call_all(None)
    try:
        found = call_with_time_limit(lambda: find_inputs(user, call), time_limit, "check-inputs")
    except TimeLimitExceeded:
        message = f"TimeoutError: finding inputs the function accepts did not finish within {time_limit:g} s"
        return [result(name, "fail", message) for name in FUNCTION_CHECKS]
    except BaseException as error:  # noqa: BLE001 - user code
        return [result(name, "fail", f"the check raised {explained(error)}") for name in FUNCTION_CHECKS]
    if not found.working:
        return _not_checked(user, found)
    return Subject(subject.spec, subject.params, found)


def function_checks(forward_mode: bool = False) -> dict[str, str]:
    """The rows a run has: :data:`FUNCTION_CHECKS`, and with ``forward_mode`` the opt-in ``forward_mode`` row."""
    return {step.name: step.proves for step in FUNCTION_PLAN if not step.opt_in or forward_mode}


def check_function(
    op: ops.OpSpec | Callable[..., Any],
    /,
    *,
    time_limit: float = TIME_LIMIT,
    forward_mode: bool = False,
    **params: Any,
) -> list[Check]:
    """Run :data:`FUNCTION_PLAN` on an op (a built-in, an editor op, an OpSpec from :func:`ops.from_function`,
    or the function itself) at ``params`` (defaults for the rest); the opt-in ``forward_mode`` check only with
    ``forward_mode=True``."""
    subject = Subject.of(op, **params)
    with quiet_tensorflow():
        try:
            elementwise = subject.spec.user_function is None or not subject.user.domain and call_with_time_limit(
                lambda: subject.user.is_elementwise(subject.params), time_limit, name="check-probe"
            )  # a declared forward is elementwise by its declaration; a declared domain is drawn from at assignments
        except TimeLimitExceeded:
            elementwise = True  # a hung forward: the elementwise checks each report it within their limit
        if not elementwise:
            found = _with_inputs(subject, time_limit)
            if isinstance(found, list):
                return found
            subject = found
        steps = [step for step in FUNCTION_PLAN if not step.opt_in or forward_mode]
        results = run_plan([(step.name, lambda step=step: step.check(subject)) for step in steps], time_limit)
    return blame_shape(results)


# -- a layer ------------------------------------------------------------------------------------------------
def check_layer(
    layer_class: type,
    /,
    functions: Sequence[tuple[str, Callable[..., Any]]] | None = None,
    *,
    time_limit: float = TIME_LIMIT,
) -> list[Check]:
    """Run :data:`LAYER_PLAN` on a ``keras.layers.Layer`` subclass built with no arguments.

    ``functions`` are the ``(name, fn)`` custom-gradient functions it may call (default: those its
    module defines), for ``input_gradient``.
    """
    if not (isinstance(layer_class, type) and issubclass(layer_class, keras.layers.Layer)):
        raise TypeError(f"expected a keras.layers.Layer subclass, got {layer_class!r}")
    if functions is None:
        from explorer.checker import discover

        module = discover.module_of(layer_class)
        functions = [(f.name, f.obj) for f in discover.members(module).functions] if module else []
    required = layer.required_arguments(layer_class)
    if required:  # the checks build the layer with no arguments
        message = (
            f"not checked: {layer_class.__name__}() needs the constructor argument(s) {', '.join(required)}; give "
            "them defaults, or check the function it calls with assert_custom_gradient(fn)"
        )
        return [result(name, "fail", message) for name in LAYER_CHECKS]
    plan = [(step.name, lambda step=step: step.check(layer_class, functions)) for step in LAYER_PLAN]
    with quiet_tensorflow():
        return run_plan(plan, time_limit)
