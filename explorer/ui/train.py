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

Every control is one :class:`explorer.state.TrainState`, and the URL is its form
(:func:`explorer.state.train_to_query`): a copied link opens the same controls, and Start trains the same
loss history. A URL the page did not write itself (a pasted link, ``/train?preset=<key>``) is read once
(:func:`explorer.state.train_from_query`) and put into the widgets' session-state keys before they render;
a bad value gives a notice naming the key and its range, and the default is used for that key alone.
Presets (``explorer.train.presets``) produce a state the same way; a live preset (``depth``) then starts its
session like Start does, the others show their view (:mod:`explorer.ui.presets`). The preset's box is
filled after the controls are drawn, so the page is usable while a preset computes.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections.abc import Callable

import pandas as pd
import streamlit as st

import ops
from explorer import loaded
from explorer import state as url_state
from explorer.serve import REPLICA_ENV
from explorer.train import presets, started_runs, tasks, time_share
from explorer.train import setup as train_setup
from explorer.train import trainer as train
from explorer.train.figures import (
    layer_norm_figure_spec,
    learned_figure_spec,
    loss_figure_spec,
    prediction_figure,
    run_colour,
)
from explorer.ui import presets as preset_views
from explorer.ui import sign_in
from explorer.ui.widgets import ReadyFigure, literal, page_link, show_chart, show_figure
from ops import learnable

SESSION_KEY = "train.session"
CONFIG_KEY = "train.config"
RUNNING_KEY = "train.running"
TARGET_KEY = "train.target_epochs"
ERROR_KEY = "train.error"
REQUEST_KEY = "train.request"  # "start" or "step", set by a button's callback, done by the page body
PREDICTIONS_KEY = "train.predictions"  # (session id, epoch, predictions): drawn once per finished state
PRESET_KEY = "train.preset"  # the preset selectbox ("" = none)
URL_KEY = "train.url"  # the queries this page wrote since it last read one: any other URL is read (a pasted link)
WRITTEN_URLS_KEPT = 32
NOTICES_KEY = "train.url_notices"  # what the last URL read could not use
RUNS_FROM_STATE_KEY = "train.runs_from_state"  # the next render keeps the runs a URL or preset just set
# The training session's id, in the URL (?run=) while this browser session holds it. Sessions live in one server
# process: a link or a reconnect that lands elsewhere (a replica that died, a restart) names a run this session
# does not have, and the page says the run was lost (LOST_RUN_KEY) instead of silently showing nothing.
RUN_URL_KEY = "run"
RUN_ID_KEY = "train.run_id"
OWN_RUN_IDS_KEY = "train.own_run_ids"  # every run id this session made (a rerun may carry an older one in its URL)
LOST_RUN_KEY = "train.lost_run"
STARTED_BY_KEY = "train.started_by"  # the signed-in user who started this session's training (None: login off)
DEFAULT_STATE = url_state.TrainState()
TICK_SECONDS = 1.0
# Unset: a tick trains for its time budget alone. The browser tests cap it, so that a live training spans a
# known number of ticks (and live chart updates) however fast the machine is.
EPOCHS_PER_TICK_ENV = "GRADIENT_EXPLORER_TRAIN_EPOCHS_PER_TICK"
# While training, the charts change less often than the progress bar. Streamlit draws a chart whose
# spec changed afresh (its element id hashes the spec), ~50 ms of the browser's CPU per chart; five
# users training on the server's machine (the benchmark) left a slider move waiting for the CPU.
LIVE_LOSS_SECONDS = 1.9  # the loss chart is redrawn at most this often (every other tick)
LIVE_LAYER_STEPS = 20  # the gradient-flow chart moves on every 1/20 of the target epochs
LIVE_FIGURES = ("loss", "layers", "learned")  # the names _live_figure keeps them under
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


def _user_op() -> ops.OpSpec | None:
    return url_state.editor_op(st.session_state.get(url_state.EDITOR_SOURCE_KEY))


