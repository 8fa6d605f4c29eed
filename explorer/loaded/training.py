"""Train-page sessions with a loaded op or layer, seen from the server: :class:`WorkerSession`.

A session with at least one run of a loaded op or layer trains in the training lane (one worker process
for every such session, :mod:`explorer.loaded.lanes`). Its runs share data and initial weights, so the
whole session goes, built-in runs too. The server keeps a :class:`WorkerSession`: the interface the page
uses of :class:`explorer.train.trainer.Session`, each method one worker call
(:mod:`explorer.loaded.worker_side`) that returns the session's state.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import tensorflow as tf

import explorer.loaded.catalogue as catalogue
import explorer.loaded.lanes as lanes
from explorer import worker


def needs_worker(runs: Any) -> bool:
    """True if any of these trainer Runs calls a loaded op or layer (the session then trains in a worker)."""
    return any(run.layer is not None or (run.op is not None and catalogue.is_loaded(run.spec.key)) for run in runs)


def describe(run: Any) -> tuple:
    """A trainer Run as the worker rebuilds it: ``(kind, key or spec, params or op key, gradient, learn)``;
    loaded ops and layers go by key (the worker loaded the same modules), an editor op as its spec."""
    if run.layer is not None:
        keys = [key for key, item in catalogue.current().layers.items() if item.layer_class is run.layer]
        if not keys:
            raise ValueError(f"{run.layer.__name__} is not a layer loaded with GRADIENT_EXPLORER_OPS")
        return ("layer", keys[0], None if run.op is None else run.spec.key, run.gradient, False)
    if run.op is None:
        return ("relu", None, None, run.gradient, False)
    spec = run.spec
    if spec.builtin or catalogue.is_loaded(spec.key):
        return ("op", spec.key, dict(run.params), run.gradient, run.learn)
    return ("spec", spec, dict(run.params), run.gradient, run.learn)


class WorkerSession:
    """A trainer Session that lives in the training worker, seen from the server: ``train_to``, ``step``,
    ``reset``, ``snapshot`` (results without their models), ``finished``, ``dataset``, ``runs`` and
    :meth:`predictions` (the decision-boundary grids, computed in the worker). A worker that ends, is
    killed or overruns during a call fails every run still training with how it ended (status "failed");
    the worker is replaced, this server and the other sessions go on (a session the replaced worker held
    is built again in the new one and retrained to its epoch at its next call: see :meth:`_ask`).

    Time limit of one call: :func:`explorer.worker.call_seconds` per run (the first chunk traces each run's
    training step), plus the call's training budget."""

    def __init__(self, state: Any) -> None:
        """``state``: the :class:`explorer.train.TrainState` of the session, as :class:`explorer.train.Session` takes it."""
        self.state = state
        self.dataset = state.dataset()
        self.runs = list(state.runs)
        self.id = uuid.uuid4().hex
        self._lock = threading.RLock()
        self._failure: str | None = None
        self._descriptions = [describe(run) for run in self.runs]
        self._controls = state.replace(runs=())  # the runs go as descriptions: a loaded op is rebuilt there by key
        try:
            state = self._remote("new_session", self.id, self._controls, self._descriptions, seconds=0.0)
        except worker.NotSendable:
            raise ValueError(
                "an editor op cannot be trained in one session with a loaded op or layer; compare them in two sessions"
            ) from None
        except (worker.WorkerFailure, LookupError) as error:
            raise ValueError(f"the models could not be built: {getattr(error, 'how', error)}") from None
        self._set(state)

    def _remote(self, body: str, *args: Any, seconds: float) -> tuple:
        """``worker_side.<body>(*args)`` in the training lane."""
        limit = worker.call_seconds() * max(1, len(self.runs)) + seconds
        return lanes.call(catalogue.current(), lanes.TRAINING, lanes.on_worker(body), *args, time_limit=limit)

    def _set(self, state: tuple) -> None:
        from explorer.train import trainer as train

        epoch, finished, rows = state
        self.epoch, self._finished = epoch, finished
        self._results = [
            train.RunResult(run, status, history, diverged, seconds, rate, None, error)
            for run, (status, history, diverged, seconds, rate, error) in zip(self.runs, rows, strict=True)
        ]

    def _fail(self, how: str) -> None:
        """Every run still training fails with ``how`` (kept: the history trained so far)."""
        self._failure = how
        self._finished = True
        for result in self._results:
            if result.status in ("ok", "no_gradient"):
                result.status, result.error = "failed", how

    def _update(self, body: str, *args: Any, seconds: float = 0.0) -> None:
        if self._failure is not None:
            return
        try:
            self._set(self._ask(body, *args, seconds=seconds))
        except worker.WorkerFailure as error:
            self._fail(f"the training step {error.how}; the worker process was replaced")
        except LookupError as error:
            self._fail(str(error.args[0]))

    def _ask(self, body: str, *args: Any, seconds: float) -> Any:
        """``body(id, *args)`` in the worker; if the worker no longer has this session (another
        session's op ended it, or it dropped the oldest), the session is built again there and trained
        back to its epoch first (training is deterministic: same seed, same batches, same numbers)."""
        try:
            return self._remote(body, self.id, *args, seconds=seconds)
        except LookupError:
            pass
        self._remote("new_session", self.id, self._controls, self._descriptions, seconds=0.0)
        if self.epoch > 0:
            self._remote("train_to", self.id, self.epoch, None, seconds=0.0)
        return self._remote(body, self.id, *args, seconds=seconds)

    @property
    def finished(self) -> bool:
        return self._finished

    def train_to(self, target_epoch: int, *, seconds: float | None = None) -> int:
        with self._lock:
            if not self._finished and target_epoch > self.epoch:
                self._update("train_to", int(target_epoch), seconds, seconds=seconds or 0.0)
            return self.epoch

    def step(self, epochs: int = 1) -> list:
        with self._lock:
            self._update("step", int(epochs))
            return list(self._results)

    def reset(self) -> None:
        with self._lock:
            self._update("reset")

    def snapshot(self) -> tuple[int, list]:
        with self._lock:
            return self.epoch, list(self._results)

    def results(self) -> list:
        return self.snapshot()[1]

    def predictions(self, resolution: int = 100) -> list:
        """One :class:`explorer.train.trainer.GridPrediction` per run, computed in the worker; NaN grids
        once the session failed (its models are gone with its worker)."""
        from explorer.train import trainer as train

        with self._lock:
            if self._failure is None:
                try:
                    return self._ask("predictions", int(resolution), seconds=0.0)
                except worker.WorkerFailure as error:
                    self._fail(f"drawing its predictions {error.how}; the worker process was replaced")
                except LookupError as error:
                    self._fail(str(error.args[0]))
            empty = train.predict_grid(_NanModel(), self.dataset, resolution=resolution)
            return [empty for _ in self.runs]


class _NanModel:
    """Stands in for a model lost with its worker: NaN everywhere (an empty plot)."""

    def __call__(self, points: Any, training: bool = False) -> Any:
        return tf.fill((tf.shape(points)[0], 1), float("nan"))
