"""Train page: one tiny Keras model per run, same data, same initial weights, same batches.

Training runs inside an ``st.fragment`` that re-executes every second while a session is
training: each tick trains every run for a short chunk of epochs and updates the progress; the
live charts follow at their own pace (:data:`LIVE_LOSS_SECONDS`, :data:`LIVE_LAYER_STEPS`), so the
rest of the page, and other users' pages, stay usable. The training session lives in this user's
``st.session_state`` only.

Two rules keep the page right under load (several users, slow reruns):

* Start and Step act on the controls as they are in the run the click triggers, never on values
  bound into a callback at the previous render: their callbacks only record the request, and the
  page body carries it out after it has read every control.
* What the training view shows is derived from the session on every run of the fragment, full or
  partial: progress, charts and, once training is over, the results (while a run trains, a chart
  may be the one sent a tick earlier: see :func:`_live_figure`; once it stops, they are fresh). When the last tick ends, the
  page still asks for a full rerun (to re-enable the buttons and stop the timer), but the results
  no longer depend on that rerun reaching the browser: a timer tick that lands after it draws
  them too.

Presets (``explorer.train.presets``, also ``/train?preset=<key>``) set every control through the widgets'
session-state keys before the widgets render; a live preset (``depth``) then starts its session like
Start does, the others run their preset function (cached once per server, see the note above
``_yin``) and show its tables and figures. The preset's box is filled after the controls are drawn,
so the page is usable while a preset computes. The URL is read for ``preset`` only
(:func:`explorer.state.preset_from_query`); an unknown value gives a notice, keeps every control and
run, and is dropped from the URL.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd
import streamlit as st

import ops
from explorer import loaded
from explorer import state as url_state
from explorer.train import preset_figures, presets, tasks
from explorer.train import trainer as train
from explorer.train.figures import layer_norm_figure_spec, loss_figure_spec, prediction_figure, run_colour
from explorer.ui.widgets import ReadyFigure, literal, page_link, show_chart, show_figure

SESSION_KEY = "train.session"
CONFIG_KEY = "train.config"
RUNNING_KEY = "train.running"
TARGET_KEY = "train.target_epochs"
ERROR_KEY = "train.error"
REQUEST_KEY = "train.request"  # "start" or "step", set by a button's callback, done by the page body
PREDICTIONS_KEY = "train.predictions"  # (session id, epoch, predictions): drawn once per finished state
PRESET_KEY = "train.preset"  # the preset selectbox ("" = none)
URL_PRESET_KEY = "train.url_preset"  # the ?preset= value already acted on, so a rerun does not re-apply it
PRESET_NOTICE_KEY = "train.preset_notice"
YIN_STEPS_KEY, YIN_LR_KEY = "train.yin_steps", "train.yin_lr"
MONTE_CARLO_KEY = "train.yin_monte_carlo"
YIN_PAGE_MAX_STEPS = 10_000  # the closed-form loop holds the GIL: keep a page's request short for everyone else
RUNS_FROM_PRESET_KEY = "train.runs_from_preset"  # the next render keeps the runs a preset just set
DEFAULT_SETUP = presets.TrainSetup()
TICK_SECONDS = 1.0
TRAIN_SECONDS_PER_TICK = 0.5  # shared by everyone training at once: the server stays responsive
# Unset: a tick trains for its time budget alone. The browser tests cap it, so that a live training spans a
# known number of ticks (and live chart updates) however fast the machine is.
EPOCHS_PER_TICK_ENV = "GRADIENT_EXPLORER_TRAIN_EPOCHS_PER_TICK"
# While training, the charts change less often than the progress bar. Streamlit draws a chart whose
# spec changed afresh (its element id hashes the spec), ~50 ms of the browser's CPU per chart; five
# users training on the server's machine (the benchmark) left a slider move waiting for the CPU.
LIVE_LOSS_SECONDS = 1.9  # the loss chart is redrawn at most this often (every other tick)
LIVE_LAYER_STEPS = 20  # the gradient-flow chart moves on every 1/20 of the target epochs
LIVE_FIGURES = ("loss", "layers")  # the names _live_figure keeps them under
MAX_RUNS = 6
OPTIMIZER_LABELS = {"adam": "Adam", "sgd": "SGD", "rmsprop": "RMSprop", "adagrad": "Adagrad"}
STATUS_BADGES = {
    "ok": ":green-badge[ok]",
    "diverged": ":red-badge[diverged]",
    "no_gradient": ":orange-badge[no gradient]",
    "stopped": ":gray-badge[stopped]",
    "failed": ":red-badge[failed]",
    "training": ":blue-badge[training]",
}
STATUS_HELP = {
    "no_gradient": "the first layer received an all-zero gradient: nothing before the op can learn",
    "diverged": "the loss became NaN, inf or exploded; training of this run stopped",
}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training session; a change means a new session."""

    task: str
    n: int
    noise: float
    width: int
    depth: int
    optimizer: str
    learning_rate: float
    batch_size: int | None
    seed: int
    runs: tuple[train.Run, ...]


def _user_op() -> ops.OpSpec | None:
    return url_state.editor_op(st.session_state.get(url_state.EDITOR_SOURCE_KEY))


def _default_runs() -> pd.DataFrame:
    explore_state = st.session_state.get("explore.state")
    op = explore_state.op if explore_state is not None else url_state.DEFAULT_OP
    return pd.DataFrame({"op": [op, op], "gradient": ["custom", "true"], "params": ["", ""]})


