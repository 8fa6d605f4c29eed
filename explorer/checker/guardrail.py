"""A pytest guardrail for your own custom gradients: :func:`assert_custom_gradient`.

    from explorer.testing import assert_custom_gradient
    from my_ops import my_surrogate, MySurrogateLayer

    def test_my_custom_gradients():
        assert_custom_gradient(my_surrogate, points=[(0.0, "jump")])
        assert_custom_gradient(MySurrogateLayer)

Warnings (e.g. "no justification documented") do not fail the assertion; every failed check does.
Nothing here imports streamlit.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np

import ops
from explorer.checker import user
from explorer.checker.checks import Check


def custom_gradient_checks(fn_or_layer: Callable[..., Any] | type, /, **declarations: Any) -> list[Check]:
    """The checks of :mod:`explorer.checker.user` on a custom-gradient function or a Keras Layer subclass.

    The checks seed Keras (``keras.utils.set_random_seed``) for repeatable fits; Python's and NumPy's
    global random states are put back afterwards, so your test suite's own random draws are unchanged
    (TensorFlow's global seed cannot be read back, and stays set).

    For a function (any signature: several inputs or outputs, a reduction, a variable), ``declarations`` go to
    :func:`ops.from_function` (``forward``, ``points``, ``ranges``, ``title``, ``justification``,
    ``input_shapes``) plus ``params`` (values to check at) and ``time_limit``; for a layer,
    ``op`` (the custom-gradient function it calls; default: those of its module) and ``time_limit``.
    """
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        return _checks(fn_or_layer, declarations)
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _checks(fn_or_layer: Callable[..., Any] | type, declarations: dict[str, Any]) -> list[Check]:
    import keras

    if isinstance(fn_or_layer, keras.layers.Layer):
        raise TypeError(
            f"pass the layer class {type(fn_or_layer).__name__}, not an instance: each check builds a fresh layer"
        )
    time_limit = declarations.pop("time_limit", user.TIME_LIMIT)
    if isinstance(fn_or_layer, type):
        op = declarations.pop("op", None)
        if declarations:
            raise TypeError(f"a layer takes only op= and time_limit=, got {', '.join(sorted(declarations))}")
        functions = None if op is None else [(ops.user.undecorated(op).__name__, op)]
        return user.check_layer(fn_or_layer, functions, time_limit=time_limit)
    params = declarations.pop("params", None) or {}
    spec = ops.from_function(fn_or_layer, **declarations)
    return user.check_function(spec, time_limit=time_limit, **params)


def assert_custom_gradient(
    fn_or_layer: Callable[..., Any] | type, /, *, snapshot: str | None = None, **declarations: Any
) -> list[Check]:
    """Raise AssertionError listing every failed check (name: message); return all checks otherwise.

    ``snapshot``: a JSON file that pins the forward and gradient values (:mod:`explorer.checker.snapshot`):
    recorded when missing (a warning; a failure with ``CI=true``), compared otherwise."""
    results = custom_gradient_checks(fn_or_layer, **declarations)
    if snapshot is not None:
        from explorer.checker.snapshot import check_snapshot

        results.append(check_snapshot(fn_or_layer, snapshot, **declarations))
    failed = [result for result in results if not result.passed]
    if failed:
        name = getattr(fn_or_layer, "__name__", None) or ops.user.undecorated(fn_or_layer).__name__
        lines = "\n".join(f"  {result.name}: {result.message}" for result in failed)
        raise AssertionError(f"{name}: {len(failed)} of {len(results)} checks failed:\n{lines}")
    return results
