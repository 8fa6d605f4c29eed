"""Train the same small network with different ops and gradient modes, fairly, and fast.

Model: ``Input -> [Dense(width) -> op] x depth -> Dense(1)``. The op is an
``ops.SurrogateLayer`` (``gradient="custom"`` or ``"true"``), or Keras ReLU for the baseline
``Run(None)``. Classification trains logits with binary cross-entropy (``from_logits``),
regression with mean squared error.

Fairness: every run starts from the same weights (built once from the seed and copied with
``set_weights``) and sees the same mini-batches in the same order (:func:`batch_order`).

Speed: one ``Model.fit`` call trains a chunk of real epochs: its single Keras ``train_step`` loops
over the chunk's epochs and each epoch's mini-batches in-graph, so Python, Keras and kernel-launch
overhead is paid per chunk, not per epoch or batch. A run starts with a plain ``tf.function`` step
(traced in ~0.2 s) and moves to an XLA-compiled one (~0.6 s to compile, then up to 5x faster per
step) at epoch :attr:`Session.xla_from_epoch`, once it has taken ``XLA_AFTER_STEPS`` optimisation
steps: a short session never pays for XLA, a long one soon earns it back. The switch is at a fixed
epoch of the configuration, so a session gives the same numbers however it is stepped. Each real epoch writes one
history row into a variable that the streaming callback reads after the chunk.

History rows (one per real epoch, ``epoch`` counted from 1) describe the weights the epoch
*starts* from, measured on the full data set: ``loss``, ``accuracy`` (classification only),
``grad_norm`` (Frobenius norm of the loss gradient w.r.t. the first Dense kernel),
``dead_fraction`` (share of first-layer units whose kernel column and bias get exactly zero
gradient), and the gradient flow through depth: ``grad_norm_1`` .. ``grad_norm_D`` (the same norm
for the kernel of each hidden Dense layer, ``grad_norm_1`` equal to ``grad_norm``) and
``grad_norm_output`` (the output layer's kernel). For full-batch training these are exactly the
values of that epoch's update step; all come from the same gradients, in the same compiled step.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import pandas as pd
import tensorflow as tf

import ops
from explorer.train import tasks
from explorer.train.setup import (  # noqa: F401 - the trainer's public names: explorer.train.Run, MAX_EPOCHS, ...
    DEFAULT_EPOCHS,
    DEFAULT_LEARNING_RATE,
    DEFAULT_OPTIMIZER,
    DEFAULT_WIDTH,
    MAX_DEPTH,
    MAX_EPOCHS,
    MAX_LEARNING_RATE,
    MAX_WIDTH,
    OPTIMIZER_NAMES,
    Run,
    TrainState,
    check_int,
    is_users,
)
from ops import traced_gradients

# Kernel initialiser seeds: layer l (0 = output) of seed s gets s * SEED_STRIDE + l, as when the limit
# was 3 hidden layers, so every network of depth <= 3 keeps its initial weights. Deeper layers (l > 3)
# draw from a separate range (DEEP_SEED_OFFSET + s * SEED_STRIDE + l: l mod 4 differs for l = 4, 5, 6,
# so no two (s, l) pairs share a seed).
SEED_STRIDE = 4
DEEP_SEED_OFFSET = 2**40
MAX_RESOLUTION = 500
# "diverged": a loss that is NaN or inf, or above DIVERGENCE_FACTOR * max(1, first loss). The second
# rule catches what Adam does with a huge learning rate: its steps are bounded by the rate, so
# the weights grow linearly and the (numerically stable) cross-entropy stays finite but explodes.
DIVERGENCE_FACTOR = 1e3
NO_GRADIENT_EPOCHS = 3  # a run with zero first-layer gradient for this many first epochs is "no_gradient"
STATUSES = ("ok", "diverged", "no_gradient", "stopped")
OPTIMIZERS: dict[str, type[keras.optimizers.Optimizer]] = dict(
    zip(OPTIMIZER_NAMES, (keras.optimizers.Adam, keras.optimizers.SGD, keras.optimizers.RMSprop, keras.optimizers.Adagrad), strict=True)
)
# Chunking: one Model.fit call costs ~10-30 ms of Keras overhead, one full-batch epoch of a small
# network ~20-50 us in XLA. A chunk aims at CHUNK_SECONDS of training, so the overhead is hidden
# and live charts / should_stop still respond several times a second.
CHUNK_SECONDS = 0.1
MAX_EPOCHS_PER_CHUNK = 500
ORDER_BUFFER_POINTS = 2**20  # mini-batch chunks carry their epochs' point orders: cap the buffer
# The first chunk, before any speed was measured: at most this much arithmetic (points x parameters
# per epoch) and this many optimisation steps (each costs ~0.1 ms more than its arithmetic).
FIRST_CHUNK_WORK = 5e7
FIRST_CHUNK_STEPS = 1000
# Measured on 2 cores, per run: XLA costs ~0.5 s more to compile than a plain tf.function and saves
# 0.1-0.2 ms per optimisation step of the small nets (0.9 ms at width 64, depth 3, 512 points), so it
# pays for itself after some 600-6,000 steps. Switching after 2,000 keeps a session within a small
# factor of the better choice made in hindsight (the ski-rental rule) without a cost model.
XLA_AFTER_STEPS = 2000

_RECORD_FIELDS = ("loss", "accuracy", "grad_norm", "dead_fraction")
FIRST_HIDDEN = "dense_1"
OUTPUT_LAYER = "output"


LEARNED_PREFIX = "learned "


def learned_parameters(net: keras.Model) -> dict[str, Any]:
    """History column -> variable of every parameter the network's op layers learn: ``learned op_1.slope``."""
    return {
        f"{LEARNED_PREFIX}{layer.name}.{name}": variable
        for layer in net.layers
        for name, variable in getattr(layer, "learned", {}).items()
    }


