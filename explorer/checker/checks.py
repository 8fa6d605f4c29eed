"""The checks of a custom-gradient function: one function per kind, each taking a
:class:`~explorer.checker.common.Subject` and the function's signature into account.

A function of one input, elementwise (a built-in, an editor op, most surrogates) is checked on the sweep of
[-3, 3] and at each dtype's hard places (:mod:`explorer.checker.elementwise`); any other signature (several
inputs or outputs, a reduction, captured variables) at the input assignments it accepts
(:mod:`explorer.checker.any_signature`). A check does not apply to some signatures: it says so with a ``skip``
row (``special_points`` and ``kink`` of a function that is not elementwise). ``second_order`` and
``forward_mode`` have one body for both signatures in :mod:`explorer.checker.higher_order`. Which checks run, in which order, is
:data:`explorer.checker.plan.FUNCTION_PLAN`.

A check never raises: an exception becomes a failed row naming it, with the fix for a known error
(:func:`explorer.checker.common.guarded`).
"""

from __future__ import annotations

from explorer.checker import any_signature, elementwise, higher_order
from explorer.checker.common import Check, Subject, guarded


@guarded("finite", fix=True)
def check_finite(subject: Subject) -> Check:
    """Forward and gradient finite on the sweep and at each dtype's hard places (0, +-tiny, +-1e4, exp
    overflow; the zero vector for a reduction), outside the function's domain not counted."""
    if subject.elementwise:
        return elementwise.at_each_flag("finite", subject, elementwise.finite_on_sweep)
    return any_signature.finite_at_assignments(subject)


@guarded("shape_dtype", fix=True)
def check_shape_dtype(subject: Subject) -> Check:
    """Every gradient has its input's shape and dtype (float16, float32, float64), as many as inputs."""
    if subject.elementwise:
        return elementwise.at_each_flag("shape_dtype", subject, elementwise.shape_dtype_of_shapes)
    return any_signature.shape_dtype_at_assignments(subject)


@guarded("graph", fix=True)
def check_graph(subject: Subject) -> Check:
    """Eager, ``tf.function`` and ``jit_compile=True`` agree, parameters and flags passed as the signature asks."""
    if subject.elementwise:
        return elementwise.at_each_flag("graph", subject, elementwise.graph_on_sweep)
    return any_signature.graph_at_assignments(subject)


@guarded("keras_fit", fix=True)
def check_keras_fit(subject: Subject) -> Check:
    """One ``Model.fit`` step through a model that calls the function: a finite loss, and a gradient reaches
    what is upstream (every input's branch; the variables the function reads)."""
    if subject.elementwise:
        return elementwise.keras_fit_through_op(subject)
    return any_signature.keras_fit_at_assignments(subject)


@guarded("special_points", fix=True)
def check_special_points(subject: Subject) -> Check:
    """Declared special points agree with the detected ones; a skip for a function that is not elementwise."""
    if subject.elementwise:
        elementwise.sweep_of(subject)  # a sweep that raises is this check's failure, as the plan words it
        return elementwise.special_points_on_sweep(subject)
    return any_signature.not_elementwise(subject)


@guarded("kink", fix=True)
def check_kink(subject: Subject) -> Check:
    """At each continuous point where the forward's one-sided slopes differ, the custom value lies between them;
    a skip for a function that is not elementwise."""
    if subject.elementwise:
        elementwise.sweep_of(subject)
        return elementwise.kink_on_sweep(subject)
    return any_signature.not_elementwise(subject, "kink", "a kink is a point of an elementwise curve")


@guarded("vs_autodiff", fix=True)
def check_vs_autodiff(subject: Subject) -> Check:
    """The custom gradient against the true one (autodiff of a declared forward, else numerical): how they
    differ, and whether a justification is declared (a step's surrogate needs none)."""
    if subject.elementwise:
        elementwise.sweep_of(subject)
        return elementwise.vs_autodiff_on_sweep(subject)
    return any_signature.vs_autodiff_directional(subject)


@guarded("saved_model", fix=True)
def check_saved_model(subject: Subject) -> Check:
    """A SavedModel round trip keeps every output and the custom gradient of every input."""
    if subject.elementwise:
        return elementwise.saved_model_through_op(subject)
    return any_signature.saved_model_at_assignments(subject)


@guarded("second_order", fix=True)
def check_second_order(subject: Subject) -> Check:
    """The second derivative through the custom gradient (eager and ``tf.function``) against central differences
    of the custom first derivative where it is smooth; None is right only where that is 0."""
    if subject.elementwise:
        return higher_order.second_order_on_sweep(subject)
    return higher_order.second_order_directional(subject)


@guarded("forward_mode", fix=True)
def check_forward_mode(subject: Subject) -> Check:
    """Opt-in: the JVP of ``tf.autodiff.ForwardAccumulator`` against the custom VJP, uᵀ(Jv) = (uᵀJ)v."""
    return higher_order.forward_mode_of(subject)