def _default_runs() -> tuple[train.Run, ...]:
    """The Explore page's op (or the default), in custom and in true mode."""
    explore_state = st.session_state.get("explore.state")
    spec = loaded.get(explore_state.op if explore_state is not None else url_state.DEFAULT_OP)
    try:
        return (train.Run(spec, None, "custom"), train.Run(spec, None, "true"))
    except ValueError:  # a loaded op of another signature: the built-in default
        return (train.Run(url_state.DEFAULT_OP, None, "custom"), train.Run(url_state.DEFAULT_OP, None, "true"))


def _runs_table(runs: tuple[train.Run, ...]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op": [url_state.runs_to_text([run]).split(":")[0] for run in runs],
            "gradient": [run.gradient for run in runs],
            "params": [url_state.run_params_text(run).replace(",", ", ") for run in runs],
            "learn": [run.learn for run in runs],
        }
    )


def _runs_from_table(table: pd.DataFrame, user_op: ops.OpSpec | None) -> tuple[list[train.Run], list[str]]:
    runs, problems = [], []
    for number, row in enumerate(table.to_dict("records"), start=1):
        key = row.get("op")
        if not isinstance(key, str) or not key:
            problems.append(f"Run {number}: pick an op.")
            continue
        gradient = row.get("gradient") if isinstance(row.get("gradient"), str) and row.get("gradient") else "custom"
        params = row.get("params") if isinstance(row.get("params"), str) else ""
        learn = row.get("learn") is True or row.get("learn") == 1
        try:
            run = url_state.make_run(key, gradient, params, learn, user_op)
            unusable = loaded.problem(key, run.params) if loaded.is_loaded(key) and run.layer is None else None
            if unusable is not None:  # probed first: a hung or broken op must not block this page's trainer
                raise ValueError(f"{unusable}; fix it and restart the server (the Explore page shows it too)")
            runs.append(run)
        except (KeyError, ValueError) as error:
            problems.append(f"Run {number}: {error.args[0] if error.args else error}")
    if len(runs) > MAX_RUNS:
        problems.append(f"At most {MAX_RUNS} runs are compared at once; the first {MAX_RUNS} are used.")
        runs = runs[:MAX_RUNS]
    return runs, problems


def _control_values(state: url_state.TrainState) -> dict:
    """Widget key -> value for every sidebar control of ``state``."""
    return {
        "train.task": state.task,
        "train.n": int(state.n),
        "train.noise": float(state.noise),
        "train.width": int(state.width),
        "train.depth": int(state.depth),
        "train.optimizer": state.optimizer,
        "train.lr": float(state.learning_rate),
        "train.full_batch": state.batch_size is None,
        "train.batch_size": int(state.batch_size or 64),
        "train.epochs": int(state.epochs),
        "train.seed": int(state.seed),
    }


def _seed_controls() -> None:
    """Default values of the sidebar widgets, set through session state (the widgets take no ``value=``),
    so that a URL or a preset can set them too without Streamlit's "default value and Session State" warning."""
    for key, value in _control_values(DEFAULT_STATE).items():
        st.session_state.setdefault(key, value)


def _apply_state(state: url_state.TrainState) -> None:
    """Put ``state`` into every control (before the widgets render); its runs seed the runs table."""
    for widget, value in _control_values(state).items():
        st.session_state[widget] = value
    st.session_state["train.runs_seed"] = _runs_table(state.runs or _default_runs())
    st.session_state.pop("train.runs_table", None)  # the editor starts again from the seed rows
    st.session_state[RUNS_FROM_STATE_KEY] = True
    st.session_state[PRESET_KEY] = state.preset


def _state_from_url() -> None:
    """Read the URL when it is not the one this page wrote last (a pasted link, a preset link): its state
    goes into the controls; what it could not use is remembered as notices. A live preset starts."""
    query = {key: st.query_params.get_all(key) for key in st.query_params}
    # A rerun carries the browser's URL, which may not yet show what the previous rerun wrote (a quick second
    # edit): any query this page wrote is its own, never a link to read, or it would undo the edit before.
    if not query or {key: values[-1] for key, values in query.items()} in st.session_state.get(URL_KEY, []):
        return
    state, notices = url_state.train_from_query(query, _current_state() or DEFAULT_STATE, editor_op=_user_op())
    view, view_notices = url_state.preset_view_from_query(query, state.preset)
    st.session_state[NOTICES_KEY] = notices + view_notices
    changed_preset = state.preset != (st.session_state.get(PRESET_KEY) or "")
    _apply_state(state)
    if changed_preset and state.preset:
        _load_preset_views(state.preset, view)
    elif state.preset:
        preset_views.show_view_state(view)
    st.session_state[URL_KEY] = [{key: values[-1] for key, values in query.items()}]


