"""Explore page: sweep one op, see forward, true and custom gradient, compare, download.

The canonical state is an :class:`explorer.state.ExploreState` in ``st.session_state``; widgets
are seeded from it (so values survive a trip to another page, where Streamlit drops widget
state) and the URL is rewritten from it on every run.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from dataclasses import dataclass, replace

import pandas as pd
import streamlit as st

import ops
from explorer import loaded
from explorer import state as url_state
from explorer.explore import figures, view_html
from explorer.explore.measures import COLUMNS as METRIC_COLUMNS
from explorer.explore.measures import metrics_records
from explorer.explore.points import display_columns, display_table
from explorer.explore.sweeps import Sweep
from explorer.ui import backends_panel, yours
from explorer.ui.widgets import ReadyFigure, arrow_table, literal, page_link, show_figure, show_formulas

STATE_KEY = "explore.state"
NOTICES_KEY = "explore.notices"
FAMILY_LABELS = {
    "spike": "Spike",
    "sign": "Sign / quantiser",
    "clip": "Clipping",
    "override": "Override",
    "stability": "Stability",
}
MAX_CACHED_SWEEPS = 32


# -- cached computation ----------------------------------------------------------------------------
# st.cache_resource, not st.cache_data: the results are immutable and shared read-only, so no rerun
# pays for pickling a copy (and a Sweep holds its op, whose TensorFlow functions do not pickle).
# Each cached function takes its inputs as one tuple: on every lookup Streamlit inspects the function's
# signature once per argument (~20 us each), so seven arguments cost a lookup 2.6x one.
@dataclass(frozen=True)
class View:
    """What the page shows for one set of inputs, computed once: the sweep, its special points, the
    points table as shown, and the rows the page warns about. Shared read-only between reruns."""

    result: Sweep
    points: pd.DataFrame
    shown_table: object  # arrow_table(display_columns(points)): what st.dataframe sends
    undeclared: tuple[tuple[float, str], ...]  # (x, note) of points found but not declared
    not_detected: tuple[tuple[float, str], ...]  # (x, kind) of declared points the sweep does not show


@st.cache_resource(max_entries=MAX_CACHED_SWEEPS, show_spinner=False)
def cached_view(key: tuple) -> View:
    """Sweep and special points for the inputs ``key`` = (op, params, lo, hi, n, dtype, upstream) of :func:`_key`."""
    op, params, lo, hi, n, dtype, upstream = key
    # a built-in here; a loaded op in its worker process, guarded (time limit, probe, eager fallback)
    result, points = loaded.sweep_and_points(op, lo=lo, hi=hi, n=n, params=dict(params), upstream=upstream, dtype=dtype)
    status = points["status"].tolist()
    return View(
        result,
        points,
        arrow_table(display_columns(points)),
        tuple((x, note) for x, note, s in zip(points["x"].tolist(), points["note"], status, strict=True) if s == "undeclared"),
        tuple((x, kind) for x, kind, s in zip(points["x"].tolist(), points["kind"], status, strict=True) if s == "not detected"),
    )


@st.cache_resource(max_entries=MAX_CACHED_SWEEPS, show_spinner=False)
def cached_signature_view(key: tuple) -> View:
    """Sweep and special points of a loaded function's view: ``key`` = (op, view, params, lo, hi, n, dtype,
    upstream) of :func:`_signature_key`; computed in the worker (:func:`explorer.loaded.view_sweep_and_points`)."""
    op, view, params, lo, hi, n, dtype, upstream = key
    result, points = loaded.view_sweep_and_points(op, view, dict(params), lo, hi, n, upstream, dtype)
    status = points["status"].tolist()
    return View(
        result,
        points,
        arrow_table(display_columns(points)),
        tuple((x, note) for x, note, s in zip(points["x"].tolist(), points["note"], status, strict=True) if s == "undeclared"),
        (),
    )


@st.cache_resource(max_entries=MAX_CACHED_SWEEPS, show_spinner=False)
def cached_signature_shown(shown_key: tuple) -> Shown:
    from explorer.explore.signature_views import disagreements

    key, overlay = shown_key
    view = cached_signature_view(key)
    frame = view.result.frame
    differ = disagreements(frame["x"].to_numpy(), frame["true_grad"].to_numpy(), frame["custom_grad"].to_numpy())
    spec = figures.main_figure_spec(view.result, view.points, overlay=overlay, differ=differ)
    if key[1].kind == "line":
        spec = _line_axes(spec)
    return Shown(ReadyFigure(spec), _metrics_arrow([view.result], [key[0]]))


def _line_axes(spec: dict) -> dict:
    """The line view's axes named for what they show: t, s(t) and ds/dt (a copy: the figure spec is cached)."""
    layout = dict(spec["layout"])
    for name, axis in spec["layout"].items():
        if name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict) and "title" in axis:
            text = axis["title"].get("text")
            renamed = {"x": "t", "forward y": "s(t)", "dy/dx": "ds/dt"}.get(text, text)
            layout[name] = {**axis, "title": {**axis["title"], "text": renamed}}
    return {**spec, "layout": layout}


