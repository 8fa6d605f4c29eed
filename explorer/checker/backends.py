"""The ``backends`` check: one ``keras.ops.custom_gradient`` function under TensorFlow, JAX and PyTorch, compared.

Keras fixes its backend when it is imported, so each backend runs in a worker process of its own
(:class:`explorer.worker.Worker` with ``KERAS_BACKEND`` set, :func:`backend_worker`), kept warm between
functions. The TensorFlow worker finds the inputs (the checker's own input assignments,
:func:`explorer.checker.backend_run.plan_for`); every worker then runs the function on them eagerly and compiled
(``tf.function`` / ``jax.jit`` / ``torch.compile``) and sends back the outputs and gradients
(:func:`explorer.checker.backend_run.run_everywhere`). :func:`compare` judges them against TensorFlow eager:
whether it runs (error type and first line), each output and each input's gradient (present, shape and dtype as
the input's, finite where TensorFlow's is, values within the dtype's tolerance). A NaN gradient without an error is
a difference: PyTorch's Keras backend gives one, silently, when the forward forgets to return its backward.

A failed row names each backend and mode that differs, what the user gets there, the likely cause and the fix
(:data:`CAUSES`). A backend that is not installed is said in the row with how to install it; it never fails it.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from explorer.checker.common import Check, result

BACKENDS = ("tensorflow", "jax", "torch")
MODULE_OF = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
INSTALL = {
    "tensorflow": "pip install tensorflow",
    "jax": "pip install 'gradient-explorer[backends]' (JAX's CPU build)",
    "torch": "pip install torch with a CPU build (README, 'Other Keras backends')",
}
MODES = ("eager", "compiled")
COMPILED = {"tensorflow": "tf.function", "jax": "jax.jit", "torch": "torch.compile"}
# rtol, atol per dtype: two frameworks' float32 kernels (sin, exp, tanh) differ in the last bits
TOLERANCE = {"float16": (1e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12)}
RUN = "explorer.checker.backend_run"
# (how the difference shows, the likely cause, the fix), the first that matches is given
CAUSES: tuple[tuple[str, str, str], ...] = (
    (
        "multiple values for argument 'upstream'",
        "the backward is written TensorFlow's way, grad(upstream): Keras's torch backend calls "
        "grad(*inputs, upstream=dy)",
        "write the backward as def grad(*args, upstream=None)",
    ),
    (
        "keyword",
        "a keyword parameter of a custom-gradient function: tf.custom_gradient accepts keywords only eagerly "
        "(not in tf.function, so not in Model.fit), jax and torch not at all",
        "make a factory, make_spike(slope) returning the custom-gradient function of x alone, instead of a keyword",
    ),
    (
        "several outputs",
        "a custom-gradient function with several outputs: TensorFlow calls grad(dy1, dy2), JAX passes one tuple, "
        "torch supports one upstream only",
        "one output per custom op (two custom-gradient functions), or return one stacked tensor",
    ),
    (
        "NaN",
        "the forward does not return its backward (return y instead of return y, grad): torch's Keras backend "
        "then gives a NaN gradient without an error, the others raise",
        "return y, grad from the forward",
    ),
    (
        "Tracer|Python `bool`|Boolean",
        "a Python if on a tensor in the forward or backward: fails on JAX (also eagerly) and under tf.function",
        "use ops.where, ops.minimum or ops.maximum instead of if",
    ),
    (
        "has shape",
        "the backward returns a gradient of another shape than its input (mean(upstream), a scalar): TensorFlow "
        "accepts it silently, JAX and torch refuse it",
        "return a gradient of the input's shape: ops.broadcast_to(g, ops.shape(x))",
    ),
    (
        "dtype",
        "the backward casts the gradient to another dtype (float16) and the backends keep it differently",
        "cast the gradient back to the input's dtype: ops.cast(g, x.dtype)",
    ),
    (
        "values",
        "the backends compute different gradients: where an input ties with a range computed from it (x equal "
        "to its min or max, Keras's fake_quant_with_min_max_vars), TensorFlow gives the range gradient 1, JAX and "
        "torch 2",
        "apply ops.stop_gradient to a range computed from the input (or make the range a separate input)",
    ),
)


def installed(backend: str) -> bool:
    return importlib.util.find_spec(MODULE_OF[backend]) is not None


def parse_backends(text: str | Sequence[str]) -> list[str]:
    """``"all"`` (every backend: those installed are compared), ``"tensorflow,jax,torch"`` or a list: the backends, TensorFlow first
    when named (it is the reference). ValueError naming the allowed values for an unknown one."""
    names = [part.strip().lower() for part in (text.split(",") if isinstance(text, str) else text) if part.strip()]
    if names == ["all"]:  # the ones not installed are named in each row with how to install them
        return list(BACKENDS)
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise ValueError(f"unknown backend(s) {', '.join(unknown) or '(none)'}; allowed: all or a comma-separated "
                         f"list of {', '.join(BACKENDS)}")
    return sorted(dict.fromkeys(names), key=BACKENDS.index)


# -- the workers --------------------------------------------------------------------------------------------
_WORKERS: dict[str, Any] = {}
_WORKERS_LOCK = threading.Lock()


def backend_worker(backend: str) -> Any:
    """The warm worker process of ``backend`` (started now if it is not running; its start is not blocking)."""
    from explorer import worker

    with _WORKERS_LOCK:
        if backend not in _WORKERS:
            running = worker.Worker(
                f"backend-{backend}", [(worker.Named(RUN, "warm"), ())], env={"KERAS_BACKEND": backend}
            )
            running.start()
            _WORKERS[backend] = running
        return _WORKERS[backend]


def close_workers() -> None:
    with _WORKERS_LOCK:
        for running in _WORKERS.values():
            running.close()
        _WORKERS.clear()


def worker_starts() -> dict[str, float | None]:
    """Each started backend worker's start time in seconds (imports of Keras and its backend), None if not yet."""
    with _WORKERS_LOCK:
        return {name: running.start_seconds for name, running in _WORKERS.items()}