def _current_state() -> url_state.TrainState | None:
    """The state the widgets held at the end of the last run (None before the first)."""
    return st.session_state.get("train.state")


def _load_preset_views(key: str, view: url_state.PresetView | None = None) -> None:
    """A preset was chosen: its views start from ``view`` (a link's) or their defaults; a live preset starts
    training."""
    preset_views.show_view_state(view or url_state.PresetView())
    _on_reset()
    if presets.get(key).live:
        st.session_state[REQUEST_KEY] = "start"


def _controls(user_op: ops.OpSpec | None) -> tuple[url_state.TrainState | None, list[str]]:
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
        seed = st.number_input("Seed", min_value=0, max_value=train_setup.MAX_SEED, key="train.seed")

    runs, problems = _runs_editor(user_op)
    if not runs:
        problems.append("Add at least one run.")
        return None, problems
    state = url_state.TrainState(
        task=task, n=int(n), noise=float(noise), width=int(width), depth=int(depth), optimizer=optimizer,
        learning_rate=float(learning_rate), batch_size=None if batch_size is None else int(batch_size),
        epochs=int(epochs), seed=int(seed), runs=tuple(runs), preset=st.session_state.get(PRESET_KEY) or "",
    )  # fmt: skip
    return state, problems


def _runs_editor(user_op: ops.OpSpec | None) -> tuple[list[train.Run], list[str]]:
    """The runs table (op, gradient mode, parameters, learn) and the runs it holds."""
    st.subheader("Runs to compare")
    st.caption(
        "Each run is an op, its parameters and a gradient mode. **custom** trains through the op's custom gradient; "
        "**true** trains through autodiff of the plain forward, so a step or sign passes no gradient and nothing before "
        "it can learn. **learn** makes the op's parameters trained variables (custom mode; see *Learned parameters*). "
        "Every model is `Input → [Dense → op] × depth → Dense`: a trainable layer must sit *before* the "
        "op, because a custom gradient changes nothing when nothing upstream of it trains."
    )
    yours = loaded.current()
    options = ops.names() + ([user_op.key] if user_op is not None else []) + list(yours.ops) + list(yours.layers)
    if "train.runs_table" not in st.session_state and not st.session_state.pop(RUNS_FROM_STATE_KEY, False):
        st.session_state["train.runs_seed"] = _runs_table(_default_runs())
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
            "learn": st.column_config.CheckboxColumn(
                "learn", default=False,
                help="train the op's parameters as variables (threshold, slope, ...), their gradient that of the "
                "surrogate's primitive; ops whose parameters cannot be learned say why",
            ),
        },
    )  # fmt: skip
    _unavailable_list(yours)
    return _runs_from_table(table, _user_op() if user_op is None else user_op)


def _unavailable_list(yours) -> None:
    """Loaded functions the model cannot hold: one line, opening into a table of function and reason."""
    unavailable = {key: loaded.untrainable(key) for key in yours.ops}
    unavailable = {key: reason for key, reason in unavailable.items() if reason is not None}
    if unavailable:
        with st.expander(f"{len(unavailable)} loaded function(s) cannot be trained (offered in the op choice, refused with the reason)"):
            st.dataframe(
                pd.DataFrame({"function": list(unavailable), "reason": list(unavailable.values())}),
                hide_index=True, width="stretch",
            )  # fmt: skip


def _session_key(state: url_state.TrainState) -> tuple:
    """What defines a session: everything but the epochs to train and the preset it came from (the URL form,
    and each run's op and layer objects: an editor op compiled anew is a new op under the same key)."""
    query = url_state.train_to_query(state.replace(epochs=1, preset=""))
    return tuple(sorted(query.items())), tuple((run.spec, run.layer) for run in state.runs)


