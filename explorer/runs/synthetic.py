"""A made-up watched run, written with the run folder's own writer: for the tests, the benchmark and a demo.

The layers alternate two built-in ops: ``fast_sigmoid`` (a spike op, threshold 0, no clip boundary) and
``ste_sign`` (clip_value 1: boundaries at -1 and 1). Each layer's inputs at a step are a fixed draw of
``probe_size`` standard normal values (seeded) scaled by a width that grows with depth and drifts with the
step; every statistic of the row (percentiles, shares, firing rate, flip ratio) and the histogram over
[-3, 3] are computed from those same inputs, so the recorded numbers agree with each other as a real run's do.
Gradient norms fall with depth from the output back (so the first layer has the smallest), the loss decays.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from explorer.watch.run_folder import RunWriter

OPS = (("fast_sigmoid", {"slope": 25.0, "threshold": 0.0}), ("ste_sign", {"clip_value": 1.0}))
HISTOGRAM_RANGE = (-3.0, 3.0)
BINS = 48
PERCENTILES = {"p0_1": 0.1, "p1": 1.0, "p25": 25.0, "p50": 50.0, "p75": 75.0, "p99": 99.0, "p99_9": 99.9}


def layer_name(depth: int) -> str:
    op, _ = OPS[depth % len(OPS)]
    return f"{'spike' if op == 'fast_sigmoid' else 'binary'}_{depth}"


def info(layers: int, every: int = 1, probe_size: int = 256, model: str = "synthetic_mlp") -> dict:
    """The ``info.json`` fields of the contract for a run of ``layers`` watched layers."""
    described = []
    for depth in range(layers):
        op, params = OPS[depth % len(OPS)]
        if op == "ste_sign":
            points = [{"x": 0.0, "kind": "jump"}, {"x": -1.0, "kind": "boundary"}, {"x": 1.0, "kind": "boundary"}]
            bounds, family, title = [-1.0, 1.0], "sign", "Straight-through sign"
        else:
            points, bounds, family, title = [{"x": 0.0, "kind": "jump"}], None, "spike", "Fast sigmoid (SuperSpike)"
        described.append({
            "name": layer_name(depth), "depth": depth, "op": op, "params": dict(params), "special_points": points,
            "clip_bounds": bounds, "family": family, "title": title, "source": "catalogue",
        })  # fmt: skip
    return {
        "model": model, "model_summary": f"{layers} watched layers (synthetic)", "keras_backend": "tensorflow",
        "versions": {}, "command": ["synthetic"], "every": every, "probe_size": probe_size, "user": None,
        "host": "localhost", "layers": described,
    }  # fmt: skip


def _width(depth: int, step: int) -> float:
    return (0.6 + 0.15 * depth) * (1.0 + 0.3 * math.sin(step / 50.0))


def records(
    step: int, layers: int, base: np.ndarray, previous: dict[int, np.ndarray], histogram_range=HISTOGRAM_RANGE
) -> tuple[list, list, dict]:
    """The ``layers`` and ``histograms`` rows and the ``steps`` row of one recorded step. ``base`` holds each
    layer's fixed standard normal draw (shape ``(layers, probe_size)``); ``previous`` each layer's outputs at the
    last record (for the flip ratio), updated here; the histogram covers ``histogram_range``."""
    lo, hi = histogram_range
    layer_rows, histogram_rows = [], []
    for depth in range(layers):
        op, params = OPS[depth % len(OPS)]
        x = base[depth] * _width(depth, step) + 0.05 * math.sin(step / 30.0 + depth)
        quantiles = np.percentile(x, list(PERCENTILES.values()))
        row = {"step": step, "layer": layer_name(depth), "depth": depth, "count": int(x.size),
               "mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()), "max": float(x.max()),
               **{key: float(q) for key, q in zip(PERCENTILES, quantiles, strict=True)}}  # fmt: skip
        if op == "ste_sign":
            clip = params["clip_value"]
            outputs = np.where(x >= 0, 1.0, -1.0)
            flips = previous.get(depth)
            row |= {
                "zero_grad_share": float(np.mean(np.abs(x) > clip)), "special_share": float(np.mean(np.abs(x) == clip)),
                "below_share": float(np.mean(x < -clip)), "above_share": float(np.mean(x > clip)),
                "firing_rate": math.nan,
                "flip_ratio": math.nan if flips is None else float(np.mean(flips != outputs)),
            }  # fmt: skip
        else:
            outputs = (x > params["threshold"]).astype(np.float64)
            row |= {
                "zero_grad_share": 0.0, "special_share": float(np.mean(x == params["threshold"])),
                "below_share": math.nan, "above_share": math.nan, "firing_rate": float(outputs.mean()),
                "flip_ratio": math.nan,
            }  # fmt: skip
        previous[depth] = outputs
        row |= {
            "grad_norm": float(math.exp(-0.25 * (layers - 1 - depth)) * (1.0 + 0.2 * math.cos(step / 40.0))),
            "mismatch_cosine": float(0.9 - 0.02 * depth), "mismatch_norm_ratio": float(1.0 + 0.05 * depth),
            "reference": "autodiff",
        }  # fmt: skip
        layer_rows.append(row)
        counts, _ = np.histogram(x, bins=BINS, range=(lo, hi))
        histogram_rows.append({"step": step, "layer": layer_name(depth), "lo": lo, "hi": hi,
                               "counts": counts.astype(np.int64).tolist(),
                               "underflow": int(np.sum(x < lo)), "overflow": int(np.sum(x > hi))})  # fmt: skip
    step_row = {"step": step, "loss": float(2.0 * math.exp(-step / 300.0) + 0.1), "seconds": float(step) * 0.01}
    return layer_rows, histogram_rows, step_row


def write_run(
    root: str | os.PathLike,
    name: str,
    steps: int,
    layers: int = 2,
    *,
    every: int = 1,
    probe_size: int = 256,
    seed: int = 0,
    close: str | None = "finished",
    flush_every: int = 500,
    histogram_range: tuple[float, float] = HISTOGRAM_RANGE,
) -> Path:
    """Write run ``name`` in ``root``: ``steps`` records (steps every, 2 every, ...), ``layers`` watched layers;
    closed with status ``close`` (None: left "running", as a writer that was killed). Returns its folder."""
    writer = RunWriter(root, name, info(layers, every, probe_size), flush_seconds=3600.0)
    for chunk in _chunks(steps, layers, every, probe_size, seed, flush_every, histogram_range):
        for table, rows in chunk.items():
            writer.append(table, rows)
        writer.flush()
    if close is not None:
        writer.close(close)
    else:
        writer.flush()
    return writer.path


def _chunks(steps, layers, every, probe_size, seed, flush_every, histogram_range) -> Iterator[dict[str, list]]:
    base = np.random.default_rng(seed).standard_normal((layers, probe_size))
    previous: dict[int, np.ndarray] = {}
    chunk: dict[str, list] = {"layers": [], "histograms": [], "steps": []}
    for index in range(1, steps + 1):
        layer_rows, histogram_rows, step_row = records(index * every, layers, base, previous, histogram_range)
        chunk["layers"] += layer_rows
        chunk["histograms"] += histogram_rows
        chunk["steps"].append(step_row)
        if index % flush_every == 0 or index == steps:
            yield chunk
            chunk = {"layers": [], "histograms": [], "steps": []}
