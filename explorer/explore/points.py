"""Special points of a sweep: the ones the op declares, the ones the data shows, and how they compare.

:func:`special_points` returns one row per special point with its one-sided limits, so that the
convention an op uses AT a jump, kink or clipping boundary can be read off and checked.

Detection is numerical, from the sweep data, and then confirmed by zooming in on the op itself:

* a *jump* of the forward, or a *boundary* (jump) of the custom gradient: an interval whose change
  is several times what the slopes two and three intervals away explain. The interval is then
  re-sampled (64 sub-intervals, repeatedly): a real jump keeps at least half of its change in a
  single sub-interval at every zoom level, a steep smooth curve spreads it out. The location ends
  between two adjacent floats (or within 1e-9 grid steps);
* a *kink* of the forward or of the custom gradient: a node whose change of slope is several times
  the change of slope at the nodes two to four steps away, confirmed on a 32x finer grid where a
  real kink keeps its slope change in one or two sub-nodes while a smooth bend spreads it evenly;
* *singular*: the true gradient is inf or NaN; each run of non-finite values is one point, at its
  first row (the onset).

All thresholds are relative: to the neighbouring differences, to the rounding noise of the dtype
(``eps * |value| / step``) and to the column's own scale, so steep smooth surrogates (sigmoid slope
100, gaussian alpha 10, swish_sign beta 20) are not reported at n = 2001. Half-precision sweeps are
analysed on float32 values at the sweep's x (and zoomed in float32): the ops compute half precision in
float32 and only round the result, which adds a staircase of rounding noise but no special point.
Non-finite true gradients are read from the sweep itself, in its dtype.

Jumps and kinks are also looked for 6 grid steps beyond lo and hi, so that a point AT an end of the
range is seen; undeclared points outside [lo, hi] are not reported.

A detected point matches a declared one within 1.5 grid steps. ``kind`` compatibility: a declared
``jump`` needs a forward jump, ``boundary`` a jump of the custom gradient, ``kink`` a kink of the
forward or of the custom gradient, ``singular`` a non-finite true gradient. Other features within
1.5 steps of a declared point (the custom gradient's cusp at a spike op's jump) belong to it. Two
declared points closer than 3 grid steps cannot be told apart: each counts as detected if anything
is found within 1.5 steps of it (``found`` says so). An undeclared point's ``x`` is the roundest
number (fewest decimals) in the interval it was located in, e.g. 0.5 for a step written ``x > 0.5``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

import ops
from explorer.explore import detect
from explorer.explore.sweeps import Sweep, numpy_dtype

COLUMNS = (
    "x",
    "kind",
    "note",
    "declared",
    "detected",
    "status",
    "forward_left",
    "forward_at",
    "forward_right",
    "true_grad",
    "true_grad_missing",
    "custom_grad",
    "custom_left",
    "custom_right",
    "found",
    "features",
)
MATCH_STEPS = 1.5  # a detected point matches a declared one this many grid steps away
JUMP_SHARE = 0.5  # a confirmed jump keeps this share of its change in one sub-interval
MAX_CANDIDATES = 2000
JUMP_SUBDIVISIONS = 64
LOOKAHEAD_POINTS = 50_000  # an evaluation also covers the next zoom round while it stays this small
JUMP_ROUNDS = 10
KINK_SUBDIVISIONS = 128  # over a window of 4 grid steps: 32x finer
EDGE_STEPS = 6  # detection also looks this many grid steps beyond lo and hi
UNRESOLVED_STEPS = 3  # declared points closer than this (in grid steps) cannot be told apart
COMPATIBLE = {
    "jump": {"forward_jump"},
    "boundary": {"custom_jump"},
    "kink": {"forward_kink", "custom_kink"},
    "singular": {"true_nonfinite"},
}
FEATURE_KIND = {
    "forward_jump": "jump",
    "true_nonfinite": "singular",
    "custom_jump": "boundary",
    "forward_kink": "kink",
    "custom_kink": "kink",
}
SEVERITY = ("forward_jump", "true_nonfinite", "forward_kink", "custom_jump", "custom_kink")  # the forward first
COLUMN_OF = {"forward": "forward", "custom": "custom_grad"}
CURVE_COLUMNS = frozenset(COLUMN_OF.values())  # the curves detection looks at


@dataclass(frozen=True)
class Feature:
    """Something the data shows at ``x``: ``name`` is a key of :data:`FEATURE_KIND`."""

    x: float
    name: str
    detail: str


class _Zoom:
    """Evaluates the swept op at new x values, in its compute dtype (float32 for half precision)."""

    def __init__(self, result: Sweep) -> None:
        self.result = result
        self.dtype = ops.compute_dtype(result.dtype)
        self.np_dtype = numpy_dtype(self.dtype)
        self.eps = float(np.finfo(self.np_dtype).eps)

    def values(self, x: np.ndarray, column: str) -> np.ndarray:
        return self.all_values(x)[column]

    def all_values(self, x: np.ndarray) -> dict:
        return self.result.evaluate(x, self.dtype)

    def cast(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64).astype(self.np_dtype).astype(np.float64)


def _strongest(candidates: np.ndarray, score: np.ndarray) -> np.ndarray:
    if candidates.size <= MAX_CANDIDATES:
        return candidates
    return np.sort(candidates[np.argsort(-score[candidates])[:MAX_CANDIDATES]])


# -- confirmation by zooming in ---------------------------------------------------------------------
def _roundest(low: float, high: float, cast) -> float:
    """The value in [low, high] with the fewest decimal digits (after casting to the dtype)."""
    centre = 0.5 * (low + high)
    for digits in range(0, 18):
        candidate = float(cast(np.array([round(centre, digits)]))[0])
        if low <= candidate <= high:
            return candidate
    return float(cast(np.array([centre]))[0])


def _pick(values: dict, columns: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Row ``r`` of the result is row ``r`` of ``values[columns[r]]`` (each reshaped to ``shape``), in the
    dtype the evaluation returned (the same for every curve)."""
    names = sorted(set(columns.tolist()))
    if len(names) == 1:
        return values[names[0]].reshape(shape)
    picked = np.empty(shape, dtype=values[names[0]].dtype)
    for column in names:
        rows = columns == column
        picked[rows] = values[column].reshape(shape)[rows]
    return picked


