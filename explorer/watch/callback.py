"""``Watch``: a Keras callback that records, every ``every`` steps of ``model.fit``, what each custom gradient of
the model sees on a fixed probe batch, into a run folder (:mod:`explorer.watch.run_folder`) and TensorBoard.

    model.fit(x, y, epochs=5, callbacks=[explorer.Watch("runs", every=100)])
    explorer.watch(model, (x[:64], y[:64]))          # one record now, in a notebook: .layers is a DataFrame

It records at the hooks and holds no training logic (the style of Keras's ``TensorBoard`` and ``CSVLogger``):
``train_step``, compilation and distribution are left as they are. The step is ``model.optimizer.iterations``
(read once per epoch and at each record; between them the batch index says when ``every`` steps have passed).
The probe batch is ``probe=`` or, by default, the first batch of the training data, kept for the callback's
life so that steps and runs are comparable. Statistics come from one compiled function built once
(:mod:`explorer.watch.probe`), called outside any replica context on the whole probe batch (under
``MultiWorkerMirroredStrategy`` the default probe is gathered from every worker first); only the chief writes.
Under the JAX and torch backends the probe runs eagerly (:mod:`explorer.watch.eager`) and records every
statistic but the mismatch.

A record is made at the start of training, at the beginning of the first batch after each ``every`` steps (the
weights then are those after the step) and at the end. Rows are buffered by the run writer and written as whole
Parquet parts at most every ``flush_seconds`` (and at the end), so a killed run keeps everything up to its last
part; a run whose fit raised is closed as "stopped" by the next fit of the same callback or at exit.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import logging
import math
import os
import platform
import socket
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pandas as pd

import explorer.watch.run_folder as run_folder
import explorer.watch.statistics as statistics

logger = logging.getLogger("explorer.watch")

ON_DEAD = ("warn", "stop")
SCALAR_COLUMNS = (
    "zero_grad_share", "special_share", "below_share", "above_share", "firing_rate", "flip_ratio", "grad_norm",
    "mismatch_cosine", "mismatch_norm_ratio", "mean", "std",
)  # fmt: skip


class DeadGradientWarning(UserWarning):
    """The share of inputs with a zero custom gradient at a layer jumped or passed the threshold."""


def check_writable(root: str | os.PathLike) -> Path:
    """``root`` as a Path if a run folder can be made in it (it, or its nearest existing parent, is a writable
    folder); ``OSError`` naming the folder otherwise. Creates nothing."""
    path = Path(root).expanduser().absolute()
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise NotADirectoryError(f"log_dir {str(path)!r} cannot be written: {str(probe)!r} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PermissionError(f"log_dir {str(path)!r} cannot be written: no write permission on {str(probe)!r}")
    return path


def is_chief(strategy: Any) -> bool:
    """Whether this process writes: always outside multi-worker training; there, the task ``chief``, or worker 0
    of a cluster without a chief (the convention of ``MultiWorkerMirroredStrategy``)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return True
    try:
        cluster = resolver.cluster_spec().as_dict()
    except Exception:  # noqa: BLE001 - no cluster: one process
        return True
    if not cluster:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type == "chief":
        return True
    return task_type in (None, "worker") and int(task_id or 0) == 0 and "chief" not in cluster


