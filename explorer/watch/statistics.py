"""What the watch callback records per layer, as pure NumPy functions of the arrays one probe batch gives.

Conventions (the run folder's columns, ``docs/run-format`` in the brief of issue 46):

* percentiles are NumPy's default (linear interpolation) over the finite inputs; ``pN`` is the N-th percentile;
* the histogram has a fixed range per layer, chosen at the first record (:func:`histogram_range`) so that steps
  are comparable; a later input below ``lo`` is an underflow, above ``hi`` an overflow (``-inf``/``+inf`` too);
  the bins are NumPy's (equal width, the last one closed); a NaN is counted nowhere (``nonfinite_share`` has it);
* "exactly on a special point" compares in the inputs' own dtype (a float32 input equals the point rounded to
  float32); "beyond a clip boundary" is strictly beyond (a closed boundary's own value is on it, not beyond);
* the zero-gradient share is of the *local* custom gradient (the layer's backward applied to an upstream of
  ones), so an input counts when the surrogate itself passes nothing, whatever the loss sends it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

QUANTILES: Mapping[str, float] = {
    "p0_1": 0.1, "p1": 1.0, "p25": 25.0, "p50": 50.0, "p75": 75.0, "p99": 99.0, "p99_9": 99.9,
}  # fmt: skip
BINS = 64
RANGE_MARGIN = 0.05  # the first record's [min, max] widened by 5% of its span each side


def _flat(values: np.ndarray | Sequence[float]) -> np.ndarray:
    return np.asarray(values).reshape(-1)


def input_summary(x: np.ndarray) -> dict[str, float]:
    """``count``, ``mean``, ``std``, ``min``, the :data:`QUANTILES` and ``max`` of the finite inputs (NaN when
    there are none), and ``nonfinite_share``."""
    flat = _flat(x)
    finite = flat[np.isfinite(flat)].astype(np.float64)
    summary: dict[str, float] = {"count": int(flat.size)}
    if finite.size:
        summary.update(mean=float(finite.mean()), std=float(finite.std()), min=float(finite.min()))
        percentiles = np.percentile(finite, list(QUANTILES.values()))
        summary.update({name: float(value) for name, value in zip(QUANTILES, percentiles, strict=True)})
        summary["max"] = float(finite.max())
    else:
        summary.update({name: math.nan for name in ("mean", "std", "min", *QUANTILES, "max")})
    summary["nonfinite_share"] = float(1.0 - finite.size / flat.size) if flat.size else math.nan
    return summary


def histogram_range(x: np.ndarray, margin: float = RANGE_MARGIN) -> tuple[float, float]:
    """The fixed histogram range of a layer from its first record: the finite inputs' [min, max], widened by
    ``margin`` of the span each side (by ``margin * max(1, |value|)`` when every input is the same value;
    [-1, 1] when there is no finite input)."""
    flat = _flat(x)
    finite = flat[np.isfinite(flat)].astype(np.float64)
    if not finite.size:
        return -1.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    pad = margin * (hi - lo) if hi > lo else margin * max(1.0, abs(lo))
    return lo - pad, hi + pad


def histogram(x: np.ndarray, lo: float, hi: float, bins: int = BINS) -> tuple[list[int], int, int]:
    """``(counts, underflow, overflow)``: ``bins`` equal-width counts over [lo, hi], and how many inputs fall
    below ``lo`` and above ``hi``. ValueError unless ``lo < hi`` and ``bins >= 1``."""
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"histogram range must be finite with lo < hi, got [{lo}, {hi}]")
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    flat = _flat(x).astype(np.float64)
    flat = flat[~np.isnan(flat)]
    underflow, overflow = int(np.count_nonzero(flat < lo)), int(np.count_nonzero(flat > hi))
    inside = flat[(flat >= lo) & (flat <= hi)]
    counts, _ = np.histogram(inside, bins=bins, range=(lo, hi))
    return [int(c) for c in counts], underflow, overflow


def zero_share(local_gradient: np.ndarray) -> float:
    """Share of inputs whose local custom gradient is exactly 0 (NaN for no input)."""
    flat = _flat(local_gradient)
    return float(np.count_nonzero(flat == 0) / flat.size) if flat.size else math.nan


def special_share(x: np.ndarray, points: Iterable[float]) -> float:
    """Share of inputs exactly equal to one of ``points`` (each rounded to the inputs' dtype); 0 with no point."""
    flat = _flat(x)
    if not flat.size:
        return math.nan
    points = [p for p in points if math.isfinite(p)]
    if not points:
        return 0.0
    dtype = flat.dtype if np.issubdtype(flat.dtype, np.floating) else np.float64
    on = np.isin(flat, np.asarray(points, dtype=np.float64).astype(dtype))
    return float(np.count_nonzero(on) / flat.size)


def beyond_shares(x: np.ndarray, bounds: tuple[float | None, float | None] | None) -> tuple[float, float]:
    """``(below_share, above_share)``: shares strictly below the lower and strictly above the upper clip
    boundary (compared in the inputs' dtype); NaN for a side without a boundary."""
    flat = _flat(x)
    lower, upper = bounds if bounds is not None else (None, None)
    dtype = flat.dtype if np.issubdtype(flat.dtype, np.floating) else np.float64

    def share(mask: np.ndarray) -> float:
        return float(np.count_nonzero(mask) / flat.size) if flat.size else math.nan

    below = math.nan if lower is None else share(flat < np.asarray(lower, np.float64).astype(dtype))
    above = math.nan if upper is None else share(flat > np.asarray(upper, np.float64).astype(dtype))
    return below, above


def firing_rate(outputs: np.ndarray) -> float:
    """Share of a spike's outputs that are exactly 1."""
    flat = _flat(outputs)
    return float(np.count_nonzero(flat == 1) / flat.size) if flat.size else math.nan


def flip_ratio(outputs: np.ndarray, previous: np.ndarray | None) -> float:
    """Share of outputs that differ from the previous record's (Larq's flip ratio, on the probe batch); NaN at
    the first record or when the shapes differ."""
    flat = _flat(outputs)
    if previous is None or _flat(previous).shape != flat.shape or not flat.size:
        return math.nan
    return float(np.count_nonzero(flat != _flat(previous)) / flat.size)


def l2_norm(values: np.ndarray) -> float:
    """Euclidean norm in float64 (the gradient reaching a layer's input, over the whole probe batch)."""
    flat = _flat(values).astype(np.float64)
    return float(np.sqrt(np.sum(flat * flat)))


def mismatch(custom: np.ndarray | None, reference: np.ndarray | None) -> tuple[float, float]:
    """``(cosine, norm_ratio)`` between the weight gradients with the custom backward and with the reference:
    ``<c, r> / (|c| |r|)`` and ``|c| / |r|``. NaN when not computable (no weights upstream, a zero reference);
    the cosine is NaN when either is all zero."""
    if custom is None or reference is None:
        return math.nan, math.nan
    c, r = _flat(custom).astype(np.float64), _flat(reference).astype(np.float64)
    if not c.size or c.shape != r.shape:
        return math.nan, math.nan
    return mismatch_from_sums(float(c @ r), float(c @ c), float(r @ r))


def mismatch_from_sums(dot: float, custom_sq: float, reference_sq: float) -> tuple[float, float]:
    """:func:`mismatch` from ``<c, r>``, ``|c|^2`` and ``|r|^2`` (what the compiled probe returns)."""
    norm_c, norm_r = math.sqrt(custom_sq), math.sqrt(reference_sq)
    cosine = dot / (norm_c * norm_r) if norm_c > 0 and norm_r > 0 else math.nan
    ratio = norm_c / norm_r if norm_r > 0 else math.nan
    return cosine, ratio


def zero_share_alarm(share: float, previous: float | None, jump: float | None, threshold: float | None) -> str | None:
    """Why the zero-gradient share ``share`` is alarming, or None: it rose by more than ``jump`` since the
    ``previous`` record, or it passed ``threshold`` (>=)."""
    if not math.isfinite(share):
        return None
    if threshold is not None and share >= threshold:
        return f"at or above the threshold {threshold:g}"
    if jump is not None and previous is not None and math.isfinite(previous) and share - previous > jump:
        return f"up from {previous:.1%} at the previous record (a rise of more than {jump:.0%})"
    return None