def _confirm_jumps(
    zoom: _Zoom, columns: np.ndarray, left: np.ndarray, right: np.ndarray, grid_step: float,
    value_left: np.ndarray, value_right: np.ndarray,
) -> list[tuple[int, float, float, float, float]]:
    """Zoom into each [left, right] of the curve ``columns[row]`` names (whose values there are
    ``value_left``, ``value_right``); keep real jumps as (row, low, high, value_low, value_high).

    The rows of every curve share one evaluation per round. While few rows are active, an evaluation
    also covers the next round (:data:`LOOKAHEAD_POINTS`): the sub-grids of all 64 sub-intervals, one of
    which the next round re-samples, made by the same arithmetic as that round would, so the rounds and
    their results are the same with or without it, in about half the calls (each call costs the same for
    a few dozen points as for thousands). The values at the final ends are those of the round that found
    them (no evaluation of its own)."""
    low, high = left.astype(np.float64).copy(), right.astype(np.float64).copy()
    value_low, value_high = value_left.astype(np.float64).copy(), value_right.astype(np.float64).copy()
    active = np.ones(low.size, dtype=bool)
    confirmed = np.ones(low.size, dtype=bool)
    fractions = np.linspace(0.0, 1.0, JUMP_SUBDIVISIONS + 1)
    ahead: dict[int, np.ndarray] = {}  # row -> its values on the grid the next round samples
    for _ in range(JUMP_ROUNDS):
        width_floor = np.maximum(4.0 * zoom.eps * np.maximum(np.abs(low), np.abs(high)), 1e-9 * grid_step)
        active &= (high - low) > width_floor
        if not active.any():
            break
        rows = np.flatnonzero(active)
        fine = zoom.cast(low[rows, None] + (high[rows] - low[rows])[:, None] * fractions)
        look_ahead = False
        if all(int(row) in ahead for row in rows):
            values = np.stack([ahead[int(row)] for row in rows])
        else:
            look_ahead = fine.size * JUMP_SUBDIVISIONS <= LOOKAHEAD_POINTS
            if look_ahead:  # every sub-interval's grid, as the next round would make it from (low, high)
                following = zoom.cast(fine[:, :-1, None] + (fine[:, 1:] - fine[:, :-1])[:, :, None] * fractions)
                both = zoom.all_values(np.concatenate([fine.ravel(), following.ravel()]))
                values = _pick({c: v[: fine.size] for c, v in both.items() if c in CURVE_COLUMNS}, columns[rows], fine.shape)
                later = _pick({c: v[fine.size :] for c, v in both.items() if c in CURVE_COLUMNS}, columns[rows], following.shape)
            else:
                values = _pick(zoom.all_values(fine.ravel()), columns[rows], fine.shape)
        ahead.clear()
        with np.errstate(invalid="ignore"):
            steps = np.abs(np.diff(values, axis=1))
        steps = np.where(np.isfinite(steps), steps, np.inf)
        total = steps.sum(axis=1)
        best = steps.argmax(axis=1)
        share = steps[np.arange(rows.size), best] / np.where(total > 0, total, np.inf)
        real = (share >= JUMP_SHARE) | np.isinf(total)
        confirmed[rows[~real]] = False
        active[rows[~real]] = False
        keep = rows[real]
        low[keep] = fine[real, best[real]]
        high[keep] = fine[real, best[real] + 1]
        value_low[keep] = values[real, best[real]]
        value_high[keep] = values[real, best[real] + 1]
        if look_ahead:
            ahead.update({int(rows[k]): later[k, best[k]] for k in np.flatnonzero(real)})
        stuck = keep[low[keep] == high[keep]]
        active[stuck] = False
    return [(int(r), low[r], high[r], value_low[r], value_high[r]) for r in np.flatnonzero(confirmed)]