def _parse_params(spec: ops.OpSpec, text: str) -> dict[str, float]:
    """``"alpha=2, threshold=0.5"`` -> dict; ValueError names the bad item."""
    params: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"'{item.strip()}' should look like name=value (parameters of {spec.key}: {', '.join(spec.param_names) or 'none'})")
        try:
            params[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"'{item.strip()}': {value.strip()!r} is not a number") from None
    return params


def _runs_from_table(table: pd.DataFrame, user_op: ops.OpSpec | None) -> tuple[list[train.Run], list[str]]:
    runs, problems = [], []
    for number, row in enumerate(table.itertuples(index=False), start=1):
        key = row.op
        if not isinstance(key, str) or not key:
            problems.append(f"Run {number}: pick an op.")
            continue
        try:
            gradient = row.gradient if isinstance(row.gradient, str) and row.gradient else "custom"
            layer = loaded.current().layers.get(key)
            if layer is not None:  # your layer in place of the op (true mode: the function it calls)
                spec = None if layer.op_key is None else loaded.get(layer.op_key)
                params = row.params.strip() if isinstance(row.params, str) else ""
                if params:
                    raise ValueError(f"{key} is built with no arguments: leave its parameters empty")
                runs.append(train.Run(spec, None, gradient, layer=layer.layer_class))
                continue
            spec = user_op if user_op is not None and key == user_op.key else loaded.get(key)
            reason = loaded.untrainable(key) if loaded.is_loaded(key) else None
            if reason is not None:
                raise ValueError(f"{key} is unavailable for training: it {reason} (the Explore page draws it)")
            params = _parse_params(spec, row.params if isinstance(row.params, str) else "")
            run = train.Run(spec, params, gradient)
            unusable = loaded.problem(key, run.params) if loaded.is_loaded(key) else None
            if unusable is not None:  # probed first: a hung or broken op must not block this page's trainer
                raise ValueError(f"{unusable}; fix it and restart the server (the Explore page shows it too)")
            runs.append(run)
        except (KeyError, ValueError) as error:
            problems.append(f"Run {number}: {error.args[0] if error.args else error}")
    if len(runs) > MAX_RUNS:
        problems.append(f"At most {MAX_RUNS} runs are compared at once; the first {MAX_RUNS} are used.")
        runs = runs[:MAX_RUNS]
    return runs, problems


def _control_values(setup: presets.TrainSetup) -> dict:
    """Widget key -> value for every sidebar control of ``setup``."""
    return {
        "train.task": setup.task,
        "train.n": int(setup.n),
        "train.noise": float(setup.noise),
        "train.width": int(setup.width),
        "train.depth": int(setup.depth),
        "train.optimizer": setup.optimizer,
        "train.lr": float(setup.learning_rate),
        "train.full_batch": setup.batch_size is None,
        "train.batch_size": int(setup.batch_size or 64),
        "train.epochs": int(setup.epochs),
        "train.seed": int(setup.seed),
    }


def _config_of(setup: presets.TrainSetup) -> TrainConfig:
    """The session config the controls give once ``setup`` is applied: its runs go through the runs
    table as the page reads them, so the two compare equal."""
    runs, _ = _runs_from_table(_runs_table(setup.runs), None)
    return TrainConfig(
        task=setup.task, n=setup.n, noise=setup.noise, width=setup.width, depth=setup.depth, optimizer=setup.optimizer,
        learning_rate=setup.learning_rate, batch_size=setup.batch_size, seed=setup.seed, runs=tuple(runs),
    )


def _seed_controls() -> None:
    """Default values of the sidebar widgets, set through session state (the widgets take no ``value=``),
    so that a preset can set them too without Streamlit's "default value and Session State" warning."""
    for key, value in _control_values(DEFAULT_SETUP).items():
        st.session_state.setdefault(key, value)


