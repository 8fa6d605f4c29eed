"""Runs page: the training runs the watch callback recorded in the server's runs folder (``--runs``, default
``./runs``), where each watched layer's real inputs sit on its op's surrogate, and how that moves while it trains.

The canonical state is a :class:`explorer.state.runs.RunsState` in ``st.session_state``, read from the URL once per
session; widgets are seeded from it and their callbacks write it back, and the URL is rewritten from it. The list
and the run's view are fragments that refresh themselves (``run_every``) while something may change: the list
always, a run's view while the run is live. Every read of a run goes through :mod:`explorer.watch.run_folder`
(which keeps names inside the runs folder) and is cached by the run's version (its files' names and mtimes), and
reads only the rows shown: one step's rows, one layer's rows at a bounded set of steps.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

import ops
from explorer import serve
from explorer.explore import view_html
from explorer.runs import figures as run_figures
from explorer.runs import links
from explorer.runs.what_if import Histogram, what_if
from explorer.state import runs as runs_state
from explorer.state.runs import RunsState
from explorer.ui import sign_in
from explorer.ui.widgets import ReadyFigure, literal, page_link, show_figure
from explorer.watch import run_folder
from explorer.watch.run_folder import Run, RunNameError

STATE_KEY = "runs.state"
NOTICES_KEY = "runs.notices"
LAST_STEPS_KEY = "runs.steps"  # the recorded steps the step slider last showed (its callback snaps to them)
REFRESH_SECONDS = 2.0  # the list and a live run's view look for new records this often
MAX_SERIES_STEPS = 400  # an over-steps figure shows at most this many steps, evenly spread (and the chosen one)
MAX_DEPTH_SERIES_STEPS = 120  # per layer, in the gradient-norm-over-steps panel
SWEEP_POINTS = 2001
STATE_WORDS = {
    "live": "live (being written)",
    "finished": "finished",
    "stopped": "stopped (on purpose)",
    "stopped before its end": "stopped before its end (its writer stopped recording)",
}
SHARE_COLUMNS = ("zero_grad_share", "special_share", "below_share", "above_share")
OVER_STEPS_COLUMNS = ("step", *SHARE_COLUMNS, "mismatch_cosine", "mismatch_norm_ratio", "firing_rate", "flip_ratio")


# -- reads (cached by the run's version: a new record makes a new key) -------------------------------------
def runs_root() -> Path:
    return serve.runs_folder()


def _listing_stamp(root: Path) -> tuple:
    """What changes when the list of runs may: the folder's entries, each one's info and heartbeat times, and the
    time in LIVE_SECONDS/4 slices (a run stops being live with no file changing)."""
    stamps = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return ((), 0)
    for entry in entries:
        if entry.is_symlink():  # never listed (run_folder.list_runs), so never looked through
            continue
        try:
            stamps.append((entry.name, *(_mtime(entry / name) for name in (run_folder.INFO_FILE, run_folder.HEARTBEAT_FILE))))
        except OSError:
            stamps.append((entry.name, 0, 0))
    return tuple(stamps), int(time.time() // (run_folder.LIVE_SECONDS / 4))


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


@st.cache_data(max_entries=16, show_spinner=False)
def _cached_listing(root: str, stamp: tuple) -> tuple[list, list]:
    return run_folder.list_runs(root)


def listing(root: Path) -> tuple[list[run_folder.RunSummary], list[tuple[str, str]]]:
    return _cached_listing(str(root), _listing_stamp(root))


@st.cache_data(max_entries=256, show_spinner=False)
def _cached_read(
    root: str, name: str, version: str, table: str, columns: tuple[str, ...] | None, steps_key: str | None,
    layers: tuple[str, ...] | None, _steps: tuple[int, ...] | None,
) -> tuple[pd.DataFrame, list[tuple[str, str]]]:  # fmt: skip
    """Rows of a run's table; ``version`` and ``steps_key`` are digests of the run's version and of ``_steps`` (which
    Streamlit does not hash: hashing hundreds of steps on every lookup cost more than the lookup)."""
    read = Run(root, name).read(table, columns, steps=_steps, layers=layers)
    return read.frame, read.problems


@st.cache_data(max_entries=32, show_spinner=False)
def _cached_steps(root: str, name: str, version: str) -> tuple[list[int], list[tuple[str, str]]]:
    read = Run(root, name).read("steps", ["step"])
    steps = sorted({int(s) for s in read.frame["step"]}) if len(read.frame) else []
    return steps, read.problems


def _digest(value: object) -> str:
    return hashlib.blake2b(repr(value).encode(), digest_size=12).hexdigest()


class RunReader:
    """One run as the page reads it during one script run: its version taken once, every read cached by it, and
    every unreadable part collected in :attr:`problems` (file name, reason) for the page to name."""

    def __init__(self, root: Path, name: str):
        self.run = Run(root, name)
        self.root, self.name = str(root), name
        self.version = _digest(self.run.version())  # changes with every new part, info or heartbeat
        self.problems: dict[str, str] = {}

    def read(self, table: str, columns: Sequence[str] | None = None, *, steps=None, layers=None) -> pd.DataFrame:
        chosen = None if steps is None else tuple(int(s) for s in steps)
        frame, problems = _cached_read(
            self.root, self.name, self.version, table, None if columns is None else tuple(columns),
            None if chosen is None else _digest(chosen), None if layers is None else tuple(layers), chosen,
        )  # fmt: skip
        self.problems.update(problems)
        return frame

    def steps(self) -> list[int]:
        steps, problems = _cached_steps(self.root, self.name, self.version)
        self.problems.update(problems)
        return steps


def spread_steps(steps: Sequence[int], limit: int) -> list[int]:
    """At most ``limit`` of ``steps`` (sorted), evenly spread, the first and the last kept."""
    if len(steps) <= limit:
        return list(steps)
    index = np.unique(np.linspace(0, len(steps) - 1, limit).round().astype(int))
    return [int(steps[i]) for i in index]


def nearest_step(steps: Sequence[int], wanted: int) -> int:
    """The recorded step nearest ``wanted`` (the earlier one on a tie)."""
    array = np.asarray(steps)
    return int(array[int(np.argmin(np.abs(array - wanted)))])


# -- state <-> widgets ------------------------------------------------------------------------------------------
def _initial_state() -> RunsState:
    if STATE_KEY not in st.session_state:
        query = {key: st.query_params.get_all(key) for key in st.query_params}
        state, notices = runs_state.runs_from_query(query)
        st.session_state[STATE_KEY] = state
        st.session_state[NOTICES_KEY] = notices
    return st.session_state[STATE_KEY]


def _state() -> RunsState:
    return st.session_state[STATE_KEY]


def _set_state(state: RunsState) -> None:
    st.session_state[STATE_KEY] = state


def _notice(text: str) -> None:
    notices = st.session_state.setdefault(NOTICES_KEY, [])
    if text not in notices:
        notices.append(text)


def _changed(state: RunsState) -> None:
    """A control moved: the new state, and the notices about the URL it was opened with are done."""
    _set_state(state)
    st.session_state[NOTICES_KEY] = []


def _on_open(key: str) -> None:
    chosen = st.session_state[key] or ""
    if chosen and chosen == _state().run:
        return  # the run already shown: its view stays (a browser may report the list's choice again, late)
    _changed(RunsState(run=chosen))


def _on_layer() -> None:
    _changed(replace(_state(), layer=st.session_state["runs.w.layer"], what_if_op="", what_if_params={}))


def _on_compare() -> None:
    _changed(replace(_state(), compare=tuple(st.session_state["runs.w.cmp"])))


def _on_step() -> None:
    steps = st.session_state.get(LAST_STEPS_KEY) or []
    value = int(st.session_state["runs.w.step"])
    if not steps:
        return
    snapped = nearest_step(steps, value)
    _changed(replace(_state(), step=None if value >= steps[-1] or snapped == steps[-1] else snapped))


def _on_what_if_op() -> None:
    _changed(replace(_state(), what_if_op=st.session_state["runs.w.wi_op"], what_if_params={}))


def _on_what_if_param(op: str, name: str) -> None:
    state = _state()
    value = float(st.session_state[f"runs.w.wi.{op}.{name}"])
    _changed(replace(state, what_if_op=op, what_if_params={**state.what_if_params, name: value}))


def _write_url(state: RunsState) -> None:
    query = runs_state.runs_to_query(state)
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)


# -- the list ---------------------------------------------------------------------------------------------------
def _list_view() -> None:
    root = runs_root()
    summaries, problems = listing(root)
    if not summaries:
        if root.is_dir():
            st.info(
                f"No runs in the runs folder `{literal(root)}` yet. Record one with the watch callback "
                "(`model.fit(..., callbacks=[Watch(...)])`); it appears here within seconds.", icon="ℹ️",
            )  # fmt: skip
        else:
            st.info(f"The runs folder `{literal(root)}` does not exist yet: start the server with `--runs DIR`, or record a run.", icon="ℹ️")
    else:
        st.caption(f"{len(summaries)} run(s) in `{literal(root)}`, newest first; live runs refresh every {REFRESH_SECONDS:g} s.")
        st.dataframe(
            pd.DataFrame({
                "run": [s.name for s in summaries], "state": [STATE_WORDS.get(s.state, s.state) for s in summaries],
                "model": [s.model for s in summaries], "ops": [s.ops for s in summaries],
                "steps recorded": [s.steps for s in summaries], "started": [s.started for s in summaries],
                "by": [s.user or "" for s in summaries],
            }),  # fmt: skip
            hide_index=True, key="runs.list",
        )  # fmt: skip
        st.selectbox(
            "Open a run", [""] + [s.name for s in summaries], key="runs.w.open", on_change=_on_open, args=("runs.w.open",),
            format_func=lambda name: name or "choose a run",
        )  # fmt: skip
    for name, reason in problems:
        st.warning(f"Run folder `{literal(name)}` cannot be read: {literal(reason)}", icon="⚠️")


# -- a run -------------------------------------------------------------------------------------------------------
def _open_run(root: Path, name: str) -> RunReader | None:
    """The run, or None with a notice saying why it is not shown (a name outside the folder, no such run, a
    broken info.json). Never reads outside the runs folder: :func:`explorer.watch.run_folder.run_path`."""
    try:
        return RunReader(root, name)
    except RunNameError as error:
        _notice(f"{error}. Showing the list of runs.")
    except FileNotFoundError:
        _notice(f"There is no run '{name}' in the runs folder (it may have been deleted). Showing the list of runs.")
    except (OSError, ValueError) as error:
        _notice(f"Run '{name}' cannot be read ({error}). Showing the list of runs.")
    return None


def _layer_infos(info: dict) -> list[dict]:
    layers = info.get("layers")
    return [layer for layer in layers if isinstance(layer, dict) and "name" in layer] if isinstance(layers, list) else []


def _layer_names(reader: RunReader) -> list[str]:
    return [str(item["name"]) for item in _layer_infos(reader.run.info)]


def _sidebar(reader: RunReader, state: RunsState, names: list[str]) -> RunsState:
    layers = _layer_names(reader)
    with st.sidebar:
        st.header("Run")
        options = [""] + sorted(set(names) | {state.run})
        st.session_state["runs.w.run"] = state.run
        st.selectbox("Run", options, key="runs.w.run", on_change=_on_open, args=("runs.w.run",),
                     format_func=lambda name: name or "back to the list of runs")  # fmt: skip
        if layers:
            if state.layer not in layers:
                if state.layer:
                    _notice(f"Run '{state.run}' has no watched layer '{state.layer[:60]}'; showing '{layers[0]}'.")
                state = replace(state, layer=layers[0])
            st.session_state["runs.w.layer"] = state.layer
            st.selectbox("Watched layer", layers, key="runs.w.layer", on_change=_on_layer)
        others = [name for name in names if name != state.run]
        missing = [name for name in state.compare if name not in others]
        for name in missing:
            _notice(f"Cannot compare with '{name}': there is no such run in the runs folder.")
        state = replace(state, compare=tuple(name for name in state.compare if name in others))
        st.session_state["runs.w.cmp"] = list(state.compare)
        st.multiselect("Compare with", others, key="runs.w.cmp", on_change=_on_compare,
                       help="Other runs on the same axes, layer by layer (the layer at the same depth), aligned by step.",
                       max_selections=runs_state.MAX_COMPARED)  # fmt: skip
    return state


def _header(reader: RunReader) -> str:
    info, run_state = reader.run.info, reader.run.state()
    st.header(f"Run {reader.name}")
    words = [STATE_WORDS.get(run_state, run_state), f"model {info.get('model', '?')}"]
    if info.get("started"):
        words.append(f"started {info['started']}")
    if info.get("user"):
        words.append(f"by {info['user']}")
    if info.get("every"):
        words.append(f"a record every {info['every']} step(s), {info.get('probe_size', '?')} probe inputs")
    st.caption(" · ".join(literal(str(word)) for word in words))
    if info.get("stop_reason"):
        st.caption(f"Stopped because: {literal(info['stop_reason'])}")
    return run_state


def slider_top(first: int, last: int, every: int) -> int:
    """The step slider's top: the first of 1, 2, 5 x 10^k (a whole number of ``every`` past ``first``) at or
    above ``last``. Streamlit makes a new slider when its range changes (losing a move made while the view
    redraws), so a growing run moves the top a few times in its life, not at every record."""
    span = max(last - first, 1)
    nice = next(f * 10**k for k in range(20) for f in (1, 2, 5) if f * 10**k >= span)
    return first + -(-nice // every) * every


def _every(steps: list[int], info_every) -> int:
    """The slider's step: the run's recording interval (info ``every``) when it is a whole number >= 1, else 1."""
    return info_every if isinstance(info_every, int) and not isinstance(info_every, bool) and info_every >= 1 else 1


def _step_control(steps: list[int], state: RunsState, info_every=None, live: bool = False) -> int:
    """The step slider; the step shown (a recorded one: a value in between snaps to the nearest).

    While a run is live the slider reaches past its last record (:func:`slider_top`) and its right end means "the
    newest step": the page never moves the thumb as records arrive (a value the server sets while the browser
    still reports the old one reads as a move, which would stop the following)."""
    st.session_state[LAST_STEPS_KEY] = steps
    wanted = steps[-1] if state.step is None else state.step
    shown = nearest_step(steps, wanted)
    if state.step is not None and shown != state.step:
        _notice(f"Step {state.step:,} is not recorded in run '{state.run}'; showing the nearest recorded step, {shown:,}.")
    if len(steps) == 1 and not live:
        st.caption(f"One step recorded: step {shown:,}.")
        return shown
    every = _every(steps, info_every)
    top = slider_top(steps[0], steps[-1], every) if live else steps[-1]
    st.session_state["runs.w.step"] = top if state.step is None else shown
    newest = " · right end: the newest, followed as it records" if live else ""
    st.slider(
        f"Step (recorded: {steps[0]:,} to {steps[-1]:,}{newest})", steps[0], max(top, steps[0] + every), step=every,
        key="runs.w.step", on_change=_on_step, help="Snaps to the nearest recorded step.",
    )  # fmt: skip
    return shown


def _layer_info(reader: RunReader, layer: str) -> dict:
    return next((item for item in _layer_infos(reader.run.info) if str(item["name"]) == layer), {})


def _sweep_view(op: str, params: dict, lo: float, hi: float):
    """The Explore page's cached sweep and special points of ``op`` over [lo, hi] (None: not an op of this server)."""
    from explorer.ui import explore

    if op not in ops.names():
        return None
    resolved = tuple(sorted(ops.get(op).resolve(params).items()))
    return explore.cached_view((op, resolved, float(lo), float(hi), SWEEP_POINTS, "float32", 1.0))