@st.cache_resource(max_entries=MAX_CACHED_SWEEPS, show_spinner=False)
def cached_signature_compare(compare_key: tuple):
    """Compare figure and metrics of one loaded function's view at several values of one slider input:
    ``compare_key`` = (keys, labels), each key as :func:`_signature_key`."""
    keys, labels = compare_key
    views = [cached_signature_view(key) for key in keys]
    spec = figures.compare_figure_spec([v.result for v in views], list(labels), [v.points for v in views])
    return ReadyFigure(spec), _metrics_arrow([v.result for v in views], list(labels))


@dataclass(frozen=True)
class Shown:
    """What the page sends for a view and an overlay setting: the main figure and the metrics table (as
    st.dataframe sends it, :func:`arrow_table`). Holds no sweep: the view cache alone bounds those."""

    figure: ReadyFigure
    metrics: object


@st.cache_resource(max_entries=MAX_CACHED_SWEEPS, show_spinner=False)
def cached_shown(shown_key: tuple) -> Shown:
    """Main figure and metrics of the view of ``key`` (:func:`_key`), ``shown_key`` = (key, overlay), in one
    cache lookup, not two: every Streamlit cache lookup hashes its arguments and inspects the function's
    signature."""
    key, overlay = shown_key
    view = cached_view(key)
    figure = ReadyFigure(figures.main_figure_spec(view.result, view.points, overlay=overlay))
    return Shown(figure, _metrics_arrow([view.result], [key[0]]))


@st.cache_resource(max_entries=MAX_CACHED_SWEEPS, show_spinner=False)
def cached_compare(compare_key: tuple):
    """Compare figure and metrics table (as st.dataframe sends it) for several (op, params) runs over one range:
    ``compare_key`` = (runs, labels, (lo, hi, n, dtype, upstream))."""
    runs, labels, sweep_range = compare_key
    views = [cached_view((key, params, *sweep_range)) for key, params in runs]
    sweeps = [view.result for view in views]
    spec = figures.compare_figure_spec(sweeps, list(labels), [view.points for view in views])
    return ReadyFigure(spec), _metrics_arrow(sweeps, list(labels))


def _metrics_arrow(sweeps: list[Sweep], labels: list[str]):
    """:func:`explorer.explore.measures.metrics_table` as the Arrow table st.dataframe sends (its columns, no index)."""
    records = metrics_records(sweeps, labels)
    return arrow_table({name: [record[name] for record in records] for name in ("label", *METRIC_COLUMNS)})


def _key(state: url_state.ExploreState) -> tuple:
    params = tuple(sorted(state.resolved_params().items()))
    return (state.op, params, state.lo, state.hi, state.n, state.dtype, state.upstream)


# -- state <-> widgets ---------------------------------------------------------------------------------
def _param_key(op: str, name: str) -> str:
    return f"w.p.{op}.{name}"


def _seed_widgets(state: url_state.ExploreState, overwrite: bool = False) -> None:
    """Put ``state`` into the widget keys (only missing ones unless ``overwrite``)."""
    values = {
        "w.op": state.op,
        "w.lo": state.lo,
        "w.hi": state.hi,
        "w.n": state.n,
        "w.dtype": state.dtype,
        "w.upstream": state.upstream,
        "w.overlay": state.overlay,
        "w.cmp": state.compare,
        "w.cmp_ops": list(state.compare_ops),
        "w.cmp_param": state.compare_param,
        "w.cmp_values": ", ".join(f"{v:g}" for v in state.compare_values),
    }
    spec = state.spec
    for param in spec.params:
        value = state.resolved_params()[param.name]
        values[_param_key(state.op, param.name)] = int(value) if param.integer else float(value)
    for key, value in values.items():
        if overwrite or key not in st.session_state:
            st.session_state[key] = value