def layer_norm_columns(depth: int) -> list[str]:
    """History columns of the per-layer kernel gradient norms: ``grad_norm_1..grad_norm_<depth>``, ``grad_norm_output``."""
    return [f"grad_norm_{layer}" for layer in range(1, depth + 1)] + ["grad_norm_output"]


# -- runs and results --------------------------------------------------------------------------
@dataclass
class RunResult:
    """Outcome of one run.

    ``status``: "diverged" (loss NaN/inf or exploded, at ``diverged_epoch``; training stopped),
    "stopped" (``should_stop``), "no_gradient" (the first layer's kernel gradient was exactly
    zero in each of the first ``NO_GRADIENT_EPOCHS`` epochs, or all if fewer; training went on),
    else "ok". ``model`` is the trained Keras network (outputs logits for classification).
    ``seconds`` is the run's wall time including model build and compilation; ``steps_per_second`` counts optimisation steps (mini-batches) per second of
    warm training (every ``fit`` call but the one that traced and compiled, which counts only
    when there was no other)."""

    run: Run
    status: str
    history: pd.DataFrame
    diverged_epoch: int | None
    seconds: float
    steps_per_second: float
    model: keras.Model
    error: str | None = None  # status "failed": the exception your op or layer raised while training


def _error_line(error: BaseException) -> str:
    """``Type: message``, the last line of a traced error, at most 300 characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[-1] if len(lines) > 1 and "in user code" in lines[0] else " ".join(lines)
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{type(error).__name__}: {text}"


# -- data order -------------------------------------------------------------------------------
def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The order of the ``n`` points in ``epoch`` (0-based): ``default_rng([seed, epoch]).permutation(n)``.

    One independent stream per (seed, epoch), so a paused session resumes with the same order.
    """
    return np.random.default_rng([seed, epoch]).permutation(n).astype(np.int32)


def batch_order(n: int, batch_size: int | None, seed: int, epoch: int) -> list[np.ndarray]:
    """The index arrays of the mini-batches of ``epoch`` (0-based), in order; every run sees these.

    Full batch (``batch_size`` None or >= n) is one batch of all points in their stored order.
    """
    if batch_size is None or batch_size >= n:
        return [np.arange(n, dtype=np.int32)]
    order = epoch_permutation(n, seed, epoch)
    return [order[start : start + batch_size] for start in range(0, n, batch_size)]


# -- model ------------------------------------------------------------------------------------
def _kernel_seed(seed: int, layer: int) -> int:
    """Initialiser seed of hidden layer ``layer`` (0: the output layer); see ``SEED_STRIDE``."""
    return seed * SEED_STRIDE + layer + (DEEP_SEED_OFFSET if layer >= SEED_STRIDE else 0)