def _confirm_kinks(
    zoom: _Zoom, columns: np.ndarray, centres: np.ndarray, half_widths: np.ndarray
) -> list[tuple[int, float, float, float, float]]:
    """Re-sample 4 grid steps around each node 32x finer, on the curve ``columns[row]`` names; keep real kinks
    as (row, x, tolerance, slope_left, slope_right). One evaluation for the rows of every curve."""
    if centres.size == 0:
        return []
    fractions = np.linspace(-1.0, 1.0, KINK_SUBDIVISIONS + 1)
    fine = zoom.cast(centres[:, None] + half_widths[:, None] * fractions)
    values = _pick(zoom.all_values(fine.ravel()), columns, fine.shape)
    found = []
    for row in range(centres.size):
        x, v = np.unique(fine[row], return_index=True)
        v = values[row][v]
        if x.size < 12 or not np.all(np.isfinite(v)):
            continue
        dx = np.diff(x)
        slope = np.diff(v) / dx
        bend = slope[1:] - slope[:-1]  # at interior nodes 1..m-2
        strength = np.abs(bend)
        best = int(np.argmax(strength))
        pair = max(
            abs(bend[best] + bend[best - 1]) if best > 0 else 0.0,
            abs(bend[best] + bend[best + 1]) if best + 1 < bend.size else 0.0,
            strength[best],
        )
        far = np.abs(np.arange(bend.size) - best) >= 3
        background = strength[far].max() if far.any() else 0.0
        noise = detect.NOISE_ULPS * zoom.eps * np.max(np.abs(v)) / dx.min()
        if not pair > detect.COARSE_RATIO * background + noise:
            continue
        # the kink lies where the straight lines through the sub-intervals on either side meet
        node = best + 1
        left_i, right_i = max(node - 2, 0), min(node + 1, slope.size - 1)
        slope_left, slope_right = slope[left_i], slope[right_i]
        x_left, v_left = x[left_i], v[left_i]
        x_right, v_right = x[right_i + 1], v[right_i + 1]
        if slope_left != slope_right:
            where = (v_right - v_left + slope_left * x_left - slope_right * x_right) / (slope_left - slope_right)
        else:
            where = x[node]
        if not x_left <= where <= x_right:
            where = x[node]
        found.append((row, where, float(dx.max()), slope_left, slope_right))
    return found