def _initial_state() -> url_state.ExploreState:
    if STATE_KEY not in st.session_state:
        query = {key: st.query_params.get_all(key) for key in st.query_params}
        state, notices = url_state.from_query(query)
        st.session_state[STATE_KEY] = state
        st.session_state[NOTICES_KEY] = notices
    return st.session_state[STATE_KEY]


SIGNATURE_WIDGETS = ("w.in", "w.wrt", "w.out", "w.seed", "w.origin", "w.sig_cmp", "w.sig_values")


def _forget_signature_widgets() -> None:
    for key in SIGNATURE_WIDGETS:
        st.session_state.pop(key, None)


def _on_op_change() -> None:
    _forget_signature_widgets()
    current: url_state.ExploreState = st.session_state[STATE_KEY]
    new_state = current.with_op(st.session_state["w.op"])
    st.session_state[STATE_KEY] = new_state
    st.session_state["w.cmp_param"] = new_state.compare_param
    st.session_state["w.cmp_values"] = ", ".join(f"{v:g}" for v in new_state.compare_values)


def _on_compare_param_change() -> None:
    current: url_state.ExploreState = st.session_state[STATE_KEY]
    name = st.session_state["w.cmp_param"]
    values = url_state.default_compare_values(current.spec, name)
    st.session_state["w.cmp_values"] = ", ".join(f"{v:g}" for v in values)


def _on_reset() -> None:
    current: url_state.ExploreState = st.session_state[STATE_KEY]
    fresh = url_state.default_state().with_op(current.op)
    st.session_state[STATE_KEY] = fresh
    _forget_signature_widgets()
    for name, param in url_state.input_params(current.op).items():
        st.session_state[_input_key(current.op, name)] = float(param.default)
    _seed_widgets(fresh, overwrite=True)
    st.session_state[NOTICES_KEY] = []


# -- widgets ---------------------------------------------------------------------------------------------
def _op_label(key: str) -> str:
    spec = loaded.get(key)
    return f"{_family_label(key)} · {spec.title}" + ("" if loaded.is_loaded(key) else f" ({key})")


def _family_label(key: str) -> str:
    """"Spike", ...; "Yours · module" for an op loaded from GRADIENT_EXPLORER_OPS (its group in the picker)."""
    module = loaded.module_of(key)
    return f"Yours · {module}" if module is not None else FAMILY_LABELS[loaded.get(key).family]


def _param_widget(op: str, param: ops.Param) -> None:
    key = _param_key(op, param.name)
    if param.integer:
        st.slider(param.name, int(param.low), int(param.high), step=1, key=key, help=param.help)
    elif param.low > 0 and param.high / param.low > 1e4:  # spans many decades: a slider cannot pick them
        st.number_input(param.name, float(param.low), float(param.high), format="%.3e", key=key, help=param.help)
    else:
        step = _nice_step((param.high - param.low) / 500)
        st.slider(param.name, float(param.low), float(param.high), step=step, key=key, help=param.help)


def _nice_step(raw: float) -> float:
    exponent = 10 ** int(f"{raw:e}".split("e")[1])
    for factor in (1, 2, 5, 10):
        if raw <= factor * exponent:
            return factor * exponent
    return 10 * exponent