def build_model(
    input_dim: int, run: Run | None, *, width: int = DEFAULT_WIDTH, depth: int = 1, seed: int = 0
) -> keras.Model:
    """``Input -> [Dense(width) -> op] x depth -> Dense(1)``; the output is a logit or a value."""
    input_dim = check_int("input_dim", input_dim, 1)
    width = check_int("width", width, 1, MAX_WIDTH)
    depth = check_int("depth", depth, 1, MAX_DEPTH)
    run = Run(None) if run is None else run
    inputs = keras.Input(shape=(input_dim,), name="x")
    hidden = inputs
    for layer in range(1, depth + 1):
        initializer = keras.initializers.GlorotUniform(seed=_kernel_seed(seed, layer))
        hidden = keras.layers.Dense(width, kernel_initializer=initializer, name=f"dense_{layer}")(hidden)
        if run.layer is not None and run.gradient == "custom":
            hidden = run.layer()(hidden)  # built as the checker builds it: no arguments (so no name)
        elif run.op is None:
            hidden = keras.layers.Activation(keras.activations.relu, name=f"op_{layer}")(hidden)
        else:
            hidden = ops.SurrogateLayer(
                run.spec, gradient=run.gradient, params=dict(run.params), trainable_params=run.learned, name=f"op_{layer}"
            )(hidden)
    initializer = keras.initializers.GlorotUniform(seed=_kernel_seed(seed, 0))
    outputs = keras.layers.Dense(1, kernel_initializer=initializer, name=OUTPUT_LAYER)(hidden)
    if run.layer is not None:
        name = f"{run.layer.__name__}_{run.gradient}"
    else:
        name = "relu" if run.op is None else f"{run.spec.key}_{run.gradient}"
    return keras.Model(inputs, outputs, name=name)


class _ChunkTrainer(keras.Model):
    """Wraps a network; one ``train_step`` = a chunk of real epochs, each with all its
    mini-batches, in one compiled call (nested in-graph loops, so XLA pays no per-epoch launch).

    The fed element is ``(first_epoch, count)`` plus, for mini-batch training, the padded point
    order of each of the chunk's epochs (always ``chunk`` rows, so shapes never change and the
    step compiles once). Each epoch writes its history row into ``records[epoch]``; the loop
    ends early after an epoch whose loss is not finite.
    """

    def __init__(self, net: keras.Model, dataset: tasks.Dataset, batch_size: int | None):
        super().__init__(name=f"trainer_{net.name}")
        self.net = net
        n = dataset.n
        self._classification = dataset.is_classification
        self._x = tf.constant(dataset.x)
        self._y = tf.constant(dataset.y[:, None])
        self.full_batch = batch_size is None or batch_size >= n
        self._batch_size = n if self.full_batch else batch_size
        self._batches = math.ceil(n / self._batch_size)
        # padded slots (the short last batch) get weight 0: same gradient as a smaller batch
        mask = np.arange(self._batches * self._batch_size) < n
        self._batch_weights = tf.constant(mask.reshape(self._batches, self._batch_size, 1).astype(np.float32))
        # a plain tf.Variable in a list: not a Keras weight, invisible to the optimiser
        first = net.get_layer(FIRST_HIDDEN)
        variable_ids = [id(v) for v in net.trainable_variables]
        self._kernel_index = variable_ids.index(id(first.kernel))
        self._bias_index = variable_ids.index(id(first.bias))
        hidden = [layer for layer in net.layers if layer.name.startswith("dense_")]
        kernels = [net.get_layer(f"dense_{layer}").kernel for layer in range(1, len(hidden) + 1)]
        kernels.append(net.get_layer(OUTPUT_LAYER).kernel)
        self._layer_kernel_indices = [variable_ids.index(id(kernel)) for kernel in kernels]
        learned = learned_parameters(net)
        self._learned = list(learned.values())
        self.record_fields = (*_RECORD_FIELDS, *layer_norm_columns(len(hidden)), *learned)
        self._records = [tf.Variable(tf.zeros((MAX_EPOCHS, len(self.record_fields))), trainable=False)]
        self.built = True

    @property
    def records(self) -> tf.Variable:
        return self._records[0]

    @property
    def batches_per_epoch(self) -> int:
        return self._batches

    @property
    def padded_points(self) -> int:
        return self._batches * self._batch_size

    def call(self, inputs, training=False):
        return self.net(inputs, training=training)

    def _per_point_loss(self, logits: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
        if self._classification:
            return tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits)
        return tf.square(logits - targets)

    def _gradients(self, x, targets, weights, variables):
        """(weighted mean loss, logits, gradients with zeros where autodiff gives None)."""
        with tf.GradientTape() as tape:
            logits = self.net(x, training=True)
            losses = self._per_point_loss(logits, targets)
            if weights is None:
                loss = tf.reduce_mean(losses)
            else:
                loss = tf.reduce_sum(losses * weights) / tf.reduce_sum(weights)
        grads = tape.gradient(loss, variables)
        grads = [tf.zeros(v.shape, v.dtype) if g is None else g for g, v in zip(grads, variables, strict=True)]
        return loss, logits, grads

    def _record(self, epoch, loss, logits, grads) -> None:
        if self._classification:
            correct = tf.equal(logits > 0.0, self._y > 0.5)
            accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
        else:
            accuracy = tf.constant(float("nan"))
        kernel_grad, bias_grad = grads[self._kernel_index], grads[self._bias_index]
        unit_alive = tf.logical_or(tf.reduce_any(kernel_grad != 0.0, axis=0), bias_grad != 0.0)
        dead_fraction = 1.0 - tf.reduce_mean(tf.cast(unit_alive, tf.float32))
        layer_norms = [tf.norm(grads[index]) for index in self._layer_kernel_indices]
        learned = [tf.cast(tf.convert_to_tensor(variable), tf.float32) for variable in self._learned]
        row = tf.stack([loss, accuracy, tf.norm(kernel_grad), dead_fraction, *layer_norms, *learned])
        self.records.scatter_nd_update(tf.reshape(epoch, [1, 1]), row[None, :])

    def _epoch(self, epoch, order, variables):
        """One real epoch; returns its start-of-epoch full-data loss."""
        loss, logits, grads = self._gradients(self._x, self._y, None, variables)
        self._record(epoch, loss, logits, grads)
        if self.full_batch:
            self.optimizer.apply(grads, variables)
            return loss
        batches = tf.reshape(order, (self._batches, self._batch_size))

        def batch_step(index):
            points = batches[index]
            _, _, batch_grads = self._gradients(
                tf.gather(self._x, points), tf.gather(self._y, points), self._batch_weights[index], variables
            )
            self.optimizer.apply(batch_grads, variables)
            return (index + 1,)

        tf.while_loop(lambda index: index < self._batches, batch_step, (tf.constant(0),))
        return loss

    def train_step(self, data):
        variables = self.net.trainable_variables
        first_epoch, count = data[0], data[1]
        orders = data[2] if len(data) > 2 else None

        def epoch_step(offset, finite):
            order = None if orders is None else orders[offset]
            loss = self._epoch(first_epoch + offset, order, variables)
            return offset + 1, tf.math.is_finite(loss)

        offset, _ = tf.while_loop(
            lambda offset, finite: tf.logical_and(offset < count, finite),
            epoch_step,
            (tf.constant(0), tf.constant(True)),
        )
        return {"epochs": offset}