@st.cache_resource(max_entries=64, show_spinner=False)
def _figure(key: tuple, _build) -> ReadyFigure:
    """A ReadyFigure of ``_build()`` (a spec), cached by ``key`` (what the figure shows: the run's version, the layer,
    the step, ...); ``_build`` is not hashed (its leading underscore), the key says everything."""
    return ReadyFigure(_build())


def _run_view(root: Path, name: str) -> None:
    """Everything of one run below the header: a fragment, refreshed every REFRESH_SECONDS while the run is live."""
    state = _state()
    reader = _open_run(root, name)
    if reader is None:
        _set_state(RunsState())
        st.rerun()
    try:
        _run_body(reader, state)
    except (FileNotFoundError, NotADirectoryError):
        _notice(f"Run '{name}' is no longer in the runs folder (deleted while shown). Showing the list of runs.")
        _set_state(RunsState())
        st.rerun()
    finally:
        _write_url(_state())


def _problems(reader: RunReader) -> None:
    for part, reason in sorted(reader.problems.items()):
        st.warning(
            f"Part `{literal(part)}` of run '{literal(reader.name)}' cannot be read ({literal(reason)}); the view shows the "
            "rows of the parts that are whole.", icon="⚠️",
        )  # fmt: skip


def _run_body(reader: RunReader, state: RunsState) -> None:
    layers = _layer_names(reader)
    if layers and state.layer not in layers:
        # the sidebar picks the layer in a whole-page run; a run of this fragment alone that finds none picked (the
        # run listed its layers since, or a callback reset the state) shows the sidebar's default, the first, and
        # reruns the page so that both agree
        _set_state(replace(state, layer=layers[0]))
        st.rerun(scope="app")
    steps = reader.steps()
    layer = state.layer
    layer_info = _layer_info(reader, layer)
    if not steps:
        st.info("No step recorded yet: the view appears with the first record.", icon="⏳")
        _problems(reader)
        return
    step = _step_control(steps, state, reader.run.info.get("every"), live=reader.run.state() == "live")
    at_step = reader.read("layers", steps=[step])
    histogram_rows = reader.read("histograms", steps=[step], layers=[layer])
    row = at_step[at_step["layer"] == layer].iloc[0].to_dict() if len(at_step) and layer in set(at_step["layer"]) else {}
    spread = spread_steps(steps, MAX_SERIES_STEPS)  # not the step shown: a step slider move re-reads none of it
    over = reader.read("layers", [c for c in OVER_STEPS_COLUMNS], steps=spread, layers=[layer])
    depth_steps = spread_steps(steps, MAX_DEPTH_SERIES_STEPS)
    depth_over = reader.read("layers", ["step", "layer", "depth", "grad_norm"], steps=depth_steps)
    loss = reader.read("steps", ["step", "loss"], steps=spread)
    shown: dict[str, dict] = {}

    st.subheader(f"{layer} at step {step:,}")
    histogram = Histogram.from_row(histogram_rows.iloc[0].to_dict()) if len(histogram_rows) else None
    op, params = layer_info.get("op"), dict(layer_info.get("params") or {})
    view = None
    if histogram is not None and op:
        try:
            view = _sweep_view(op, params, histogram.lo, histogram.hi)
        except ValueError as error:
            st.warning(f"Cannot draw {literal(op)} at the recorded parameters: {literal(error)}", icon="⚠️")
    if histogram is None:
        st.caption(f"No histogram recorded for {literal(layer)} at step {step:,}.")
    elif view is None:
        st.caption(f"{literal(layer)} uses {'a team op this server did not load' if op else 'no op of the catalogue'}: the histogram alone.")
        spec = run_figures.what_if_spec(histogram, [], step=step, layer=layer)
        shown["layer"] = spec
        show_figure(_figure((reader.version, "hist", layer, step), lambda: spec), key="runs.layer_figure")
    else:
        clip_bounds = layer_info.get("clip_bounds")
        key = (reader.version, "layer", layer, step)
        figure = _figure(key, lambda: run_figures.layer_figure_spec(
            view.result, view.points, histogram, row, step=step, layer=layer, clip_bounds=clip_bounds))  # fmt: skip
        shown["layer"] = figure.spec
        show_figure(figure, key="runs.layer_figure", filename=f"{reader.name}_{layer}_step{step}")
    if row:
        _shares_line(row)
        _explore_link(op, params, row)

    st.subheader("Over steps")
    figure = _figure((reader.version, "over", layer, _digest(spread)), lambda: run_figures.over_steps_spec(over, layer=layer))
    shown["over"] = figure.spec
    show_figure(figure, key="runs.over_steps", filename=f"{reader.name}_{layer}_over_steps")
    at = at_step[["layer", "depth", "grad_norm"]] if len(at_step) else at_step
    figure = _figure((reader.version, "depth", step, _digest(depth_steps)),
                     lambda: run_figures.gradient_depth_spec(at, depth_over, step=step))  # fmt: skip
    shown["depth"] = figure.spec
    show_figure(figure, key="runs.depth", filename=f"{reader.name}_gradient_depth")
    figure = _figure((reader.version, "loss", _digest(spread)), lambda: run_figures.loss_spec(loss))
    shown["loss"] = figure.spec
    show_figure(figure, key="runs.loss", filename=f"{reader.name}_loss")

    if histogram is not None:
        shown["what_if"] = _what_if(histogram, op, params, row, step, layer)
    compared = _compare(reader, state, layer_info)
    if compared is not None:
        shown["compare"] = compared
    _problems(reader)
    _downloads(reader, state, step, layer, at_step, shown)


