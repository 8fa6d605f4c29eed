"""What a training session is made of: :class:`Run` (one model: an op, its parameters, a gradient mode) and
:class:`TrainState` (every control of the Train page), which :class:`explorer.train.Session`,
:func:`explorer.train.compare` and the presets take, and whose URL form is in :mod:`explorer.state`.

A state is checked (``ValueError`` naming the allowed range) when it is made, before any model.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import keras

import ops
from explorer.train import tasks
from ops import learnable

MAX_EPOCHS = 2000
MAX_WIDTH = 64
MAX_DEPTH = 6
MAX_LEARNING_RATE = 1e7
MAX_SEED = 2**31 - 1
OPTIMIZER_NAMES = ("adam", "sgd", "rmsprop", "adagrad")
DEFAULT_OPTIMIZER = "adam"
DEFAULT_LEARNING_RATE = 0.03
DEFAULT_EPOCHS = 300
DEFAULT_WIDTH = 16


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    allowed = f"[{low}, {high}]" if high is not None else f">= {low}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a whole number {allowed}, got {value!r}")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name} = {value} is outside the allowed range {allowed}")
    return int(value)


def check_learning_rate(value: Any) -> float:
    allowed = f"(0, {MAX_LEARNING_RATE:g}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < value <= MAX_LEARNING_RATE:
        raise ValueError(f"learning_rate must be a number in {allowed}, got {value!r}")
    return float(value)


def check_optimizer(value: Any) -> str:
    if not isinstance(value, str) or value.lower() not in OPTIMIZER_NAMES:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZER_NAMES)}, got {value!r}")
    return value.lower()


@dataclass(frozen=True, eq=False)
class Run:
    """One model to train: an op (key or ``OpSpec``; ``None`` = Keras ReLU baseline), its
    parameters and the gradient mode ("custom": the op's custom gradient; "true": autodiff of
    the plain forward). ``params`` is stored resolved (defaults filled in, validated).

    ``layer``: your own ``keras.layers.Layer`` subclass (built with no arguments) used in place of the
    op, with ``op`` the function it calls (or None if unknown). In "custom" mode the layer itself
    trains, its own custom gradient and all; in "true" mode the function it calls does, through
    autodiff of its forward (``SurrogateLayer(op, gradient="true")``), which needs ``op``. Everything
    else (data, order, Dense initialisers) is the same as for any run."""

    op: str | ops.OpSpec | None
    params: Mapping[str, Any] | None = None
    gradient: str = "custom"
    layer: type | None = None
    learn: bool = False

    def __post_init__(self) -> None:
        if self.gradient not in ops.GRADIENT_MODES:
            raise ValueError(f"gradient must be one of {ops.GRADIENT_MODES}, got {self.gradient!r}")
        if self.layer is not None:
            if not (isinstance(self.layer, type) and issubclass(self.layer, keras.layers.Layer)):
                raise ValueError(f"layer must be a keras.layers.Layer subclass, got {self.layer!r}")
            if self.params or self.learn:
                raise ValueError(f"{self.layer.__name__} is built with no arguments: a layer run takes no params")
            if self.gradient == "true" and self.op is None:
                raise ValueError(
                    f"true mode for {self.layer.__name__} needs the function it calls, and none of its module's "
                    "custom-gradient functions matched its output and input gradient; train it in custom mode"
                )
        if self.op is None:
            if self.params or self.learn:
                raise ValueError("the ReLU baseline Run(None) takes no params")
            object.__setattr__(self, "params", {})
            return
        try:
            spec = ops.get(self.op)
        except KeyError as error:
            raise ValueError(str(error.args[0])) from None
        object.__setattr__(self, "params", spec.resolve(dict(self.params or {})))
        if self.learn:
            if self.gradient != "custom":
                raise ValueError(f"{spec.key}: learning its parameters needs the custom gradient (gradient='custom')")
            if not self.learned:
                reasons = "; ".join(f"{name}: {why}" for name, why in learnable.why_not(spec).items()) or "it has none"
                raise ValueError(f"{spec.key} has no parameter that can be learned ({reasons})")

    def __eq__(self, other: object) -> bool:
        """Same op (by key or spec: the same spec object), parameters, gradient mode, layer and learning."""
        if not isinstance(other, Run):
            return NotImplemented
        mine = (self.spec, dict(self.params), self.gradient, self.layer, self.learn)
        return mine == (other.spec, dict(other.params), other.gradient, other.layer, other.learn)

    __hash__ = None  # params is a dict

    @property
    def learned(self) -> tuple[str, ...]:
        """The parameters this run trains as variables (every learnable one of its op when ``learn``)."""
        if not self.learn or self.op is None or self.layer is not None:
            return ()
        return learnable.learnable(self.spec)

    @property
    def spec(self) -> ops.OpSpec | None:
        return None if self.op is None else ops.get(self.op)

    @property
    def label(self) -> str:
        """A short legend name, e.g. ``ste_sign (custom)`` or ``relu``."""
        if self.layer is not None:
            return f"{self.layer.__name__} ({self.gradient})"
        if self.op is None:
            return "relu"
        spec = self.spec
        changed = {k: v for k, v in self.params.items() if v != spec.defaults()[k]}
        details = ", ".join([f"{k}={v:g}" for k, v in changed.items()] + (["learnt"] if self.learn else []))
        return f"{spec.key} ({self.gradient}{', ' + details if details else ''})"


def is_users(run: Run) -> bool:
    """A run of code this project did not write: your layer, your function or an editor op."""
    return run.layer is not None or (run.op is not None and not run.spec.builtin)


def as_run(run: Run | str | ops.OpSpec | None) -> Run:
    return run if isinstance(run, Run) else Run(run)


@dataclass(frozen=True)
class TrainState:
    """Every control of the Train page: the data set (``task``, ``n`` points, ``noise``, generated from
    ``seed``), the model (``width``, ``depth``), the optimiser, ``learning_rate``, ``batch_size`` (None: full
    batch), ``epochs``, the ``runs`` compared (each an op, its parameters, a gradient mode and whether it learns
    its parameters) and the ``preset`` it came from ("" for none). The seed fixes the data, the initial weights
    and the batch order, so one state trains to the same loss history every time.

    ``runs`` may be given as Runs, op keys, OpSpecs or None (the ReLU baseline); they are stored as Runs."""

    task: str = "xor"
    n: int = tasks.DEFAULT_POINTS
    noise: float = tasks.DEFAULT_NOISE
    width: int = DEFAULT_WIDTH
    depth: int = 1
    optimizer: str = DEFAULT_OPTIMIZER
    learning_rate: float = DEFAULT_LEARNING_RATE
    batch_size: int | None = None
    epochs: int = DEFAULT_EPOCHS
    seed: int = 0
    runs: tuple[Run, ...] = field(default=())
    preset: str = ""

    def __post_init__(self) -> None:
        if self.task not in tasks.names():
            raise ValueError(f"task must be one of {', '.join(tasks.names())}, got {self.task!r}")
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 - frozen
        set_("n", check_int("n", self.n, tasks.MIN_POINTS, tasks.MAX_POINTS))
        if isinstance(self.noise, bool) or not isinstance(self.noise, numbers.Real) or not 0.0 <= self.noise <= tasks.MAX_NOISE:
            raise ValueError(f"noise must be a number in [0, {tasks.MAX_NOISE:g}], got {self.noise!r}")
        set_("noise", float(self.noise))
        set_("width", check_int("width", self.width, 1, MAX_WIDTH))
        set_("depth", check_int("depth", self.depth, 1, MAX_DEPTH))
        set_("optimizer", check_optimizer(self.optimizer))
        set_("learning_rate", check_learning_rate(self.learning_rate))
        if self.batch_size is not None:
            set_("batch_size", check_int("batch_size", self.batch_size, 1, tasks.MAX_POINTS))
        set_("epochs", check_int("epochs", self.epochs, 1, MAX_EPOCHS))
        set_("seed", check_int("seed", self.seed, 0, MAX_SEED))
        runs = self.runs
        if isinstance(runs, (str, Run, ops.OpSpec)) or not isinstance(runs, Sequence):
            raise ValueError("runs must be a list of Run (or op keys)")
        set_("runs", tuple(as_run(run) for run in runs))

    def replace(self, **changes: Any) -> TrainState:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)

    def dataset(self) -> tasks.Dataset:
        """The data set these controls generate (same seed, same points)."""
        return tasks.make(self.task, n=self.n, noise=self.noise, seed=self.seed)