# -- the session ------------------------------------------------------------------------------
@dataclass
class _RunState:
    run: Run
    net: keras.Model
    trainer: _ChunkTrainer
    rows: list[dict[str, float]] = field(default_factory=list)
    status: str | None = None  # None while training; "diverged" / "stopped" / "failed" once finished early
    error: str | None = None  # "failed": what the user's code raised
    diverged_epoch: int | None = None
    build_seconds: float = 0.0
    fit_seconds: list[float] = field(default_factory=list)
    fit_steps: list[int] = field(default_factory=list)
    fit_warm: list[bool] = field(default_factory=list)  # False for the fit that traced and compiled
    compiled: bool = False  # the current training step has been traced (and compiled)
    jit_compile: bool = False
    xla_failed: bool = False  # XLA could not compile this run's step (a user op): it stays plain
    optimizer_start: list[np.ndarray] = field(default_factory=list)
    learned_start: list[np.ndarray] = field(default_factory=list)  # learned op parameters at epoch 0


class _StreamEpochs(keras.callbacks.Callback):
    """After each ``fit`` chunk: turn the chunk's records into history rows, stream them through
    ``on_epoch``, stop on a diverged loss (see ``DIVERGENCE_FACTOR``; rows after it are dropped)
    or when ``should_stop()`` says so."""

    def __init__(self, session: Session, index: int, first_epoch: int, count: int, on_epoch, should_stop):
        super().__init__()
        self._session, self._index = session, index
        self._first_epoch, self._count = first_epoch, count
        self._on_epoch, self._should_stop = on_epoch, should_stop

    def on_epoch_end(self, epoch, logs=None):
        state = self._session._states[self._index]
        records = state.trainer.records.numpy()[self._first_epoch : self._first_epoch + self._count]
        for offset, values in enumerate(records):
            row = {"epoch": self._first_epoch + offset + 1}
            row.update({name: float(value) for name, value in zip(state.trainer.record_fields, values, strict=True)})
            if not self._session.dataset.is_classification:
                del row["accuracy"]
            state.rows.append(row)
            if self._on_epoch is not None:
                self._on_epoch(self._index, row["epoch"], dict(row))
            if not math.isfinite(row["loss"]) or row["loss"] > DIVERGENCE_FACTOR * max(1.0, state.rows[0]["loss"]):
                state.status, state.diverged_epoch = "diverged", row["epoch"]
                self.model.stop_training = True
                return
        if self._should_stop is not None and self._should_stop():
            self._session._stop_requested = True
            self.model.stop_training = True