def _shares_line(row: dict) -> None:
    text = run_figures.shares_text(row)
    extra = []
    for column, label in (("firing_rate", "firing rate"), ("flip_ratio", "flip ratio"), ("grad_norm", "gradient norm")):
        value = row.get(column)
        if value is not None and np.isfinite(float(value)):
            extra.append(f"{label} {float(value):.4g}")
    st.markdown(f"**Recorded at this step:** {literal(' · '.join(filter(None, [text, *extra])))}")


def _explore_link(op: str | None, params: dict, row: dict) -> None:
    query = links.explore_query(op, params, float(row.get("p0_1", np.nan)), float(row.get("p99_9", np.nan))) if op else None
    if query is None:
        st.caption("This layer's op is not one this server knows: no Explore view of it.")
        return
    url = links.explore_url(page_link({}, "runs"), query)
    st.link_button(
        "Open this layer in Explore", url, icon=":material/insights:",
        help="Explore with the layer's op, its parameters and the sweep range set to the inputs' 0.1 to 99.9 % range.",
    )  # fmt: skip


def _what_if(histogram: Histogram, op: str | None, params: dict, row: dict, step: int, layer: str) -> dict:
    st.subheader("What if, without retraining")
    st.markdown(
        "The **same recorded inputs** of this layer at this step **under another backward**: another op or parameter "
        "value. This is not a new training run: with that backward the network would have trained differently, and "
        "its inputs would have moved."
    )
    state = _state()
    names = ops.names()
    default_op = op if op in names else names[0]
    chosen = state.what_if_op or default_op
    st.session_state["runs.w.wi_op"] = chosen
    col_op, col_params = st.columns([1, 2])
    col_op.selectbox("Backward (op)", names, key="runs.w.wi_op", on_change=_on_what_if_op)
    spec = ops.get(chosen)
    base = params if chosen == op else {}
    values = {**spec.defaults(), **{k: v for k, v in base.items() if k in spec.param_names}, **state.what_if_params}
    with col_params:
        for param in spec.params:
            key = f"runs.w.wi.{chosen}.{param.name}"
            value = min(max(float(values[param.name]), param.low), param.high)
            st.session_state[key] = int(value) if param.integer else value
            if param.integer:
                st.slider(param.name, int(param.low), int(param.high), step=1, key=key,
                          on_change=_on_what_if_param, args=(chosen, param.name))  # fmt: skip
            else:
                st.slider(param.name, float(param.low), float(param.high), step=_step_of(param), key=key,
                          on_change=_on_what_if_param, args=(chosen, param.name), help=param.help)  # fmt: skip
            values[param.name] = float(st.session_state[key])
    results = []
    try:
        if op in names:
            results.append(what_if(histogram, op, params))
        results.append(what_if(histogram, chosen, {name: values[name] for name in spec.param_names}))
    except ValueError as error:
        st.warning(f"What-if not computed: {literal(error)}", icon="⚠️")
    table = pd.DataFrame({
        "backward": [("recorded: " if i == 0 and op in names else "what if: ") + r.label for i, r in enumerate(results)],
        "zero-gradient share": [r.zero_share for r in results],
        "expected gradient mass": [r.mass for r in results],
        "outside the histogram": [r.outside_share for r in results],
    })  # fmt: skip
    st.dataframe(table, hide_index=True, key="runs.what_if_table",
                 column_config={c: st.column_config.NumberColumn(format="%.4f") for c in table.columns[1:]})  # fmt: skip
    recorded = row.get("zero_grad_share")
    st.caption(
        "Each bin's inputs get g at the bin centre (a bin across a boundary counts on its centre's side); the "
        "expected gradient mass is Σ count·|g(centre)| / total."
        + (f" The run recorded an exact zero-gradient share of {100 * float(recorded):.3g} % at this step." if recorded is not None and np.isfinite(float(recorded)) else "")
    )  # fmt: skip
    spec_dict = run_figures.what_if_spec(histogram, results, step=step, layer=layer)
    show_figure(ReadyFigure(spec_dict), key="runs.what_if", filename=f"{layer}_what_if")
    st.session_state["runs.what_if_rows"] = table
    return spec_dict