def _call(backend: str, name: str, *args: Any, time_limit: float) -> Any:
    from explorer import worker

    return backend_worker(backend).call(worker.Named(RUN, name), *args, time_limit=time_limit)


def functions_to_compare(target: str, time_limit: float = 300.0) -> list[str]:
    """The functions of ``target`` (a ``.py`` file or module name) to compare (imported in the TensorFlow
    worker, never here)."""
    return _call("tensorflow", "keras_functions", target, time_limit=time_limit)


# -- running and comparing ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Difference:
    """Where one backend and mode differs: ``what`` (``runs``, ``output 1``, ``gradient of x``), ``gets``
    (what the user gets there) and ``kind`` (error, nan, shape, dtype, values, missing)."""

    backend: str
    mode: str
    what: str
    gets: str
    kind: str

    @property
    def place(self) -> str:
        return f"{self.backend} eager" if self.mode == "eager" else COMPILED[self.backend]


def run_backends(
    target: str, name: str, backends: Sequence[str], *, time_limit: float = 300.0, compile_seconds: float = 60.0,
    layer: bool = False,
) -> tuple[dict[str, Any], dict[str, dict[str, list[dict]]]]:
    """The plan (inputs, how it is called; from the TensorFlow worker; for a ``layer``, its weights) and every
    backend's results, the backends' workers running at once. A worker that dies or overruns: an error result in every mode."""
    from explorer import worker

    plan = _call("tensorflow", "layer_plan" if layer else "plan_for", target, name, time_limit=time_limit)

    def one(backend: str) -> dict[str, list[dict]]:
        try:
            return _call(backend, "run_everywhere", target, name, plan, MODES, compile_seconds, time_limit=time_limit)
        except worker.WorkerFailure as failure:
            return {mode: [{"error": f"WorkerFailure: {failure.how}"}] * len(plan["assignments"]) for mode in MODES}
        except Exception as error:  # noqa: BLE001 - e.g. an import error of the module in that backend
            return {mode: [{"error": f"{type(error).__name__}: {error}"}] * len(plan["assignments"]) for mode in MODES}

    with ThreadPoolExecutor(max_workers=len(backends)) as pool:
        results = dict(zip(backends, pool.map(one, backends), strict=True))
    return plan, results


