"""The typed state of the pages and its URL form: :class:`ExploreState`, :class:`EditorSource` and
:class:`TrainState` (defined beside the trainer, which takes it: :mod:`explorer.train.setup`).

Like TensorFlow Playground's ``state.ts``: every control of a page is a field here, the URL
query string is a serialisation of it, and a copied URL reproduces the view. Parsing never
raises: an unknown or invalid value falls back to its default and adds a notice for the page.
Nothing here imports streamlit, so all of it is tested without a page.

Why not Streamlit's ``bind="query-params"`` (1.67) on the widgets: it drops an invalid URL value
silently ("Invalid query parameter values are ignored and removed from the URL"), while every bad
value here must be named in a notice; a bound parameter "can't be set or deleted through
``st.query_params``", so the op's parameters (whose set changes with the op) and the editor's
fields (written back only when they compile) could not be managed by the page; and it names the
URL key after the widget key, which would tie ``p.<name>`` to one widget per op.

Explore page

URL keys: ``op``, ``lo``, ``hi``, ``n``, ``dtype``, ``upstream``, ``overlay``, one ``p.<name>``
per parameter of the op (prefixed because ``leaky_clip`` has parameters named ``lo`` and
``hi``), and the compare section: ``cmp`` ("ops" or "param"), ``cmp_ops``, ``cmp_param``,
``cmp_values``. A loaded function of any signature (:mod:`explorer.explore.signature_views`) adds ``in``
(the swept input), ``wrt`` (the gradient's input), ``out`` (an output index or ``sum``), ``seed`` and
``origin`` (the line view's x0 and u) and one ``i.<name>`` per input held at a slider value.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import ops
from explorer import expr, loaded
from explorer.explore.sweeps import MAX_ABS_X, MAX_N, MIN_N, SweepRange
from explorer.train import setup as train_setup
from explorer.train import ste_bias

DEFAULT_OP = "ste_sign"
DTYPES = ops.DTYPES
N_RANGE = (MIN_N, MAX_N)
X_LIMIT = MAX_ABS_X
UPSTREAM_LIMIT = 1e6
COMPARE_MODES = ("ops", "param")
MAX_COMPARE = 6
MAX_QUERY_VALUE = 200  # characters kept from one URL value; a longer one is ignored with a notice
PARAM_PREFIX = "p."
TrainState = train_setup.TrainState  # the Train page's state; its URL form is at the end of this module


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


def _last(query: Mapping[str, Any], key: str) -> str | None:
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
        raw = _last(query, key)
        if raw is not None and len(raw) > MAX_QUERY_VALUE:
            notices.append(f"URL value of '{key}' is too long ({len(raw)} characters); using the default.")
            return None
        return raw

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
            values[name] = param.validate(_number(raw), state.op)
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
            values.append(param.validate(_number(item)))
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


def url_number(value: float) -> str:
    """The shortest text that parses back to exactly ``value`` (``repr(float)``), so a copied URL
    reproduces the view; a whole number drops its ``.0`` (``-1``, not ``-1.0``) and an exponent its
    ``+`` (``1e22``: a ``+`` in a query string may be read back as a space); both parse back the same.
    The one formatter of every number in a URL, explore and editor state alike."""
    text = repr(float(value)).replace("e+", "e")
    return text[:-2] if text.endswith(".0") else text


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


# -- the editor ------------------------------------------------------------------------------------
# URL keys: ``u_name``, ``u_fwd``, ``u_grad``, ``u_params`` as ``"k:25:1:100;a:2:1:5"`` (name:default:
# low:high) and ``u_points`` as ``"0, -1/k, 1:kink"``.
EDITOR_URL_KEYS = ("u_name", "u_fwd", "u_grad", "u_params", "u_points")
EDITOR_CACHE_SIZE = 16  # compiled editor ops kept (each holds its TensorFlow functions)
EDITOR_SOURCE_KEY = "editor.good"  # session-state key of the editor's last source that compiled


@dataclass(frozen=True)
class EditorSource:
    """Everything the user typed; hashable, so it keys the caches. ``params``: (name, default, low, high)."""

    name: str = "my_spike"
    forward: str = "where(x > 0, 1, 0)"
    gradient: str = "1 / (k * abs(x) + 1) ** 2"
    params: tuple[tuple[str, float, float, float], ...] = (("k", 25.0, 1.0, 100.0),)
    points: str = "0"


DEFAULT = EditorSource()


# -- text forms (URL values) ------------------------------------------------------------------------
def params_to_text(params: tuple[tuple[str, float, float, float], ...]) -> str:
    return ";".join(f"{name}:{url_number(d)}:{url_number(lo)}:{url_number(hi)}" for name, d, lo, hi in params)


def params_from_text(text: str) -> tuple[tuple[str, float, float, float], ...]:
    """``"k:25:1:100;a:2:1:5"`` -> (("k", 25, 1, 100), ("a", 2, 1, 5)); ValueError says what is wrong."""
    params = []
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        fields = item.split(":")
        if len(fields) != 4:
            raise ValueError(f"{item!r} is not name:default:low:high")
        name, *numbers = (field.strip() for field in fields)
        try:
            default, low, high = (float(number) for number in numbers)
        except ValueError:
            raise ValueError(f"{item!r}: default, low and high must be numbers") from None
        if not all(math.isfinite(v) for v in (default, low, high)):
            raise ValueError(f"{item!r}: default, low and high must be finite")
        params.append((name, default, low, high))
    if len(params) > expr.MAX_PARAMS:
        raise ValueError(f"{len(params)} parameters given; at most {expr.MAX_PARAMS} are allowed")
    return tuple(params)


def points_from_text(text: str) -> list[float | str | tuple[float | str, str]]:
    """``"0, -1/k, 1:kink"``: numbers or expressions of the parameters, each optionally ``:kind``."""
    points: list[float | str | tuple[float | str, str]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        value_text, _, kind = item.partition(":")
        value_text, kind = value_text.strip(), kind.strip()
        try:
            value: float | str = float(value_text)
        except ValueError:
            value = value_text
        points.append((value, kind) if kind else value)
    return points


def editor_to_query(source: EditorSource) -> dict[str, str]:
    return {
        "u_name": source.name,
        "u_fwd": source.forward,
        "u_grad": source.gradient,
        "u_params": params_to_text(source.params),
        "u_points": source.points,
    }


def editor_from_query(query: Mapping[str, Any]) -> tuple[EditorSource | None, list[str]]:
    """The editor source in the URL (None if it has no u_* key) and notices about ignored values."""
    if not any(key in query for key in EDITOR_URL_KEYS):
        return None, []
    notices: list[str] = []
    values = {}
    for key, attribute in (("u_name", "name"), ("u_fwd", "forward"), ("u_grad", "gradient"), ("u_points", "points")):
        if key in query:
            text = str(query[key])
            if len(text) > expr.MAX_LENGTH:
                notices.append(f"URL value {key} is longer than {expr.MAX_LENGTH} characters and was ignored.")
                continue
            values[attribute] = text
    if "u_params" in query:
        try:
            values["params"] = params_from_text(str(query["u_params"]))
        except ValueError as error:
            notices.append(f"URL value u_params was ignored ({error}); the example's parameters are used.")
    source = EditorSource(**{**DEFAULT.__dict__, **values})
    return source, notices




@functools.lru_cache(maxsize=EDITOR_CACHE_SIZE)
def compile_editor_op(source: EditorSource) -> ops.OpSpec:
    """The op an editor source describes; raises :class:`explorer.expr.ExpressionError` (not cached)."""
    params = {name: (default, low, high) for name, default, low, high in source.params}
    if len(params) != len(source.params):
        raise expr.ExpressionError("two parameters have the same name", expression="params")
    return expr.compile_op(
        source.name, source.forward, source.gradient, params=params, points=points_from_text(source.points)
    )


def editor_op(source: EditorSource | None) -> ops.OpSpec | None:
    """The op of an editor source (the one under :data:`EDITOR_SOURCE_KEY`), or None if it has none."""
    if source is None:
        return None
    try:
        return compile_editor_op(source)
    except expr.ExpressionError:
        return None


# -- the train page ------------------------------------------------------------------------------------
# URL keys: ``preset``, ``task``, ``n``, ``noise``, ``width``, ``depth``, ``opt``, ``lr``, ``batch`` (a whole number,
# or ``full``), ``epochs``, ``seed`` and ``runs``: ``op:gradient[:params][:learn]`` per run, runs joined by ``;``,
# params as ``name=value,name=value`` (``/train?lr=0.1&runs=atan:custom:alpha=4;atan:true``). Keys left out take
# the preset's value (with ``preset``) or the default; so ``/train?preset=yin2019`` is the whole preset.
PRESET_URL_KEY = "preset"
TRAIN_URL_KEYS = ("preset", "task", "n", "noise", "width", "depth", "opt", "lr", "batch", "epochs", "seed", "runs")
LEARN_FLAG = "learn"
RELU_KEY = "relu"  # the Keras ReLU baseline, Run(None)


def parse_run_params(spec: ops.OpSpec, text: str) -> dict[str, float]:
    """``"alpha=2, threshold=0.5"`` -> dict; ValueError names the bad item."""
    params: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"'{item.strip()}' should look like name=value (parameters of {spec.key}: {', '.join(spec.param_names) or 'none'})")
        try:
            params[name.strip()] = _number(value)
        except ValueError:
            raise ValueError(f"'{item.strip()}': {value.strip()!r} is not a finite number") from None
    return params


def run_params_text(run: train_setup.Run) -> str:
    """The parameters of ``run`` that differ from the op's defaults, as :func:`parse_run_params` reads them."""
    if run.op is None or run.layer is not None:
        return ""
    defaults = run.spec.defaults()
    return ",".join(f"{name}={url_number(value)}" for name, value in run.params.items() if value != defaults[name])