def _step_of(param: ops.Param) -> float:
    raw = (param.high - param.low) / 500
    exponent = 10 ** int(f"{raw:e}".split("e")[1])
    return next((f * exponent for f in (1, 2, 5, 10) if raw <= f * exponent), 10 * exponent)


def _compare(reader: RunReader, state: RunsState, layer_info: dict) -> dict | None:
    if not state.compare:
        return None
    depth = int(layer_info.get("depth", 0) or 0)
    st.subheader("Runs compared")
    entries = []
    for name in (reader.name, *state.compare):
        other = reader if name == reader.name else _open_run(Path(reader.root), name)
        if other is None:
            continue
        same = next((item for item in _layer_infos(other.run.info) if int(item.get("depth", -1)) == depth), None)
        steps = other.steps()
        spread = spread_steps(steps, MAX_SERIES_STEPS)
        rows = other.read("layers", ["step", "zero_grad_share", "grad_norm"], steps=spread,
                          layers=[str(same["name"])]) if same else pd.DataFrame()  # fmt: skip
        if same is None:
            st.caption(f"Run {literal(name)} has no watched layer at depth {depth}: its loss only.")
        loss = other.read("steps", ["step", "loss"], steps=spread)
        layer_op = f"{same.get('op') or same.get('title', '?')} {_params_text(same.get('params') or {})}" if same else ""
        entries.append((f"{name}: {layer_op}".strip(), rows, loss))
        reader.problems.update({f"{name}: {part}": why for part, why in other.problems.items()} if other is not reader else {})
    spec = run_figures.compare_spec(entries, depth=depth)
    show_figure(ReadyFigure(spec), key="runs.compare", filename=f"{reader.name}_compare")
    return spec