def _sidebar() -> url_state.ExploreState:
    current = _initial_state()
    _seed_widgets(current)
    with st.sidebar:
        st.header("Op")
        keys = [spec.key for family in ops.by_family().values() for spec in family] + list(loaded.current().ops)
        st.selectbox(
            "Surrogate op (type to search)",
            keys,
            format_func=_op_label,
            key="w.op",
            on_change=_on_op_change,
            help="Ops are grouped by family: spike surrogates, sign and quantiser estimators, clipping, "
            "intentional overrides, numerically stable gradients; \"Yours\" are the functions loaded from "
            "GRADIENT_EXPLORER_OPS when the server started.",
        )
        op = st.session_state["w.op"]
        spec = loaded.get(op)
        _seed_widgets(st.session_state[STATE_KEY] if st.session_state[STATE_KEY].op == op else current.with_op(op))
        if spec.params:
            st.subheader("Parameters")
            for param in spec.params:
                _param_widget(op, param)
        else:
            st.caption("This op has no parameters.")

        st.header("Sweep")
        col_lo, col_hi = st.columns(2)
        col_lo.number_input("x from", -url_state.X_LIMIT, url_state.X_LIMIT, key="w.lo", format="%g")
        col_hi.number_input("x to", -url_state.X_LIMIT, url_state.X_LIMIT, key="w.hi", format="%g")
        st.number_input(
            "points",
            min_value=url_state.N_RANGE[0],
            max_value=url_state.N_RANGE[1],
            step=500,
            key="w.n",
            help="The CSV has every point; plotted traces are reduced to 5,000 points, keeping every special point.",
        )
        st.radio(
            "dtype",
            url_state.DTYPES,
            key="w.dtype",
            horizontal=True,
            help="See what half precision does: x is rounded to the dtype, and so are output and gradient.",
        )
        st.number_input(
            "upstream gradient dy",
            -url_state.UPSTREAM_LIMIT,
            url_state.UPSTREAM_LIMIT,
            key="w.upstream",
            format="%g",
            help="The gradient arriving from above. Custom gradients multiply it, except clip_gradient, which clips it.",
        )
        st.button("Reset to defaults", on_click=_on_reset, width="stretch")

    params = {p.name: st.session_state[_param_key(op, p.name)] for p in spec.params}
    return replace(
        st.session_state[STATE_KEY] if st.session_state[STATE_KEY].op == op else current.with_op(op),
        op=op,
        params={k: float(v) for k, v in params.items()},
        lo=float(st.session_state["w.lo"]),
        hi=float(st.session_state["w.hi"]),
        n=int(st.session_state["w.n"]),
        dtype=st.session_state["w.dtype"],
        upstream=float(st.session_state["w.upstream"]),
        overlay=bool(st.session_state["w.overlay"]),
    )


# -- main area ---------------------------------------------------------------------------------------------
def _header(spec: ops.OpSpec) -> None:
    st.title(spec.title)
    st.caption(f"`{spec.key}` · {_family_label(spec.key)}" + ("" if loaded.is_loaded(spec.key) else " family"))
    if spec.forward_tex:
        show_formulas(spec)
    else:  # a loaded function: its code is the formula
        st.markdown(
            f"Your own `@tf.custom_gradient` function. The {spec.true_gradient_label} is "
            + ("autodiff of the forward you declared." if spec.true_gradient == "autodiff"
               else "a float64 central difference of your forward's values (no plain forward declared).")
        )
    why = spec.why.replace("*", "\\*")  # formulas like pi*alpha*x are text, not markdown emphasis
    if not why:
        docstring = spec.user_function.docstring.replace("*", "\\*") if spec.user_function is not None else ""
        why = "None declared (`justification=`, or its module's `GRADIENT_EXPLORER` dict): where the custom gradient "
        why += "differs from the true one, the vs_autodiff check warns."
        if docstring:
            why += f" Its docstring, context and not a declaration: {docstring}"
    st.info(f"**Why.** {why}\n\n**From.** {spec.reference}")


def _compare_section(state: url_state.ExploreState) -> tuple[url_state.ExploreState, Shown | None]:
    """The compare section; returns the state with its controls and what it drew (None: nothing)."""
    st.subheader("Compare")
    spec = state.spec
    mode = st.radio(
        "Compare",
        url_state.COMPARE_MODES,
        key="w.cmp",
        horizontal=True,
        format_func=lambda m: "several ops" if m == "ops" else f"{spec.key} at several values of one parameter",
        label_visibility="collapsed",
    )
    problems: list[str] = []
    if mode == "ops":
        chosen = st.multiselect(
            "Ops to overlay",
            loaded.names(),
            key="w.cmp_ops",
            max_selections=url_state.MAX_COMPARE,
            format_func=_op_label,
        )
        state = replace(state, compare="ops", compare_ops=tuple(chosen) or state.compare_ops)
        views = [key for key in chosen if loaded.is_loaded(key) and not loaded.layout(key).simple]
        for key in views:
            st.caption(
                f"{key} is left out of this comparison: it is drawn along its own inputs, outputs or line, not as one "
                "elementwise curve of x; compare it on its own page, at several values of one of its inputs."
            )
        chosen = [key for key in chosen if key not in views]
        runs = [(key, {}) for key in chosen]
        labels = list(chosen)
    else:
        if not spec.params:
            st.caption(f"`{spec.key}` has no parameters: compare several ops instead.")
            return replace(state, compare="param"), None
        col_name, col_values = st.columns([1, 2])
        name = col_name.selectbox("Parameter", spec.param_names, key="w.cmp_param", on_change=_on_compare_param_change)
        text = col_values.text_input("Values (comma-separated)", key="w.cmp_values")
        values, problems = url_state.parse_compare_values(spec, name, text)
        state = replace(state, compare="param", compare_param=name, compare_values=values or state.compare_values)
        base = state.resolved_params()
        runs = [(spec.key, {**base, name: value}) for value in values]
        labels = [f"{name} = {value:g}" for value in values]
    for problem in problems:
        st.warning(f"Ignored compare value {literal(problem)}.")
    if not runs:
        st.caption("Pick at least one op or value to compare.")
        return state, None
    try:
        resolved = tuple((key, tuple(sorted(loaded.get(key).resolve(p).items()))) for key, p in runs)
        figure, table = cached_compare((resolved, tuple(labels), (state.lo, state.hi, state.n, state.dtype, state.upstream)))
    except ValueError as error:
        st.error(f"Cannot compare: {literal(error)}")
        return state, None
    col_figure, col_table = st.columns([3, 2])
    with col_figure:
        show_figure(figure, key="compare_figure", filename=f"{spec.key}_compare")
    with col_table:
        st.dataframe(table, hide_index=True)
    return state, Shown(figure, table)


