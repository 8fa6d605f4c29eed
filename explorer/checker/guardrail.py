"""A pytest guardrail for your own custom gradients: :func:`assert_custom_gradient`.

    from explorer.testing import assert_custom_gradient
    from my_ops import my_surrogate, MySurrogateLayer

    def test_my_custom_gradients():
        assert_custom_gradient(my_surrogate, points=[(0.0, "jump")])
        assert_custom_gradient(MySurrogateLayer)

Every failed check fails the assertion. A ``warn`` row (e.g. "no justification declared") does not: it is
raised as a :class:`GradientCheckWarning`, which pytest lists in its warnings summary; a team's CI makes them
failures with ``filterwarnings = ["error::explorer.testing.GradientCheckWarning"]``. A ``skip`` row (a check
that does not apply) is neither. Nothing here imports streamlit.
"""

from __future__ import annotations

import importlib
import random
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import ops
from explorer.checker import plan
from explorer.checker.common import Check, GradientCheckWarning


def custom_gradient_checks(fn_or_layer: Callable[..., Any] | type, /, **declarations: Any) -> list[Check]:
    """The checks of :mod:`explorer.checker.plan` on a custom-gradient function or a Keras Layer subclass.

    The checks seed Keras (``keras.utils.set_random_seed``) for repeatable fits; Python's and NumPy's
    global random states are put back afterwards, so your test suite's own random draws are unchanged
    (TensorFlow's global seed cannot be read back, and stays set).

    For a function (any signature: several inputs or outputs, a reduction, a variable), ``declarations`` go to
    :func:`ops.from_function` (``forward``, ``points``, ``ranges``, ``title``, ``justification``,
    ``input_shapes``), over those its module declares in its ``GRADIENT_EXPLORER`` dict (as ``verify``
    reads them), plus ``params`` (values to check at), ``time_limit`` and ``forward_mode=True`` (the opt-in
    check of ``tf.autodiff.ForwardAccumulator``'s JVP against the custom gradient); for a layer,
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
    time_limit = declarations.pop("time_limit", plan.TIME_LIMIT)
    if isinstance(fn_or_layer, type):
        op = declarations.pop("op", None)
        if declarations:
            raise TypeError(f"a layer takes only op= and time_limit=, got {', '.join(sorted(declarations))}")
        functions = None if op is None else [(ops.user.undecorated(op).__name__, op)]
        return plan.check_layer(fn_or_layer, functions, time_limit=time_limit)
    params = declarations.pop("params", None) or {}
    forward_mode = bool(declarations.pop("forward_mode", False))
    from explorer.checker import discover

    key = discover.module_level_name(fn_or_layer)  # the name GRADIENT_EXPLORER is read under, and hints name
    named = {"key": key} if key else {}
    spec = ops.from_function(fn_or_layer, **{**named, **discover.declared_for(fn_or_layer), **declarations})
    return plan.check_function(spec, time_limit=time_limit, forward_mode=forward_mode, **params)


def assert_custom_gradient(
    fn_or_layer: Callable[..., Any] | type, /, *, snapshot: str | None = None, **declarations: Any
) -> list[Check]:
    """Raise AssertionError listing every failed check (name: message); otherwise warn once per ``warn`` row
    (:class:`GradientCheckWarning`, naming the function and the check) and return all checks.

    The checks run in a worker process (:func:`checks_in_worker`) when ``fn_or_layer`` can be imported
    there by module and name, else in this process; the message says which. A function that ends its
    worker (``os._exit``, a segfault, ``SystemExit``) or does not return within
    ``GRADIENT_EXPLORER_CHECK_SECONDS`` fails the assertion naming how, and your test session goes on.

    ``snapshot``: a JSON file that pins the forward and gradient values (:mod:`explorer.checker.snapshot`):
    recorded when missing (a warning; a failure with ``CI=true``), compared otherwise.
    """
    from explorer import worker
    from explorer.checker import snapshot as snapshots

    # the flags as this process sees them now: a warm worker was started with the environment of its time
    pinning = None if snapshot is None else (str(Path(snapshot).resolve()), snapshots.ci_and_update_flags())
    where = importable_name(fn_or_layer)
    results = None
    ran = "checked in this process: not importable by module and name"
    if where is not None:
        try:
            results = checks_in_worker(*where, declarations, pinning)
            ran = "checked in a worker process"
        except worker.NotSendable:
            ran = "checked in this process: its declarations cannot be sent to a worker process"
        except worker.WorkerFailure as failure:
            raise AssertionError(f"{_name(fn_or_layer)}: its checks {failure.how} (checked in a worker process)") from None
    if results is None:
        results = custom_gradient_checks(fn_or_layer, **declarations)
        if pinning is not None:
            path, (ci, update) = pinning
            with warnings.catch_warnings():  # its warn row is raised below, with the others
                warnings.simplefilter("ignore", GradientCheckWarning)
                results.append(snapshots.check_snapshot(fn_or_layer, path, ci=ci, update=update, **declarations))
    failed = [result for result in results if not result.passed]
    if failed:
        lines = "\n".join(f"  {result.name}: {result.message}" for result in failed)
        raise AssertionError(f"{_name(fn_or_layer)}: {len(failed)} of {len(results)} checks failed ({ran}):\n{lines}")
    for result in results:
        if result.level == "warn":
            warnings.warn(f"{_name(fn_or_layer)}: {result.name}: {result.message}", GradientCheckWarning, stacklevel=2)
    return results


def _name(fn_or_layer: Any) -> str:
    return getattr(fn_or_layer, "__name__", None) or ops.user.undecorated(fn_or_layer).__name__


# -- the worker hook (explorer.worker) --------------------------------------------------------------------
GUARDRAIL_LANE = "guardrail"  # the shared worker (explorer.worker.shared) of this process's guardrail checks


def importable_name(fn_or_layer: Any) -> tuple[str, str] | None:
    """(module, name) under which a worker process finds this very function or class, or None (a local
    function, a lambda, a ``__main__`` script's or a notebook's function)."""
    module = getattr(fn_or_layer, "__module__", None)
    name = getattr(fn_or_layer, "__name__", None)
    if not isinstance(module, str) or not isinstance(name, str) or module == "__main__" or module not in sys.modules:
        return None
    if getattr(sys.modules[module], name, None) is not fn_or_layer:
        return None
    spec = getattr(sys.modules[module], "__spec__", None)
    if spec is None or spec.name != module:  # a file imported under a made-up name cannot be found again
        return None
    return module, name


def _checks_by_name(
    module: str,
    name: str,
    declarations: dict[str, Any],
    pinning: tuple[str, tuple[bool, bool]] | None,
    where: tuple[list[str], str | None],
) -> list[Check]:
    """In the worker: import ``module.name`` and run :func:`custom_gradient_checks` on it, then the snapshot
    check (its warning, like every warn row, is raised by the caller, in the test's own process). ``where``: the caller's
    ``sys.path`` and the module's file now; a warm worker that imported a module of that name from another
    file (a test's temporary folder of an earlier test) imports it again."""
    path, file = where
    sys.path[:] = path
    cached = sys.modules.get(module)
    if cached is not None and file is not None and getattr(cached, "__file__", None) != file:
        del sys.modules[module]
    fn_or_layer = getattr(importlib.import_module(module), name)
    results = custom_gradient_checks(fn_or_layer, **declarations)
    if pinning is not None:
        from explorer.checker.snapshot import check_snapshot

        path, (ci, update) = pinning
        with warnings.catch_warnings():  # the caller raises its warn row, in the test's own process
            warnings.simplefilter("ignore", GradientCheckWarning)
            results.append(check_snapshot(fn_or_layer, path, ci=ci, update=update, **declarations))
    return results


def checks_in_worker(
    module: str, name: str, declarations: dict[str, Any], pinning: tuple[str, tuple[bool, bool]] | None = None
) -> list[Check]:
    """:func:`custom_gradient_checks` of ``module.name`` in this process's guardrail worker (started at
    first use and kept warm; replaced after a call that ended it or overran
    ``GRADIENT_EXPLORER_CHECK_SECONDS``, which raises :class:`explorer.worker.WorkerFailure`)."""
    from explorer import worker

    running = worker.shared(GUARDRAIL_LANE, worker.importing(plan.__name__))
    where = (list(sys.path), getattr(sys.modules.get(module), "__file__", None))
    return running.call(
        _checks_by_name, module, name, declarations, pinning, where, time_limit=worker.check_seconds()
    )