def _params_text(params: dict) -> str:
    return "(" + ", ".join(f"{k} = {v:g}" for k, v in params.items() if isinstance(v, (int, float))) + ")" if params else ""


def _downloads(reader: RunReader, state: RunsState, step: int, layer: str, at_step: pd.DataFrame, shown: dict) -> None:
    st.subheader("Downloads")
    col_table, col_csv, col_parquet, col_html = st.columns([1, 1, 1, 1])
    table = col_table.selectbox("Table", run_folder.TABLES, key="runs.w.table")
    run = reader.run
    col_csv.download_button(
        f"{table} as CSV", data=lambda: run.read(table).frame.to_csv(index=False), file_name=f"{reader.name}_{table}.csv",
        mime="text/csv", on_click="ignore", key="runs.csv",
    )  # fmt: skip
    col_parquet.download_button(
        f"{table} as Parquet", data=lambda: _parquet_bytes(run.read(table).frame), file_name=f"{reader.name}_{table}.parquet",
        mime="application/vnd.apache.parquet", on_click="ignore", key="runs.parquet",
    )  # fmt: skip
    link = page_link(runs_state.runs_to_query(replace(state, step=step)), "runs")
    col_html.download_button(
        "Download this view (HTML)", data=_view_file(reader.name, link, step, layer, at_step, shown),
        file_name=f"{reader.name}_{layer}_step{step}.html", mime="text/html", on_click="ignore", key="runs.html",
        help="One file that opens offline in any browser: the figures of this view, the link that reproduces it and "
        "the layers' rows at this step.",
    )  # fmt: skip


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    sink = io.BytesIO()
    frame.to_parquet(sink, index=False)
    return sink.getvalue()


