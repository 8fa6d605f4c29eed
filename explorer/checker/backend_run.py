"""The worker side of the ``backends`` check: one function's forward and gradients under this process's Keras
backend (:func:`run_everywhere`), and, in the TensorFlow worker, the inputs every backend gets (:func:`plan_for`).

Runs in a worker process whose ``KERAS_BACKEND`` was set before Keras was imported (Keras fixes its backend at
import): imports nothing of the project that imports TensorFlow, so a JAX or PyTorch worker never loads it.
A result crosses the pipe as plain data: NumPy arrays, strings, floats.

The gradient is taken the way each framework's users take it: ``tf.GradientTape`` (eager, and inside
``tf.function``), ``jax.vjp`` (eager, and inside ``jax.jit``), ``torch.autograd.grad`` (eager, and on
``torch.compile`` of the function when that finishes within the time limit). Every backend gets the same
upstream gradient, not all ones (:func:`upstream_for`), so a backward that mishandles it shows.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

COMPILED = {"tensorflow": "tf.function", "jax": "jax.jit", "torch": "torch.compile"}
GRID = np.linspace(-3.0, 3.0, 25)  # one input: a 1-D grid through 0, +-1, +-2, +-3 besides the found shapes
_modules: dict[str, Any] = {}
_counter = itertools.count(1)
_compiled_torch: dict[tuple[str, str], Any] = {}
_compiled: dict[tuple[str, str, bool], Any] = {}  # (target, name, unit upstream): its tf.function / jax.jit


def backend() -> str:
    """This process's Keras backend (what ``KERAS_BACKEND`` was when Keras was imported)."""
    import keras

    return keras.backend.backend()


def warm() -> str:
    """Import Keras and its backend once, at the worker's start (so a check's time excludes it)."""
    name = backend()
    if name == "jax":
        import jax  # noqa: F401
    elif name == "torch":
        import torch  # noqa: F401
    return name


def load(target: str) -> Any:
    """The module of ``target`` (a ``.py`` file or a module name), imported once in this process."""
    if target in _modules:
        return _modules[target]
    path = Path(target)
    if path.suffix == ".py":
        name = f"backends_{path.stem if path.stem.isidentifier() else 'module'}_{next(_counter)}"
        spec = importlib.util.spec_from_file_location(name, path.resolve())
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {target}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        module = importlib.import_module(target)
    _modules[target] = module
    return module