# -- detection ------------------------------------------------------------------------------------------
def _fmt(value: float) -> str:
    return f"{value:.4g}"


def detect_features(result: Sweep) -> list[Feature]:
    """Every jump, kink and non-finite onset the data of a sweep shows (confirmed by zooming in)."""
    df = result.frame
    zoom = _Zoom(result)
    grid_step = result.grid_step
    swept = df["x"].to_numpy(dtype=np.float64)
    # a few grid steps beyond both ends, so that a point AT lo or hi has neighbours on both sides
    outside = grid_step * np.arange(1, EDGE_STEPS + 1, dtype=np.float64)
    left = zoom.cast(swept[0] - outside[::-1])
    right = zoom.cast(swept[-1] + outside)
    left, right = np.unique(left[left < swept[0]]), np.unique(right[right > swept[-1]])
    x = np.concatenate([left, swept, right])
    if zoom.dtype != result.dtype:
        # half precision: analyse the float32 values the op computes at the same x, before they
        # are rounded to a staircase whose rounding noise would hide small kinks
        analysed = zoom.all_values(x)
    else:
        extra = zoom.all_values(np.concatenate([left, right]))
        analysed = {
            column: np.concatenate(
                [extra[column][: left.size], df[column].to_numpy(dtype=np.float64), extra[column][left.size :]]
            )
            for column in COLUMN_OF.values()
        }
    # Both curves are analysed together, so that each zoom round is one evaluation for both (each
    # evaluation of a few dozen x costs about as much as one of thousands); the features are listed
    # per curve as before: forward jumps, forward kinks, custom jumps, custom kinks.
    labels = ("forward", "custom")
    jumps = {}
    for label in labels:
        v = analysed[COLUMN_OF[label]]
        candidates = detect.jump_intervals(x, v, zoom.eps)
        with np.errstate(invalid="ignore"):
            jumps[label] = _strongest(candidates, np.abs(np.diff(v)))
    rows = np.concatenate([jumps[label] for label in labels]).astype(int)
    curve_of_row = np.concatenate([np.full(jumps[label].size, COLUMN_OF[label], dtype=object) for label in labels])
    curve_values = np.stack([analysed[COLUMN_OF[label]] for label in labels])
    curve_index = np.concatenate([np.full(jumps[label].size, k) for k, label in enumerate(labels)]).astype(int)
    confirmed = _confirm_jumps(
        zoom, curve_of_row, x[rows], x[rows + 1], grid_step,
        curve_values[curve_index, rows], curve_values[curve_index, rows + 1],
    )
    jump_features: dict[str, list[Feature]] = {label: [] for label in labels}
    kinks: dict[str, np.ndarray] = {}
    halves: dict[str, np.ndarray] = {}
    for label in labels:
        column = COLUMN_OF[label]
        v = analysed[column]
        what = "forward" if label == "forward" else "custom gradient"
        exclude = np.zeros(x.size, dtype=bool)
        for _, low, high, before, after in (c for c in confirmed if curve_of_row[c[0]] == column):
            where = _roundest(low, high, zoom.cast)
            jump_features[label].append(
                Feature(where, f"{label}_jump", f"{what} jumps from {_fmt(before)} to {_fmt(after)}")
            )
            at = int(np.searchsorted(x, where))
            exclude[max(at - 3, 0) : at + 3] = True
        nodes = detect.kink_nodes(x, v, zoom.eps, exclude)
        bend = np.zeros(x.size)
        if x.size > 2:
            with np.errstate(all="ignore"):
                slope = np.diff(v) / np.diff(x)
            bend[1:-1] = np.nan_to_num(np.abs(slope[1:] - slope[:-1]))
        kinks[label] = _strongest(nodes, bend).astype(int)
        halves[label] = 2.0 * np.maximum(np.diff(x, prepend=x[0])[kinks[label]], np.diff(x, append=x[-1])[kinks[label]])
    kink_rows = np.concatenate([kinks[label] for label in labels]).astype(int)
    curve_of_kink = np.concatenate([np.full(kinks[label].size, COLUMN_OF[label], dtype=object) for label in labels])
    bent = _confirm_kinks(zoom, curve_of_kink, x[kink_rows], np.concatenate([halves[label] for label in labels]))
    found: list[Feature] = []
    for label in labels:
        what = "forward" if label == "forward" else "custom gradient"
        found += jump_features[label]
        for _, where, tolerance, before, after in (k for k in bent if curve_of_kink[k[0]] == COLUMN_OF[label]):
            where = _roundest(where - tolerance, where + tolerance, zoom.cast)
            found.append(Feature(where, f"{label}_kink", f"{what} slope changes from {_fmt(before)} to {_fmt(after)}"))
    x = swept
    true_grad = df["true_grad"].to_numpy(dtype=np.float64)
    for start, end in detect.runs(~np.isfinite(true_grad)):
        row = end if start == 0 and end < x.size - 1 else start  # the finite/non-finite boundary
        values = ", ".join(sorted({str(v) for v in true_grad[start : end + 1][:1000]}))
        extent = "at this x only" if start == end else f"from x = {_fmt(x[start])} to {_fmt(x[end])}"
        found.append(Feature(float(x[row]), "true_nonfinite", f"true gradient is {values} {extent}"))
    return sorted(found, key=lambda f: f.x)