CHART_HEADINGS = {
    "layer": "The layer's op and its inputs", "over": "Over steps", "depth": "Gradient norm against depth",
    "loss": "Loss", "what_if": "What if (the same inputs, another backward)", "compare": "Runs compared",
}  # fmt: skip


def _view_file(name: str, link: str, step: int, layer: str, at_step: pd.DataFrame, shown: dict):
    def build() -> str:
        charts = [view_html.Chart(CHART_HEADINGS[key], spec, f"{name}_{key}") for key, spec in shown.items()]
        tables = [view_html.Table(f"Watched layers at step {step:,}", at_step)]
        return view_html.view_html(
            f"Run {name}: {layer} at step {step:,} · Gradient Explorer", link, charts, tables,
            subtitle=f"run {name}, layer {layer}, step {step:,}", saved_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        )  # fmt: skip

    return build


# -- the page -----------------------------------------------------------------------------------------------------
def _list_fragment() -> None:
    sign_in.end_if_expired()  # a timer tick skips the page's gate
    _list_view()
    if _state().run:  # a run was opened from the list: the whole page shows it
        st.rerun(scope="app")


def _run_fragment(root: Path, name: str, live: bool) -> None:
    sign_in.end_if_expired()  # a timer tick skips the page's gate
    _run_view(root, name)
    if live and _state().run == name and _still_live(root, name) is False:
        st.rerun(scope="app")  # the run ended: the whole page says so, and the timer stops


def _still_live(root: Path, name: str) -> bool | None:
    try:
        return Run(root, name).state() == "live"
    except (OSError, ValueError):
        return None


def page() -> None:
    state = _initial_state()
    st.title("Runs")
    st.caption(
        "Training runs recorded by the watch callback: where each watched layer's real inputs sit on its op's "
        "surrogate, the shares that get no gradient, and how that moves while the network trains."
    )
    notices_box = st.container()
    root = runs_root()
    if state.run:
        summaries, _ = listing(root)
        reader = _open_run(root, state.run)
        if reader is None:
            state = RunsState()
            _set_state(state)
        else:
            names = [summary.name for summary in summaries]
            state = _sidebar(reader, state, names)
            _set_state(state)
            run_state = _header(reader)
            live = run_state == "live"
            st.fragment(run_every=REFRESH_SECONDS if live else None)(_run_fragment)(root, state.run, live)
    if not _state().run:
        st.fragment(run_every=REFRESH_SECONDS)(_list_fragment)()
        _write_url(_state())
    with notices_box:
        for notice in st.session_state.get(NOTICES_KEY, []):
            st.warning(literal(notice), icon="⚠️")
