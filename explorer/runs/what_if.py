"""What if, without retraining: a layer's recorded input histogram under another backward.

A run records, per watched layer and step, how its inputs fell into equal-width bins over [lo, hi] (plus the
inputs below and above that range). Under another op or parameter value the same inputs would get
``g(x)`` as their custom gradient factor (``ops.get(key).surrogate_grad``, upstream 1); each bin's inputs are
given ``g`` at the bin's centre. Two figures come out:

* the **zero-gradient share**: inputs whose bin centre has ``g = 0``, over every input recorded (the under- and
  overflow included in the total: their ``g`` is not known, and their share is reported beside, as
  ``outside_share``);
* the **expected gradient mass**: ``sum over bins of count * |g(centre)| / total``, the mean factor a unit of
  upstream gradient keeps on its way through the layer.

It is the same inputs under another backward, not a new training run: the inputs themselves would move if the
network trained with that backward. A bin that straddles a clip boundary counts wholly on the side of its
centre (the recorded ``zero_grad_share`` of the run is exact; this one is within one bin's share of it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import ops

MAX_BINS = 100_000  # a histogram with more bins than this is refused (a bad file, not a run)


@dataclass(frozen=True)
class Histogram:
    """The recorded inputs of one layer at one step: ``counts`` of equal-width bins over [``lo``, ``hi``],
    ``underflow`` inputs below ``lo`` and ``overflow`` above ``hi``. ValueError naming what is wrong when the
    values do not make one (lo, hi finite with lo < hi; 1 to MAX_BINS bins; counts whole and not negative)."""

    lo: float
    hi: float
    counts: np.ndarray
    underflow: int = 0
    overflow: int = 0

    def __post_init__(self) -> None:
        lo, hi = float(self.lo), float(self.hi)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"a histogram needs finite lo < hi, got lo = {lo:g}, hi = {hi:g}")
        counts = np.asarray(self.counts)
        if counts.ndim != 1 or not 1 <= counts.size <= MAX_BINS:
            raise ValueError(f"a histogram needs 1 to {MAX_BINS:,} bins in one row, got shape {counts.shape}")
        if counts.dtype.kind not in "iuf" or not np.all(np.isfinite(counts)) or np.any(counts < 0):
            raise ValueError("histogram counts must be whole numbers >= 0")
        if counts.dtype.kind == "f" and np.any(counts != np.round(counts)):
            raise ValueError("histogram counts must be whole numbers >= 0")
        under, over = _count(self.underflow, "underflow"), _count(self.overflow, "overflow")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "counts", counts.astype(np.int64))
        object.__setattr__(self, "underflow", under)
        object.__setattr__(self, "overflow", over)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Histogram:
        """From a row of a run's ``histograms`` table (``lo``, ``hi``, ``counts``, ``underflow``, ``overflow``)."""
        return cls(row["lo"], row["hi"], np.asarray(row["counts"]), row["underflow"], row["overflow"])

    @property
    def bins(self) -> int:
        return int(self.counts.size)

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(self.lo, self.hi, self.bins + 1)

    @property
    def centres(self) -> np.ndarray:
        edges = self.edges
        return (edges[:-1] + edges[1:]) / 2.0

    @property
    def total(self) -> int:
        return int(self.counts.sum()) + self.underflow + self.overflow


def _count(value: Any, name: str) -> int:
    number = float(value)
    if not math.isfinite(number) or number < 0 or number != round(number):
        raise ValueError(f"histogram {name} must be a whole number >= 0, got {value!r}")
    return int(number)


@dataclass(frozen=True)
class WhatIf:
    """The histogram's inputs under op ``op`` at ``params`` (resolved): see the module docstring."""

    op: str
    params: Mapping[str, float]
    zero_share: float  # share of all recorded inputs whose bin centre gets g = 0
    mass: float  # sum(count * |g(centre)|) / total
    outside_share: float  # share of the inputs below lo or above hi (g unknown; counted in neither figure)
    total: int
    grad: np.ndarray = field(repr=False)  # g at the bin centres

    @property
    def label(self) -> str:
        settings = ", ".join(f"{name} = {value:g}" for name, value in self.params.items())
        return f"{self.op} ({settings})" if settings else self.op


def surrogate_at(op: str, params: Mapping[str, float], x: Sequence[float] | np.ndarray) -> np.ndarray:
    """``g(x)`` of registry op ``op`` at ``params``, for an upstream gradient of 1, in float64."""
    spec = _spec(op)
    values = np.asarray(x, dtype=np.float64)
    return np.asarray(spec.surrogate_grad(values, 1.0, **spec.resolve(params)), dtype=np.float64)


def _spec(op: str) -> ops.OpSpec:
    try:
        return ops.get(op)
    except KeyError as error:
        raise ValueError(f"'{op}' is not a built-in op; what-if takes one of {', '.join(ops.names())}") from error


@functools.lru_cache(maxsize=256)
def _grad_at_centres(op: str, params: tuple[tuple[str, float], ...], lo: float, hi: float, bins: int) -> np.ndarray:
    """g at the centres of ``bins`` equal bins over [lo, hi]: a run's bins are the same at every step, so a step
    slider never calls TensorFlow again. Read-only (shared)."""
    edges = np.linspace(lo, hi, bins + 1)
    grad = surrogate_at(op, dict(params), (edges[:-1] + edges[1:]) / 2.0)
    grad.setflags(write=False)
    return grad


def what_if(histogram: Histogram, op: str, params: Mapping[str, float] | None = None) -> WhatIf:
    """The zero-gradient share and expected gradient mass of ``histogram``'s inputs under ``op`` at ``params``
    (its defaults for the rest); ValueError naming the op or parameter when they are not valid. With no input
    recorded, the shares are NaN."""
    spec = _spec(op)
    resolved = spec.resolve(params or {})
    grad = _grad_at_centres(op, tuple(sorted(resolved.items())), histogram.lo, histogram.hi, histogram.bins)
    total = histogram.total
    if total == 0:
        nan = float("nan")
        return WhatIf(op, resolved, nan, nan, nan, 0, grad)
    counts = histogram.counts
    zero = float(counts[grad == 0.0].sum()) / total
    finite = np.isfinite(grad)
    mass = float(np.sum(counts[finite] * np.abs(grad[finite]))) / total if finite.all() else float("nan")
    outside = (histogram.underflow + histogram.overflow) / total
    return WhatIf(op, resolved, zero, mass, outside, total, grad)