# -- a loaded function of any signature --------------------------------------------------------------------
def _input_key(op: str, name: str) -> str:
    return f"w.i.{op}.{name}"


def _signature_key(state: url_state.ExploreState, view) -> tuple:
    from explorer.explore.signature_views import held_name

    values = {**state.resolved_params(), **{held_name(k): v for k, v in _input_values(state).items()}}
    spec = loaded.view_spec(state.op, view)
    params = tuple(sorted(spec.resolve({k: v for k, v in values.items() if k in spec.param_names}).items()))
    return (state.op, view, params, state.lo, state.hi, state.n, state.dtype, state.upstream)


def _input_values(state: url_state.ExploreState) -> dict[str, float]:
    defaults = {name: p.default for name, p in url_state.input_params(state.op).items()}
    return {**defaults, **state.inputs}


def _signature_controls(state: url_state.ExploreState, layout) -> tuple[url_state.ExploreState, object]:
    """The swept input, the gradient's input, the output, the line's seed and the slider inputs; returns the
    state with them and the validated view."""
    from explorer.explore import signature_views as sv

    base = sv.validate_view(layout, sv.View(swept=state.swept, wrt=state.wrt, output=state.output, seed=state.seed, origin=state.origin))
    defaults = {"w.in": base.swept, "w.wrt": base.wrt, "w.out": base.output, "w.seed": base.seed, "w.origin": base.origin}
    for key, value in defaults.items():
        if key not in st.session_state:
            st.session_state[key] = value
    names = list(layout.inputs)
    columns = st.columns(4)
    if len(names) > 1:
        columns[0].selectbox("Swept input", names, key="w.in", help="The input that runs along the sweep (x).")
    swept = st.session_state["w.in"] if st.session_state.get("w.in") in names else base.swept
    if base.kind == sv.CURVE and len(names) > 1:
        columns[1].selectbox(
            "Gradient with respect to", names, key="w.wrt",
            help="The gradient panels show d(output)/d(this input) along the same sweep.",
        )
    wrt = st.session_state.get("w.wrt", swept) if base.kind == sv.CURVE else swept
    wrt = wrt if wrt in names else swept
    if layout.outputs > 1:
        options = [*range(layout.outputs), sv.SUM_OF_OUTPUTS]
        if st.session_state.get("w.out") not in options:
            st.session_state["w.out"] = 0
        columns[2].selectbox(
            "Output shown", options, key="w.out",
            format_func=lambda i: "sum of the outputs (upstream 1 on each)" if i == sv.SUM_OF_OUTPUTS else f"output {i}",
        )
    output = int(st.session_state.get("w.out", 0)) if layout.outputs > 1 else 0
    seed, origin = 0, False
    if base.kind == sv.LINE:
        with columns[3]:
            st.number_input("Seed of x₀, u", 0, url_state.MAX_SEED, step=1, key="w.seed",
                            help="Draws the line's start x₀, its unit direction u and every tensor-shaped input held fixed.")
            st.button("New line", on_click=_new_seed, help="Draw x₀ and u again (the next seed).")
            st.checkbox("Through the origin (x₀ = 0)", key="w.origin")
        seed, origin = int(st.session_state["w.seed"]), bool(st.session_state["w.origin"])
    view = sv.validate_view(layout, sv.View(base.kind, swept, wrt, output, seed, origin))
    sliders = url_state.input_params(state.op)
    held = sv.slider_inputs(layout, view)
    values = dict(state.inputs)
    if held:
        slider_columns = st.columns(min(len(held), 4))
        for index, name in enumerate(held):
            param = sliders[name]
            key = _input_key(state.op, name)
            if key not in st.session_state:
                st.session_state[key] = float(state.inputs.get(name, param.default))
            with slider_columns[index % len(slider_columns)]:
                _param_widget_at(key, param)
            values[name] = float(st.session_state[key])
    state = replace(state, swept=swept if swept != layout.inputs[0] else "", wrt=wrt if wrt != swept else "",
                    output=output, seed=seed, origin=origin, inputs=values)
    return state, view


