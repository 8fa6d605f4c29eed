"""Explore page: sweep one op, see forward, true and custom gradient, compare, download.

The canonical state is an :class:`explorer.state.ExploreState` in ``st.session_state``; widgets
are seeded from it (so values survive a trip to another page, where Streamlit drops widget
state) and the URL is rewritten from it on every run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd
import streamlit as st

import ops
from explorer import loaded
from explorer import state as url_state
from explorer.explore import figures
from explorer.explore.measures import COLUMNS as METRIC_COLUMNS
from explorer.explore.measures import metrics_records
from explorer.explore.points import display_columns
from explorer.explore.sweeps import Sweep
from explorer.ui import yours
from explorer.ui.widgets import ReadyFigure, arrow_table, literal, show_figure, show_formulas

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


def _on_op_change() -> None:
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
    why = spec.why.replace("*", "\\*") or "None documented (a docstring would be one; the vs_autodiff check warns)."  # formulas like pi*alpha*x are text, not markdown emphasis
    st.info(f"**Why.** {why}\n\n**From.** {spec.reference}")


def _compare_section(state: url_state.ExploreState) -> url_state.ExploreState:
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
        runs = [(key, {}) for key in chosen]
        labels = list(chosen)
    else:
        if not spec.params:
            st.caption(f"`{spec.key}` has no parameters: compare several ops instead.")
            return replace(state, compare="param")
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
        return state
    try:
        resolved = tuple((key, tuple(sorted(loaded.get(key).resolve(p).items()))) for key, p in runs)
        figure, table = cached_compare((resolved, tuple(labels), (state.lo, state.hi, state.n, state.dtype, state.upstream)))
    except ValueError as error:
        st.error(f"Cannot compare: {literal(error)}")
        return state
    col_figure, col_table = st.columns([3, 2])
    with col_figure:
        show_figure(figure, key="compare_figure")
    with col_table:
        st.dataframe(table, hide_index=True)
    return state


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

    try:
        view = cached_view(_key(state))
    except loaded.UserOpError as error:
        st.error(f"**Your op failed.** {literal(error)}. Other ops and every control still work.", icon="🛑")
        view = None
    except ValueError as error:
        st.error(f"Cannot sweep: {literal(error)}. Change the control named above; everything else is kept.")
        view = None

    if view is not None:
        shown = cached_shown((_key(state), state.overlay))
        figure = shown.figure
        show_figure(figure, key="main_figure", config={"displaylogo": False})
        yours.graph_notes(spec.key)
        for x, note in view.undeclared:
            st.warning(f"Undeclared special point at x = {x:.6g}: {note}", icon="⚠️")
        for x, kind in view.not_detected:
            st.caption(f"Declared {kind} at x = {x:.6g} was not detected numerically at this resolution.")

        st.subheader("Special points")
        if view.points.empty:
            st.caption("No special points in this range: forward and gradients are smooth here.")
        else:
            st.dataframe(view.shown_table, hide_index=True)
        st.subheader("Metrics")
        st.dataframe(shown.metrics, hide_index=True)

    if loaded.is_loaded(spec.key):
        yours.checks(spec.key, state.resolved_params())
    state = _compare_section(state)

    if view is not None:
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
            "Figure as standalone HTML",
            data=lambda: figures.figure_html(figure.spec),
            file_name=f"{spec.key}_figure.html",
            mime="text/html",
            on_click="ignore",
        )

    st.session_state[STATE_KEY] = state
    query = url_state.to_query(state)
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)
