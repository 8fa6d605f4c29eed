"""Where a sampled curve jumps, bends or stops being finite: the one detector every view uses.

The sweep's decimation keeps both sides of every :func:`jump_intervals` candidate, the special
points confirm the candidates of :func:`jump_intervals` and :func:`kink_nodes` by zooming in on the
op, the figures cut their lines at the confirmed points and ask :func:`discontinuous_sides` which
side of a point to mark open, and the checker reports :func:`runs` of bad values.

All tests are relative, with one set of thresholds:

* :data:`COARSE_RATIO`: a change must be this many times what the neighbouring intervals explain
  (their slopes, for a jump; their change of slope, for a kink; their steps, beside a point);
* :data:`SCALE_FLOOR`: and above this share of the curve's own scale (its finite span for a jump,
  its steepest slope for a kink), so rounding-level wiggles of a flat curve are not features;
* :data:`NOISE_ULPS`: and above the rounding noise of the dtype, ``NOISE_ULPS * eps * |value|``
  (divided by the step for slopes);
* :data:`DECLARED_FLOOR`: beside a point that *declares* a discontinuity of this curve (a jump of
  the forward, a boundary of the custom gradient) any change above this share of the scale counts,
  so a declared jump always shows as a break.
"""

from __future__ import annotations

import numpy as np

COARSE_RATIO = 4.0
SCALE_FLOOR = 1e-3
NOISE_ULPS = 3.0  # worst case of a second difference of correctly rounded values is 2 ulps
DECLARED_FLOOR = 1e-9


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(first, last)`` index of each run of True in ``mask``."""
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return []
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def neighbour_max(values: np.ndarray, offsets: tuple[int, ...]) -> np.ndarray:
    """Per index, the max of ``values`` at the given offsets, ignoring NaN and the array's ends (0 if none)."""
    pad = max(abs(o) for o in offsets)
    padded = np.full(values.size + 2 * pad, -np.inf)
    padded[pad : pad + values.size] = np.where(np.isnan(values), -np.inf, values)
    result = padded[pad + offsets[0] : pad + offsets[0] + values.size].copy()
    for offset in offsets[1:]:
        np.maximum(result, padded[pad + offset : pad + offset + values.size], out=result)
    result[result == -np.inf] = 0.0
    return result


def jump_intervals(x: np.ndarray, v: np.ndarray, eps: float) -> np.ndarray:
    """Intervals ``i`` (between rows i and i+1) whose change the slopes 2 and 3 intervals away do not explain.

    Candidates: a steep smooth curve on a coarse grid can pass, which is why the special points
    confirm each one by zooming in.
    """
    finite = np.isfinite(v)
    valid = finite[1:] & finite[:-1]
    if not valid.any():
        return np.array([], dtype=int)
    dx = np.diff(x)
    with np.errstate(all="ignore"):
        change = np.abs(np.diff(v))
        slope = np.where(valid, change / dx, np.nan)
    explained = dx * neighbour_max(slope, (-3, -2, 2, 3))
    magnitude = np.maximum(np.abs(v[:-1]), np.abs(v[1:]))
    noise = NOISE_ULPS * eps * np.where(valid, magnitude, 0.0)
    floor = SCALE_FLOOR * np.ptp(v[finite])
    is_jump = valid & (change > COARSE_RATIO * explained + noise) & (change > floor)
    return np.flatnonzero(is_jump)


def kink_nodes(x: np.ndarray, v: np.ndarray, eps: float, exclude: np.ndarray | None = None) -> np.ndarray:
    """Nodes whose change of slope is far larger than the change of slope 2-4 nodes away (candidates).

    ``exclude`` marks nodes not to report (next to a confirmed jump, where every slope is steep).
    """
    size = v.size
    if size < 5:
        return np.array([], dtype=int)
    finite = np.isfinite(v)
    dx = np.diff(x)
    with np.errstate(all="ignore"):
        slope = np.diff(v) / dx
    slope[~(finite[1:] & finite[:-1])] = np.nan
    bend = np.full(size, np.nan)
    bend[1:-1] = slope[1:] - slope[:-1]  # node i: slope of interval i minus slope of interval i-1
    strength = np.abs(bend)
    if exclude is not None:
        strength[exclude] = np.nan
    background = neighbour_max(strength, (-4, -3, -2, 2, 3, 4))
    neighbour = neighbour_max(strength, (-1, 1))
    magnitude = np.zeros(size)
    magnitude[1:-1] = np.maximum.reduce([np.abs(v[:-2]), np.abs(v[1:-1]), np.abs(v[2:])])
    step = np.full(size, np.inf)
    step[1:-1] = np.minimum(dx[:-1], dx[1:])
    noise = NOISE_ULPS * eps * np.nan_to_num(magnitude) / step
    usable = np.isfinite(slope)
    slope_scale = np.max(np.abs(slope[usable])) if usable.any() else 0.0
    with np.errstate(invalid="ignore"):
        local_max = (strength >= neighbour) & np.isfinite(strength)
        is_kink = (
            local_max
            & (strength + neighbour > COARSE_RATIO * background + noise)
            & (strength > SCALE_FLOOR * slope_scale)
            & (strength > 0)
        )
    is_kink[[0, size - 1]] = False
    found = np.flatnonzero(is_kink)
    # of two equal neighbours (a kink half-way between nodes) keep one
    return found[np.concatenate(([True], np.diff(found) > 1))] if found.size else found


def finite_edges(v: np.ndarray) -> np.ndarray:
    """Intervals ``i`` where row i and row i+1 differ in being finite (the edges of NaN/inf runs)."""
    finite = np.isfinite(v)
    return np.flatnonzero(finite[1:] != finite[:-1])


def scale(v: np.ndarray) -> float:
    """The size a change is compared with: the finite span, else the largest magnitude, else 1."""
    finite = v[np.isfinite(v)]
    if finite.size == 0:
        return 1.0
    span = float(finite.max() - finite.min())
    return span if span > 0 else max(float(np.abs(finite).max()), 1.0)


def discontinuous_sides(v: np.ndarray, row: int, declared: bool, curve_scale: float) -> tuple[bool, bool]:
    """Does ``v`` jump between rows ``row-1`` and ``row``, and between ``row`` and ``row+1``?

    A side is continuous when its step is within :data:`COARSE_RATIO` times the next steps out
    (the local slope) or within :data:`SCALE_FLOOR` of the curve's scale (:data:`DECLARED_FLOOR`
    for the discontinuity the point declares). A NaN neighbour counts as a break.
    """
    size = v.size

    def step(a: int, b: int) -> float:
        if a < 0 or b >= size or not (np.isfinite(v[a]) and np.isfinite(v[b])):
            return np.nan
        return abs(float(v[b] - v[a]))

    outer = np.nanmax([step(row - 2, row - 1), step(row + 1, row + 2), 0.0])
    tolerance = max(COARSE_RATIO * outer, (DECLARED_FLOOR if declared else SCALE_FLOOR) * curve_scale)
    left, right = step(row - 1, row), step(row, row + 1)
    return bool(left > tolerance), bool(right > tolerance)  # NaN compares False: NaN breaks by itself