def _dotted(node: Any) -> list[str] | None:
    """``keras.ops.custom_gradient`` as ["keras", "ops", "custom_gradient"]; None for anything but names."""
    import ast

    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _keras_decorated(module: Any, tree: Any) -> tuple[list[str], set[str]]:
    """The module-level function names and the qualified names (``make_spike.<locals>.spike``) of every
    function in ``tree`` decorated with ``keras.ops.custom_gradient`` (looked up in ``module``)."""
    import ast

    import keras

    top, qualified = [], set()

    def visit(node: Any, prefix: str, at_top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for decorator in child.decorator_list:
                    found: Any = module
                    for part in _dotted(decorator) or ["<none>"]:
                        found = getattr(found, part, None)
                    if found is keras.ops.custom_gradient:
                        qualified.add(prefix + child.name)
                        if at_top:
                            top.append(child.name)
                visit(child, f"{prefix}{child.name}.<locals>.", False)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", False)

    visit(tree, "", True)
    return top, qualified


def keras_functions(target: str) -> list[str]:
    """The module-level functions of ``target`` written with ``keras.ops.custom_gradient`` (however it is
    imported: the decorator is looked up in the module and compared with Keras's own; a factory's function
    bound at module level, ``spike = make_spike(10.0)``, counts), then those its ``GRADIENT_EXPLORER`` dict
    marks ``{"compare_backends": True}`` (a plain function that calls a Keras op with a custom gradient, such
    as ``keras.quantizers.fake_quant_with_min_max_vars``). Called in the TensorFlow worker, where Keras's
    decorator is ``tf.custom_gradient``."""
    return keras_names_in(load(target))


def keras_names_in(module: Any) -> list[str]:
    """:func:`keras_functions` of a module already imported (under the TensorFlow backend)."""
    import ast

    import ops

    path = getattr(module, "__file__", None)
    if not path:
        return []
    top, qualified = _keras_decorated(module, ast.parse(Path(path).read_text(encoding="utf-8")))
    names = []
    for name, value in vars(module).items():
        if name.startswith("__") or not callable(value) or isinstance(value, type):
            continue  # a private helper (_clip) is compared too: quantisation libraries write theirs so
        if name in top or (
            ops.is_custom_gradient(value) and getattr(ops.user.undecorated(value), "__qualname__", "") in qualified
        ):
            names.append(name)
    declared = getattr(module, "GRADIENT_EXPLORER", None)
    for name, entry in (declared.items() if isinstance(declared, dict) else ()):
        if isinstance(entry, dict) and entry.get("compare_backends") is True and callable(getattr(module, name, None)):
            names.append(name)
    return list(dict.fromkeys(names))


def keras_layers(target: str) -> list[str]:
    """The ``keras.layers.Layer`` subclasses ``target`` defines, when it also defines a function to compare (a
    module written for ``keras.ops``; a layer of TensorFlow ops alone is TensorFlow's by design)."""
    import keras

    module = load(target)
    if not keras_functions(target):
        return []
    return [name for name, value in vars(module).items() if isinstance(value, type)
            and issubclass(value, keras.layers.Layer) and value.__module__ == module.__name__]


def layer_plan(target: str, name: str) -> dict[str, Any]:
    """In the TensorFlow worker: a layer built with no arguments, called on a (4, 3) input and on a 1-D grid,
    with the weights it got each time (every backend sets the same ones)."""
    cls = getattr(load(target), name)
    assignments = []
    for values in (np.random.default_rng(0).uniform(-2.0, 2.0, size=(4, 3)), GRID):
        x = values.astype("float32")
        layer = cls()
        layer(x)
        assignments.append({"values": [x], "dtype": "float32", "weights": [np.asarray(w) for w in layer.get_weights()]})
    return {"inputs": ["x"], "keywords": {}, "positional": {}, "order": ["x"], "layer": True,
            "assignments": assignments}


# -- the inputs every backend gets (the TensorFlow worker) -------------------------------------------------
def _signature_plan(fn: Callable[..., Any]) -> dict[str, Any]:
    """How to call ``fn``: tensor inputs (no default) positionally; a numeric parameter at its default, by
    keyword (as a layer calls ``spike(x, slope=10.0)``) or positionally when positional-only."""
    signature = inspect.signature(fn)
    inputs, keywords, positional = [], {}, {}
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        default = parameter.default
        if default is parameter.empty:
            inputs.append(parameter.name)
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            if parameter.kind == parameter.POSITIONAL_ONLY:
                positional[parameter.name] = float(default)
            else:
                keywords[parameter.name] = float(default)
    return {"inputs": inputs, "keywords": keywords, "positional": positional, "order": list(signature.parameters)}


def plan_for(target: str, name: str) -> dict[str, Any]:
    """In the TensorFlow worker: how to call ``name`` and the input assignments every backend runs it on.

    A custom-gradient function gets the assignments :func:`ops.inputs.find_inputs` finds (the checker's own,
    at float32), a plain function one of shape (4, 3) per input; a function of one input also the 1-D
    :data:`GRID`. Values are drawn as the checker draws them (seeded, in [-2, 2] or [0.1, 2])."""
    import ops
    from explorer.checker import discover
    from ops.inputs import Assignment, domains_for, find_inputs

    fn = getattr(load(target), name)
    inner = ops.user.undecorated(fn) if ops.is_custom_gradient(fn) else fn
    plan = _signature_plan(inner)
    assignments: list[Assignment] = []
    if ops.is_custom_gradient(fn):
        try:
            found = discover.declarations(discover.Found(name, load(target).__name__, fn))
            user = ops.from_function(fn, key=name, **found).user_function
            working = find_inputs(user, lambda inputs: user.call_all(inputs, {}, None)).working
            assignments = list(working)
        except Exception:  # noqa: BLE001 - a function TensorFlow cannot run: every backend tries the default
            assignments = []
    if not assignments:  # a plain function (compare_backends), or one TensorFlow cannot run: declared shapes or (4, 3)
        declared = discover.declarations(discover.Found(name, load(target).__name__, fn))
        shapes = declared.get("input_shapes") or [((4, 3),) * len(plan["inputs"])]
        domains = domains_for(plan["inputs"], declared.get("domain"))
        assignments = [Assignment(tuple(tuple(s) for s in each), "default", domains=domains) for each in shapes]
    if any(a.domains for a in assignments):
        plan["drawn"] = assignments[0].describe(plan["inputs"])
    chosen = []
    for assignment in assignments[:2]:
        dtype = "float16" if assignment.dtype == "float16" else "float32"  # float64 needs jax's x64 mode
        chosen.append({"values": [v.astype(dtype) for v in assignment.values(0)], "dtype": dtype})
        if assignment.positive:
            plan["positive"] = True
    if len(plan["inputs"]) == 1:  # a scalar (torch's silent NaN shows there) and the grid
        grid = np.abs(GRID) + 0.1 if plan.get("positive") else GRID
        dtype = chosen[0]["dtype"]
        chosen.append({"values": [np.asarray(0.5, dtype)], "dtype": dtype})
        chosen.append({"values": [grid.astype(dtype)], "dtype": dtype})
    plan["assignments"] = chosen
    return plan


# -- one backend ------------------------------------------------------------------------------------------
def upstream_for(shape: Sequence[int], dtype: str) -> np.ndarray:
    """The upstream gradient of an output of ``shape``: 1.5 + 0.25 sin(i) over its elements (never all equal,
    so a backward that averages or drops it differs from one that uses it)."""
    size = int(np.prod(shape, dtype=np.int64))
    return (1.5 + 0.25 * np.sin(np.arange(size))).reshape(tuple(shape)).astype(dtype)


def _caller(fn: Callable[..., Any], plan: dict[str, Any]) -> Callable[..., Any]:
    """``inputs -> fn(...)`` called as :func:`_signature_plan` says."""

    def call(*inputs: Any) -> Any:
        values = dict(zip(plan["inputs"], inputs, strict=True))
        positional = [values[n] if n in values else plan["positional"][n] for n in plan["order"]
                      if n in values or n in plan["positional"]]
        return fn(*positional, **plan["keywords"])

    return call


def _outputs(y: Any) -> list[Any]:
    return list(y) if isinstance(y, (list, tuple)) else [y]


def _first_line(error: BaseException) -> str:
    """``Type: first line`` (with the next line when the first only introduces it, ``...raised:``)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[-1] if len(lines) > 1 and "in user code" in lines[0] else (lines[0] if lines else "")
    if text.endswith(":") and len(lines) > 1 and "in user code" not in lines[0]:
        text = f"{text} {lines[1]}"
    if len(text) > 240:
        text = text[:237] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _as_numpy(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    if hasattr(value, "detach"):
        value = value.detach().cpu()
    return np.asarray(value)


def _upstream(shape: Sequence[int], dtype: str, unit: bool) -> np.ndarray:
    return np.ones(tuple(shape), dtype) if unit else upstream_for(shape, dtype)


def _tensorflow(call, values, compiled: bool, unit: bool = False, key: tuple = ()):
    import tensorflow as tf

    def both(*xs):
        with tf.GradientTape() as tape:
            for x in xs:
                tape.watch(x)
            outputs = _outputs(call(*xs))
        ups = [tf.constant(_upstream(o.shape, o.dtype.name, unit)) for o in outputs]
        return outputs, tape.gradient(outputs, list(xs), output_gradients=ups)

    if compiled and key:  # one tf.function per function: a check run again retraces only for new shapes
        run = _compiled.setdefault((*key, unit), tf.function(both, autograph=False))
    elif compiled:
        run = tf.function(both, autograph=False)
    else:
        run = both
    return run(*[tf.constant(v) for v in values])


def _jax(call, values, compiled: bool, unit: bool = False, key: tuple = ()):
    import jax

    def both(*xs):
        y, pullback = jax.vjp(lambda *a: call(*a), *xs)
        outputs = _outputs(y)
        ups = [_upstream(o.shape, str(o.dtype), unit) for o in outputs]
        return outputs, list(pullback(type(y)(ups) if isinstance(y, (list, tuple)) else ups[0]))

    if compiled:
        run = _compiled.setdefault((*key, unit), jax.jit(both)) if key else jax.jit(both)
    else:
        run = both
    return run(*[jax.numpy.asarray(v) for v in values])


def _torch(call, values, compiled: bool, key: tuple[str, str], unit: bool = False):
    import warnings

    import torch

    warnings.filterwarnings("ignore", module="torch")  # its anomaly-mode tracebacks: the error is the result
    if compiled and key:
        if key not in _compiled_torch:
            _compiled_torch[key] = torch.compile(call, backend="aot_eager")
        call = _compiled_torch[key]
    elif compiled:
        call = torch.compile(call, backend="aot_eager")
    xs = [torch.tensor(v, requires_grad=True) for v in values]
    outputs = _outputs(call(*xs))
    ups = [torch.from_numpy(_upstream(tuple(o.shape), str(o.dtype).removeprefix("torch."), unit)) for o in outputs]
    grads = torch.autograd.grad(outputs, xs, grad_outputs=ups, allow_unused=True)
    return outputs, list(grads)


def run_once(
    target: str, name: str, plan: dict[str, Any], values: Sequence[np.ndarray], compiled: bool, unit: bool = False,
    weights: Sequence[np.ndarray] | None = None,
) -> dict:
    """One run: ``{"error": "Type: first line"}`` or ``{"outputs": [...], "gradients": [... or None]}``; with
    ``unit`` the upstream gradient is all ones (a sweep to draw), else :func:`upstream_for`. A layer (``plan``
    of :func:`layer_plan`) is built here, called once, given ``weights``, then run."""
    import keras

    kind = keras.backend.backend()
    key: tuple = (target, name)
    try:
        if plan.get("layer"):
            call = getattr(load(target), name)()
            call(np.asarray(values[0]))
            call.set_weights(list(weights or []))
            key = ()  # a new layer each time: nothing compiled is kept
        else:
            call = _caller(getattr(load(target), name), plan)
    except Exception as error:  # noqa: BLE001 - building the layer is part of what is compared
        return {"error": _first_line(error)}
    try:
        if kind == "tensorflow":
            outputs, grads = _tensorflow(call, values, compiled, unit, key)
        elif kind == "jax":
            outputs, grads = _jax(call, values, compiled, unit, key)
        elif kind == "torch":
            outputs, grads = _torch(call, values, compiled, key, unit)
        else:
            return {"error": f"ValueError: the Keras backend {kind!r} is not compared (allowed: {', '.join(COMPILED)})"}
    except Exception as error:  # noqa: BLE001 - what the user gets on this backend
        return {"error": _first_line(error)}
    return {"outputs": [_as_numpy(o) for o in outputs], "gradients": [_as_numpy(g) for g in grads]}


def run_everywhere(
    target: str, name: str, plan: dict[str, Any], modes: Sequence[str], compile_seconds: float
) -> dict[str, list[dict]]:
    """Every mode ("eager", "compiled") on every assignment of ``plan``: mode -> one result per assignment
    (:func:`run_once`). ``torch.compile`` that does not finish within ``compile_seconds`` is
    ``{"skipped": why}`` (its abandoned thread retires this worker after the reply)."""
    from explorer.checker.timelimit import TimeLimitExceeded, call_with_time_limit

    load(target)
    kind = backend()
    if kind == "torch" and "compiled" in modes and (target, name) not in _compiled_torch:
        import torch

        torch._dynamo.reset()  # a new function compiles afresh: the recompile limit counts per code object, and
        _compiled_torch.clear()  # every function is called through the same `call`
    results: dict[str, list[dict]] = {}
    for mode in modes:
        compiled = mode == "compiled"
        rows = []
        for assignment in plan["assignments"]:
            values, weights = assignment["values"], assignment.get("weights")
            if kind == "torch" and compiled:
                try:
                    rows.append(call_with_time_limit(
                        lambda values=values, weights=weights: run_once(target, name, plan, values, True, False, weights),
                        compile_seconds, "compile",
                    ))
                except TimeLimitExceeded:
                    rows = [{"skipped": f"torch.compile did not finish within {compile_seconds:g} s"}]
                    break
            else:
                rows.append(run_once(target, name, plan, values, compiled, False, weights))
        results[mode] = rows
    return results


# -- beyond the first derivative (the backends_second_order and backends_forward_mode rows) --------------------
def higher_once(target: str, name: str, plan: dict[str, Any], which: Sequence[str]) -> dict[str, Any]:
    """At the plan's first assignment, under this worker's backend: ``second`` (the gradient with respect to the
    first input of the custom gradient contracted with :func:`upstream_for`, ⟨Jᵀw, u⟩: a gradient penalty's
    second derivative; None when the backend finds no path) and ``forward`` (the JVP along u, forward mode);
    each an array, None, or ``{"error": ...}``."""
    import keras

    kind = keras.backend.backend()
    call = _caller(getattr(load(target), name), plan)
    values = plan["assignments"][0]["values"]
    tangents = [upstream_for(np.shape(v), str(np.asarray(v).dtype)) for v in values]
    found: dict[str, Any] = {}
    for what in which:
        try:
            if kind == "tensorflow":
                got = _tf_second(call, values, tangents) if what == "second" else _tf_forward(call, values, tangents)
            elif kind == "jax":
                got = _jax_second(call, values, tangents) if what == "second" else _jax_forward(call, values, tangents)
            else:
                got = _torch_second(call, values, tangents) if what == "second" else _torch_forward(call, values, tangents)
            found[what] = _as_numpy(got)
        except Exception as error:  # noqa: BLE001 - what the user gets on this backend
            found[what] = {"error": _first_line(error)}
    return found


def _tf_second(call, values, tangents):
    import tensorflow as tf

    xs = [tf.constant(v) for v in values]
    with tf.GradientTape() as outer:
        outer.watch(xs[0])
        with tf.GradientTape() as inner:
            for x in xs:
                inner.watch(x)
            outputs = _outputs(call(*xs))
        ups = [tf.constant(upstream_for(o.shape, o.dtype.name)) for o in outputs]
        grads = inner.gradient(outputs, xs, output_gradients=ups)
        total = tf.add_n([tf.reduce_sum(g * t) for g, t in zip(grads, tangents, strict=True) if g is not None])
    return outer.gradient(total, xs[0])


def _tf_forward(call, values, tangents):
    import tensorflow as tf

    xs = [tf.constant(v) for v in values]
    with tf.autodiff.ForwardAccumulator(xs, [tf.constant(t) for t in tangents]) as accumulator:
        outputs = _outputs(call(*xs))
    return accumulator.jvp(outputs[0])


def _jax_second(call, values, tangents):
    import jax
    import jax.numpy as jnp

    def contracted(first, *rest):
        y, pullback = jax.vjp(lambda *a: call(*a), first, *rest)
        outputs = _outputs(y)
        ups = [upstream_for(o.shape, str(o.dtype)) for o in outputs]
        grads = pullback(type(y)(ups) if isinstance(y, (list, tuple)) else ups[0])
        return sum(jnp.sum(g * t) for g, t in zip(grads, tangents, strict=True) if g is not None)

    return jax.grad(contracted)(*[jnp.asarray(v) for v in values])


def _jax_forward(call, values, tangents):
    import jax
    import jax.numpy as jnp

    _, out = jax.jvp(lambda *a: _outputs(call(*a))[0], tuple(jnp.asarray(v) for v in values),
                     tuple(jnp.asarray(t) for t in tangents))
    return out


def _torch_second(call, values, tangents):
    import torch

    xs = [torch.tensor(v, requires_grad=True) for v in values]
    outputs = _outputs(call(*xs))
    ups = [torch.from_numpy(upstream_for(tuple(o.shape), str(o.dtype).removeprefix("torch."))) for o in outputs]
    grads = torch.autograd.grad(outputs, xs, grad_outputs=ups, create_graph=True, allow_unused=True)
    total = sum((g * torch.from_numpy(t)).sum() for g, t in zip(grads, tangents, strict=True) if g is not None)
    if not getattr(total, "requires_grad", False):
        return None  # no path from the inputs to the gradient: the second derivative is lost
    (second,) = torch.autograd.grad(total, [xs[0]], allow_unused=True)
    return second


def _torch_forward(call, values, tangents):
    import torch
    import torch.autograd.forward_ad as fwd

    with fwd.dual_level():
        xs = [fwd.make_dual(torch.tensor(v), torch.from_numpy(t)) for v, t in zip(values, tangents, strict=True)]
        output = _outputs(call(*xs))[0]
        return fwd.unpack_dual(output).tangent