def _first_batch_from_fit() -> tuple | None:
    """The first batch of the data ``Model.fit`` is training on, read again from its data adapter (the ``fit``
    frame that calls the callbacks holds it as ``epoch_iterator``); None outside ``fit`` or for a plain Python
    generator, whose batches cannot be read twice."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            iterator = frame.f_locals.get("epoch_iterator")
            adapter = getattr(iterator, "data_adapter", None)
            if adapter is not None:
                if type(adapter).__name__ == "GeneratorDataAdapter":
                    return None
                batch = next(iter(adapter.get_numpy_iterator()))
                return batch if isinstance(batch, tuple) else (batch,)
            frame = frame.f_back
    finally:
        del frame
    return None


def _whole_batch(batch: Any, strategy: Any) -> Any:
    """``batch`` with every per-replica value (a multi-worker fit reads its first batch already distributed) made
    the whole batch again: gathered from every replica of every worker along the batch axis (a collective: every
    worker runs ``on_train_begin`` at the same point), so the probe is the same batch on every worker."""
    if keras.backend.backend() != "tensorflow":
        return batch
    import tensorflow as tf

    def whole(value):
        if isinstance(value, tf.distribute.DistributedValues):
            if strategy is not None:
                return strategy.gather(value, axis=0).numpy()
            return np.concatenate([np.asarray(part) for part in value.values], axis=0)
        return value

    return tf.nest.map_structure(whole, batch)


def _as_probe(probe: Any) -> tuple[Any, Any, Any]:
    """``(x, y, sample_weight)`` from ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``."""
    if isinstance(probe, tuple):
        if not 1 <= len(probe) <= 3:
            raise ValueError(f"probe must be x, (x, y) or (x, y, sample_weight); got a tuple of {len(probe)}")
        x, y, weights = (*probe, None, None)[:3]
        return x, y, weights
    return probe, None, None


def _same_probe(before: tuple, now: tuple) -> bool:
    """Whether two probes hold the same arrays (a fit reads its first batch again as new arrays)."""
    old, new = _flatten(before), _flatten(now)
    if len(old) != len(new):
        return False
    for a, b in zip(old, new, strict=True):
        if a is b:
            continue
        if a is None or b is None:
            return False
        try:
            if not np.array_equal(np.asarray(a), np.asarray(b)):
                return False
        except (TypeError, ValueError):
            return False
    return True


def _probe_size(x: Any) -> int:
    first = [value for value in _flatten(x) if hasattr(value, "shape")]
    return int(first[0].shape[0]) if first and len(first[0].shape) else 1


def _flatten(value: Any) -> list:
    if isinstance(value, Mapping):
        return [v for item in value.values() for v in _flatten(item)]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _flatten(item)]
    return [value]


def _versions(backend: str) -> dict[str, str]:
    from importlib import metadata

    versions = {"keras": keras.__version__, "numpy": np.__version__, "python": platform.python_version()}
    for package, key in (("tensorflow", "tensorflow"), ("gradient-explorer", "gradient_explorer"), ("jax", "jax"),
                         ("torch", "torch")):  # fmt: skip
        if key in ("jax", "torch") and backend != key:
            continue
        try:
            versions[key] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[key] = "not installed" if key != "gradient_explorer" else "source tree"
    return versions


def _summary(model: keras.Model) -> str:
    lines: list[str] = []
    try:
        model.summary(print_fn=lambda line, *args, **kwargs: lines.append(str(line)), line_length=100)
    except Exception as error:  # noqa: BLE001 - a summary is information, never a reason to fail
        return f"(no summary: {type(error).__name__}: {error})"
    return "\n".join(lines)


class Watch(keras.callbacks.Callback):
    """Record what each custom gradient of the model sees, every ``every`` steps (module docstring).

    ``log_dir``: the runs folder (a run is ``log_dir/<name>``; ``name`` defaults to ``<model>-<UTC time>``).
    ``probe``: ``x``, ``(x, y)`` or ``(x, y, sample_weight)``; default the first training batch. ``layers``: the
    names of the layers to watch (default: every custom-gradient layer, see :mod:`explorer.watch.layers`).
    ``references``: ``{layer name: plain forward}`` for your own layers' mismatch. ``reference_sigma``: the width of
    the smoothed reference of an op whose true gradient is zero everywhere. ``bins``: histogram bins.
    ``dead_jump``: warn when a layer's zero-gradient share rises by more than this since the previous record;
    ``dead_threshold``: warn when it reaches this; ``on_dead``: ``"warn"`` or ``"stop"`` (also stops training).
    ``mismatch``: compute the mismatch (a backward per layer through the weights upstream of it).
    ``events``: also write ``tf.summary`` scalars and histograms to ``<run>/events`` for TensorBoard.
    ``write``: False records in memory only (:attr:`steps`, :attr:`layers`, :attr:`histograms`).

    An unwritable ``log_dir`` raises ``OSError`` here, before any training.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike = "runs",
        every: int = 100,
        *,
        name: str | None = None,
        probe: Any = None,
        layers: Sequence[str] | None = None,
        references: Mapping[str, Callable] | None = None,
        reference_sigma: float = 0.5,
        bins: int = statistics.BINS,
        dead_jump: float | None = 0.25,
        dead_threshold: float | None = None,
        on_dead: str = "warn",
        mismatch: bool = True,
        events: bool = True,
        write: bool = True,
        user: str | None = None,
        flush_seconds: float = 2.0,
    ):
        super().__init__()
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a whole number of steps >= 1, got {every!r}")
        if on_dead not in ON_DEAD:
            raise ValueError(f"on_dead must be one of {ON_DEAD}, got {on_dead!r}")
        for label, value in (("dead_jump", dead_jump), ("dead_threshold", dead_threshold)):
            if value is not None and not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ValueError(f"{label} must be a share in (0, 1] or None, got {value!r}")
        if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 10_000:
            raise ValueError(f"bins must be a whole number in [1, 10000], got {bins!r}")
        if not (isinstance(reference_sigma, (int, float)) and 0 < reference_sigma < math.inf):
            raise ValueError(f"reference_sigma must be a positive number, got {reference_sigma!r}")
        if name is not None:
            run_folder.check_name(name)
        if isinstance(layers, str):
            layers = [layers]
        self.log_dir = check_writable(log_dir) if write else None
        self.every, self.run_name, self.probe = every, name, probe
        self.layer_names = list(layers) if layers is not None else None
        self.references = dict(references or {})
        self.reference_sigma, self.bins = float(reference_sigma), bins
        self.dead_jump, self.dead_threshold, self.on_dead = dead_jump, dead_threshold, on_dead
        self.mismatch, self.events, self.write, self.user = mismatch, events, write, user
        self.flush_seconds = flush_seconds
        self._prepared: tuple | None = None  # (model, probe, tensors, watched, skipped, probe function) of the last start
        self._fitting = False  # between on_train_begin and on_train_end
        self._summary_of: tuple | None = None  # (model, its summary text): written in every run's info.json
        self._reset()

    # -- state -----------------------------------------------------------------------------------------------
    def _reset(self) -> None:
        self.watched: list = []
        self.skipped: list[str] = []
        self.chief = True
        self.writer: run_folder.RunWriter | None = None
        self._events_writer = None
        self._probe_fn = None
        self._probe_tensors: tuple | None = None
        self._ranges: dict[str, tuple[float, float]] = {}
        self._previous_outputs: dict[str, np.ndarray] = {}
        self._previous_zero: dict[str, float] = {}
        self._alarmed: set[str] = set()
        self._last_step: int | None = None
        self._epoch_base = 0
        self._probe_keras: tuple | None = None
        self._eager_probe = None
        self._summary_columns: list[list[str]] = []
        self._started = time.monotonic()
        self.stop_reason: str | None = None
        self.backend = keras.backend.backend()
        self._rows: dict[str, list[dict[str, Any]]] = {table: [] for table in run_folder.TABLES}

    @property
    def steps(self) -> pd.DataFrame:
        """Every record's step row in this process (the run folder's ``steps`` table)."""
        return pd.DataFrame(self._rows["steps"])

    @property
    def layers(self) -> pd.DataFrame:
        """Every record's layer rows in this process (the run folder's ``layers`` table)."""
        return pd.DataFrame(self._rows["layers"])

    @property
    def histograms(self) -> pd.DataFrame:
        return pd.DataFrame(self._rows["histograms"])

    @property
    def run_path(self) -> Path | None:
        return self.writer.path if self.writer is not None else None

    # -- hooks -----------------------------------------------------------------------------------------------
    def on_train_begin(self, logs=None) -> None:
        if self._prepared is not None and self._prepared[0] is self.model:
            probe = self._prepared[1]  # a later fit with the same callback: the probe is kept, runs stay comparable
        else:
            probe = self.probe if self.probe is not None else _first_batch_from_fit()
            if probe is not None:
                probe = _whole_batch(probe, getattr(self.model, "distribute_strategy", None))
        if probe is None:
            raise ValueError(
                "Watch found no probe batch: give one, Watch(..., probe=(x, y)) (the training data is a Python "
                "generator, whose batches cannot be read twice, or the callback runs outside Model.fit)"
            )
        self.start(probe)
        self._fitting = True
        self._epoch_base = self._step()
        self._record(self._epoch_base)

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch_base = self._step()  # one read of the optimizer's iterations per epoch

    def on_train_batch_begin(self, batch, logs=None) -> None:
        # Before batch ``batch`` of this epoch, ``batch`` steps of it are done: the weights are those after step
        # ``epoch_base + batch``. Deciding here (not at the batch's end) leaves Keras free to dispatch the other
        # callbacks' batch-end hooks asynchronously and costs no read of the device per batch.
        done = self._epoch_base + int(batch)
        if self._last_step is not None and done // self.every > self._last_step // self.every:
            self._record(self._step())

    def on_train_end(self, logs=None) -> None:
        step = self._step()
        if self._last_step != step:
            self._record(step)
        self._fitting = False
        self.close()

    # -- the work --------------------------------------------------------------------------------------------
    def _step(self) -> int:
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None:
            return 0
        return int(keras.ops.convert_to_numpy(optimizer.iterations))

    def start(self, probe: Any) -> None:
        """Find the layers, build the probe function and open the run (what ``on_train_begin`` does)."""
        self.close(interrupted=self._fitting)  # a fit that began and never reached on_train_end: stopped
        self._reset()
        model = self.model
        x, y, weights = _as_probe(probe)
        self._probe_keras = (x, y, weights)
        if self.backend != "tensorflow":
            self._start_eager(model, x, y, weights)
        else:
            import tensorflow as tf

            import explorer.watch.layers as layer_finder
            from explorer.watch.probe import build_probe

            def tensor(value):
                return None if value is None else tf.nest.map_structure(tf.convert_to_tensor, value)

            cached = self._prepared
            if cached is not None and cached[0] is model and _same_probe(cached[1], (x, y, weights)):
                # a later fit of the same model on the same probe: the layers found and the function traced hold
                self._probe_tensors, self.watched, self.skipped, self._probe_fn = cached[2:]
            else:
                self._probe_tensors = (tensor(x), tensor(y), tensor(weights))
                found = layer_finder.find(model, self._probe_tensors[0], self.layer_names, self.references,
                                          self.reference_sigma)  # fmt: skip
                self.watched, self.skipped = found.watched, found.skipped
                for message in self.skipped:
                    warnings.warn(message, stacklevel=2)
                    logger.warning(message)
                if not self.watched:
                    raise ValueError(
                        f"Watch found no custom-gradient layer to watch in model {model.name!r}: it looks for "
                        + layer_finder.LOOKED_FOR
                        + (f" ({'; '.join(self.skipped)})" if self.skipped else "")
                    )
                self._probe_fn = build_probe(model, self.watched, mismatch=self.mismatch)
                self._prepared = (model, (x, y, weights), self._probe_tensors, self.watched, self.skipped,
                                  self._probe_fn)  # fmt: skip
        strategy = getattr(model, "distribute_strategy", None)
        self.chief = is_chief(strategy) if strategy is not None else True
        if self.write and self.chief:
            self._open(model, _probe_size(x))

    def _start_eager(self, model: keras.Model, x: Any, y: Any, weights: Any) -> None:
        """JAX and torch: the named layers (or the team's own) probed eagerly (:mod:`explorer.watch.eager`)."""
        import explorer.watch.eager as eager
        from explorer.watch.layers import WatchedLayer

        layers = eager.candidate_layers(model, self.layer_names)
        if not layers:
            raise ValueError(
                f"Watch found no layer to watch in model {model.name!r} under KERAS_BACKEND={self.backend}: it "
                "watches the layers you name (layers=[...]) or, without names, every layer whose class is not "
                "Keras's own (your keras.ops.custom_gradient layers)"
            )
        self.watched = [WatchedLayer(layer=layer, name=layer.name, depth=depth,
                                     source="named" if self.layer_names is not None else "yours",
                                     reference=f"none: not recorded under {self.backend}")
                        for depth, layer in enumerate(layers)]  # fmt: skip
        message = (
            f"Watch under KERAS_BACKEND={self.backend} records every statistic but {eager.NOT_RECORDED}; run "
            "the model under KERAS_BACKEND=tensorflow for it"
        )
        warnings.warn(message, stacklevel=3)
        logger.warning(message)
        probe = eager.probe_jax if self.backend == "jax" else eager.probe_torch
        self._eager_probe = lambda: probe(model, layers, x, y, weights)

    def _model_summary(self, model: keras.Model) -> str:
        if self._summary_of is None or self._summary_of[0] is not model:
            self._summary_of = (model, _summary(model))
        return self._summary_of[1]

    def _open(self, model: keras.Model, probe_size: int) -> None:
        name = self.run_name or run_folder.new_run_name(run_folder.check_name(_safe_prefix(model.name)))
        info = {
            "model": model.name, "model_summary": self._model_summary(model), "keras_backend": self.backend,
            "versions": _versions(self.backend), "command": list(sys.argv), "every": self.every,
            "probe_size": probe_size, "user": self.user, "host": socket.gethostname(),
            "layers": [w.info() for w in self.watched], "skipped": self.skipped,
        }  # fmt: skip
        self.writer = run_folder.RunWriter(self.log_dir, name, info, flush_seconds=self.flush_seconds)
        _OPEN.add(self)
        if self.events and self.backend == "tensorflow":
            import tensorflow as tf

            self._events_writer = tf.summary.create_file_writer(str(self.writer.path / "events"))

    def _record(self, step: int) -> None:
        self._last_step = step
        seconds = time.monotonic() - self._started
        if self._eager_probe is not None:
            loss, per_layer = self._eager_probe()
            per_layer = [{**values, "weights": 0} for values in per_layer]
        else:
            from explorer.watch.probe import to_numpy

            loss, per_layer = to_numpy(self._probe_fn(*self._probe_tensors))
        layer_rows, histogram_rows = [], []
        for entry, values in zip(self.watched, per_layer, strict=True):
            row, histogram = self.layer_statistics(entry, values)
            layer_rows.append({"step": step, **row})
            histogram_rows.append({"step": step, **histogram})
        step_row = {"step": step, "loss": loss, "seconds": seconds}
        self._store("steps", [step_row])
        self._store("layers", layer_rows)
        self._store("histograms", histogram_rows)
        self._summaries(step, step_row, layer_rows, histogram_rows)
        self._alarm(step, layer_rows)

    def record(self, step: int | None = None) -> None:
        """One record now, at ``step`` (default: the optimizer's iterations); after :meth:`start` or a fit."""
        if self._probe_keras is None:
            raise ValueError("nothing to record yet: call start(probe) first, or pass the callback to Model.fit")
        self._record(self._step() if step is None else int(step))
        if self.writer is not None and not self.writer.closed:
            self.writer.flush()  # a record asked for by hand is on disk at once

    def layer_statistics(self, entry, values: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
        """One layer's row of the ``layers`` and ``histograms`` tables from the probe's arrays."""
        x, outputs = values["x"], values["y"]
        if entry.name not in self._ranges:
            self._ranges[entry.name] = statistics.histogram_range(x)
            if entry.output_kind is None:
                entry.output_kind = _output_kind(outputs)
        lo, hi = self._ranges[entry.name]
        counts, underflow, overflow = statistics.histogram(x, lo, hi, self.bins)
        below, above = statistics.beyond_shares(x, entry.clip_bounds)
        if int(values["weights"]) > 0:
            cosine, ratio = statistics.mismatch_from_sums(float(values["dot"]), float(values["custom_sq"]),
                                                          float(values["reference_sq"]))  # fmt: skip
        else:
            cosine, ratio = math.nan, math.nan
        previous = self._previous_outputs.get(entry.name)
        flip = statistics.flip_ratio(outputs, previous) if entry.output_kind == "sign" else math.nan
        self._previous_outputs[entry.name] = np.array(outputs, copy=True)
        row = {
            "layer": entry.name, "depth": entry.depth, **statistics.input_summary(x),
            "zero_grad_share": statistics.zero_share(values["local"]),
            "special_share": statistics.special_share(x, [p.x for p in entry.points]),
            "below_share": below, "above_share": above,
            "firing_rate": statistics.firing_rate(outputs) if entry.output_kind == "spike" else math.nan,
            "flip_ratio": flip, "grad_norm": statistics.l2_norm(values["dx"]),
            "mismatch_cosine": cosine, "mismatch_norm_ratio": ratio,
            "reference": entry.reference if int(values["weights"]) > 0 or entry.reference_fn is None
            else f"{entry.reference}; no weights upstream: no mismatch",
            "op": entry.spec.key if entry.spec is not None else None,
        }  # fmt: skip
        histogram = {"layer": entry.name, "lo": lo, "hi": hi, "counts": counts, "underflow": underflow,
                     "overflow": overflow}  # fmt: skip
        return row, histogram

    def _store(self, table: str, rows: list[dict[str, Any]]) -> None:
        self._rows[table].extend(rows)
        if self.writer is not None and not self.writer.closed:
            self.writer.append(table, rows)

    def _summaries(self, step: int, step_row, layer_rows, histogram_rows) -> None:
        """Scalars and histograms for TensorBoard: one ``Summary`` protocol buffer per record, its values carrying
        the metadata TensorBoard's own ``scalar``/``histogram`` summaries carry, written with
        ``tf.summary.experimental.write_raw_pb`` (one op: nothing to trace, and TensorBoard need not be installed
        to write it). A layer's scalars are the columns that apply to it (finite at its first record; the flip
        ratio of a sign). A histogram is the record's fixed bins (under/overflow left out: TensorBoard has no place
        for them)."""
        if self._events_writer is None:
            return
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

        if not self._summary_columns:
            self._summary_columns = [
                [c for c in SCALAR_COLUMNS if _finite(row[c]) or (c == "flip_ratio" and entry.output_kind == "sign")]
                for row, entry in zip(layer_rows, self.watched, strict=True)
            ]
        scalar, histogram = _metadata("scalars", "DATA_CLASS_SCALAR"), _metadata("histograms", "DATA_CLASS_TENSOR")
        summary = summary_pb2.Summary()

        def add_scalar(tag: str, number: float) -> None:
            value = summary.value.add(tag=tag)
            value.metadata.CopyFrom(scalar)
            value.tensor.CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[number],
                                                         tensor_shape=tensor_shape_pb2.TensorShapeProto()))  # fmt: skip

        add_scalar("probe/loss", step_row["loss"])
        for row, columns, bins in zip(layer_rows, self._summary_columns, histogram_rows, strict=True):
            for column in columns:
                add_scalar(f"{row['layer']}/{column}", row[column])
            edges = np.linspace(bins["lo"], bins["hi"], len(bins["counts"]) + 1)
            buckets = np.stack([edges[:-1], edges[1:], np.asarray(bins["counts"], np.float64)], axis=1)
            shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=n)
                                                           for n in buckets.shape])  # fmt: skip
            value = summary.value.add(tag=f"{row['layer']}/inputs")
            value.metadata.CopyFrom(histogram)
            value.tensor.CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=shape,
                                                         tensor_content=buckets.astype("<f8").tobytes()))  # fmt: skip
        with self._events_writer.as_default():
            tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)

    def _alarm(self, step: int, layer_rows: list[dict[str, Any]]) -> None:
        for row in layer_rows:
            name, share = row["layer"], row["zero_grad_share"]
            why = statistics.zero_share_alarm(share, self._previous_zero.get(name), self.dead_jump,
                                              self.dead_threshold)  # fmt: skip
            self._previous_zero[name] = share
            if why is None or name in self._alarmed:
                continue
            self._alarmed.add(name)
            message = (f"layer {name!r} at step {step}: the custom gradient is zero for {share:.1%} of its inputs "
                       f"on the probe batch ({why})")  # fmt: skip
            warnings.warn(DeadGradientWarning(message), stacklevel=2)
            logger.warning(message)
            if self.on_dead == "stop" and self.model is not None:
                self.model.stop_training = True
                self.stop_reason = self.stop_reason or message

    def close(self, interrupted: bool = False) -> None:
        """Write what is buffered and mark the run finished (or stopped, after ``on_dead="stop"``, or when
        ``interrupted``: the fit ended without ``on_train_end``, by an exception or an interrupt)."""
        if interrupted and self.writer is not None and not self.writer.closed and not self.stop_reason:
            self.stop_reason = "training ended without on_train_end (an exception or an interrupt)"
        if self._events_writer is not None:
            self._events_writer.flush()
            self._events_writer.close()
            self._events_writer = None
        if self.writer is not None and not self.writer.closed:
            status = "stopped" if self.stop_reason else "finished"
            self.writer.close(status, self.stop_reason)