def _shape(value: np.ndarray) -> str:
    return "scalar" if value.ndim == 0 else str(tuple(value.shape))


def _summary(value: np.ndarray) -> str:
    flat = np.asarray(value, dtype=np.float64).ravel()
    shown = ", ".join(f"{v:.4g}" for v in flat[:4])
    return f"[{shown}{', ...' if flat.size > 4 else ''}]"


def _compare_arrays(what: str, got: np.ndarray | None, ref: np.ndarray | None, expected: np.ndarray | None,
                    ref_place: str) -> tuple[str, str] | None:
    """(kind, what the user gets) if ``got`` differs: missing, shape or dtype unlike the input's (``expected``),
    NaN where the reference is finite, or values outside the dtype's tolerance of the reference's."""
    if got is None:
        return ("missing", f"no {what} (None)") if ref is not None else None
    if expected is not None and got.shape != expected.shape:
        return "shape", f"{what} has shape {_shape(got)}, its input {_shape(expected)}"
    if expected is not None and got.dtype != expected.dtype:
        return "dtype", f"{what} has dtype {got.dtype}, its input {expected.dtype}"
    bad = np.isnan(got) & (np.ones_like(got, bool) if ref is None or ref.shape != got.shape else ~np.isnan(ref))
    if bad.any():
        return "nan", f"{what} NaN at {int(bad.sum())} of {got.size} elements, without an error"
    if ref is None or ref.shape != got.shape:
        return None
    rtol, atol = TOLERANCE.get(str(got.dtype), TOLERANCE["float32"])
    close = np.isclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    where = np.argwhere(~close)[:3]
    return "values", (f"{what} {_summary(got[~close])} where {ref_place} gives {_summary(ref[~close])} "
                      f"({int((~close).sum())} of {got.size} elements differ, first at index "
                      f"{', '.join(str(tuple(int(i) for i in w)) for w in where)})")


def compare(plan: dict[str, Any], results: dict[str, dict[str, list[dict]]]) -> list[Difference]:
    """Every difference from the reference (the first backend, eager; TensorFlow when it is compared), and
    every gradient of another shape or dtype than its input, in any mode, the reference's own included."""
    backends = list(results)
    reference = results[backends[0]]["eager"]
    ref_place = f"{backends[0]} eager"
    names = plan["inputs"]
    found: list[Difference] = []
    for backend in backends:
        for mode in MODES:
            for index, got in enumerate(results[backend].get(mode, [])):
                if "skipped" in got:
                    continue
                ref = reference[index] if index < len(reference) else {"error": "missing"}
                inputs = plan["assignments"][index]["values"] if index < len(plan["assignments"]) else []
                found += _differences(backend, mode, got, ref, inputs, names, ref_place)
    unique: list[Difference] = []
    for difference in found:  # one per (backend, mode, what): the first assignment's
        if not any((d.backend, d.mode, d.what) == (difference.backend, difference.mode, difference.what) for d in unique):
            unique.append(difference)
    return unique


def _differences(backend, mode, got, ref, inputs, names, ref_place) -> list[Difference]:
    if "error" in got:
        if "error" in ref and ref["error"].split(":")[0] == got["error"].split(":")[0]:
            return []
        return [Difference(backend, mode, "runs", f"raises {got['error']}", "error")]
    found = []
    if "error" in ref:
        found.append(Difference(backend, mode, "runs", f"runs where {ref_place} raises {ref['error']}", "runs"))
        ref = {"outputs": [None] * len(got["outputs"]), "gradients": [None] * len(got["gradients"])}
    outputs, ref_outputs = got["outputs"], ref["outputs"]
    if len(outputs) != len(ref_outputs):
        found.append(Difference(backend, mode, "outputs", f"{len(outputs)} output(s), {ref_place} "
                                f"{len(ref_outputs)}", "values"))
    for number, (output, ref_output) in enumerate(zip(outputs, ref_outputs, strict=False), start=1):
        what = "the output" if len(outputs) == 1 else f"output {number}"
        differs = _compare_arrays(what, output, ref_output, None, ref_place)
        if differs:
            found.append(Difference(backend, mode, what, differs[1], differs[0]))
    for name, value, grad, ref_grad in zip(names, inputs, got["gradients"], ref["gradients"], strict=False):
        what = f"gradient of {name}"
        differs = _compare_arrays(what, grad, ref_grad, value, ref_place)
        if differs:
            found.append(Difference(backend, mode, what, differs[1], differs[0]))
    return found