def _run_key(run: train_setup.Run) -> str:
    if run.layer is not None:
        return next((key for key, item in loaded.current().layers.items() if item.layer_class is run.layer), run.layer.__name__)
    return RELU_KEY if run.op is None else run.spec.key


def runs_to_text(runs: Sequence[train_setup.Run]) -> str:
    """``op:gradient[:params][:learn]`` per run, joined by ``;``."""
    texts = []
    for run in runs:
        fields = [_run_key(run), run.gradient]
        params = run_params_text(run)
        if params or run.learn:
            fields.append(params)
        if run.learn:
            fields.append(LEARN_FLAG)
        texts.append(":".join(fields))
    return ";".join(texts)


def make_run(key: str, gradient: str, params_text: str = "", learn: bool = False, editor_op: ops.OpSpec | None = None) -> train_setup.Run:
    """The Run of a runs-table row or a URL item: ``key`` a built-in op, the editor's op, a loaded op or layer
    (a layer is used in place of the op); ValueError says what is wrong."""
    if gradient not in ops.GRADIENT_MODES:
        raise ValueError(f"gradient '{gradient}' must be one of {', '.join(ops.GRADIENT_MODES)}")
    if key == RELU_KEY and key not in loaded.names():
        return train_setup.Run(None, None, gradient)
    layer = loaded.current().layers.get(key)
    if layer is not None:  # your layer in place of the op (true mode: the function it calls)
        if params_text.strip() or learn:
            raise ValueError(f"{key} is built with no arguments: leave its parameters empty")
        spec = None if layer.op_key is None else loaded.get(layer.op_key)
        return train_setup.Run(spec, None, gradient, layer=layer.layer_class)
    spec = editor_op if editor_op is not None and key == editor_op.key else loaded.get(key)
    reason = loaded.untrainable(key) if loaded.is_loaded(key) else None
    if reason is not None:
        raise ValueError(f"{key} is unavailable for training: it {reason} (the Explore page draws it)")
    return train_setup.Run(spec, parse_run_params(spec, params_text), gradient, learn=learn)