_OPEN: weakref.WeakSet = weakref.WeakSet()  # callbacks that opened a run: closed as interrupted at exit if still open


@atexit.register
def _close_interrupted() -> None:
    for callback in list(_OPEN):
        try:
            callback.close(interrupted=callback._fitting)
        except Exception:  # noqa: BLE001, S110 - at exit, a run that cannot be closed stays "running" and reads back
            pass


def _finite(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value)


@functools.cache
def _metadata(plugin: str, data_class: str):
    """The ``SummaryMetadata`` TensorBoard's plugin ``plugin`` writes (``scalars``, ``histograms``)."""
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata()
    metadata.plugin_data.plugin_name = plugin
    metadata.data_class = getattr(summary_pb2, data_class)
    return metadata


def _output_kind(outputs: np.ndarray) -> str | None:
    """For a layer that is not a catalogue op: "spike" when every output is 0 or 1, "sign" when the outputs
    take at most 16 values (a sign or a quantiser), else None."""
    flat = np.asarray(outputs).reshape(-1)
    if not flat.size or not np.all(np.isfinite(flat)):
        return None
    values = np.unique(flat)
    if np.all(np.isin(values, (0.0, 1.0))):
        return "spike"
    return "sign" if values.size <= 16 else None


def _safe_prefix(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in name).lstrip("._-")
    return (cleaned or "run")[:80]


def watch(model: keras.Model, probe: Any, log_dir: str | os.PathLike | None = None, **options: Any) -> Watch:
    """One record of ``model`` on ``probe`` now (a notebook's look inside; ``.layers`` is the table), and the
    callback to keep watching: ``model.fit(..., callbacks=[explorer.watch(model, (x, y))])`` continues it (a
    new run when it starts). Writes a run folder only when ``log_dir`` is given."""
    callback = Watch(log_dir if log_dir is not None else "runs", write=log_dir is not None, probe=probe, **options)
    callback.set_model(model)
    callback.start(probe)
    callback.record()
    return callback
