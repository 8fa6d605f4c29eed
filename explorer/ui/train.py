"""Train page: one tiny Keras model per run, same data, same initial weights, same batches.

Training runs inside an ``st.fragment`` that re-executes every half second while a session is
training: each tick trains every run for a short chunk of epochs and redraws the live loss
chart, so the rest of the page stays usable. The training session lives in this user's
``st.session_state`` only.

Two rules keep the page right under load (several users, slow reruns):

* Start and Step act on the controls as they are in the run the click triggers, never on values
  bound into a callback at the previous render: their callbacks only record the request, and the
  page body carries it out after it has read every control.
* What the training view shows is derived from the session on every run of the fragment, full or
  partial: progress, chart and, once training is over, the results. When the last tick ends, the
  page still asks for a full rerun (to re-enable the buttons and stop the timer), but the results
  no longer depend on that rerun reaching the browser: a timer tick that lands after it draws
  them too.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import dataclass

import pandas as pd
import streamlit as st

import ops
from explorer import state as url_state
from explorer import tasks, train
from explorer.train_figures import loss_figure, prediction_figure, run_colour
from explorer.ui.widgets import literal

SESSION_KEY = "train.session"
CONFIG_KEY = "train.config"
RUNNING_KEY = "train.running"
TARGET_KEY = "train.target_epochs"
ERROR_KEY = "train.error"
REQUEST_KEY = "train.request"  # "start" or "step", set by a button's callback, done by the page body
PREDICTIONS_KEY = "train.predictions"  # (session id, epoch, predictions): drawn once per finished state
TICK_SECONDS = 0.5
TRAIN_SECONDS_PER_TICK = 0.25  # shared by everyone training at once: the server stays responsive
MAX_RUNS = 6
OPTIMIZER_LABELS = {"adam": "Adam", "sgd": "SGD", "rmsprop": "RMSprop", "adagrad": "Adagrad"}
STATUS_BADGES = {
    "ok": ":green-badge[ok]",
    "diverged": ":red-badge[diverged]",
    "no_gradient": ":orange-badge[no gradient]",
    "stopped": ":gray-badge[stopped]",
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
            spec = user_op if user_op is not None and key == user_op.key else ops.get(key)
            gradient = row.gradient if isinstance(row.gradient, str) and row.gradient else "custom"
            params = _parse_params(spec, row.params if isinstance(row.params, str) else "")
            runs.append(train.Run(spec, params, gradient))
        except (KeyError, ValueError) as error:
            problems.append(f"Run {number}: {error.args[0] if error.args else error}")
    if len(runs) > MAX_RUNS:
        problems.append(f"At most {MAX_RUNS} runs are compared at once; the first {MAX_RUNS} are used.")
        runs = runs[:MAX_RUNS]
    return runs, problems


def _controls(user_op: ops.OpSpec | None) -> tuple[TrainConfig | None, list[str], int]:
    with st.sidebar:
        st.header("Data")
        task = st.selectbox("Task", tasks.names(), format_func=lambda name: tasks.get(name).title, key="train.task")
        st.caption(tasks.get(task).description)
        n = st.number_input(
            "Points", min_value=tasks.MIN_POINTS, max_value=tasks.MAX_POINTS, value=tasks.DEFAULT_POINTS, step=64, key="train.n"
        )
        noise = st.slider("Noise", 0.0, tasks.MAX_NOISE, tasks.DEFAULT_NOISE, 0.01, key="train.noise")
        st.header("Model")
        width = st.slider("Hidden width", 1, train.MAX_WIDTH, train.DEFAULT_WIDTH, key="train.width")
        depth = st.slider("Hidden layers", 1, train.MAX_DEPTH, 1, key="train.depth")
        st.header("Optimiser")
        optimizer = st.selectbox(
            "Optimiser", list(train.OPTIMIZERS), format_func=lambda name: OPTIMIZER_LABELS.get(name, name), key="train.optimizer"
        )
        learning_rate = st.number_input(
            "Learning rate",
            min_value=1e-6,
            max_value=train.MAX_LEARNING_RATE,
            value=train.DEFAULT_LEARNING_RATE,
            format="%g",
            key="train.lr",
        )
        full_batch = st.toggle("Full batch", value=True, key="train.full_batch")
        batch_size = None if full_batch else st.number_input("Batch size", 1, tasks.MAX_POINTS, 64, key="train.batch_size")
        epochs = st.number_input(
            "Epochs", min_value=1, max_value=train.MAX_EPOCHS, value=train.DEFAULT_EPOCHS, step=50, key="train.epochs"
        )
        seed = st.number_input("Seed", min_value=0, max_value=2**31 - 1, value=0, key="train.seed")

    st.subheader("Runs to compare")
    st.caption(
        "Each run is an op, its parameters and a gradient mode. **custom** trains through the op's custom gradient; "
        "**true** trains through autodiff of the plain forward, so a step or sign passes no gradient and nothing before "
        "it can learn. Every model is `Input → [Dense → op] × depth → Dense`: a trainable layer must sit *before* the "
        "op, because a custom gradient changes nothing when nothing upstream of it trains."
    )
    options = ops.names() + ([user_op.key] if user_op is not None else [])
    if "train.runs_table" not in st.session_state:
        st.session_state["train.runs_seed"] = _default_runs()
    table = st.data_editor(
        st.session_state["train.runs_seed"],
        key="train.runs_table",
        num_rows="dynamic",
        hide_index=True,
        width="stretch",
        column_config={
            "op": st.column_config.SelectboxColumn("op", options=options, required=True, help="built-in ops, and your editor op"),
            "gradient": st.column_config.SelectboxColumn("gradient", options=list(ops.GRADIENT_MODES), required=True, default="custom"),
            "params": st.column_config.TextColumn("parameters", help="e.g. alpha=4, threshold=0.5; empty for defaults"),
        },
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


def _new_session(config: TrainConfig) -> train.Session:
    dataset = tasks.make(config.task, n=config.n, noise=config.noise, seed=config.seed)
    return train.Session(
        dataset,
        list(config.runs),
        width=config.width,
        depth=config.depth,
        optimizer=config.optimizer,
        learning_rate=config.learning_rate,
        batch_size=config.batch_size,
        seed=config.seed,
    )


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


def _train_tick(session: train.Session) -> None:
    """Train every run for this session's share of the tick; stop at the target epoch."""
    target = min(st.session_state.get(TARGET_KEY, train.DEFAULT_EPOCHS), train.MAX_EPOCHS)
    epoch = session.train_to(target, seconds=_training_budget())
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


