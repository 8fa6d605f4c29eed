"""The Explore page's state: :class:`ExploreState` and its URL form (:func:`from_query`, :func:`to_query`).

URL keys: ``op``, ``lo``, ``hi``, ``n``, ``dtype``, ``upstream``, ``overlay``, one ``p.<name>``
per parameter of the op (prefixed because ``leaky_clip`` has parameters named ``lo`` and
``hi``), and the compare section: ``cmp`` ("ops" or "param"), ``cmp_ops``, ``cmp_param``,
``cmp_values``. A loaded function of any signature (:mod:`explorer.explore.signature_views`) adds ``in``
(the swept input), ``wrt`` (the gradient's input), ``out`` (an output index or ``sum``), ``seed`` and
``origin`` (the line view's x0 and u) and one ``i.<name>`` per input held at a slider value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import ops
from explorer import loaded
from explorer.explore.sweeps import MAX_ABS_X, MAX_N, MIN_N, SweepRange
from explorer.state.query import bounded_value, finite_number, number_in_range, url_number

DEFAULT_OP = "ste_sign"
DTYPES = ops.DTYPES
N_RANGE = (MIN_N, MAX_N)
X_LIMIT = MAX_ABS_X
UPSTREAM_LIMIT = 1e6
COMPARE_MODES = ("ops", "param")
MAX_COMPARE = 6
PARAM_PREFIX = "p."


@dataclass(frozen=True)
class ExploreState:
    op: str = DEFAULT_OP
    params: Mapping[str, float] = field(default_factory=dict)
    lo: float = -3.0
    hi: float = 3.0
    n: int = 2001
    dtype: str = "float32"
    upstream: float = 1.0
    overlay: bool = False
    compare: str = "param"
    compare_ops: tuple[str, ...] = ("ste_sign", "approx_sign", "swish_sign")
    compare_param: str = "clip_value"
    compare_values: tuple[float, ...] = (0.5, 1.0, 2.0)
    # a loaded function of any signature (explorer.explore.signature_views); "" / empty: its defaults
    swept: str = ""  # URL "in": the input swept (default the first)
    wrt: str = ""  # URL "wrt": the gradient with respect to this input (default the swept one)
    output: int = 0  # URL "out": the output shown, or "sum" (signature_views.SUM_OF_OUTPUTS)
    seed: int = 0  # URL "seed": x0, u and tensor-shaped inputs of the line view
    origin: bool = False  # URL "origin": the line goes through 0 (x0 = 0)
    inputs: Mapping[str, float] = field(default_factory=dict)  # URL "i.<name>": slider inputs' values
    compare_input: str = ""  # URL "cmp_in": compare the view at several values of this input
    compare_input_values: tuple[float, ...] = ()  # URL "cmp_in_values"

    @property
    def spec(self) -> ops.OpSpec:
        return loaded.get(self.op)  # a built-in, or an op loaded from GRADIENT_EXPLORER_OPS

    @property
    def sweep_range(self) -> SweepRange:
        """``lo``, ``hi``, ``n``, ``dtype`` and ``upstream`` as the one value every sweep takes; ValueError
        naming the allowed range when they do not make one (e.g. lo beyond float16's largest value)."""
        return SweepRange(self.lo, self.hi, self.n, self.dtype, self.upstream)

    def with_range(self, sweep_range: SweepRange) -> ExploreState:
        """The same view over ``sweep_range`` (already validated)."""
        span = sweep_range
        return replace(self, lo=span.lo, hi=span.hi, n=span.n, dtype=span.dtype, upstream=span.upstream)

    def resolved_params(self) -> dict[str, float]:
        return {**self.spec.defaults(), **self.params}

    def with_op(self, key: str) -> ExploreState:
        """Switch op: its parameters start at their defaults; the compare parameter follows."""
        spec = loaded.get(key)
        names = spec.param_names
        compare_param = self.compare_param if self.compare_param in names else (names[0] if names else "")
        values = self.compare_values if compare_param == self.compare_param else default_compare_values(spec, compare_param)
        return replace(
            self, op=key, params={}, compare_param=compare_param, compare_values=values,
            swept="", wrt="", output=0, seed=0, origin=False, inputs={}, compare_input="", compare_input_values=(),
        )


def default_compare_values(spec: ops.OpSpec, name: str) -> tuple[float, ...]:
    """Half the default, the default, twice the default: clamped to the slider range."""
    if not name:
        return ()
    param = next(p for p in spec.params if p.name == name)
    base = param.default if param.default != 0 else (param.low + param.high) / 2
    values = []
    for factor in (0.5, 1.0, 2.0):
        value = min(max(base * factor, param.low), param.high)
        value = round(value) if param.integer else value
        if value not in values:
            values.append(value)
    return tuple(values)


def default_state() -> ExploreState:
    return ExploreState()


def from_query(query: Mapping[str, Any]) -> tuple[ExploreState, list[str]]:
    """State from URL query parameters, plus a notice for every value that fell back to its default."""
    notices: list[str] = []
    base = default_state()

    def text(key: str) -> str | None:
        return bounded_value(query, key, notices)

    op = text("op")
    state = base
    if op is not None:
        if op in loaded.names():
            state = base.with_op(op)
        else:
            notices.append(f"Unknown op '{op}' in the URL; showing '{DEFAULT_OP}'. Valid ops: {', '.join(loaded.names())}.")
    spec = state.spec

    params: dict[str, float] = {}
    for param in spec.params:
        raw = text(PARAM_PREFIX + param.name)
        if raw is None:
            continue
        try:
            params[param.name] = param.validate(finite_number(raw), spec.key)
        except ValueError:
            notices.append(
                f"Parameter '{param.name}' = '{raw}' is not a number in [{param.low:g}, {param.high:g}]; "
                f"using the default {param.default:g}."
            )
    if params:
        try:
            spec.resolve(params)
            state = replace(state, params=params)
        except ValueError as error:
            notices.append(f"{error}; using the defaults.")
    unknown_params = sorted(
        k[len(PARAM_PREFIX) :] for k in query if k.startswith(PARAM_PREFIX) and k[len(PARAM_PREFIX) :] not in spec.param_names
    )
    if unknown_params:
        notices.append(f"Ignored parameter(s) {', '.join(unknown_params)}: '{spec.key}' has {', '.join(spec.param_names) or 'none'}.")

    def number(key: str, default: float, low: float, high: float, integer: bool = False) -> float:
        raw = text(key)
        if raw is None:
            return default
        try:
            return number_in_range(raw, low, high, integer)
        except ValueError:
            notices.append(f"'{key}' = '{raw}' must be a {'whole ' if integer else ''}number in [{low:g}, {high:g}]; using {default:g}.")
            return default

    lo = number("lo", base.lo, -X_LIMIT, X_LIMIT)
    hi = number("hi", base.hi, -X_LIMIT, X_LIMIT)
    if not lo < hi:
        notices.append(f"The range needs lo < hi (got lo = {lo:g}, hi = {hi:g}); using [{base.lo:g}, {base.hi:g}].")
        lo, hi = base.lo, base.hi
    n = int(number("n", base.n, *N_RANGE, integer=True))
    upstream = number("upstream", base.upstream, -UPSTREAM_LIMIT, UPSTREAM_LIMIT)

    dtype = text("dtype")
    if dtype is not None and dtype not in DTYPES:
        notices.append(f"Unknown dtype '{dtype}'; use one of {', '.join(DTYPES)}. Using float32.")
        dtype = None

    overlay_raw = text("overlay")
    overlay = base.overlay
    if overlay_raw is not None:
        if overlay_raw.lower() in ("1", "true", "yes"):
            overlay = True
        elif overlay_raw.lower() not in ("0", "false", "no"):
            notices.append(f"'overlay' = '{overlay_raw}' must be 0 or 1; using 0.")

    state = replace(state, lo=lo, hi=hi, n=n, dtype=dtype or base.dtype, upstream=upstream, overlay=overlay)
    state = _signature_from_query(state, query, text, notices)
    return _compare_from_query(state, text, notices), notices


INPUT_PREFIX = "i."
MAX_SEED = 2**31 - 1


def input_params(key: str) -> dict[str, ops.Param]:
    """The slider of every tensor input of loaded op ``key`` but its first (its declared ``input_ranges``,
    else the default range); empty for a built-in. A slider is shown only for the inputs the view holds fixed."""
    from explorer.explore import signature_views

    item = loaded.current().ops.get(key)
    if item is None or item.spec.user_function is None:
        return {}
    return {
        name: signature_views.input_param(name, item.input_ranges.get(name)) for name in item.spec.user_function.inputs
    }


def _signature_from_query(state: ExploreState, query: Mapping[str, Any], text, notices: list[str]) -> ExploreState:
    """``in``, ``wrt``, ``out``, ``seed``, ``origin`` and ``i.<name>``: the controls of a loaded function of any
    signature. Checked against its signature (never by calling it); each bad value falls back with a notice."""
    user = state.spec.user_function
    names = user.inputs if user is not None else ()
    chosen: dict[str, Any] = {}
    for url_key, field_name in (("in", "swept"), ("wrt", "wrt")):
        raw = text(url_key)
        if raw is None:
            continue
        if raw in names:
            chosen[field_name] = raw
        else:
            notices.append(f"'{url_key}' = '{raw}' is not an input of '{state.op}' (inputs: {', '.join(names) or 'none'}); using the first.")
    raw = text("out")
    if raw is not None:
        if raw == "sum":
            chosen["output"] = -1
        elif raw.isdigit() and int(raw) < 8:
            chosen["output"] = int(raw)
        else:
            notices.append(f"'out' = '{raw}' must be an output index 0-7 or 'sum'; using output 0.")
    raw = text("seed")
    if raw is not None:
        if raw.isdigit() and int(raw) <= MAX_SEED:
            chosen["seed"] = int(raw)
        else:
            notices.append(f"'seed' = '{raw}' must be a whole number in [0, {MAX_SEED}]; using 0.")
    raw = text("origin")
    if raw is not None:
        if raw.lower() in ("1", "true", "yes"):
            chosen["origin"] = True
        elif raw.lower() not in ("0", "false", "no"):
            notices.append(f"'origin' = '{raw}' must be 0 or 1; using 0.")
    sliders = input_params(state.op)
    values: dict[str, float] = {}
    for key in query:
        if not key.startswith(INPUT_PREFIX):
            continue
        name, raw = key[len(INPUT_PREFIX) :], text(key)
        param = sliders.get(name)
        if param is None:
            notices.append(f"Ignored input '{name}': '{state.op}' has no such input to hold fixed.")
            continue
        if raw is None:
            continue
        try:
            values[name] = param.validate(finite_number(raw), state.op)
        except ValueError:
            notices.append(
                f"Input '{name}' = '{raw}' is not a number in [{param.low:g}, {param.high:g}]; using {param.default:g}."
            )
    raw = text("cmp_in")
    if raw is not None:
        if raw in sliders:
            chosen["compare_input"] = raw
        else:
            notices.append(f"'cmp_in' = '{raw}' is not an input of '{state.op}' to compare at; using the first.")
    raw = text("cmp_in_values")
    name = chosen.get("compare_input")
    if raw is not None and name:
        found, problems = parse_input_values(sliders[name], raw)
        notices.extend(f"Ignored compare value {problem}." for problem in problems)
        if found:
            chosen["compare_input_values"] = found
    return replace(state, inputs=values, **chosen)


def parse_input_values(param: ops.Param, text: str) -> tuple[tuple[float, ...], list[str]]:
    """``"0.5, 1, 2"`` -> valid distinct values of slider ``param`` (an input's or a parameter's; at most
    MAX_COMPARE), and a message per item that is not a number in its range."""
    values: list[float] = []
    problems: list[str] = []
    for item in text.split(","):
        if not item.strip():
            continue
        try:
            values.append(param.validate(finite_number(item)))
        except ValueError:
            problems.append(f"'{item.strip()}': {param.name} must be a number in [{param.low:g}, {param.high:g}]")
    return tuple(dict.fromkeys(values))[:MAX_COMPARE], problems


def signature_query(state: ExploreState) -> dict[str, str]:
    """The URL keys of :func:`_signature_from_query` that differ from their defaults."""
    query: dict[str, str] = {}
    if state.swept:
        query["in"] = state.swept
    if state.wrt and state.wrt != (state.swept or None):
        query["wrt"] = state.wrt
    if state.output != 0:
        query["out"] = "sum" if state.output == -1 else str(state.output)
    if state.seed:
        query["seed"] = str(state.seed)
    if state.origin:
        query["origin"] = "1"
    defaults = input_params(state.op)
    for name, value in state.inputs.items():
        if name in defaults and value != defaults[name].default:
            query[INPUT_PREFIX + name] = url_number(value)
    if state.compare_input in defaults:
        query["cmp_in"] = state.compare_input
        if state.compare_input_values:
            query["cmp_in_values"] = ",".join(url_number(v) for v in state.compare_input_values)
    return query


def _compare_from_query(state: ExploreState, text, notices: list[str]) -> ExploreState:
    mode = text("cmp")
    if mode is not None and mode not in COMPARE_MODES:
        notices.append(f"'cmp' = '{mode}' must be one of {', '.join(COMPARE_MODES)}; using '{state.compare}'.")
        mode = None
    state = replace(state, compare=mode or state.compare)

    raw_ops = text("cmp_ops")
    if raw_ops is not None:
        keys = [k.strip() for k in raw_ops.split(",") if k.strip()]
        known = loaded.names()
        bad = [k for k in keys if k not in known]
        good = list(dict.fromkeys(k for k in keys if k in known))[:MAX_COMPARE]
        if bad:
            notices.append(f"Ignored unknown op(s) in 'cmp_ops': {', '.join(bad)}.")
        if good:
            state = replace(state, compare_ops=tuple(good))

    spec = state.spec
    raw_param = text("cmp_param")
    if raw_param is not None:
        if raw_param in spec.param_names:
            if raw_param != state.compare_param:
                state = replace(state, compare_param=raw_param, compare_values=default_compare_values(spec, raw_param))
        else:
            notices.append(f"'cmp_param' = '{raw_param}' is not a parameter of '{spec.key}'; using '{state.compare_param}'.")

    raw_values = text("cmp_values")
    if raw_values is not None and state.compare_param:
        values, problems = parse_compare_values(spec, state.compare_param, raw_values)
        notices.extend(f"Ignored compare value {problem}." for problem in problems)
        if values:
            state = replace(state, compare_values=values)
    return state


def parse_compare_values(spec: ops.OpSpec, name: str, text: str) -> tuple[tuple[float, ...], list[str]]:
    """:func:`parse_input_values` for the op's parameter ``name``."""
    return parse_input_values(next(p for p in spec.params if p.name == name), text)


def to_query(state: ExploreState) -> dict[str, str]:
    """The URL query for ``state``; values equal to the default are left out to keep URLs short."""
    base = default_state()
    query: dict[str, str] = {"op": state.op}
    defaults = state.spec.defaults()
    for name, value in state.params.items():
        if value != defaults.get(name):
            query[PARAM_PREFIX + name] = url_number(value)
    for key in ("lo", "hi", "upstream"):
        if getattr(state, key) != getattr(base, key):
            query[key] = url_number(getattr(state, key))
    if state.n != base.n:
        query["n"] = str(state.n)
    if state.dtype != base.dtype:
        query["dtype"] = state.dtype
    if state.overlay:
        query["overlay"] = "1"
    query.update(signature_query(state))
    query["cmp"] = state.compare
    if state.compare == "ops":
        query["cmp_ops"] = ",".join(state.compare_ops)
    elif state.compare_param:
        query["cmp_param"] = state.compare_param
        query["cmp_values"] = ",".join(url_number(v) for v in state.compare_values)
    return query
