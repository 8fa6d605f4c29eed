"""Which inputs your custom-gradient function accepts: :func:`find_inputs`.

A function of several tensor inputs, several outputs, a reduction or a matrix product cannot be called on any
tensor: ``matmul(a, b)`` needs ``(m, k)`` and ``(k, n)``. An *assignment* (:class:`Assignment`) gives one shape
per tensor input; it *works* when the forward and the backward run on it, in float64, else float32, else float16,
with values uniform in [-2, 2] (seeded), else (the float64 forward is NaN there: outside the function's domain)
in [0.1, 2]. The candidates are the declared ``input_shapes`` of :func:`ops.from_function` (which win), else
:data:`SHAPE_RULES` in order; at most four working assignments are kept (:class:`Found`), the first of each rule
first, so that whoever uses them (the checker, the Explore page's views) has two of different rules where two
work. Finding them calls your code: the app does it in a worker process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from ops.user import UserFunction

# (name, for n inputs: two assignments, one shape per input). m, k, n of the product all differ.
SHAPE_RULES: tuple[tuple[str, Callable[[int], list[tuple[tuple[int, ...], ...]]]], ...] = (
    ("every input of one shape", lambda n: [((4, 3),) * n, ((2, 5),) * n]),
    ("extra inputs as scalars", lambda n: [((4, 3),) + ((),) * (n - 1), ((2, 5),) + ((),) * (n - 1)] if n > 1 else []),
    ("trailing-axis broadcast", lambda n: [((4, 3),) + ((3,),) * (n - 1), ((2, 5),) + ((5,),) * (n - 1)] if n > 1 else []),
    ("matrix product", lambda n: [((2, 3), (3, 4)), ((5, 2), (2, 3))] if n == 2 else []),
)
WIDEST_FIRST = ("float64", "float32", "float16")  # the dtypes an assignment is tried in
MAX_WORKING = 4  # working assignments kept
DECLARE = (
    "declare them: GRADIENT_EXPLORER = {{'{name}': {{'input_shapes': [{example}]}}}} in its module, or "
    "ops.from_function({name}, input_shapes=[{example}])"
)


def error_text(error: BaseException) -> str:
    """``Type: message`` on one line; of a traced error ("in user code: File ..."), its last line; TensorFlow's
    eager op noise ("{{function_node ...}}", "[Op:MatMul] name:") reduced to "(op MatMul)"."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[-1] if len(lines) > 1 and "in user code" in lines[0] else " ".join(lines)
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    text = re.sub(r"\s*\[Op:(\w+)\](\s*name:\s*\S*)?\s*$", r" (op \1)", text)
    if len(text) > 300:
        text = text[:297] + "..."
    name = type(error).__name__
    return text if text.startswith(f"{name}:") else f"{name}: {text}" if text else name


def as_list(y: Any) -> list[tf.Tensor]:
    """A function's outputs as a list (one tensor, or a tuple or list of them)."""
    return list(y) if isinstance(y, (list, tuple)) else [y]


def tensors(values: Sequence[np.ndarray], dtype: str) -> list[tf.Tensor]:
    return [tf.constant(v, dtype) for v in values]


def shape_text(shape: Sequence[int]) -> str:
    """"scalar", or the shape as a tuple: "(4, 3)"."""
    return "scalar" if len(shape) == 0 else str(tuple(shape))


@dataclass(frozen=True)
class Assignment:
    """Input shapes the function was found to accept, the rule they come from, and where values are drawn:
    uniform in [-2, 2] (``positive``: [0.1, 2]); an input with a declared ``domain`` in its (low, high); the
    lower of a pair of bounds (:func:`bound_pairs`: ``min_value`` and ``max_value``) in [-2, -0.25] and the upper
    in [0.25, 2], so that min <= max and some of [-2, 2] lies outside the range."""

    shapes: tuple[tuple[int, ...], ...]
    rule: str
    positive: bool = False  # values in [0.1, 2] (the forward is NaN for some in [-2, 2])
    dtype: str = "float64"  # the widest dtype the forward and backward run in
    domains: tuple[tuple[float, float, str] | None, ...] = ()  # per input: (low, high, why) or None

    def values(self, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        lo = 0.1 if self.positive else -2.0
        domains = self.domains or (None,) * len(self.shapes)
        return [rng.uniform(*(domain[:2] if domain else (lo, 2.0)), size=shape)
                for shape, domain in zip(self.shapes, domains, strict=True)]

    def describe(self, names: Sequence[str]) -> str:
        domains = self.domains or (None,) * len(self.shapes)
        return ", ".join(
            f"{n} {shape_text(s)}" + (f" in [{d[0]:g}, {d[1]:g}] ({d[2]})" if d else "")
            for n, s, d in zip(names, self.shapes, domains, strict=True)
        )


LOWER_UPPER = (("min", "max"), ("lo", "hi"), ("low", "high"), ("lower", "upper"), ("left", "right"))
LOWER_BOUND, UPPER_BOUND = (-2.0, -0.25), (0.25, 2.0)  # a bound pair's draws: ordered, with room outside


def bound_pairs(names: Sequence[str]) -> list[tuple[int, int]]:
    """``(lower, upper)`` input positions whose names differ only by min/max, lo/hi, low/high, lower/upper or
    left/right as a word or a prefix or suffix (``min_value``/``max_value``, ``vmin``/``vmax``,
    ``clip_value_min``/``clip_value_max``): a range the function needs ordered (a clip's bounds)."""
    import re

    pairs = []
    for i, name in enumerate(names):
        for lower, upper in LOWER_UPPER:
            pattern = rf"(?:(?<=[_\W])|^|(?<=v)){lower}(?=[_\W]|$|s?_|vals?|_?val)"
            if not re.search(pattern, name):
                continue
            partner = re.sub(pattern, upper, name, count=1)
            if partner != name and partner in names:
                pairs.append((i, list(names).index(partner)))
    return pairs


def domains_for(
    inputs: Sequence[str], declared: Mapping[str, Sequence[float]] | None = None
) -> tuple[tuple[float, float, str] | None, ...]:
    """Per tensor input, where its values are drawn and why: the ``declared`` domain, a bound pair's side, else
    None; () when every input is drawn the default way."""
    declared = declared or {}
    found: list[tuple[float, float, str] | None] = [None] * len(inputs)
    for lower, upper in bound_pairs(inputs):
        found[lower] = (*LOWER_BOUND, f"below {inputs[upper]}")
        found[upper] = (*UPPER_BOUND, f"above {inputs[lower]}")
    for index, name in enumerate(inputs):
        if name in declared:
            low, high = (float(v) for v in declared[name])
            found[index] = (low, high, "its declared domain")
    return tuple(found) if any(found) else ()


@dataclass
class Found:
    """The working assignments (at most :data:`MAX_WORKING` kept) and, when none works, why."""

    working: list[Assignment] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    backward_failures: list[str] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)