def _training_view() -> None:
    """Progress, status, live loss chart and, once training is over, the results.

    Runs as a fragment; everything is derived from the session, so any run of it (a timer tick,
    or the full rerun asked for when training ends) shows the same thing for the same state.
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
    st.plotly_chart(
        loss_figure([r.history for r in results], [r.run.label for r in results], log_y=log_y),
        key="train.loss_chart",
    )
    if was_running and not running:
        st.rerun(scope="app")  # re-enable the buttons and stop the timer; the results do not wait for it
    if not running and epoch > 0:
        _results_view(session, epoch, results)


def _predictions(session: train.Session, epoch: int, results: list[train.RunResult]) -> list[train.GridPrediction]:
    """Each model on a grid, computed once per (session, epoch): late timer ticks redraw for free."""
    key = (id(session), epoch)
    cached = st.session_state.get(PREDICTIONS_KEY)
    if cached is None or cached[0] != key:
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
    dataset = session.dataset
    st.subheader("Decision boundaries" if dataset.input_dim == 2 else "Fitted curves")
    predictions = _predictions(session, epoch, results)
    st.plotly_chart(prediction_figure(predictions, [r.run.label for r in results], dataset), key="train.predictions")
    history = pd.concat([r.history.assign(run=r.run.label) for r in results], ignore_index=True)
    st.download_button(
        "History as CSV",
        data=lambda: history.to_csv(index=False),
        file_name=f"training_{dataset.name}.csv",
        mime="text/csv",
        on_click="ignore",
    )


def page() -> None:
    st.title("Train: what a gradient choice does to learning")
    st.caption(
        "Every run starts from the same initial weights and sees the same batches in the same order, "
        "so differences come from the gradient alone."
    )
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
    if st.session_state.get(SESSION_KEY) is None:
        st.info("Press **Start** to train every run, or **Step** to train one epoch at a time.")
        return
    if config is not None and st.session_state.get(CONFIG_KEY) != config and not running:
        st.info("The settings changed since this session was trained: **Start** trains with the new settings.")
    st.fragment(run_every=TICK_SECONDS if running else None)(_training_view)()
