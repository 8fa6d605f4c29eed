"""One typed state for the explore view, and its URL form.

Like TensorFlow Playground's ``state.ts``: every control of the page is a field here, the URL
query string is a serialisation of it, and a copied URL reproduces the view. Parsing never
raises: an unknown or invalid value falls back to its default and adds a notice for the page.

URL keys: ``op``, ``lo``, ``hi``, ``n``, ``dtype``, ``upstream``, ``overlay``, one ``p.<name>``
per parameter of the op (prefixed because ``leaky_clip`` has parameters named ``lo`` and
``hi``), and the compare section: ``cmp`` ("ops" or "param"), ``cmp_ops``, ``cmp_param``,
``cmp_values``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import ops

DEFAULT_OP = "ste_sign"
DTYPES = ops.DTYPES
N_RANGE = (11, 1_000_000)
X_LIMIT = 1e6
UPSTREAM_LIMIT = 1e6
COMPARE_MODES = ("ops", "param")
MAX_COMPARE = 6
MAX_QUERY_VALUE = 200  # characters kept from one URL value; a longer one is ignored with a notice
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

    @property
    def spec(self) -> ops.OpSpec:
        return ops.get(self.op)

    def resolved_params(self) -> dict[str, float]:
        return {**self.spec.defaults(), **self.params}

    def with_op(self, key: str) -> ExploreState:
        """Switch op: its parameters start at their defaults; the compare parameter follows."""
        spec = ops.get(key)
        names = spec.param_names
        compare_param = self.compare_param if self.compare_param in names else (names[0] if names else "")
        values = self.compare_values if compare_param == self.compare_param else default_compare_values(spec, compare_param)
        return replace(self, op=key, params={}, compare_param=compare_param, compare_values=values)


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


def _first(query: Mapping[str, Any], key: str) -> str | None:
    value = query.get(key)
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else None  # repeated keys: the last one wins, as in Streamlit
    return None if value is None else str(value)


def _number(text: str) -> float:
    value = float(text.strip())
    if not math.isfinite(value):
        raise ValueError("not finite")
    return value


def from_query(query: Mapping[str, Any]) -> tuple[ExploreState, list[str]]:
    """State from URL query parameters, plus a notice for every value that fell back to its default."""
    notices: list[str] = []
    base = default_state()

    def text(key: str) -> str | None:
        raw = _first(query, key)
        if raw is not None and len(raw) > MAX_QUERY_VALUE:
            notices.append(f"URL value of '{key}' is too long ({len(raw)} characters); using the default.")
            return None
        return raw

    op = text("op")
    state = base
    if op is not None:
        if op in ops.names():
            state = base.with_op(op)
        else:
            notices.append(f"Unknown op '{op}' in the URL; showing '{DEFAULT_OP}'. Valid ops: {', '.join(ops.names())}.")
    spec = state.spec

    params: dict[str, float] = {}
    for param in spec.params:
        raw = text(PARAM_PREFIX + param.name)
        if raw is None:
            continue
        try:
            params[param.name] = param.validate(_number(raw), spec.key)
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
            value = _number(raw)
            if integer and value != round(value):
                raise ValueError("not whole")
            if not low <= value <= high:
                raise ValueError("out of range")
            return int(value) if integer else value
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
    return _compare_from_query(state, text, notices), notices


def _compare_from_query(state: ExploreState, text, notices: list[str]) -> ExploreState:
    mode = text("cmp")
    if mode is not None and mode not in COMPARE_MODES:
        notices.append(f"'cmp' = '{mode}' must be one of {', '.join(COMPARE_MODES)}; using '{state.compare}'.")
        mode = None
    state = replace(state, compare=mode or state.compare)

    raw_ops = text("cmp_ops")
    if raw_ops is not None:
        keys = [k.strip() for k in raw_ops.split(",") if k.strip()]
        bad = [k for k in keys if k not in ops.names()]
        good = list(dict.fromkeys(k for k in keys if k in ops.names()))[:MAX_COMPARE]
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
    """``"0.5, 1, 2"`` -> valid, distinct values of parameter ``name`` (at most MAX_COMPARE), and
    a message for each item that is not a number in the parameter's range."""
    param = next(p for p in spec.params if p.name == name)
    values: list[float] = []
    problems: list[str] = []
    for item in text.split(","):
        if not item.strip():
            continue
        try:
            values.append(param.validate(_number(item), spec.key))
        except ValueError:
            problems.append(f"'{item.strip()}': {name} must be a number in [{param.low:g}, {param.high:g}]")
    return tuple(dict.fromkeys(values))[:MAX_COMPARE], problems


def _fmt(value: float) -> str:
    return f"{value:.10g}"


def to_query(state: ExploreState) -> dict[str, str]:
    """The URL query for ``state``; values equal to the default are left out to keep URLs short."""
    base = default_state()
    query: dict[str, str] = {"op": state.op}
    defaults = state.spec.defaults()
    for name, value in state.params.items():
        if value != defaults.get(name):
            query[PARAM_PREFIX + name] = _fmt(value)
    for key in ("lo", "hi", "upstream"):
        if getattr(state, key) != getattr(base, key):
            query[key] = _fmt(getattr(state, key))
    if state.n != base.n:
        query["n"] = str(state.n)
    if state.dtype != base.dtype:
        query["dtype"] = state.dtype
    if state.overlay:
        query["overlay"] = "1"
    query["cmp"] = state.compare
    if state.compare == "ops":
        query["cmp_ops"] = ",".join(state.compare_ops)
    elif state.compare_param:
        query["cmp_param"] = state.compare_param
        query["cmp_values"] = ",".join(_fmt(v) for v in state.compare_values)
    return query