def _candidates(user: UserFunction) -> list[tuple[str, tuple[tuple[int, ...], ...]]]:
    n = len(user.inputs)
    if user.input_shapes:
        return [("declared", shapes) for shapes in user.input_shapes]
    first = [(name, rule(n)[0]) for name, rule in SHAPE_RULES if rule(n)]
    second = [(name, rule(n)[1]) for name, rule in SHAPE_RULES if rule(n)]
    return first + second


def find_inputs(user: UserFunction, call: Callable[[Sequence[tf.Tensor]], Any]) -> Found:
    """Try each candidate assignment (declared, else :data:`SHAPE_RULES`) with ``call(inputs)``: forward and
    backward in float64, else float32, else float16; with values in [-2, 2], else (a NaN forward) in [0.1, 2]."""
    found = Found()
    for rule, shapes in _candidates(user):
        found.tried.append(", ".join(shape_text(s) for s in shapes))
        for dtype in WIDEST_FIRST:
            assignment = _try(rule, shapes, dtype, call, found, user.inputs, domains_for(user.inputs, user.domain))
            if assignment is not None:
                found.working.append(assignment)
                break
        if len(found.working) >= MAX_WORKING:
            break
    # the first assignment of each rule first: two different rules where two work
    rules_seen: list[str] = []
    ordered = []
    for assignment in found.working:
        if assignment.rule not in rules_seen or assignment.rule == "declared":
            rules_seen.append(assignment.rule)
            ordered.append(assignment)
    ordered += [a for a in found.working if a not in ordered]
    found.working = ordered
    return found


def _try(rule, shapes, dtype, call, found: Found, names, domains=()) -> Assignment | None:
    for positive in (False, True):
        assignment = Assignment(shapes, rule, positive, dtype, domains)
        where = assignment.describe(names)
        inputs = tensors(assignment.values(0), dtype)
        try:
            with tf.GradientTape() as tape:
                for tensor in inputs:
                    tape.watch(tensor)
                outputs = as_list(call(inputs))
        except Exception as error:  # noqa: BLE001 - the user's forward refuses these shapes
            found.failures.append(f"{where} ({dtype}): the forward raised {error_text(error)}")
            return None
        if not positive and dtype == "float64" and any(np.isnan(o.numpy()).any() for o in outputs):
            continue  # outside the domain somewhere in [-2, 2]: try positive values
        try:
            variables = [v for v in tape.watched_variables() if v.trainable]
            tape.gradient(outputs, [*inputs, *variables])
        except Exception as error:  # noqa: BLE001
            found.backward_failures.append(f"{where} ({dtype}): the backward raised {error_text(error)}")
            return None
        return assignment
    return None


def no_inputs_message(user: UserFunction, found: Found) -> str:
    """Why no assignment works: the backward raised on inputs the forward accepts, a known error (variables
    keyword, gradient count), or no input shapes found that the forward accepts (with how to declare them)."""
    example = ", ".join(str((4, 3)) for _ in user.inputs)
    declare = DECLARE.format(name=user.name, example=f"({example},)")
    if found.backward_failures:
        failure = found.backward_failures[0].rstrip(". ")
        fix = ""
        if any(marker in failure for marker in ("size-incompatible", "Incompatible shapes", "must be equal rank")):
            fix = (
                ". Each input's gradient must have that input's shape (a matrix product: da = dy @ b^T, "
                "db = a^T @ dy; a broadcast input: sum dy over the broadcast axes)"
            )
        return f"the backward raised on inputs the forward accepts: {failure}{fix}"
    markers = ("must accept keyword argument 'variables'", "expected to return")
    known = [failure for failure in found.failures if any(marker in failure for marker in markers)]
    if known:
        return f"the function cannot run: {known[0].rstrip('. ')}"
    first = found.failures[0] if found.failures else "no candidate"
    tried = "; ".join(found.tried)
    return f"no input shapes found that {user.name} accepts (tried {tried}; e.g. {first}); {declare}"