def cause_and_fix(differences: Sequence[Difference], plan: dict[str, Any], outputs: int) -> tuple[str, str]:
    """The likely cause in words and its fix, from what differs (an error's text, the kind of difference)."""
    import re

    texts = " ".join(f"{d.gets} [{d.kind}]" for d in differences)
    for marker, cause, fix in CAUSES:
        if marker == "keyword":
            if plan["keywords"] and re.search(r"keyword|unexpected|positional argument", texts):
                return cause, fix
        elif marker == "several outputs":
            if outputs > 1:
                return cause, fix
        elif marker == "NaN":
            if any(d.kind == "nan" for d in differences):
                return cause, fix
        elif marker == "has shape":
            if any(d.kind == "shape" for d in differences) or re.search(r"invalid gradient|same type|Incompatible shapes",
                                                                          texts):
                return cause, fix
        elif marker == "dtype":
            if any(d.kind == "dtype" for d in differences):
                return cause, fix
        elif marker == "values":
            if any(d.kind == "values" for d in differences):
                return cause, fix
        elif re.search(marker, texts):
            return cause, fix
    return "the backends treat this function differently", "make it agree with TensorFlow eager"


def _cut(text: str, limit: int = 170) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def verdict(name: str, plan: dict[str, Any], results: dict[str, dict[str, list[dict]]],
            missing: Sequence[str] = ()) -> Check:
    """The ``backends`` row of one function from every backend's results (:func:`run_backends`)."""
    compared = ", ".join(results)
    skipped = [f"{backend} {COMPILED[backend]}: {got[0]['skipped']}" for backend, modes in results.items()
               for mode, got in modes.items() if got and "skipped" in got[0]]
    notes = [f"{b} not installed ({INSTALL[b]})" for b in missing] + [f"skipped {s}" for s in skipped]
    note = f" ({'; '.join(notes)})" if notes else ""
    differences = compare(plan, results)
    if not differences:
        reference = results[next(iter(results))]["eager"]
        if all("error" in r for r in reference) and all(
            "error" in r for modes in results.values() for rows in modes.values() for r in rows
        ):
            return result("backends", "fail", f"raises on every backend ({reference[0]['error']}){note}")
        places = ", ".join(f"{b} eager and {COMPILED[b]}" for b in results)
        return result("backends", "pass", f"{places} agree: forward and gradients, shapes and dtypes{note}")
    outputs = max((len(r.get("outputs", [])) for modes in results.values() for rows in modes.values() for r in rows),
                  default=1)
    cause, fix = cause_and_fix(differences, plan, outputs)
    shown = "; ".join(f"{d.place}: {_cut(d.gets)}" for d in differences[:6])
    more = f" (and {len(differences) - 6} more)" if len(differences) > 6 else ""
    return result("backends", "fail", f"differs on {', '.join(dict.fromkeys(d.place for d in differences))} "
                  f"(reference: {next(iter(results))} eager). {shown}{more}. Likely cause: {cause}. "
                  f"Fix: {fix}. Compared: {compared}{note}")