def _new_session(state: url_state.TrainState) -> train.Session | loaded.WorkerSession:
    """A session of these controls; one with a run of a loaded op or layer trains in the training worker
    (:class:`explorer.loaded.WorkerSession`), built-in ops train here."""
    if loaded.needs_worker(state.runs):
        return loaded.WorkerSession(state)
    return train.Session(state)


def _ensure_session(state: url_state.TrainState) -> train.Session | None:
    if st.session_state.get(CONFIG_KEY) != _session_key(state) or st.session_state.get(SESSION_KEY) is None:
        try:
            st.session_state[SESSION_KEY] = _new_session(state)
        except ValueError as error:
            st.session_state[ERROR_KEY] = str(error)
            return None
        st.session_state[RUN_ID_KEY] = uuid.uuid4().hex[:8]
        own = st.session_state.get(OWN_RUN_IDS_KEY, [])
        st.session_state[OWN_RUN_IDS_KEY] = [*own[-(WRITTEN_URLS_KEPT - 1) :], st.session_state[RUN_ID_KEY]]
        st.session_state[LOST_RUN_KEY] = None
        st.session_state[CONFIG_KEY] = _session_key(state)
        st.session_state[ERROR_KEY] = None
    return st.session_state[SESSION_KEY]


def _request(action: str) -> None:
    """Button callback: remember what was asked; :func:`_carry_out` does it with this run's controls."""
    st.session_state[REQUEST_KEY] = action


def _carry_out(state: url_state.TrainState | None) -> None:
    """Do the Start or Step asked for in this interaction, with the controls as this run read them.

    A callback's ``args`` are bound when the page last rendered, so a value typed just before the
    click (the click takes the focus and sends both in one interaction) would be lost there.
    """
    action = st.session_state.pop(REQUEST_KEY, None)
    if action is None or state is None:
        return
    if action == "start":
        st.session_state[SESSION_KEY] = None  # Start always begins from the initial weights
        if _ensure_session(state) is not None:
            st.session_state[TARGET_KEY] = state.epochs
            st.session_state[RUNNING_KEY] = True
            _record_start(state)
    elif action == "step":
        st.session_state[RUNNING_KEY] = False
        had = st.session_state.get(RUN_ID_KEY)
        session = _ensure_session(state)
        if session is not None and st.session_state.get(RUN_ID_KEY) != had:
            _record_start(state)
        if session is not None and not session.finished:
            try:
                session.step(1)
            except ValueError as error:
                st.session_state[ERROR_KEY] = str(error)


def _record_start(state: url_state.TrainState) -> None:
    """Who started this training run: kept with the session, in the server's list and in its log."""
    user = sign_in.current_user()
    run_id = st.session_state.get(RUN_ID_KEY) or ""
    st.session_state[STARTED_BY_KEY] = user
    labels = tuple(run.label for run in state.runs)
    started_runs.record(run_id, user, labels, state.epochs, replica=os.environ.get(REPLICA_ENV, ""))
    sign_in.log_action("training run started", f"run {run_id} ({', '.join(labels)}; {state.epochs} epochs)")


def _on_stop() -> None:
    st.session_state[RUNNING_KEY] = False
    _leave_trainers()
    sign_in.log_action("training run stopped", f"run {st.session_state.get(RUN_ID_KEY)}")


def _on_reset() -> None:
    if st.session_state.get(SESSION_KEY) is not None:
        sign_in.log_action("training run deleted", f"run {st.session_state.get(RUN_ID_KEY)} (Reset)")
    st.session_state[RUNNING_KEY] = False
    st.session_state[SESSION_KEY] = None
    for name in LIVE_FIGURES:  # they hold the discarded session (its models and data set)
        st.session_state.pop(f"train.live.{name}", None)
    st.session_state[CONFIG_KEY] = None
    st.session_state[ERROR_KEY] = None
    st.session_state[RUN_ID_KEY] = st.session_state[LOST_RUN_KEY] = None