# -- matching and one-sided limits ----------------------------------------------------------------------
def _tolerance(x: np.ndarray, where: float, grid_step: float) -> float:
    at = int(np.clip(np.searchsorted(x, where), 1, x.size - 1))
    local = np.max(np.diff(x[max(at - 2, 0) : at + 2])) if x.size > 1 else grid_step
    return MATCH_STEPS * max(grid_step, local)


def _sides(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """x minus / plus two units of the dtype's epsilon (relative for |x| > 1): a few ulps, never 0."""
    np_dtype = numpy_dtype(dtype)
    offset = 2.0 * float(np.finfo(np_dtype).eps) * np.maximum(1.0, np.abs(x))
    return x - offset, x + offset


def special_points(result: Sweep) -> pd.DataFrame:
    """One row per special point, declared and/or detected, with one-sided limits.

    Columns: ``x``, ``kind``, ``note`` (the declared convention, or what was detected), ``declared``,
    ``detected``, ``status`` (``"ok"``, ``"undeclared"`` or ``"not detected"``), ``forward_left``,
    ``forward_at``, ``forward_right``, ``true_grad``, ``true_grad_missing``, ``custom_grad``,
    ``custom_left``, ``custom_right`` (the left/right values are at x -/+ two dtype epsilons,
    relative for |x| > 1, evaluated in the sweep dtype), ``found`` (what detection saw there) and
    ``features`` (the names of the detected features there, e.g. ``"forward_jump,custom_kink"``: which
    curves are discontinuous or bent at that point).
    """
    dtype = result.dtype
    grid_step = result.grid_step
    x = result["x"].to_numpy(dtype=np.float64)
    np_dtype = numpy_dtype(dtype)
    declared = result.declared_points
    features = detect_features(result)
    used = [False] * len(features)
    rows = []
    for point in declared:
        where = float(np.float64(point.x).astype(np_dtype))
        tolerance = _tolerance(x, where, grid_step)
        near = [k for k, f in enumerate(features) if abs(f.x - where) <= tolerance]
        for k in near:
            used[k] = True
        found = [features[k].detail for k in near]
        detected = any(features[k].name in COMPATIBLE[point.kind] for k in near)
        crowded = any(
            other is not point
            and abs(float(np.float64(other.x).astype(np_dtype)) - where) <= UNRESOLVED_STEPS / MATCH_STEPS * tolerance
            for other in declared
        )
        if not detected and crowded and near:
            detected = True  # below the grid's resolution: what is seen nearby is shared
            found.append(f"closer than {UNRESOLVED_STEPS} grid steps to another special point")
        rows.append(
            {
                "x": where,
                "kind": point.kind,
                "note": point.note,
                "declared": True,
                "detected": detected,
                "status": "ok" if detected else "not detected",
                "found": "; ".join(found),
                "features": ",".join(sorted({features[k].name for k in near})),
            }
        )
    # undeclared features: group those within matching distance of each other
    groups: list[list[Feature]] = []
    lo, hi = x[0], x[-1]
    for feature, is_used in zip(features, used, strict=True):
        if is_used or not lo <= feature.x <= hi:
            continue
        if groups and feature.x - groups[-1][-1].x <= _tolerance(x, feature.x, grid_step):
            groups[-1].append(feature)
        else:
            groups.append([feature])
    for group in groups:
        main = min(group, key=lambda f: SEVERITY.index(f.name))
        details = "; ".join(f.detail for f in group)
        rows.append(
            {
                "x": main.x,
                "kind": FEATURE_KIND[main.name],
                "note": details,
                "declared": False,
                "detected": True,
                "status": "undeclared",
                "found": details,
                "features": ",".join(sorted({f.name for f in group})),
            }
        )
    at = np.array([row["x"] for row in rows], dtype=np.float64)
    order = np.argsort(at, kind="stable")
    # Not merged into another evaluation: TensorFlow's element-wise kernels can differ in the last bit
    # with an element's place in the batch (vectorised packets vs scalar tails), and the table's values
    # stay exactly those of the points' own evaluation.
    limits = _limits(at, result)
    # one DataFrame built from its columns, in x order (a frame of the rows first, then sorted, cost a
    # fifth of this function); lists infer the dtypes a frame of the rows would, object when empty
    return pd.DataFrame(
        {
            name: limits[name][order] if name in limits
            else [rows[k][name] for k in order] if rows
            else np.zeros(0, dtype=object)
            for name in COLUMNS
        }  # fmt: skip
    )


def _limits(at: np.ndarray, result: Sweep) -> dict:
    """The one-sided limits and the values AT the points ``at`` (columns in the order of ``at``)."""
    count = at.size
    if count == 0:
        return {
            column: np.zeros(0, dtype=bool if column == "true_grad_missing" else np.float64)
            for column in COLUMNS[6:14]
        }
    left, right = _sides(at, result.dtype)
    values = result.evaluate(np.concatenate([left, at, right]))
    forward, custom, true_grad = values["forward"], values["custom_grad"], values["true_grad"]
    return {
        "forward_left": forward[:count],
        "forward_at": forward[count : 2 * count],
        "forward_right": forward[2 * count :],
        "true_grad": true_grad[count : 2 * count],
        "true_grad_missing": np.full(count, bool(values["true_grad_missing"])),
        "custom_grad": custom[count : 2 * count],
        "custom_left": custom[:count],
        "custom_right": custom[2 * count :],
    }


DISPLAY_COLUMNS = {
    "x": "x",
    "kind": "kind",
    "status": "status",
    "forward_left": "forward just left",
    "forward_at": "forward AT",
    "forward_right": "forward just right",
    "true_grad": "true gradient",
    "custom_left": "custom just left",
    "custom_grad": "custom gradient AT",
    "custom_right": "custom just right",
    "note": "convention",
}


def _true_gradient_text(table: pd.DataFrame) -> list[str]:
    return [
        "None" if missing else f"{value:.6g}"
        for value, missing in zip(table["true_grad"], table["true_grad_missing"], strict=True)
    ]


def display_columns(table: pd.DataFrame) -> dict[str, np.ndarray | list[str]]:
    """The columns of :func:`display_table` (shown name: values), without building a frame: what a page
    turns straight into the Arrow table it sends (:func:`explorer.ui.widgets.arrow_table`)."""
    return {
        shown: _true_gradient_text(table) if name == "true_grad" else table[name].to_numpy()
        for name, shown in DISPLAY_COLUMNS.items()
    }


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The special-points table as a page shows it: readable headers, and "None" where autodiff
    returned no gradient (rather than the 0 the sweep plots)."""
    # one DataFrame from its columns (selecting, renaming and then replacing a column cost 3x this)
    return pd.DataFrame(display_columns(table), index=table.index)