def check_backends(target: str, name: str, backends: Sequence[str], *, time_limit: float = 300.0,
                   compile_seconds: float = 60.0, layer: bool = False) -> Check:
    """The ``backends`` row of function ``name`` of ``target`` on ``backends`` (those not installed are named in
    the row with how to install them; with fewer than two installed it is a skip, never a fail)."""
    missing = [b for b in backends if not installed(b)]
    usable = [b for b in backends if installed(b)]
    if len(usable) < 2:
        how = "; ".join(f"{b}: {INSTALL[b]}" for b in missing) or "name two or more, e.g. --backends tensorflow,jax"
        return result("backends", "skip", f"not compared: fewer than two backends installed ({how})")
    try:
        plan, results = run_backends(target, name, usable, time_limit=time_limit, compile_seconds=compile_seconds,
                                     layer=layer)
    except Exception as error:  # noqa: BLE001 - the TensorFlow worker could not plan (import error, hang)
        how = getattr(error, "how", None) or f"{type(error).__name__}: {error}"
        return result("backends", "fail", f"not compared: finding its inputs in the TensorFlow worker failed: {how}")
    return verdict(name, plan, results, missing)


# -- verify's rows ------------------------------------------------------------------------------------------
def _files(target: str) -> list[str]:
    """What ``discover`` imports for ``target``: a directory's ``*.py`` (not ``_*``), a ``.py`` file, a module."""
    from pathlib import Path

    path = Path(target)
    if path.is_dir():
        return [str(p) for p in sorted(path.glob("*.py")) if not p.name.startswith("_")]
    return [target]


def skip_rows(functions: Sequence[Any]) -> list[dict[str, Any]]:
    """Without ``--backends``: a ``skip`` row for each discovered ``keras.ops.custom_gradient`` function (it was
    checked on TensorFlow only, which says nothing of JAX or torch)."""
    import sys

    from explorer.checker import backend_run

    rows = []
    for item in functions:
        module = sys.modules.get(item.module)
        try:
            keras_made = module is not None and item.name in backend_run.keras_names_in(module)
        except (OSError, SyntaxError, ValueError):
            keras_made = False
        if keras_made:
            message = ("checked on TensorFlow only: a keras.ops.custom_gradient function may differ on JAX or torch; "
                       "compare with verify --backends all")
            rows.append({"op": item.name, "check": "backends", "level": "skip", "passed": True, "message": message,
                         "backend": "tensorflow"})
    return rows


def backend_rows(targets: Sequence[str], functions: Sequence[Any], backends: Sequence[str] | None,
                 time_limit: float | None = None) -> list[dict[str, Any]]:
    """verify's ``backends`` rows: with ``backends``, one per function of ``targets`` to compare
    (:func:`functions_to_compare`) and per Keras layer of a module that has one (its forward and input gradient,
    every backend given TensorFlow's weights), its ``backend`` the backends compared; without, :func:`skip_rows`."""
    if backends is None:
        return skip_rows(functions)
    from explorer import worker

    limit = time_limit or worker.check_seconds()
    compared = ",".join(b for b in backends if installed(b))
    work: list[tuple[str, str, bool]] = []
    for target in targets:
        for file in _files(target):
            try:
                work += [(file, name, False) for name in functions_to_compare(file, limit)]
                work += [(file, name, True) for name in _call("tensorflow", "keras_layers", file, time_limit=limit)]
            except Exception:  # noqa: BLE001 - a module that does not import: its problem is reported by discover
                continue
    names = [name for _, name, _ in work]
    rows = []
    for file, name, is_layer in work:
        label = name if names.count(name) == 1 else f"{file}:{name}"
        found = check_backends(file, name, backends, time_limit=limit, layer=is_layer)
        rows.append({"op": label, "check": "backends", "level": found.level, "passed": found.passed,
                     "message": found.message, "backend": compared})
    return rows


# -- a function object (the notebook, the Explore page) --------------------------------------------------------
def where_defined(fn: Any) -> tuple[str, str]:
    """``(file, name)`` of a function bound at module level in a ``.py`` file: what a backend worker imports.
    ValueError for one defined elsewhere (a notebook cell, a lambda): the workers could not import it."""
    import inspect
    import sys

    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    inner = getattr(fn, "__wrapped__", fn)
    if module is None or getattr(module, "__file__", None) is None:
        module = inspect.getmodule(inner)
    path = getattr(module, "__file__", None)
    names = [name for name, value in vars(module).items() if value is fn] if module is not None else []
    if not path or not str(path).endswith(".py") or not names:
        raise ValueError(
            f"{getattr(fn, '__name__', fn)!r} is not a module-level function of a .py file: each backend's worker "
            "process imports it from its module, so define it in one (not in a notebook cell) and import it"
        )
    return str(path), names[0]