def runs_from_text(text: str, editor_op: ops.OpSpec | None = None) -> tuple[list[train_setup.Run], list[str]]:
    """The runs of a ``runs`` URL value and a message per item that is not a valid run."""
    runs, problems = [], []
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        fields = item.split(":")
        learn = len(fields) > 2 and fields[-1] == LEARN_FLAG
        if learn:
            fields = fields[:-1]
        if len(fields) > 3 or len(fields) < 2:
            problems.append(f"'{item}' is not op:gradient[:params][:{LEARN_FLAG}]")
            continue
        try:
            runs.append(make_run(fields[0], fields[1], fields[2] if len(fields) == 3 else "", learn, editor_op))
        except (KeyError, ValueError) as error:
            problems.append(f"'{item}': {error.args[0] if error.args else error}")
    return runs, problems


def train_from_query(
    query: Mapping[str, Any], base: train_setup.TrainState | None = None, *, editor_op: ops.OpSpec | None = None
) -> tuple[train_setup.TrainState, list[str]]:
    """The Train state a URL asks for, plus a notice for every value not used (the default is used instead).

    Keys the URL leaves out keep ``base``'s value (the page's current controls; default: the defaults), or the
    preset's when ``preset`` names one. An unknown preset keeps every control and run."""
    from explorer.train import presets, tasks

    notices: list[str] = []
    default = train_setup.TrainState()
    state = base or default

    def text(key: str) -> str | None:
        raw = _last(query, key)
        if raw is not None and len(raw) > MAX_QUERY_VALUE:
            notices.append(f"URL value of '{key}' is too long ({len(raw)} characters); using the default.")
            return None
        return raw

    raw = text(PRESET_URL_KEY)
    if raw is not None:
        if raw in presets.names():
            state = presets.get(raw).state
        elif raw:
            notices.append(f"Unknown preset '{raw}' in the URL; no preset loaded, your settings are kept. Presets: {', '.join(presets.names())}.")
            state = state.replace(preset="")
        else:
            state = state.replace(preset="")
    changes: dict[str, Any] = {}

    def number(key: str, field_name: str, low: float, high: float, integer: bool = False) -> None:
        raw = text(key)
        if raw is None:
            return
        fallback = getattr(default, field_name)
        try:
            value = _number(raw)
            if integer and value != round(value):
                raise ValueError("not whole")
            if not low <= value <= high:
                raise ValueError("out of range")
            changes[field_name] = int(value) if integer else value
        except ValueError:
            shown = (lambda v: str(int(v))) if integer else (lambda v: f"{v:g}")  # noqa: E731 - one format each
            notices.append(
                f"'{key}' = '{raw}' must be a {'whole ' if integer else ''}number in [{shown(low)}, {shown(high)}]; using {shown(fallback)}."
            )
            changes[field_name] = fallback

    def choice(key: str, field_name: str, allowed: Sequence[str]) -> None:
        raw = text(key)
        if raw is None:
            return
        if raw in allowed:
            changes[field_name] = raw
        else:
            fallback = getattr(default, field_name)
            notices.append(f"'{key}' = '{raw}' must be one of {', '.join(allowed)}; using {fallback}.")
            changes[field_name] = fallback

    choice("task", "task", tasks.names())
    number("n", "n", tasks.MIN_POINTS, tasks.MAX_POINTS, integer=True)
    number("noise", "noise", 0.0, tasks.MAX_NOISE)
    number("width", "width", 1, train_setup.MAX_WIDTH, integer=True)
    number("depth", "depth", 1, train_setup.MAX_DEPTH, integer=True)
    choice("opt", "optimizer", train_setup.OPTIMIZER_NAMES)
    raw = text("lr")
    if raw is not None:
        try:
            value = _number(raw)
            if not 0.0 < value <= train_setup.MAX_LEARNING_RATE:
                raise ValueError("out of range")
            changes["learning_rate"] = value
        except ValueError:
            notices.append(f"'lr' = '{raw}' must be a number in (0, {train_setup.MAX_LEARNING_RATE:g}]; using {default.learning_rate:g}.")
            changes["learning_rate"] = default.learning_rate
    raw = text("batch")
    if raw is not None:
        if raw == "full":
            changes["batch_size"] = None
        elif raw.isdigit() and 1 <= int(raw) <= tasks.MAX_POINTS:
            changes["batch_size"] = int(raw)
        else:
            notices.append(f"'batch' = '{raw}' must be 'full' or a whole number in [1, {tasks.MAX_POINTS}]; using full.")
            changes["batch_size"] = None
    number("epochs", "epochs", 1, train_setup.MAX_EPOCHS, integer=True)
    number("seed", "seed", 0, train_setup.MAX_SEED, integer=True)
    raw = text("runs")
    if raw is not None:
        runs, problems = runs_from_text(raw, editor_op)
        notices.extend(f"Ignored run {problem} in 'runs'." for problem in problems)
        if runs:
            changes["runs"] = tuple(runs)
        else:
            notices.append("'runs' has no valid run (op:gradient[:params][:learn], e.g. atan:custom:alpha=4); using the default runs.")
            changes["runs"] = ()
    return state.replace(**changes), notices


