"""From a watched layer to the Explore page: the URL that opens Explore with the layer's op, its parameters and
the sweep range set to the range of the layer's inputs between their 0.1th and 99.9th percentiles."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urlencode, urlsplit, urlunsplit

from explorer import loaded
from explorer import state as url_state

MIN_SPAN = 1e-3  # a layer whose inputs all but coincide is swept over at least this width around them


def sweep_range(p0_1: float, p99_9: float) -> tuple[float, float]:
    """[lo, hi] for Explore from the two percentiles: as they are when they make a range; widened to
    :data:`MIN_SPAN` around them when they (nearly) coincide; [-3, 3] when either is not a number; always
    inside Explore's limits."""
    if not (math.isfinite(p0_1) and math.isfinite(p99_9)):
        return -3.0, 3.0
    lo, hi = min(p0_1, p99_9), max(p0_1, p99_9)
    if hi - lo < MIN_SPAN:
        middle = (lo + hi) / 2.0
        lo, hi = middle - MIN_SPAN / 2.0, middle + MIN_SPAN / 2.0
    limit = url_state.X_LIMIT
    lo, hi = max(lo, -limit), min(hi, limit)
    return (lo, hi) if lo < hi else (-3.0, 3.0)


def explore_query(op: str, params: Mapping[str, float], p0_1: float, p99_9: float) -> dict[str, str] | None:
    """Explore's URL query (:func:`explorer.state.to_query`) for ``op`` at ``params`` over the inputs' range; None
    when Explore does not know ``op`` (a team's own op this server did not load) or ``params`` are not valid for it
    (a parameter it does not have, or a value out of its range)."""
    if op not in loaded.names():
        return None
    state = url_state.default_state().with_op(op)
    spec = state.spec
    try:
        checked = {name: spec.params[spec.param_names.index(name)].validate(float(value), op) for name, value in params.items()}
        spec.resolve(checked)
    except (ValueError, TypeError):
        return None
    lo, hi = sweep_range(float(p0_1), float(p99_9))
    return url_state.to_query(replace(state, params=checked, lo=lo, hi=hi))


def explore_url(page_url: str, query: Mapping[str, str]) -> str:
    """The Explore page's address beside ``page_url`` (the Runs page as the browser shows it, ``.../runs``: Explore
    is the app's root page, so the last path segment goes) with ``query``."""
    parts = urlsplit(page_url)
    path = parts.path
    if path.rstrip("/").endswith("/runs") or path.rstrip("/") == "runs":
        path = path.rstrip("/")[: -len("runs")]
    path = path or "/"
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query, safe=",:"), ""))