def _new_seed() -> None:
    st.session_state["w.seed"] = (int(st.session_state.get("w.seed", 0)) + 1) % url_state.MAX_SEED


def _param_widget_at(key: str, param: ops.Param) -> None:
    step = _nice_step((param.high - param.low) / 500)
    st.slider(f"{param.name} (input held fixed)", float(param.low), float(param.high), step=step, key=key, help=param.help)


LINE_NOTE = (
    "Along the line {s}(t) = {s}₀ + t·u (x₀ {start}, u a unit direction, seed {seed}) the forward panel shows "
    "s(t) = ⟨w, f({s}(t))⟩ with w all ones{out}, the true gradient is ds/dt ({how}), and the custom gradient is "
    "⟨custom backward(w), u⟩: where the two differ, your backward is not the derivative along this line."
)


def _signature_note(spec: ops.OpSpec, layout, view) -> str:
    from explorer.explore import signature_views as sv

    if view.kind == sv.LINE:
        out = ""
        if layout.outputs > 1:
            out = " on every output" if view.output == sv.SUM_OF_OUTPUTS else f" on output {view.output}, zeros on the others"
        how = "autodiff of your declared forward" if spec.true_gradient == "autodiff" else "a float64 central difference of s"
        start = "= 0" if view.origin else ("drawn uniformly from [0.1, 2]" if layout.positive else "drawn uniformly from [-2, 2]")
        return LINE_NOTE.format(s=view.swept, start=start, seed=view.seed, out=out, how=how)
    held = [name for name in layout.inputs if name != view.swept]
    held_text = f"; {', '.join(held)} held at the slider values" if held else ""
    return (
        f"{view.swept} runs along the sweep{held_text}; the gradient panels show the derivative of "
        f"{'the sum of the outputs' if view.output == sv.SUM_OF_OUTPUTS else f'output {view.output}'} with respect to "
        f"{view.wrt} at each point (true: a float64 central difference of your forward; custom: your backward)."
    )


def _signature_page(state: url_state.ExploreState, layout) -> tuple[url_state.ExploreState, View | None, Shown | None]:
    """The figure of a loaded function that is not one input, one output, elementwise."""
    st.info(f"**Shape.** `{state.op}` is {literal(layout.describe())}.")
    state, view = _signature_controls(state, layout)
    try:
        key = _signature_key(state, view)
        shown_view = cached_signature_view(key)
    except loaded.UserOpError as error:
        st.error(f"**Your op failed.** {literal(error)}. Other ops and every control still work.", icon="🛑")
        return state, None, None
    except ValueError as error:
        st.error(f"Cannot sweep: {literal(error)}. Change the control named above; everything else is kept.")
        return state, None, None
    shown = cached_signature_shown((key, state.overlay))
    show_figure(shown.figure, key="main_figure", filename=state.op)
    st.caption(_signature_note(shown_view.result.spec, layout, view))
    yours.graph_notes(state.op)
    for x, note in shown_view.undeclared:
        st.caption(f"Special point at {'t' if view.kind == 'line' else view.swept} = {x:.6g}: {note}")
    _points_and_metrics(shown_view, shown.metrics)
    return state, shown_view, shown


def _points_and_metrics(view, metrics) -> None:
    """The special-points table of a view (or a line saying there are none) and the metrics table under it."""
    st.subheader("Special points")
    if view.points.empty:
        st.caption("No special points in this range: forward and gradients are smooth here.")
    else:
        st.dataframe(view.shown_table, hide_index=True)
    st.subheader("Metrics")
    st.dataframe(metrics, hide_index=True)