class Session:
    """Built models plus optimiser state for a list of runs; :meth:`step` trains all of them for
    a few more epochs (resumable: the page can step one epoch at a time), :meth:`results` reads
    the outcome so far. All runs share initial weights and batch order.

    Thread-safe: :meth:`step`, :meth:`reset`, :meth:`results` and :meth:`snapshot` take the
    session's lock. Streamlit starts a new script run on a click while the superseded one may
    still be inside ``step`` (its "fast reruns"); without the lock the new run would read a
    half-trained chunk (one run's rows, the other's not, ``epoch`` not yet advanced).
    """

    def __init__(
        self,
        state: TrainState | None = None,
        /,
        *,
        dataset: tasks.Dataset | None = None,
        epochs_per_chunk: int | None = None,
        **controls: Any,
    ):
        """``state``'s runs, model, optimiser and seed (``controls``: fields of :class:`TrainState` to use
        instead, e.g. ``Session(task="xor", runs=[Run("atan")])``); ``dataset``: train on it instead of the one
        the state's task, n, noise and seed generate. ``epochs_per_chunk``: a fixed chunk length (default:
        adaptive, see :meth:`step`)."""
        state = TrainState(**controls) if state is None else state.replace(**controls)
        if not state.runs:
            raise ValueError("runs must be a non-empty list of Run")
        self.state = state
        self.width, self.depth, self.seed = state.width, state.depth, state.seed
        self.optimizer, self.learning_rate, self.batch_size = state.optimizer, state.learning_rate, state.batch_size
        if dataset is not None and not isinstance(dataset, tasks.Dataset):
            raise ValueError(f"dataset must be a tasks.Dataset, got {dataset!r}")
        self.dataset = state.dataset() if dataset is None else dataset
        self.runs = list(state.runs)
        self._adaptive_chunks = epochs_per_chunk is None
        if epochs_per_chunk is None:
            n, batch = self.dataset.n, min(self.batch_size or self.dataset.n, self.dataset.n)
            capacity = MAX_EPOCHS_PER_CHUNK if batch == n else ORDER_BUFFER_POINTS // (math.ceil(n / batch) * batch)
            self.epochs_per_chunk = max(1, min(MAX_EPOCHS_PER_CHUNK, capacity))
        else:
            self.epochs_per_chunk = check_int("epochs_per_chunk", epochs_per_chunk, 1, MAX_EPOCHS_PER_CHUNK)
        self.epoch = 0  # epochs done by every run still training
        self._stop_requested = False
        self._lock = threading.RLock()
        start = time.perf_counter()
        template = build_model(self.dataset.input_dim, None, width=self.width, depth=self.depth, seed=self.seed)
        self.initial_weights = template.get_weights()
        self._dense_weights = {layer.name: layer.get_weights() for layer in template.layers if layer.weights}
        template_seconds = time.perf_counter() - start
        batch = min(self.batch_size or self.dataset.n, self.dataset.n)
        steps_per_epoch = math.ceil(self.dataset.n / batch)
        self.xla_from_epoch = math.ceil(XLA_AFTER_STEPS / steps_per_epoch)
        self._states = [self._build_or_explain(run) for run in self.runs]
        self._states[0].build_seconds += template_seconds  # built once; booked to the first run
        # Each trace of a custom gradient into these models' training and prediction graphs leaves a gradient
        # function in TensorFlow's registry that keeps the graph alive (ops.traced_gradients); give them back
        # when this session is garbage, so a server training session after session does not grow.
        release = weakref.finalize(self, traced_gradients.release, [v for state in self._states for v in state.net.variables])
        release.atexit = False  # at exit the process gives everything back; TensorFlow may already be half torn down
        parameters = self._states[0].net.count_params()
        first = min(int(FIRST_CHUNK_WORK // (self.dataset.n * parameters)), FIRST_CHUNK_STEPS // steps_per_epoch)
        self._chunk = self.epochs_per_chunk if not self._adaptive_chunks else max(1, min(self.epochs_per_chunk, first))

    # -- building ---------------------------------------------------------------------------
    def _build_or_explain(self, run: Run) -> _RunState:
        """:meth:`_build`; ValueError naming the run if your op or layer cannot even be built into a model."""
        try:
            return self._build(run)
        except ValueError:
            raise
        except Exception as error:  # noqa: BLE001 - only for code this project did not write
            if not is_users(run):
                raise
            raise ValueError(f"{run.label} cannot be built into a model: {_error_line(error)}") from None

    def _build(self, run: Run) -> _RunState:
        start = time.perf_counter()
        net = build_model(self.dataset.input_dim, run, width=self.width, depth=self.depth, seed=self.seed)
        self._set_initial_weights(net)
        trainer = _ChunkTrainer(net, self.dataset, self.batch_size)
        state = _RunState(run=run, net=net, trainer=trainer)
        optimizer = OPTIMIZERS[self.optimizer](learning_rate=self.learning_rate)
        optimizer.build(net.trainable_variables)
        trainer.compile(optimizer=optimizer, jit_compile=False)
        state.optimizer_start = [variable.numpy() for variable in optimizer.variables]
        state.learned_start = [variable.numpy() for variable in learned_parameters(net).values()]
        state.build_seconds = time.perf_counter() - start
        return state

    def _set_initial_weights(self, net: keras.Model) -> None:
        """Every Dense layer's initial weights (the same in every run); op layers keep their own (a learned
        parameter starts at its given value)."""
        for name, weights in self._dense_weights.items():
            net.get_layer(name).set_weights(weights)

    def _use_xla(self, state: _RunState, jit_compile: bool) -> None:
        """Recompile the run's training step with or without XLA; weights and optimiser state stay."""
        state.trainer.compile(optimizer=state.trainer.optimizer, jit_compile=jit_compile)
        state.jit_compile = jit_compile
        state.compiled = False

    def reset(self) -> None:
        """Back to epoch 0: initial weights, fresh optimiser state, empty histories; compiled
        functions are kept (so a second pass measures warm speed)."""
        with self._lock:
            self._reset()

    def _reset(self) -> None:
        for state in self._states:
            self._set_initial_weights(state.net)
            for variable, value in zip(learned_parameters(state.net).values(), state.learned_start, strict=True):
                variable.assign(value)
            for variable, value in zip(state.trainer.optimizer.variables, state.optimizer_start, strict=True):
                variable.assign(value)  # iteration count and moments; the learning rate is a variable too
            state.rows.clear()
            state.status, state.diverged_epoch = None, None
            state.fit_seconds.clear()
            state.fit_steps.clear()
            state.fit_warm.clear()
        self.epoch = 0
        self._stop_requested = False

    # -- training ---------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """True when no run can train further (all diverged or stopped, or the epoch cap is reached)."""
        return self.epoch >= MAX_EPOCHS or all(state.status is not None for state in self._states)

    def batch_order(self, epoch: int) -> list[np.ndarray]:
        """The mini-batches (index arrays) every run sees in ``epoch`` (0-based)."""
        return batch_order(self.dataset.n, self.batch_size, self.seed, epoch)

    def step(
        self,
        epochs: int = 1,
        *,
        on_epoch: Callable[[int, int, dict], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        seconds: float | None = None,
    ) -> list[RunResult]:
        """Train every still-running run for up to ``epochs`` more epochs, interleaved chunk by chunk.

        ``on_epoch(run_index, epoch, row)`` is called once per epoch and run; ``should_stop()``
        is checked after every chunk but the last (a chunk is about ``CHUNK_SECONDS`` of training
        per run, at most ``epochs_per_chunk`` epochs); True marks the runs still training "stopped".
        ``seconds`` pauses (no status change) after the first chunk that ends past that wall time:
        a page sharing the server trains for a time budget, and the chunk size, not a guess of
        epochs per second, decides how much work one call does.
        """
        with self._lock:
            return self._step(epochs, on_epoch, should_stop, seconds)

    def train_to(self, target_epoch: int, *, seconds: float | None = None) -> int:
        """Train towards epoch ``target_epoch`` (for at most about ``seconds``); return the epoch reached.

        Reads the epoch under the lock, so two callers aiming at the same target never overshoot it.
        """
        with self._lock:
            remaining = min(target_epoch, MAX_EPOCHS) - self.epoch
            if remaining > 0 and not self.finished:
                self._step(remaining, None, None, seconds)
            return self.epoch

    def snapshot(self) -> tuple[int, list[RunResult]]:
        """``(epoch, results)`` read together, between two chunks."""
        with self._lock:
            return self.epoch, self.results()

    def _step(self, epochs: int, on_epoch, should_stop, seconds: float | None) -> list[RunResult]:
        started = time.perf_counter()
        epochs = check_int("epochs", epochs, 1, MAX_EPOCHS)
        if self.epoch + epochs > MAX_EPOCHS:
            raise ValueError(
                f"epochs = {epochs} is too many: a session trains at most {MAX_EPOCHS} epochs, {self.epoch} are done"
            )
        target = self.epoch + epochs
        while self.epoch < target and not self.finished:
            count = min(self._chunk, target - self.epoch)
            if self.epoch < self.xla_from_epoch:
                count = min(count, self.xla_from_epoch - self.epoch)  # the switch is at the same epoch always
            if seconds is not None:  # within the budget, once the speed is known
                count = min(count, self._epochs_within(seconds - (time.perf_counter() - started)) or count)
            element = self._chunk_element(count)
            last_chunk = self.epoch + count >= target  # nothing left to interrupt after it
            for index, state in enumerate(self._states):
                if state.status is None:
                    self._fit_chunk(index, state, count, element, on_epoch, None if last_chunk else should_stop)
                if self._stop_requested:
                    break
            self.epoch += count
            self._adapt_chunk()
            if self._stop_requested:
                for state in self._states:
                    if state.status is None:
                        state.status = "stopped"
                break
            if seconds is not None and time.perf_counter() - started >= seconds:
                break
        return self.results()

    def _seconds_per_epoch(self) -> float | None:
        """Seconds one epoch of every training run takes, from the fastest warm fit of each (None
        while a run has no warm fit: its only fit also traced the step).

        A fit's time also holds a fixed per-call overhead (Keras, Python, launching the step) that
        grows with the server's load. The fastest rate ever seen is the least affected by it, so
        chunk lengths planned from it do not shrink into all-overhead chunks under load.
        """
        total = 0.0
        for state in self._states:
            if state.status is not None:
                continue
            timed = zip(state.fit_seconds, state.fit_steps, state.fit_warm, strict=True)
            rates = [sec * state.trainer.batches_per_epoch / steps for sec, steps, warm in timed if warm and steps > 0]
            if not rates:
                return None
            total += min(rates)
        return total or None

    def _epochs_within(self, seconds: float) -> int | None:
        per_epoch = self._seconds_per_epoch()
        return None if per_epoch is None else max(1, int(seconds / per_epoch))

    def _adapt_chunk(self) -> None:
        """Next chunk length: about ``CHUNK_SECONDS`` of training per run."""
        if not self._adaptive_chunks:
            return
        training = sum(state.status is None for state in self._states)
        planned = self._epochs_within(CHUNK_SECONDS * max(training, 1))
        if planned is not None:
            self._chunk = max(1, min(self.epochs_per_chunk, planned))

    def _chunk_element(self, count: int) -> tuple:
        """What one train_step consumes: (first epoch, count[, padded orders of every chunk slot])."""
        element = (np.int32(self.epoch), np.int32(count))
        if self.batch_size is None or self.batch_size >= self.dataset.n:
            return element
        padded = self._states[0].trainer.padded_points
        orders = np.zeros((self.epochs_per_chunk, padded), np.int32)
        for offset in range(count):
            order = epoch_permutation(self.dataset.n, self.seed, self.epoch + offset)
            orders[offset, : len(order)] = order
        return (*element, orders)

    def _fit_chunk(self, index: int, state: _RunState, count: int, element: tuple, on_epoch, should_stop) -> None:
        data = tf.data.Dataset.from_tensors(element)
        callback = _StreamEpochs(self, index, self.epoch, count, on_epoch, should_stop)
        rows_before = len(state.rows)
        start = time.perf_counter()
        xla = self.epoch >= self.xla_from_epoch and not state.xla_failed
        if state.jit_compile != xla:
            self._use_xla(state, xla)
        try:
            try:
                state.trainer.fit(data, epochs=1, verbose=0, callbacks=[callback], shuffle=False)
            except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError):
                if not state.jit_compile:
                    raise
                # an op that XLA cannot compile (possible for user ops; it fails before any step ran):
                # the same step without XLA, for the rest of the session
                state.xla_failed = True
                self._use_xla(state, False)
                state.trainer.fit(data, epochs=1, verbose=0, callbacks=[callback], shuffle=False)
        except Exception as error:  # noqa: BLE001 - only for code this project did not write (see below)
            if not is_users(state.run):
                raise
            # your op or layer raised (NumPy in a backward, a wrong gradient shape or dtype): this run
            # stops with the message, the other runs go on
            state.status, state.error = "failed", _error_line(error)
        state.fit_seconds.append(time.perf_counter() - start)
        state.fit_steps.append((len(state.rows) - rows_before) * state.trainer.batches_per_epoch)
        state.fit_warm.append(state.compiled)
        state.compiled = True

    # -- results ----------------------------------------------------------------------------
    def results(self) -> list[RunResult]:
        """A snapshot of every run (usable while training is paused)."""
        with self._lock:
            return [self._result(state) for state in self._states]

    def _result(self, state: _RunState) -> RunResult:
        columns = [
            "epoch",
            "loss",
            *(["accuracy"] if self.dataset.is_classification else []),
            "grad_norm",
            "dead_fraction",
            *layer_norm_columns(self.depth),
            *learned_parameters(state.net),
        ]
        history = pd.DataFrame(state.rows, columns=columns).astype({"epoch": "int64"})
        status = state.status
        if status is None:
            first = history["grad_norm"].iloc[:NO_GRADIENT_EPOCHS]
            status = "no_gradient" if len(first) and bool((first == 0.0).all()) else "ok"
        warm = [
            (sec, steps)
            for sec, steps, is_warm in zip(state.fit_seconds, state.fit_steps, state.fit_warm, strict=True)
            if is_warm
        ]
        warm_seconds, warm_steps = zip(*warm, strict=True) if warm else (state.fit_seconds, state.fit_steps)
        total = sum(warm_seconds)
        return RunResult(
            run=state.run,
            status=status,
            history=history,
            diverged_epoch=state.diverged_epoch,
            seconds=state.build_seconds + sum(state.fit_seconds),
            steps_per_second=sum(warm_steps) / total if total > 0 else 0.0,
            model=state.net,
            error=state.error,
        )


def compare(
    state: TrainState | None = None,
    /,
    *,
    dataset: tasks.Dataset | None = None,
    on_epoch: Callable[[int, int, dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    epochs_per_chunk: int | None = None,
    **controls: Any,
) -> list[RunResult]:
    """Train every run of ``state`` for its ``epochs`` from the same initial weights and batch order (a
    :class:`Session` of the same arguments, stepped once); never raises for a diverging or gradient-less run
    (see ``RunResult.status``). ``compare(task="xor", runs=["atan", "ste_sign"], epochs=50)`` builds the state."""
    session = Session(state, dataset=dataset, epochs_per_chunk=epochs_per_chunk, **controls)
    return session.step(session.state.epochs, on_epoch=on_epoch, should_stop=should_stop)


# -- evaluation on a grid -----------------------------------------------------------------------
@dataclass(frozen=True)
class GridPrediction:
    """A model evaluated on a regular grid covering the data (10 % margin).

    2-D tasks: ``values[iy, ix]`` at ``(x[ix], y[iy])`` (Plotly heatmap/contour order).
    1-D tasks: ``y`` is None and ``values[ix]`` is the prediction at ``x[ix]``.
    Classification values are P(class 1) = sigmoid(logit); regression values are predictions.
    """

    x: np.ndarray
    y: np.ndarray | None
    values: np.ndarray
    kind: str


def _axis(column: np.ndarray, resolution: int) -> np.ndarray:
    low, high = float(column.min()), float(column.max())
    margin = 0.1 * (high - low) or 0.5
    return np.linspace(low - margin, high + margin, resolution, dtype=np.float32)


def predict_grid(model: keras.Model, dataset: tasks.Dataset, resolution: int = 100) -> GridPrediction:
    """Evaluate ``model`` on a ``resolution``-point line (1-D task) or square grid (2-D task)."""
    resolution = check_int("resolution", resolution, 2, MAX_RESOLUTION)
    if dataset.input_dim not in (1, 2):
        raise ValueError(f"predict_grid needs a 1-D or 2-D task, got input_dim {dataset.input_dim}")
    x_axis = _axis(dataset.x[:, 0], resolution)
    if dataset.input_dim == 1:
        points, y_axis = x_axis[:, None], None
    else:
        y_axis = _axis(dataset.x[:, 1], resolution)
        grid_x, grid_y = np.meshgrid(x_axis, y_axis)  # rows follow y
        points = np.stack([grid_x.ravel(), grid_y.ravel()], axis=1)
    outputs = model(tf.constant(points), training=False)
    if dataset.is_classification:
        outputs = tf.math.sigmoid(outputs)
    values = np.asarray(outputs, dtype=np.float32)[:, 0]
    if y_axis is not None:
        values = values.reshape(resolution, resolution)
    return GridPrediction(x=x_axis, y=y_axis, values=values, kind=dataset.kind)