def _controls(user_op: ops.OpSpec | None) -> tuple[TrainConfig | None, list[str], int]:
    _seed_controls()
    with st.sidebar:
        st.header("Data")
        task = st.selectbox("Task", tasks.names(), format_func=lambda name: tasks.get(name).title, key="train.task")
        st.caption(tasks.get(task).description)
        n = st.number_input("Points", min_value=tasks.MIN_POINTS, max_value=tasks.MAX_POINTS, step=64, key="train.n")
        noise = st.slider("Noise", 0.0, tasks.MAX_NOISE, step=0.01, key="train.noise")
        st.header("Model")
        width = st.slider("Hidden width", 1, train.MAX_WIDTH, key="train.width")
        depth = st.slider("Hidden layers", 1, train.MAX_DEPTH, key="train.depth")
        st.header("Optimiser")
        optimizer = st.selectbox(
            "Optimiser", list(train.OPTIMIZERS), format_func=lambda name: OPTIMIZER_LABELS.get(name, name), key="train.optimizer"
        )
        learning_rate = st.number_input(
            "Learning rate", min_value=1e-6, max_value=train.MAX_LEARNING_RATE, format="%g", key="train.lr"
        )
        full_batch = st.toggle("Full batch", key="train.full_batch")
        batch_size = None if full_batch else st.number_input("Batch size", 1, tasks.MAX_POINTS, key="train.batch_size")
        epochs = st.number_input("Epochs", min_value=1, max_value=train.MAX_EPOCHS, step=50, key="train.epochs")
        seed = st.number_input("Seed", min_value=0, max_value=2**31 - 1, key="train.seed")

    st.subheader("Runs to compare")
    st.caption(
        "Each run is an op, its parameters and a gradient mode. **custom** trains through the op's custom gradient; "
        "**true** trains through autodiff of the plain forward, so a step or sign passes no gradient and nothing before "
        "it can learn. Every model is `Input → [Dense → op] × depth → Dense`: a trainable layer must sit *before* the "
        "op, because a custom gradient changes nothing when nothing upstream of it trains."
    )
    yours = loaded.current()
    options = ops.names() + ([user_op.key] if user_op is not None else []) + list(yours.ops) + list(yours.layers)
    if "train.runs_table" not in st.session_state and not st.session_state.pop(RUNS_FROM_PRESET_KEY, False):
        st.session_state["train.runs_seed"] = _default_runs()
    table = st.data_editor(
        st.session_state["train.runs_seed"],
        key="train.runs_table",
        num_rows="dynamic",
        hide_index=True,
        width="stretch",
        column_config={
            "op": st.column_config.SelectboxColumn(
                "op",
                options=options,
                required=True,
                help="built-in ops, your editor op, and the functions and layers loaded from GRADIENT_EXPLORER_OPS "
                "(a layer is used in place of the op)",
            ),
            "gradient": st.column_config.SelectboxColumn("gradient", options=list(ops.GRADIENT_MODES), required=True, default="custom"),
            "params": st.column_config.TextColumn("parameters", help="e.g. alpha=4, threshold=0.5; empty for defaults"),
        },
    )
    unavailable = {key: loaded.untrainable(key) for key in yours.ops}
    unavailable = {key: reason for key, reason in unavailable.items() if reason is not None}
    if unavailable:
        st.caption(
            "Unavailable for training (offered in the op choice, refused with this reason): "
            + "; ".join(f"`{key}` {literal(reason)}" for key, reason in unavailable.items())
        )
    runs, problems = _runs_from_table(table, user_op)
    if not runs:
        problems.append("Add at least one run.")
        return None, problems, int(epochs)
    config = TrainConfig(
        task=task,
        n=int(n),
        noise=float(noise),
        width=int(width),
        depth=int(depth),
        optimizer=optimizer,
        learning_rate=float(learning_rate),
        batch_size=None if batch_size is None else int(batch_size),
        seed=int(seed),
        runs=tuple(runs),
    )
    return config, problems, int(epochs)


def _new_session(config: TrainConfig) -> train.Session | loaded.WorkerSession:
    """A session of these controls; one with a run of a loaded op or layer trains in the training worker
    (:class:`explorer.loaded.WorkerSession`), built-in ops train here."""
    setup = presets.TrainSetup(**{field.name: getattr(config, field.name) for field in fields(config)})
    if not loaded.needs_worker(config.runs):
        return setup.new_session()
    dataset = tasks.make(setup.task, n=setup.n, noise=setup.noise, seed=setup.seed)
    return loaded.WorkerSession(
        dataset, config.runs, width=setup.width, depth=setup.depth, optimizer=setup.optimizer,
        learning_rate=setup.learning_rate, batch_size=setup.batch_size, seed=setup.seed,
    )  # fmt: skip


def _ensure_session(config: TrainConfig) -> train.Session | None:
    if st.session_state.get(CONFIG_KEY) != config or st.session_state.get(SESSION_KEY) is None:
        try:
            st.session_state[SESSION_KEY] = _new_session(config)
        except ValueError as error:
            st.session_state[ERROR_KEY] = str(error)
            return None
        st.session_state[CONFIG_KEY] = config
        st.session_state[ERROR_KEY] = None
    return st.session_state[SESSION_KEY]


def _request(action: str) -> None:
    """Button callback: remember what was asked; :func:`_carry_out` does it with this run's controls."""
    st.session_state[REQUEST_KEY] = action


def _carry_out(config: TrainConfig | None, epochs: int) -> None:
    """Do the Start or Step asked for in this interaction, with the controls as this run read them.

    A callback's ``args`` are bound when the page last rendered, so a value typed just before the
    click (the click takes the focus and sends both in one interaction) would be lost there.
    """
    action = st.session_state.pop(REQUEST_KEY, None)
    if action is None or config is None:
        return
    if action == "start":
        st.session_state[SESSION_KEY] = None  # Start always begins from the initial weights
        if _ensure_session(config) is not None:
            st.session_state[TARGET_KEY] = epochs
            st.session_state[RUNNING_KEY] = True
    elif action == "step":
        st.session_state[RUNNING_KEY] = False
        session = _ensure_session(config)
        if session is not None and not session.finished:
            try:
                session.step(1)
            except ValueError as error:
                st.session_state[ERROR_KEY] = str(error)


def _on_stop() -> None:
    st.session_state[RUNNING_KEY] = False
    _leave_trainers()


def _on_reset() -> None:
    st.session_state[RUNNING_KEY] = False
    st.session_state[SESSION_KEY] = None
    for name in LIVE_FIGURES:  # they hold the discarded session (its models and data set)
        st.session_state.pop(f"train.live.{name}", None)
    st.session_state[CONFIG_KEY] = None
    st.session_state[ERROR_KEY] = None


# Which browser sessions are training right now (id -> time of their last tick). Only a count
# for sharing the CPU; the training state itself lives in each user's session_state.
_TRAINERS: dict[str, float] = {}
_TRAINERS_LOCK = threading.Lock()


