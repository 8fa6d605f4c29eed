"""The Train page's URL form: :class:`TrainState` (defined beside the trainer, which takes it:
:mod:`explorer.train.setup`) from and to a query, and a preset's own view controls (:class:`PresetView`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import ops
from explorer import loaded
from explorer.state.query import bounded_value, finite_number, last_value, number_in_range, url_number
from explorer.train import setup as train_setup
from explorer.train import ste_bias

TrainState = train_setup.TrainState  # the Train page's state, defined beside the trainer (which takes it)


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
            params[name.strip()] = finite_number(value)
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
        return bounded_value(query, key, notices)

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
            changes[field_name] = number_in_range(raw, low, high, integer)
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
            value = finite_number(raw)
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
            value = finite_number(raw)
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
        "ste_p": (f"one of {', '.join(exponents)}", lambda raw: one_of(exponents)(url_number(finite_number(raw)))),
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
        raw = last_value(query, key)
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