def _signature_compare(state: url_state.ExploreState, layout, view) -> tuple[url_state.ExploreState, Shown | None]:
    """Compare for a loaded function of any signature: the view at several values of one slider input; returns
    the state and what it drew (None: nothing)."""
    from explorer.explore import signature_views as sv

    st.subheader("Compare")
    held = sv.slider_inputs(layout, view)
    if not held:
        st.caption(
            f"Nothing to compare here: `{state.op}` has no scalar input to hold at several values, and another "
            "function's view is drawn along its own inputs and line, so the curves would not share an axis."
        )
        return state, None
    sliders = url_state.input_params(state.op)
    if st.session_state.get("w.sig_cmp") not in held:
        st.session_state["w.sig_cmp"] = state.compare_input if state.compare_input in held else held[0]
        st.session_state.pop("w.sig_values", None)
    col_name, col_values = st.columns([1, 2])
    name = col_name.selectbox("Input", held, key="w.sig_cmp", on_change=lambda: st.session_state.pop("w.sig_values", None))
    param = sliders[name]
    if "w.sig_values" not in st.session_state:
        values = state.compare_input_values if name == state.compare_input and state.compare_input_values else (
            param.low, param.default, param.high)
        st.session_state["w.sig_values"] = ", ".join(f"{v:g}" for v in values)
    text = col_values.text_input("Values (comma-separated)", key="w.sig_values")
    values, problems = url_state.parse_input_values(param, text)
    for problem in problems:
        st.warning(f"Ignored compare value {literal(problem)}.")
    state = replace(state, compare_input=name, compare_input_values=values or state.compare_input_values)
    if not values:
        st.caption("Give at least one value to compare.")
        return state, None
    try:
        keys = tuple(_signature_key(replace(state, inputs={**state.inputs, name: v}), view) for v in values)
        figure, table = cached_signature_compare((keys, tuple(f"{name} = {v:g}" for v in values)))
    except ValueError as error:
        st.error(f"Cannot compare: {literal(error)}")
        return state, None
    col_figure, col_table = st.columns([3, 2])
    with col_figure:
        show_figure(figure, key="compare_figure", filename=f"{state.op}_compare")
    with col_table:
        st.dataframe(table, hide_index=True)
    return state, Shown(figure, table)


def page() -> None:
    state = _sidebar()
    st.session_state[STATE_KEY] = state
    for notice in st.session_state.get(NOTICES_KEY, []):
        st.warning(literal(notice), icon="⚠️")

    spec = state.spec
    yours.load_errors()
    _header(spec)
    st.toggle("Overlay true and custom gradient on one axis", key="w.overlay")
    state = replace(state, overlay=bool(st.session_state["w.overlay"]))

    layout = loaded.layout(spec.key) if loaded.is_loaded(spec.key) else None
    if layout is not None and layout.failure is not None:
        st.error(f"**Your op failed.** {literal(layout.failure)}. Other ops and every control still work.", icon="🛑")
        _finish(state, spec, None, None, None)
        return
    if layout is not None and not layout.simple:
        state, view, shown = _signature_page(state, layout)
        compared = None
        if view is not None:
            yours.checks(spec.key, state.resolved_params())
            state, compared = _signature_compare(state, layout, view.result.view)
        _finish(state, spec, view, shown, compared)
        return

    try:
        view = cached_view(_key(state))
    except loaded.UserOpError as error:
        st.error(f"**Your op failed.** {literal(error)}. Other ops and every control still work.", icon="🛑")
        view = None
    except ValueError as error:
        st.error(f"Cannot sweep: {literal(error)}. Change the control named above; everything else is kept.")
        view = None

    shown = None
    if view is not None:
        shown = cached_shown((_key(state), state.overlay))
        show_figure(shown.figure, key="main_figure", filename=spec.key)
        yours.graph_notes(spec.key)
        for x, note in view.undeclared:
            st.warning(f"Undeclared special point at x = {x:.6g}: {note}", icon="⚠️")
        for x, kind in view.not_detected:
            st.caption(f"Declared {kind} at x = {x:.6g} was not detected numerically at this resolution.")

        _points_and_metrics(view, shown.metrics)

    if loaded.is_loaded(spec.key):
        yours.checks(spec.key, state.resolved_params())
        backends_panel.panel(spec.key, state.lo, state.hi)
    state, compared = _compare_section(state)
    _finish(state, spec, view, shown, compared)