# Who trains now, in this server or, under `run --replicas`, on this machine: only a count for sharing the
# CPU; the training state itself lives in each user's session_state.
_TRAINERS = time_share.from_environment()


def _trainer_id() -> str:
    return st.session_state.setdefault("train.id", uuid.uuid4().hex)


def _training_budget() -> float:
    """Seconds this tick may train: :data:`time_share.TRAIN_SECONDS_PER_TICK` split between everyone training
    now, so five people training on two cores still get answers to their slider moves."""
    return _TRAINERS.seconds_for(_trainer_id())


def _leave_trainers() -> None:
    _TRAINERS.leave(_trainer_id())


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
    sign_in.end_if_expired()  # a timer tick skips the page's gate
    session: train.Session | None = st.session_state.get(SESSION_KEY)
    if session is None:
        return
    was_running = st.session_state.get(RUNNING_KEY, False)
    if was_running:
        _train_tick(session)
    running = st.session_state.get(RUNNING_KEY, False)
    epoch, results = session.snapshot()  # consistent even if a superseded run is still training it
    target = max(1, st.session_state.get(TARGET_KEY, train.DEFAULT_EPOCHS))
    started_by = st.session_state.get(STARTED_BY_KEY)
    progress = f"epoch {epoch} of {target}" + (f" · started by {started_by}" if started_by else "")
    st.progress(min(1.0, epoch / target), text=progress)
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
    learned = [r for r in results if any(column.startswith(train.LEARNED_PREFIX) for column in r.history.columns)]
    if learned:  # the learned parameters' trajectories beside the loss
        col_loss, col_learned = st.columns([3, 2])
        with col_loss:
            show_figure(loss_chart, key="train.loss_chart")
        with col_learned:
            _learned_view(session, learned, running)
    else:
        show_figure(loss_chart, key="train.loss_chart")
    _gradient_flow_view(session, results, epoch, live_step=max(1, target // LIVE_LAYER_STEPS) if running else None)
    if was_running and not running:
        st.rerun(scope="app")  # re-enable the buttons and stop the timer; the results do not wait for it
    if not running and (epoch > 0 or any(r.status == "failed" for r in results)):  # a failure in the first chunk too
        _results_view(session, epoch, results)


def _learned_view(session, results: list[train.RunResult], running: bool) -> None:
    """The learned parameters' values over epochs, and what learning each one amounts to."""
    labels = tuple(r.run.label for r in results)
    chart = _live_figure(
        "learned", (session, labels), LIVE_LOSS_SECONDS if running else 0.0,
        lambda: learned_figure_spec([r.history for r in results], list(labels)),
    )  # fmt: skip
    show_figure(chart, key="train.learned_chart")
    lines = []
    for result in results:
        spec = result.run.spec
        for name in result.run.learned:
            what = learnable.kind(spec, name)
            last = result.history.filter(like=f".{name}").iloc[-1] if len(result.history) else None
            value = "" if last is None else " (now " + ", ".join(f"{v:.4g}" for v in last) + ")"
            lines.append(f"- **{spec.key}.{name}**{value}: " + learnable.EQUIVALENCES[what].format(name=name))
    st.caption(
        "Learned parameters: their gradient is that of the surrogate's primitive σ (the function the custom gradient "
        "differentiates in place of the step), anchored at the jump.\n" + "\n".join(lines)
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
            f"{row['run']}: {preset_views.ratio_text(row['first/last at init'])} at initialisation, "
            f"{preset_views.ratio_text(row['first/last at now'])} at epoch {row['epoch']}"
            for row in table.to_dict("records")
        )
        st.markdown(f"**First / last hidden layer**, {preset_views.RATIO_LATEX} ({int(table['depth'].iloc[0])} hidden layers): {ratios}.")
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
    _view_download(session, epoch, results, predictions)


def _view_download(session: train.Session, epoch: int, results: list[train.RunResult], predictions: list) -> None:
    """"Download this view": the loss (and learned-parameter), gradient-flow and prediction figures, the results and
    the settings as one HTML file that opens offline (:func:`explorer.explore.view_html.view_html`), made when
    clicked; its link is the trained state with the epochs trained, so Start there trains the same runs again."""
    from explorer.explore import view_html

    state, dataset = session.state.replace(epochs=max(epoch, 1)), session.dataset
    link = page_link(url_state.train_to_query(state), "train")
    labels = [r.run.label for r in results]
    histories = [r.history for r in results]
    learned = [r for r in results if any(column.startswith(train.LEARNED_PREFIX) for column in r.history.columns)]
    log_y = bool(st.session_state.get("train.log_y", False))

    def build() -> str:
        charts = [view_html.Chart("Loss", ReadyFigure(loss_figure_spec(histories, labels, log_y=log_y)).to_dict(), "training_loss")]
        if learned:
            spec = learned_figure_spec([r.history for r in learned], [r.run.label for r in learned])
            charts.append(view_html.Chart("Learned parameters", ReadyFigure(spec).to_dict(), "learned_parameters"))
        charts += [
            view_html.Chart("Gradient flow through depth", ReadyFigure(layer_norm_figure_spec(histories, labels, epoch=epoch)).to_dict(), "gradient_flow"),
            view_html.Chart("Decision boundaries" if dataset.input_dim == 2 else "Fitted curves", prediction_figure(predictions, labels, dataset), "predictions"),
        ]  # fmt: skip
        settings = {
            "task": tasks.get(state.task).title, "points": state.n, "noise": state.noise,
            "hidden layers x width": f"{state.depth} x {state.width}", "optimiser": OPTIMIZER_LABELS.get(state.optimizer, state.optimizer),
            "learning rate": state.learning_rate, "batch size": state.batch_size or "full batch", "epochs trained": epoch, "seed": state.seed,
        }  # fmt: skip
        tables = [
            view_html.Table("Results", _results_table(results), "Each run: op (gradient mode, parameters changed from the defaults) after its last epoch; every run started from the same weights and saw the same batches."),
            view_html.Table("Settings", pd.DataFrame({"setting": list(settings), "value": [str(v) for v in settings.values()]})),
        ]  # fmt: skip
        return view_html.view_html(
            f"Train: {tasks.get(state.task).title} · Gradient Explorer", link, charts, tables,
            subtitle=f"{len(results)} runs, {epoch} epochs: " + ", ".join(labels),
            link_note="Opens the Train page on the server that saved this file (you need access to it) with every "
            "control of this training: Start trains it again (the same seed: the same initial weights and batches).",
            saved_at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        )  # fmt: skip

    st.download_button(
        "Download this view (HTML)", data=build, file_name=f"training_{dataset.name}_view.html", mime="text/html",
        on_click="ignore",
        help="One file that opens offline in any browser, for a teammate without this server: the interactive figures "
        "(plotly.js inside, about 5 MB), the link to this training, the results and the settings.",
    )  # fmt: skip


# -- presets ------------------------------------------------------------------------------------
def _preset_session(key: str) -> train.Session | None:
    """The current session if it is exactly preset ``key``'s state (the user has not changed a control)."""
    session = st.session_state.get(SESSION_KEY)
    state = presets.get(key).state
    if session is None or not state.runs or st.session_state.get(CONFIG_KEY) != _session_key(state):
        return None
    return session


def _on_preset_change() -> None:
    key = st.session_state.get(PRESET_KEY) or ""
    st.session_state[NOTICES_KEY] = []
    if key:
        state = presets.get(key).state
        _apply_state(state.replace(runs=state.runs or _default_runs()))
        _load_preset_views(key)


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
    for notice in st.session_state.get(NOTICES_KEY) or []:
        st.warning(literal(notice), icon="⚠️")
    return st.session_state.get(PRESET_KEY) or ""


def _write_url(state: url_state.TrainState | None) -> None:
    """The URL is the state the controls hold, the preset view's own controls included (the page remembers it,
    so that it reads only other URLs)."""
    if state is None:
        return
    st.session_state["train.state"] = state
    query = url_state.train_to_query(state) | url_state.preset_view_to_query(preset_views.view_state(), state.preset)
    if st.session_state.get(SESSION_KEY) is not None and st.session_state.get(RUN_ID_KEY):
        query[RUN_URL_KEY] = st.session_state[RUN_ID_KEY]
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)
    written = [known for known in st.session_state.get(URL_KEY, []) if known != query]
    st.session_state[URL_KEY] = [*written[-(WRITTEN_URLS_KEPT - 1) :], query]


def _note_lost_run() -> None:
    """A URL naming a training run this session does not hold: remember it for the notice (until Start or Reset)."""
    wanted = st.query_params.get(RUN_URL_KEY)
    # a rerun carries the browser's URL, which may still show a run this session made before (a quick Start)
    if wanted and wanted not in st.session_state.get(OWN_RUN_IDS_KEY, []):
        st.session_state[LOST_RUN_KEY] = wanted[:16]


def page() -> None:
    st.title("Train: what a gradient choice does to learning")
    st.caption(
        "Every run starts from the same initial weights and sees the same batches in the same order, "
        "so differences come from the gradient alone. The URL holds every control: a copied link trains the same."
    )
    _seed_controls()
    _note_lost_run()
    _state_from_url()
    preset = _preset_selector()
    if st.session_state.get(LOST_RUN_KEY):
        st.warning(
            f"Training run {literal(st.session_state[LOST_RUN_KEY])} is not on this server: the server process that "
            "trained it stopped (or the link comes from another browser tab), so its results are lost. The controls "
            "are the run's, from the link: **Start** trains it again (the same seed: the same initial weights and batches).",
            icon="⚠️",
        )
    preset_box = st.container()  # filled after the controls: they show while a preset computes
    user_op = _user_op()
    state, problems = _controls(user_op)
    for problem in problems:
        st.warning(literal(problem), icon="⚠️")
    _carry_out(state)
    _write_url(state)

    running = st.session_state.get(RUNNING_KEY, False)
    col_start, col_stop, col_step, col_reset, col_log = st.columns([1, 1, 1, 1, 2])
    col_start.button(
        "Start", type="primary", on_click=_request, args=("start",), disabled=state is None or running, width="stretch"
    )
    col_stop.button("Stop", on_click=_on_stop, disabled=not running, width="stretch")
    col_step.button(
        "Step",
        on_click=_request,
        args=("step",),
        disabled=state is None or running,
        width="stretch",
        help="train one epoch",
    )
    col_reset.button("Reset", on_click=_on_reset, width="stretch", help="discard the trained models")
    col_log.toggle("Log-scale loss", key="train.log_y")

    if st.session_state.get(ERROR_KEY):
        st.error(f"Cannot train: {literal(st.session_state[ERROR_KEY])}")
    if preset:
        with preset_box:
            preset_views.view(preset, _preset_session(preset))
    if sign_in.policy() is not None:
        _started_runs_view()
    if st.session_state.get(SESSION_KEY) is None:
        st.info("Press **Start** to train every run, or **Step** to train one epoch at a time.")
        return
    if state is not None and st.session_state.get(CONFIG_KEY) != _session_key(state) and not running:
        st.info("The settings changed since this session was trained: **Start** trains with the new settings.")
    st.fragment(run_every=TICK_SECONDS if running else None)(_training_view)()


def _started_runs_view() -> None:
    """With ``--login``: the training runs started on this server and by whom (:mod:`explorer.train.started_runs`)."""
    recent = started_runs.recent(STARTED_RUNS_SHOWN)
    with st.expander(f"Training runs on this server ({len(recent)})", expanded=bool(recent)):
        if not recent:
            st.caption("No training run was started on this server yet.")
            return
        now = time.time()
        st.container(key="train_started_runs").dataframe(
            pd.DataFrame({
                "run": [entry.run_id for entry in recent],
                "started by": [entry.user or "" for entry in recent],
                "started": [f"{max(0, round((now - entry.started) / 60))} min ago" for entry in recent],
                "compares": [", ".join(entry.labels) for entry in recent],
                "epochs": [entry.epochs for entry in recent],
                **({"replica": [entry.replica for entry in recent]} if any(entry.replica for entry in recent) else {}),
            }),
            hide_index=True, width="stretch",
        )  # fmt: skip


STARTED_RUNS_SHOWN = 10