def check_callable(fn: Any, backends: str | Sequence[str] = "all", *, time_limit: float = 300.0) -> Check:
    """The ``backends`` row of a function object (``explorer.check(fn, backends="all")``)."""
    chosen = parse_backends(backends)
    try:
        target, name = where_defined(fn)
    except ValueError as error:
        return result("backends", "skip", f"not compared: {error}")
    return check_backends(target, name, chosen, time_limit=time_limit)


@dataclass(frozen=True)
class BackendSweep:
    """One input, elementwise, on a grid ``x``: per backend the forward and the custom gradient (upstream 1),
    eagerly, or the error; ``differs``: where some backend's differs from the first's (NaN on one side only
    included); ``verdict``: the ``backends`` row on the checker's inputs."""

    x: np.ndarray
    curves: dict[str, dict[str, Any]]
    differs: np.ndarray
    verdict: Check

    def differing_inputs(self, limit: int = 12) -> list[float]:
        return [float(v) for v in self.x[self.differs][:limit]]


def sweep_backends(
    target: str, name: str, backends: Sequence[str], lo: float = -3.0, hi: float = 3.0, n: int = 601,
    *, time_limit: float = 300.0,
) -> BackendSweep:
    """Each installed backend of ``backends`` on ``linspace(lo, hi, n)`` (float32), and the ``backends`` verdict;
    for a function of several inputs no curves (the verdict alone). ValueError for a range or count outside the
    allowed one."""
    from explorer import worker

    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"lo must be < hi, both finite; got lo={lo}, hi={hi}")
    if not 2 <= n <= 20001:
        raise ValueError(f"n must be in [2, 20001], got {n}")
    usable = [b for b in backends if installed(b)]
    x = np.linspace(lo, hi, n).astype(np.float32)
    row = check_backends(target, name, backends, time_limit=time_limit)
    plan = _call("tensorflow", "plan_for", target, name, time_limit=time_limit)

    def one(backend: str) -> dict[str, Any]:
        try:
            got = _call(backend, "run_once", target, name, plan, [x], False, True, time_limit=time_limit)
        except worker.WorkerFailure as failure:
            return {"error": f"WorkerFailure: {failure.how}"}
        if "error" in got:
            return got
        return {"forward": got["outputs"][0], "gradient": got["gradients"][0]}

    if len(plan["inputs"]) != 1:  # drawn along one input only: the verdict alone
        return BackendSweep(x, {}, np.zeros(x.shape, bool), row)
    with ThreadPoolExecutor(max_workers=max(1, len(usable))) as pool:
        curves = dict(zip(usable, pool.map(one, usable), strict=True))
    return BackendSweep(x, curves, _differing(x, curves), row)


def _differing(x: np.ndarray, curves: dict[str, dict[str, Any]]) -> np.ndarray:
    """Where any backend's forward or gradient differs from the first backend's (float32 tolerance); all of
    the grid where one raises and the other does not."""
    mask = np.zeros(x.shape, bool)
    names = list(curves)
    if not names:
        return mask
    reference = curves[names[0]]
    rtol, atol = TOLERANCE["float32"]
    for other in names[1:]:
        got = curves[other]
        if ("error" in got) != ("error" in reference):
            return np.ones(x.shape, bool)
        if "error" in got:
            continue
        for key in ("forward", "gradient"):
            a, b = got.get(key), reference.get(key)
            if a is None or b is None or np.shape(a) != x.shape or np.shape(b) != x.shape:
                mask |= (a is None) != (b is None) or np.shape(a) != np.shape(b)
                continue
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            mask |= ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return mask