def _training_budget() -> float:
    """Seconds this tick may train: TRAIN_SECONDS_PER_TICK split between everyone training now,
    so five people training on two cores still get answers to their slider moves."""
    me = st.session_state.setdefault("train.id", uuid.uuid4().hex)
    now = time.monotonic()
    with _TRAINERS_LOCK:
        _TRAINERS[me] = now
        for trainer, last in list(_TRAINERS.items()):
            if now - last > 4 * TICK_SECONDS:
                del _TRAINERS[trainer]
        count = len(_TRAINERS)
    return TRAIN_SECONDS_PER_TICK / count


def _leave_trainers() -> None:
    with _TRAINERS_LOCK:
        _TRAINERS.pop(st.session_state.get("train.id", ""), None)


def epochs_per_tick() -> int | None:
    """The most epochs one tick trains (``GRADIENT_EXPLORER_TRAIN_EPOCHS_PER_TICK``), None when unset."""
    text = os.environ.get(EPOCHS_PER_TICK_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{EPOCHS_PER_TICK_ENV}={text!r}; allowed: a whole number of epochs >= 1, or unset")
    return int(text)


def _train_tick(session: train.Session) -> None:
    """Train every run for this session's share of the tick (and at most :func:`epochs_per_tick` epochs);
    stop at the target epoch."""
    target = min(st.session_state.get(TARGET_KEY, train.DEFAULT_EPOCHS), train.MAX_EPOCHS)
    cap = epochs_per_tick()
    tick_target = target if cap is None else min(target, session.epoch + cap)
    epoch = session.train_to(tick_target, seconds=_training_budget())
    if epoch >= target or session.finished:
        st.session_state[RUNNING_KEY] = False
        _leave_trainers()


def _results_table(results: list[train.RunResult]) -> pd.DataFrame:
    rows = []
    for result in results:
        history = result.history
        last = history.iloc[-1] if len(history) else None
        rows.append(
            {
                "run": result.run.label,
                "status": result.status,
                "final loss": float(last["loss"]) if last is not None else math.nan,
                "accuracy": float(last["accuracy"]) if last is not None and "accuracy" in history else math.nan,
                "epochs": int(len(history)),
                "seconds": result.seconds,
                "steps/s": result.steps_per_second,
                "diverged at epoch": result.diverged_epoch,
            }
        )
    return pd.DataFrame(rows)


def _live_figure(name: str, inputs: tuple, max_age: float, build: Callable[[], dict]) -> ReadyFigure:
    """The figure ``build`` makes, or the one this browser session showed last under ``name`` if it was
    made from the same ``inputs`` (compared with ==; a training session by identity) less than
    ``max_age`` seconds ago: the same spec, so the browser keeps the chart it drew."""
    key = f"train.live.{name}"
    now = time.monotonic()
    shown = st.session_state.get(key)
    if shown is not None and shown[0] == inputs and now - shown[1] < max_age:
        return shown[2]
    figure = ReadyFigure(build())
    st.session_state[key] = (inputs, now, figure)
    return figure


def _training_view() -> None:
    """Progress, status, live loss chart and, once training is over, the results.

    Runs as a fragment; everything is derived from the session, so any run of it (a timer tick,
    or the full rerun asked for when training ends) shows the same thing for the same state, except
    that while a run trains its charts may be those of an earlier tick (:func:`_live_figure`).
    """
    session: train.Session | None = st.session_state.get(SESSION_KEY)
    if session is None:
        return
    was_running = st.session_state.get(RUNNING_KEY, False)
    if was_running:
        _train_tick(session)
    running = st.session_state.get(RUNNING_KEY, False)
    epoch, results = session.snapshot()  # consistent even if a superseded run is still training it
    target = max(1, st.session_state.get(TARGET_KEY, train.DEFAULT_EPOCHS))
    st.progress(min(1.0, epoch / target), text=f"epoch {epoch} of {target}")
    badges = []
    for index, result in enumerate(results):
        status = "training" if running and result.status == "ok" else result.status
        colour = run_colour(index)
        badges.append(f"<span style='color:{colour}'>■</span> {result.run.label} {STATUS_BADGES.get(status, status)}")
    st.markdown(" &nbsp; ".join(badges), unsafe_allow_html=True)
    log_y = st.session_state.get("train.log_y", False)
    labels = tuple(r.run.label for r in results)
    loss_chart = _live_figure(  # plain specs (no plotly validation): they are made on every tick
        "loss", (session, log_y, labels), LIVE_LOSS_SECONDS if running else 0.0,
        lambda: loss_figure_spec([r.history for r in results], list(labels), log_y=log_y),
    )  # fmt: skip
    show_figure(loss_chart, key="train.loss_chart")
    _gradient_flow_view(session, results, epoch, live_step=max(1, target // LIVE_LAYER_STEPS) if running else None)
    if was_running and not running:
        st.rerun(scope="app")  # re-enable the buttons and stop the timer; the results do not wait for it
    if not running and (epoch > 0 or any(r.status == "failed" for r in results)):  # a failure in the first chunk too
        _results_view(session, epoch, results)


def _ratio(value: float) -> str:
    if math.isnan(value):
        return "no gradient in the last layer"
    return "0 (no gradient reaches layer 1)" if value == 0 else f"{value:.3g}"


RATIO_LATEX = r"$\lVert \nabla_{W_1} L \rVert \,/\, \lVert \nabla_{W_D} L \rVert$"


def _preset_session(key: str) -> train.Session | None:
    """The current session if it is exactly preset ``key``'s setup (the user has not changed a control)."""
    session = st.session_state.get(SESSION_KEY)
    if session is None or st.session_state.get(CONFIG_KEY) != _config_of(presets.get(key).setup):
        return None
    return session


def _depth_sentence(table: pd.DataFrame) -> str:
    """What the depth preset's run shows: the measured first / last hidden-layer ratio per scale."""
    def per_layer(ratio: float, depth: int) -> str:
        return f" (×{ratio ** (1 / (depth - 1)):.2g} per layer)" if ratio > 0 and depth > 1 else ""

    at_init = ", ".join(
        f"{row['run']}: **{_ratio(row['first/last at init'])}**{per_layer(row['first/last at init'], row['depth'])}"
        for row in table.to_dict("records")
    )
    later = ", ".join(f"{row['run']}: {_ratio(row['first/last at now'])}" for row in table.to_dict("records"))
    epoch = int(table["epoch"].max())
    return (
        f"**This run shows** ({int(table['depth'].iloc[0])} hidden layers, ratio {RATIO_LATEX} of the first to the last "
        f"hidden layer's kernel gradient norm; below 1 the gradient shrinks on its way down, above 1 it grows, "
        f"by about the same factor per layer, so more depth means more of it): "
        f"at initialisation {at_init}; at epoch {epoch}: {later}."
    )


def _gradient_flow_view(
    session: train.Session, results: list[train.RunResult], epoch: int, live_step: int | None = None
) -> None:
    """Kernel gradient norm of every layer, per run, at initialisation and over training; for deep nets
    the measured first/last ratio (live: the depth preset's box states it once training is over).
    ``live_step``: while training, the chart shows epochs up to the last multiple of it."""
    if epoch == 0:
        return
    st.subheader("Gradient flow through depth")
    table = presets.gradient_flow_table(results)
    if len(table) and int(table["depth"].iloc[0]) > 1:
        ratios = "; ".join(
            f"{row['run']}: {_ratio(row['first/last at init'])} at initialisation, "
            f"{_ratio(row['first/last at now'])} at epoch {row['epoch']}"
            for row in table.to_dict("records")
        )
        st.markdown(f"**First / last hidden layer**, {RATIO_LATEX} ({int(table['depth'].iloc[0])} hidden layers): {ratios}.")
    labels = tuple(r.run.label for r in results)
    shown_epoch = epoch if live_step is None else max(1, epoch - epoch % live_step)
    layer_chart = _live_figure(
        "layers", (session, shown_epoch, labels), math.inf if live_step else 0.0,
        lambda: layer_norm_figure_spec([r.history for r in results], list(labels), epoch=shown_epoch),
    )  # fmt: skip
    show_figure(layer_chart, key="train.layer_chart")
    st.caption(
        "One panel per run; each line is one epoch (the legend gives the colour of each), solid at initialisation. "
        "A layer with exactly zero gradient cannot sit on the log scale: its point is left out (hover names it)."
    )


def _predictions(session: train.Session, epoch: int, results: list[train.RunResult]) -> list[train.GridPrediction]:
    """Each model on a grid, computed once per (session, epoch): late timer ticks redraw for free."""
    key = (id(session), epoch)
    cached = st.session_state.get(PREDICTIONS_KEY)
    if cached is None or cached[0] != key:
        if isinstance(session, loaded.WorkerSession):  # its models are in the training worker
            predictions = session.predictions(resolution=80)
        else:
            predictions = [train.predict_grid(result.model, session.dataset, resolution=80) for result in results]
        st.session_state[PREDICTIONS_KEY] = cached = (key, predictions)
    return cached[1]


def _results_view(session: train.Session, epoch: int, results: list[train.RunResult]) -> None:
    st.subheader("Results")
    st.dataframe(
        _results_table(results),
        hide_index=True,
        column_config={
            "final loss": st.column_config.NumberColumn(format="%.4g"),
            "accuracy": st.column_config.NumberColumn(format="%.3f"),
            "seconds": st.column_config.NumberColumn(format="%.2f"),
            "steps/s": st.column_config.NumberColumn(format="%.0f"),
        },
    )
    for result in results:
        if result.status in STATUS_HELP:
            st.warning(f"**{result.run.label}**: {STATUS_HELP[result.status]}.", icon="⚠️")
        if result.status == "failed":  # your op or layer raised while training; the other runs went on
            st.error(f"**{literal(result.run.label)}** failed while training: {literal(result.error)}", icon="🛑")
    dataset = session.dataset
    st.subheader("Decision boundaries" if dataset.input_dim == 2 else "Fitted curves")
    predictions = _predictions(session, epoch, results)
    show_chart(prediction_figure(predictions, [r.run.label for r in results], dataset), key="train.predictions")
    history = pd.concat([r.history.assign(run=r.run.label) for r in results], ignore_index=True)
    st.download_button(
        "History as CSV",
        data=lambda: history.to_csv(index=False),
        file_name=f"training_{dataset.name}.csv",
        mime="text/csv",
        on_click="ignore",
    )
    _view_download(dataset, epoch, results, predictions)


def _view_download(dataset: tasks.Dataset, epoch: int, results: list[train.RunResult], predictions: list) -> None:
    """"Download this view": the loss, gradient-flow and prediction figures, the results and the settings as one
    HTML file that opens offline (:func:`explorer.explore.view_html.view_html`), made when clicked."""
    from explorer.explore import view_html

    link = page_link(st.query_params.to_dict(), "train")
    config: TrainConfig | None = st.session_state.get(CONFIG_KEY)
    labels = [r.run.label for r in results]
    histories = [r.history for r in results]
    log_y = bool(st.session_state.get("train.log_y", False))

    def build() -> str:
        charts = [
            view_html.Chart("Loss", ReadyFigure(loss_figure_spec(histories, labels, log_y=log_y)).to_dict(), "training_loss"),
            view_html.Chart("Gradient flow through depth", ReadyFigure(layer_norm_figure_spec(histories, labels, epoch=epoch)).to_dict(), "gradient_flow"),
            view_html.Chart("Decision boundaries" if dataset.input_dim == 2 else "Fitted curves", prediction_figure(predictions, labels, dataset), "predictions"),
        ]  # fmt: skip
        tables = [view_html.Table("Results", _results_table(results), "Each run: op (gradient mode, parameters changed from the defaults) after its last epoch; every run started from the same weights and saw the same batches.")]
        if config is not None:
            settings = {
                "task": tasks.get(config.task).title, "points": config.n, "noise": config.noise,
                "hidden layers x width": f"{config.depth} x {config.width}", "optimiser": OPTIMIZER_LABELS.get(config.optimizer, config.optimizer),
                "learning rate": config.learning_rate, "batch size": config.batch_size or "full batch", "epochs trained": epoch, "seed": config.seed,
            }  # fmt: skip
            tables.append(view_html.Table("Settings", pd.DataFrame({"setting": list(settings), "value": [str(v) for v in settings.values()]})))
        return view_html.view_html(
            f"Train: {tasks.get(dataset.name).title} · Gradient Explorer", link, charts, tables,
            subtitle=f"{len(results)} runs, {epoch} epochs: " + ", ".join(labels),
            link_note="Opens the Train page on the server that saved this file (you need access to it). The settings "
            "and runs below give this training again with Start: the same seed, initial weights and batches.",
            saved_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        )  # fmt: skip

    st.download_button(
        "Download this view (HTML)", data=build, file_name=f"training_{dataset.name}_view.html", mime="text/html",
        on_click="ignore",
        help="One file that opens offline in any browser, for a teammate without this server: the interactive figures "
        "(plotly.js inside, about 5 MB), the link to this page, the results and the settings.",
    )  # fmt: skip


# -- presets ------------------------------------------------------------------------------------
def _runs_table(runs: tuple[train.Run, ...]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op": [run.spec.key for run in runs],
            "gradient": [run.gradient for run in runs],
            "params": [", ".join(f"{name}={value:g}" for name, value in run.params.items() if value != run.spec.defaults()[name]) for run in runs],
        }
    )


def _apply_preset(key: str) -> None:
    """Set every control to the preset's values (before the widgets render) and, for a live preset,
    ask for Start: the page body carries it out with these controls (see :func:`_carry_out`)."""
    preset = presets.get(key)
    for widget, value in _control_values(preset.setup).items():
        st.session_state[widget] = value
    st.session_state["train.runs_seed"] = _runs_table(preset.setup.runs) if preset.setup.runs else _default_runs()
    st.session_state.pop("train.runs_table", None)  # the editor starts again from the seed rows
    st.session_state[RUNS_FROM_PRESET_KEY] = bool(preset.setup.runs)
    st.session_state[YIN_STEPS_KEY], st.session_state[YIN_LR_KEY] = 3000, 0.1
    st.session_state[MONTE_CARLO_KEY] = False
    st.session_state[PRESET_KEY] = key
    st.session_state[PRESET_NOTICE_KEY] = None
    _on_reset()
    if preset.live:
        st.session_state[REQUEST_KEY] = "start"


def _preset_from_url() -> None:
    """Act on ``?preset=`` once per value: apply a known preset; for any other value keep every control
    and run as it is, remember a notice and drop the value from the URL (as the explore page rewrites
    its URL to the state it shows)."""
    values = st.query_params.get_all(url_state.PRESET_URL_KEY)
    raw = values[-1] if values else None
    if raw is None or raw == st.session_state.get(URL_PRESET_KEY):
        return
    st.session_state[URL_PRESET_KEY] = raw
    key, notices = url_state.preset_from_query({url_state.PRESET_URL_KEY: values}, presets.names())
    if key is not None:
        _apply_preset(key)
        return
    st.session_state[PRESET_NOTICE_KEY] = " ".join(notices)
    current = st.session_state.get(PRESET_KEY) or ""
    if current:
        st.query_params[url_state.PRESET_URL_KEY] = current
        st.session_state[URL_PRESET_KEY] = current
    else:
        del st.query_params[url_state.PRESET_URL_KEY]


def _on_preset_change() -> None:
    key = st.session_state.get(PRESET_KEY) or ""
    st.session_state[URL_PRESET_KEY] = key or None
    if key:
        _apply_preset(key)
        st.query_params["preset"] = key
    else:
        st.query_params.pop("preset", None)
        st.session_state[PRESET_NOTICE_KEY] = None


# Caching: st.cache_data, not st.cache_resource. The results are small DataFrames (at most a few
# thousand rows), so the pickled copy each session gets costs milliseconds, and no session can
# change another's table by accident. Each is computed once per server process and argument set;
# Streamlit holds a per-key lock while it computes, so a second visitor waits for that one
# computation instead of starting another on the same two cores.
@st.cache_data(show_spinner="Coarse gradient descent, closed form…", max_entries=16)
def _yin(steps: int, lr: float) -> dict[str, pd.DataFrame]:
    return {ste: presets.yin2019(ste, steps=steps, lr=lr) for ste in presets.STES}


@st.cache_data(show_spinner=False, max_entries=1)
def _yin_sweep() -> pd.DataFrame:
    return presets.yin2019_loss_sweep()


@st.cache_data(show_spinner="Sampling 100,000 inputs per STE…", max_entries=1)
def _yin_monte_carlo() -> pd.DataFrame:
    v, w = np.array([0.6, -0.4, 0.9, -1.1]), np.zeros(presets.YIN_INPUT)
    w[:3] = (-0.4, 0.5, 0.3)  # |w| ~ 0.7 (the clipped ReLU's window matters), theta ~ 2.2
    frames = [presets.yin2019_monte_carlo(ste, v, w).assign(ste=ste) for ste in presets.STES]
    return pd.concat(frames, ignore_index=True)


@st.cache_data(show_spinner="Training 10 seeds x 2 networks…", max_entries=1)
def _dann() -> pd.DataFrame:
    return presets.dann()


@st.cache_data(show_spinner="Training one network per surrogate and steepness…", max_entries=1)
def _shape_scale() -> pd.DataFrame:
    return presets.shape_scale()


def _preset_header(preset: presets.Preset) -> None:
    st.subheader(preset.title)
    st.markdown(f"**The paper's claim.** {preset.claim}\n\n**Reference.** {preset.reference}")


def _yin_view() -> None:
    col_steps, col_lr = st.columns(2)
    steps = col_steps.number_input(
        "Steps", min_value=1, max_value=YIN_PAGE_MAX_STEPS, step=500, key=YIN_STEPS_KEY,
        help=f"at most {YIN_PAGE_MAX_STEPS:,} here (about a second): the steps are a Python loop",
    )
    lr = col_lr.number_input("Learning rate", min_value=1e-4, max_value=10.0, format="%g", key=YIN_LR_KEY)
    histories = _yin(int(steps), float(lr))
    summary = presets.yin2019_summary(histories, steps=int(steps))
    rows = summary.set_index("ste").to_dict("index")
    identity = rows["identity"]
    flip_step = identity["w flips at step"]
    flip = "w does not flip" if pd.isna(flip_step) else f"w flips at step {int(flip_step)}"
    st.markdown(
        r"Model $y = v^\top \sigma(Zw)$, $\sigma(x) = \mathbb{1}\{x > 0\}$, $Z \in \mathbb{R}^{4 \times 10}$ with "
        r"i.i.d. $\mathcal{N}(0, 1)$ entries, teacher $v^* = (1, 1, 1, -1)$, $w^* = e_1$; $v$ follows its exact "
        r"expected gradient, $w$ the expected coarse gradient of each STE (closed forms, Lemmas 4 and 7)."
    )
    st.markdown(
        r"**This run shows** (from $v = (-0.2, -0.2, -0.2, 1.8)$, $w = -w^*$, "
        f"loss {identity['start loss']:.3f}; "
        f"{int(steps):,} steps, learning rate {float(lr):g}): ReLU STE ends at loss **{rows['relu']['final loss']:.4f}**, "
        f"clipped ReLU at **{rows['clipped_relu']['final loss']:.4f}**. Identity STE: {flip}, the loss reaches "
        f"**{identity['highest loss']:.3f}**, and it does not settle (final loss {identity['final loss']:.3f})."
    )
    for ste in summary.loc[summary["diverged"], "ste"]:
        st.warning(
            f"The {ste} STE diverged at learning rate {float(lr):g}: v or w left the float range at step "
            f"{rows[ste]['steps']:,}, so its run stops there. A learning rate of 0.1 (the paper's regime) stays finite."
        )
    st.dataframe(
        summary.assign(**{"w flips at step": summary["w flips at step"].map(lambda v: "never" if pd.isna(v) else f"{int(v)}")}),
        hide_index=True,
        column_config={c: st.column_config.NumberColumn(format="%.4f") for c in ("start loss", "final loss", "highest loss", "final theta")},
    )
    show_chart(preset_figures.yin2019_figure(histories), key="train.preset_yin")
    sweep = _yin_sweep()
    singular = sweep.loc[sweep["singular"], "theta"].tolist()
    st.markdown(
        r"The loss over $\theta$ from Lemma 1, and TensorFlow's autodiff of it in $w$ through "
        r"$\theta = \arccos\big(w^\top w^* / (\lVert w \rVert \lVert w^* \rVert)\big)$: "
        f"inf/NaN (singular) at $\\theta$ = {', '.join(f'{t:.4g}' for t in singular)}, exactly where $w$ is parallel to $w^*$. "
        "So the model's own gradient is unusable where these runs sit; the STEs' coarse gradients are finite there."
    )
    show_chart(preset_figures.yin2019_sweep_figure(sweep), key="train.preset_yin_sweep")
    if st.toggle("Check the closed forms against a TensorFlow @tf.custom_gradient STE (Monte Carlo)", key=MONTE_CARLO_KEY):
        check = _yin_monte_carlo()
        worst = float(check["z"].abs().max())
        st.caption(f"100,000 sampled Z per STE; largest |monte carlo - closed form| = {worst:.2f} standard errors.")
        st.dataframe(check, hide_index=True)


def _dann_view() -> None:
    per_seed = _dann()
    summary = presets.dann_summary(per_seed)
    with_reversal, without = summary.iloc[0], summary.iloc[1]
    st.markdown(
        f"**This run shows** (two moons, target rotated {presets.DANN_ROTATION:g}°, {presets.DANN_POINTS} points per domain, "
        f"noise {presets.DANN_NOISE:g}, {presets.DANN_HIDDEN} sigmoid units, "
        r"$\lambda_p = \frac{2}{1 + e^{-10p}} - 1$ at training progress $p$): target accuracy "
        f"**{with_reversal['mean target accuracy']:.3f} ± {with_reversal['std']:.3f}** with gradient reversal against "
        f"**{without['mean target accuracy']:.3f} ± {without['std']:.3f}** without, mean ± std over {int(with_reversal['seeds'])} "
        f"seeds; reversal is better in {int(with_reversal['better in seeds'])} of {int(with_reversal['seeds'])} seeds."
    )
    st.dataframe(summary, hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.3f") for c in ("mean target accuracy", "std", "min", "max")})
    show_chart(preset_figures.dann_figure(per_seed), key="train.preset_dann")
    with st.expander("Every seed"):
        st.dataframe(per_seed, hide_index=True)


def _shape_scale_view() -> None:
    results = _shape_scale()
    shaped = results[results["steepness"].notna()]
    identity = results.loc[results["surrogate"] == "identity STE", "accuracy"].iloc[0]
    true = results.loc[results["surrogate"] == "true gradient", "accuracy"].iloc[0]
    st.markdown(
        f"**This run shows** (one Heaviside layer of 16 units, noisy moons, Adam, {presets.SHAPE_SCALE_EPOCHS} epochs, same "
        f"initial weights): every shaped surrogate reaches **{shaped['accuracy'].min():.3f} to {shaped['accuracy'].max():.3f}** "
        f"over steepness {', '.join(f'{v:g}' for v in sorted(shaped['steepness'].unique()))}; the identity STE "
        f"**{identity:.3f}**; the true gradient **{true:.3f}** (no gradient reaches the hidden layer: only the output "
        "layer learns). With Adam the gradient's overall size is normalised away in this one-layer net; the depth "
        "preset shows where scale bites."
    )
    table = presets.shape_scale_table(results)
    st.caption("Accuracy after training, by surrogate and steepness (slope or alpha); '-': no steepness.")
    st.dataframe(table.style.format(precision=3, na_rep=""), hide_index=True)
    show_chart(preset_figures.shape_scale_figure(results), key="train.preset_shape_scale")
    with st.expander("Every run"):
        st.dataframe(results, hide_index=True)


def _depth_view() -> None:
    session = _preset_session("depth")
    epoch, results = session.snapshot() if session is not None else (0, [])
    if epoch == 0:
        st.markdown(
            "**This run shows**: the three networks train below (press Start if they are not training); the "
            "measured first / last layer ratios appear live under *Gradient flow through depth* from the first "
            "epoch, and here once training stops."
        )
        return
    st.markdown(_depth_sentence(presets.gradient_flow_table(results)))


def _preset_view(key: str) -> None:
    preset = presets.get(key)
    with st.container(border=True):
        _preset_header(preset)
        if key == "yin2019":
            _yin_view()
        elif key == "dann":
            _dann_view()
        elif key == "zenke2021":
            _shape_scale_view()
        else:
            _depth_view()
        if not preset.live and preset.setup.runs:
            st.caption("The controls below are set to a live version of this experiment: press **Start** to watch it train.")


def _preset_selector() -> str:
    options = ["", *presets.names()]
    st.selectbox(
        "Preset: a published result, reproduced live",
        options,
        format_func=lambda key: "none" if not key else presets.get(key).title,
        key=PRESET_KEY,
        on_change=_on_preset_change,
        help="Each preset sets every control and shows the paper's claim beside what this run measures. "
        "Also reachable by link: /train?preset=" + "|".join(presets.names()),
    )
    notice = st.session_state.get(PRESET_NOTICE_KEY)
    if notice:
        st.warning(literal(notice), icon="⚠️")
    return st.session_state.get(PRESET_KEY) or ""


def page() -> None:
    st.title("Train: what a gradient choice does to learning")
    st.caption(
        "Every run starts from the same initial weights and sees the same batches in the same order, "
        "so differences come from the gradient alone."
    )
    _preset_from_url()
    preset = _preset_selector()
    preset_box = st.container()  # filled after the controls: they show while a preset computes
    user_op = _user_op()
    config, problems, epochs = _controls(user_op)
    for problem in problems:
        st.warning(literal(problem), icon="⚠️")
    _carry_out(config, epochs)

    running = st.session_state.get(RUNNING_KEY, False)
    col_start, col_stop, col_step, col_reset, col_log = st.columns([1, 1, 1, 1, 2])
    col_start.button(
        "Start", type="primary", on_click=_request, args=("start",), disabled=config is None or running, width="stretch"
    )
    col_stop.button("Stop", on_click=_on_stop, disabled=not running, width="stretch")
    col_step.button(
        "Step",
        on_click=_request,
        args=("step",),
        disabled=config is None or running,
        width="stretch",
        help="train one epoch",
    )
    col_reset.button("Reset", on_click=_on_reset, width="stretch", help="discard the trained models")
    col_log.toggle("Log-scale loss", key="train.log_y")

    if st.session_state.get(ERROR_KEY):
        st.error(f"Cannot train: {literal(st.session_state[ERROR_KEY])}")
    if preset:
        with preset_box:
            _preset_view(preset)
    if st.session_state.get(SESSION_KEY) is None:
        st.info("Press **Start** to train every run, or **Step** to train one epoch at a time.")
        return
    if config is not None and st.session_state.get(CONFIG_KEY) != config and not running:
        st.info("The settings changed since this session was trained: **Start** trains with the new settings.")
    st.fragment(run_every=TICK_SECONDS if running else None)(_training_view)()