def _finish(
    state: url_state.ExploreState, spec: ops.OpSpec, view: View | None, shown: Shown | None, compared: Shown | None
) -> None:
    """Downloads and the URL."""
    query = url_state.to_query(state)
    if view is not None and shown is not None:
        result = view.result
        st.subheader("Downloads")
        col_csv, col_html = st.columns(2)
        col_csv.download_button(
            f"Sweep as CSV ({len(result):,} rows)",
            data=lambda: result.frame.to_csv(index=False),
            file_name=f"{spec.key}_sweep.csv",
            mime="text/csv",
            on_click="ignore",
        )
        col_html.download_button(
            "Download this view (HTML)",
            data=_view_file(state, page_link(query), view, shown, compared),
            file_name=f"{spec.key}_view.html",
            mime="text/html",
            on_click="ignore",
            help="One file that opens offline in any browser, for a teammate without this server: the interactive "
            "figures (plotly.js inside, about 5 MB), the link that reproduces this view, the checker's verdict and the "
            "special-points and metrics tables. Made when you click (the checks take a second or two).",
        )

    st.session_state[STATE_KEY] = state
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)


VIEW_CHECKS_SECONDS = 90.0  # a downloaded view waits this long for the checks (the browser waits 180 s for the file)


def _view_file(state: url_state.ExploreState, link: str, view: View, shown: Shown, compared: Shown | None):
    """The "Download this view" file of this view, as a function of no arguments: st.download_button calls it on the
    click, in a thread of the server, so a rerun pays only for making the closure."""
    spec, params = state.spec, state.resolved_params()  # the page's op (a loaded function's view has a spec of its own)

    def build() -> str:
        settings = ", ".join(f"{name} = {value:g}" for name, value in params.items())
        subtitle = (
            f"{settings + ' · ' if settings else ''}x from {state.lo:g} to {state.hi:g}, {state.n:,} points, {state.dtype}, "
            f"upstream gradient dy = {state.upstream:g}"
        )
        charts = [view_html.Chart("Forward, true and custom gradient", shown.figure.to_dict(), spec.key)]
        tables = [
            view_html.Table(
                "Special points", display_table(view.points),
                "" if len(view.points) else "No special points in this range: forward and gradients are smooth here.",
            ),
            view_html.Table("Metrics", shown.metrics.to_pandas()),
        ]  # fmt: skip
        if compared is not None:
            charts.append(view_html.Chart("Compare", compared.figure.to_dict(), f"{spec.key}_compare"))
            tables.append(view_html.Table("Compared: metrics", compared.metrics.to_pandas()))
        return view_html.view_html(
            f"{spec.title} ({spec.key}) · Gradient Explorer", link, charts, tables,
            verdict=_verdict(spec.key, params), subtitle=subtitle, saved_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        )  # fmt: skip

    return build


@functools.lru_cache(maxsize=MAX_CACHED_SWEEPS)
def _builtin_checks(key: str, params: tuple[tuple[str, float], ...]) -> tuple:
    from explorer.checker import runner

    return tuple(runner.check(key, **dict(params)))


def _verdict(key: str, params: dict[str, float]) -> view_html.Verdict:
    """The checker's verdict on op ``key`` at ``params`` for a downloaded view (never raises): a built-in op checked
    here (about a second, once per op and parameters); a loaded op's checks from the background worker, which
    the page has asked for already, waiting at most :data:`VIEW_CHECKS_SECONDS`."""
    shown = ", ".join(f"{name} = {value:g}" for name, value in params.items())
    what = f"{key}{f' at {shown}' if shown else ''}"
    try:
        if loaded.is_loaded(key):
            future = loaded.checks(key, params)
            if future.cancelled():  # another session's request for other parameters cancelled it: ask again
                future = loaded.checks(key, params)
            results = future.result(timeout=VIEW_CHECKS_SECONDS)
        else:
            results = _builtin_checks(key, tuple(sorted(params.items())))
    except concurrent.futures.TimeoutError:
        return view_html.Verdict(note=f"The checks of {what} had not finished {VIEW_CHECKS_SECONDS:g} s after the click.")
    except Exception as error:  # noqa: BLE001 - the file is still made, saying why it has no verdict
        return view_html.Verdict(note=f"The checks of {what} could not run: {type(error).__name__}: {error}")
    return view_html.Verdict(
        tuple(results),
        f"The gradient checker on {what}, as python -m explorer verify runs it (a warning is not a failure).",
    )