def train_to_query(state: train_setup.TrainState) -> dict[str, str]:
    """The URL query for ``state``: ``preset`` (if any), every control that differs from the preset's (or the
    default) and always the runs."""
    from explorer.train import presets

    base = presets.get(state.preset).state if state.preset else train_setup.TrainState()
    query: dict[str, str] = {PRESET_URL_KEY: state.preset} if state.preset else {}
    for key, field_name in (("task", "task"), ("opt", "optimizer")):
        if getattr(state, field_name) != getattr(base, field_name):
            query[key] = getattr(state, field_name)
    for key, field_name in (("n", "n"), ("width", "width"), ("depth", "depth"), ("epochs", "epochs"), ("seed", "seed")):
        if getattr(state, field_name) != getattr(base, field_name):
            query[key] = str(getattr(state, field_name))
    for key, field_name in (("noise", "noise"), ("lr", "learning_rate")):
        if getattr(state, field_name) != getattr(base, field_name):
            query[key] = url_number(getattr(state, field_name))
    if state.batch_size != base.batch_size:
        query["batch"] = "full" if state.batch_size is None else str(state.batch_size)
    if state.runs:
        query["runs"] = runs_to_text(state.runs)
    return query


# -- a preset's own view controls (/train?preset=yin2019&yin.steps=500) ------------------------------------
YIN_MAX_STEPS = 10_000  # the closed-form loop holds the GIL: keep a page's request short for everyone else
YIN_LR_RANGE = (1e-4, 10.0)
STE_BIAS_SURROGATE = "atan"


