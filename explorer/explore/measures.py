"""Numbers that summarise a sweep's custom gradient: peak, width, area, dead zone, mismatch.

All come from the sweep's rows (its exact special points included) by trapezoid / linear
interpolation, so their accuracy is that of the grid: about one grid step in ``fwhm`` and in
``dead_fraction``, and the trapezoid error plus the tails outside [lo, hi] in ``area``.

* ``peak``, ``peak_x``: the custom gradient of largest magnitude (signed) and where it is (the first
  such row if it is a plateau). Taken as plotted, i.e. including the upstream gradient.
* ``fwhm``: total length where the custom gradient is at least half the peak (same sign), linear
  interpolation between rows; NaN if the peak is 0.
* ``area``: trapezoid integral of ``custom_grad / upstream`` over the range (NaN if upstream is 0);
  per unit upstream so that it compares with the forward:
* ``forward_change`` = forward(hi) - forward(lo), and ``jump`` = the sum of the forward's jumps at
  the sweep's declared jump points (forward one row right minus one row left of each).
* ``normalised``: ``area`` is within 2% of a non-zero ``forward_change`` or ``jump`` (a surrogate
  whose area is the jump size passes the step's full change back, like the true derivative does).
* ``dead_fraction``: share of [lo, hi] where the custom gradient is exactly 0 (between two rows that
  are both 0).
* ``max_abs_diff``: largest |custom_grad - true_grad| away from special points (rows more than
  ``EXCLUDE_STEPS`` grid steps from any). Where autodiff returns None the true gradient counts as 0
  (as plotted); rows where it is inf/NaN are skipped (they are reported as singular points).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from explorer.explore.sweeps import Sweep

NORMALISED_TOLERANCE = 0.02
EXCLUDE_STEPS = 2.5
COLUMNS = (
    "op",
    "peak",
    "peak_x",
    "fwhm",
    "area",
    "forward_change",
    "jump",
    "normalised",
    "dead_fraction",
    "max_abs_diff",
)


def _length_at_least(x: np.ndarray, values: np.ndarray, level: float) -> float:
    """Total length where the piecewise-linear interpolant of ``values`` is >= ``level``."""
    above = values - level
    a, b = above[:-1], above[1:]
    dx = np.diff(x)
    both = (a >= 0) & (b >= 0)
    crossing = (a >= 0) != (b >= 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(a >= 0, a / (a - b), b / (b - a))
    return float(dx[both].sum() + (dx[crossing] * share[crossing]).sum())


def _jump_size(df: pd.DataFrame, forward: np.ndarray) -> float:
    rows = np.flatnonzero(np.asarray(df["point"] == "jump"))
    rows = rows[(rows > 0) & (rows < len(df) - 1)]
    return float(np.sum(forward[rows + 1] - forward[rows - 1])) if rows.size else 0.0


def metrics(result: Sweep, points: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row of :data:`COLUMNS` for a :class:`explorer.explore.sweeps.Sweep`.

    ``points`` (a :func:`explorer.explore.points.special_points` table) adds its points, undeclared ones
    included, to those excluded from ``max_abs_diff``; by default only the sweep's declared points are.
    """
    return pd.DataFrame([_metrics_row(result, points)], columns=list(COLUMNS))


def _metrics_row(result: Sweep, points: pd.DataFrame | None = None) -> dict:
    df = result.frame
    x = df["x"].to_numpy(dtype=np.float64)
    forward = df["forward"].to_numpy(dtype=np.float64)
    custom = df["custom_grad"].to_numpy(dtype=np.float64)
    true_grad = df["true_grad"].to_numpy(dtype=np.float64)
    upstream = result.upstream
    grid_step = result.grid_step

    finite = np.isfinite(custom)
    if finite.any():
        best = int(np.argmax(np.where(finite, np.abs(custom), -1.0)))
        peak, peak_x = float(custom[best]), float(x[best])
    else:
        peak, peak_x = float("nan"), float("nan")
    if peak == 0 or not np.isfinite(peak):
        fwhm = float("nan")
    else:
        fwhm = _length_at_least(x, np.sign(peak) * custom, abs(peak) / 2.0)

    area = float(np.trapezoid(custom / upstream, x)) if upstream != 0 else float("nan")
    forward_change = float(forward[-1] - forward[0])
    jump = _jump_size(df, forward)
    references = [r for r in (forward_change, jump) if np.isfinite(r) and r != 0]
    normalised = bool(np.isfinite(area) and any(abs(area - r) <= NORMALISED_TOLERANCE * abs(r) for r in references))

    zero = custom == 0
    dead = np.diff(x)[zero[:-1] & zero[1:]].sum()
    dead_fraction = float(dead / (x[-1] - x[0]))

    special = x[np.asarray(df["point"] != "")]
    if points is not None and len(points):
        special = np.concatenate([special, points["x"].to_numpy(dtype=np.float64)])
    away = np.ones(x.size, dtype=bool)
    if special.size:
        special = np.sort(special)
        at = np.clip(np.searchsorted(special, x), 1, special.size)
        nearest = np.minimum(np.abs(x - special[at - 1]), np.abs(x - special[np.minimum(at, special.size - 1)]))
        away = nearest > EXCLUDE_STEPS * grid_step
    usable = away & np.isfinite(true_grad) & np.isfinite(custom)
    max_abs_diff = float(np.max(np.abs(custom[usable] - true_grad[usable]))) if usable.any() else float("nan")

    row = {
        "op": result.key,
        "peak": peak,
        "peak_x": peak_x,
        "fwhm": fwhm,
        "area": area,
        "forward_change": forward_change,
        "jump": jump,
        "normalised": normalised,
        "dead_fraction": dead_fraction,
        "max_abs_diff": max_abs_diff,
    }
    return row


def metrics_table(sweeps: Sequence[Sweep], labels: Sequence[str] | None = None) -> pd.DataFrame:
    """:func:`metrics` of several sweeps, one row each, with a first column ``label`` (default: the op
    keys) that is also the index, so the table reads well with or without its index shown."""
    records = metrics_records(sweeps, labels)
    # one frame from the rows (a frame per row, concatenated, then a column inserted cost 4x this)
    return pd.DataFrame(records, columns=["label", *COLUMNS], index=pd.Index([r["label"] for r in records]))


def metrics_records(sweeps: Sequence[Sweep], labels: Sequence[str] | None = None) -> list[dict]:
    """The rows of :func:`metrics_table` as dicts (``label`` first), without building a frame: what a page
    turns straight into the Arrow table it sends (:func:`explorer.ui.widgets.arrow_table`)."""
    if labels is not None and len(labels) != len(sweeps):
        raise ValueError(f"labels must have one entry per sweep ({len(sweeps)}), got {len(labels)}")
    rows = [_metrics_row(result) for result in sweeps]
    names = [str(label) for label in labels] if labels is not None else [str(row["op"]) for row in rows]
    return [{"label": name, **row} for name, row in zip(names, rows, strict=True)]