@dataclass(frozen=True)
class PresetView:
    """The controls of a preset's own view (the Train state holds the training controls): Yin et al.'s steps,
    learning rate and Monte Carlo check; the straight-through bias's exponent p, target t and surrogate."""

    yin_steps: int = 3000
    yin_lr: float = 0.1
    yin_monte_carlo: bool = False
    ste_p: float = 2.0
    ste_t: float = ste_bias.DEFAULT_T
    ste_surrogate: str = STE_BIAS_SURROGATE


PRESET_VIEW_URL_KEYS: dict[str, tuple[tuple[str, str], ...]] = {  # preset -> (URL key, field)
    "yin2019": (("yin.steps", "yin_steps"), ("yin.lr", "yin_lr"), ("yin.mc", "yin_monte_carlo")),
    "ste_bias": (("ste.p", "ste_p"), ("ste.t", "ste_t"), ("ste.op", "ste_surrogate")),
}


def _preset_view_rules() -> dict[str, tuple[str, Callable[[str], Any]]]:
    """Per view field: the allowed values in words, and a parser that returns the value or raises ValueError."""

    def number_in(low: float, high: float, whole: bool = False, places: int | None = None) -> Callable[[str], Any]:
        def parse(raw: str) -> Any:
            value = _number(raw)
            value = round(value, places) if places is not None else value
            if (whole and value != round(value)) or not low <= value <= high:
                raise ValueError("out of range")
            return int(value) if whole else value

        return parse

    def one_of(allowed: Mapping[str, Any]) -> Callable[[str], Any]:
        def parse(raw: str) -> Any:
            if raw not in allowed:
                raise ValueError("not allowed")
            return allowed[raw]

        return parse

    low_t, high_t = ste_bias.T_RANGE
    exponents = {url_number(p): p for p in ste_bias.EXPONENTS}
    return {
        "yin_steps": (f"a whole number in [1, {YIN_MAX_STEPS}]", number_in(1, YIN_MAX_STEPS, whole=True)),
        "yin_lr": (f"a number in [{YIN_LR_RANGE[0]:g}, {YIN_LR_RANGE[1]:g}]", number_in(*YIN_LR_RANGE)),
        "yin_monte_carlo": ("0 or 1", one_of({"0": False, "1": True})),
        "ste_p": (f"one of {', '.join(exponents)}", lambda raw: one_of(exponents)(url_number(_number(raw)))),
        # the page's slider moves in steps of 0.01
        "ste_t": (f"a number in [{low_t:g}, {high_t:g}]", number_in(low_t, high_t, places=2)),
        "ste_surrogate": (f"one of {', '.join(ste_bias.spike_ops())}", one_of({k: k for k in ste_bias.spike_ops()})),
    }


def preset_view_from_query(query: Mapping[str, Any], preset: str) -> tuple[PresetView, list[str]]:
    """The view controls a URL asks for (only the keys of ``preset`` are read), plus a notice for every value not
    used (its default is used instead)."""
    default, notices, changes = PresetView(), [], {}
    rules = _preset_view_rules()
    for key, field_name in PRESET_VIEW_URL_KEYS.get(preset, ()):
        raw = _last(query, key)
        if raw is None:
            continue
        allowed, parse = rules[field_name]
        try:
            changes[field_name] = parse(raw.strip())
        except ValueError:
            fallback = getattr(default, field_name)
            shown = raw if len(raw) <= 40 else raw[:37] + "..."
            notices.append(f"'{key}' = '{shown}' must be {allowed}; using {_url_text(fallback)}.")
    return replace(default, **changes), notices


def _url_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return url_number(value) if isinstance(value, float) else str(value)


def preset_view_to_query(view: PresetView, preset: str) -> dict[str, str]:
    """The URL keys of ``preset``'s view controls that differ from their defaults."""
    default, query = PresetView(), {}
    for key, field_name in PRESET_VIEW_URL_KEYS.get(preset, ()):
        value = getattr(view, field_name)
        if value == getattr(default, field_name):
            continue
        query[key] = _url_text(value)
    return query
