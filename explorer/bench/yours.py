"""Benchmark: the Explore rerun for a loaded op (``GRADIENT_EXPLORER_OPS``) against the same rerun for a
comparable built-in. Target: the loaded op's rerun stays within 1.5x of the built-in's.

Method: two warm AppTests of ``app.py`` in one process, one on the loaded ``fast_sigmoid_spike``
(``examples/spike.py``: a step with the SuperSpike surrogate, parameter ``slope``), one on the built-in
``fast_sigmoid`` (the same maths, parameter ``slope``). Each pair sets each page's ``slope`` slider to a
value it has not had (so the sweep, special points and figure are computed, as when a user moves
it) and times ``AppTest.run()``: loaded, then built-in. Interleaving A B A B exposes both to the same
machine load; the result is the median of the per-pair ratios (robust to one slow pair).

The loaded op pays for what makes user code safe: a round trip to its worker process (the sweep and its
special points computed there, the frame and points table pickled back once), a 7-point eager probe of
the user's function, and (in the background worker, one core) the checker's run for the new parameters. ``settle_checks=True`` waits for those checks before each pair, which isolates the
rerun itself; the default does not, which is what a user dragging the slider gets.
:func:`measure_input_slider_rerun` does the same for a two-input function's scalar input (``grad_reverse``'s
``lam``, key ``loaded_input_vs_builtin_rerun``). Tooling, not product: run it from a clone
(``python -m explorer.bench.yours``, ``--input`` for the second).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
APP_PATH = ROOT / "app.py"
TARGET_RATIO = 1.5
LOADED_OP, LOADED_TARGET = "fast_sigmoid_spike", "examples/spike.py"
BUILTIN_OP = "fast_sigmoid"
SLIDER_PARAM = "slope"


def _values(low: float, high: float, count: int) -> list[float]:
    """``count`` distinct round values inside both sliders' ranges, none equal to the default (25)."""
    values, step = [], (high - low) / (count + 2)
    for index in range(1, count + 2):
        value = round(low + index * step, 1)
        if value != 25.0 and value not in values:
            values.append(value)
    return values[:count]


def _forget_cached_views() -> None:
    """Empty Streamlit's caches, so that a measurement does not find the views an earlier one of this process
    computed (the same slider values on a built-in page made its reruns cache hits: 11 ms against 22 ms)."""
    import streamlit as st

    st.cache_resource.clear()
    st.cache_data.clear()


@contextlib.contextmanager
def _serving(target: str):
    """``GRADIENT_EXPLORER_OPS`` = ``target`` (a path of this clone) for one measurement, with the loaded ops and
    Streamlit's caches fresh; the variable and the loaded ops are put back afterwards."""
    from explorer import loaded

    previous = os.environ.get(loaded.OPS_ENV)
    os.environ[loaded.OPS_ENV] = str(ROOT / target)
    loaded.reset()
    _forget_cached_views()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(loaded.OPS_ENV, None)
        else:
            os.environ[loaded.OPS_ENV] = previous
        loaded.reset()


def _page(op: str):
    from streamlit.testing.v1 import AppTest

    app = AppTest.from_file(str(APP_PATH), default_timeout=300)
    app.query_params["op"] = op
    app.run()
    if app.exception:
        raise RuntimeError(f"the explore page raised on {op}: {app.exception[0].message}")
    return app


def _interleaved(
    steps: int, warm_up: int, mine: Callable[[int], float], builtin: Callable[[int], float]
) -> tuple[float, float, float, int]:
    """``mine(i)`` then ``builtin(i)`` (seconds) for each step i, so the machine's load cancels within a pair.
    After ``warm_up`` steps: the median per-pair ratio, the median seconds of each side, the number of pairs."""
    ratios, mine_s, builtin_s = [], [], []
    for index in range(steps):
        a, b = mine(index), builtin(index)
        if index >= warm_up:
            ratios.append(a / b)
            mine_s.append(a)
            builtin_s.append(b)
    return statistics.median(ratios), statistics.median(mine_s), statistics.median(builtin_s), len(ratios)


def _timed_change(app, op: str, value: float) -> float:
    app.slider(key=f"w.p.{op}.{SLIDER_PARAM}").set_value(value)
    start = time.perf_counter()
    app.run()
    elapsed = time.perf_counter() - start
    if app.exception:
        raise RuntimeError(f"the explore page raised on {op}: {app.exception[0].message}")
    return elapsed


def measure_loaded_rerun(pairs: int = 12, warm_up: int = 2, *, settle_checks: bool = False) -> dict[str, Any]:
    """``loaded_vs_builtin_rerun`` (median of per-pair ratios, target <= :data:`TARGET_RATIO`) and the
    median rerun of each page in ms. Sets ``GRADIENT_EXPLORER_OPS`` for the measurement and restores it."""
    from explorer import loaded

    with _serving(LOADED_TARGET):
        mine, builtin = _page(LOADED_OP), _page(BUILTIN_OP)
        values = _values(2.5, 100.0, warm_up + pairs)

        def loaded_side(index: int) -> float:
            if settle_checks:
                loaded.checks(LOADED_OP, {SLIDER_PARAM: values[index]}).result(timeout=300)
            return _timed_change(mine, LOADED_OP, values[index])

        ratio, mine_s, builtin_s, pairs_measured = _interleaved(
            len(values), warm_up, loaded_side, lambda index: _timed_change(builtin, BUILTIN_OP, values[index])
        )
        return {
            "loaded_vs_builtin_rerun": ratio,
            "loaded_vs_builtin_rerun_target": TARGET_RATIO,
            "loaded_vs_builtin_rerun_met": ratio <= TARGET_RATIO,
            "loaded_rerun_ms": 1e3 * mine_s,
            "builtin_rerun_ms": 1e3 * builtin_s,
            "loaded_rerun_pairs": pairs_measured,
            "loaded_rerun_ops": f"{LOADED_OP} (loaded) vs {BUILTIN_OP} (built-in), slider {SLIDER_PARAM}",
            "loaded_rerun_checks_settled": settle_checks,
        }


INPUT_OP, INPUT_TARGET, INPUT_NAME = "grad_reverse", "examples/gradient_reversal.py", "lam"


def measure_input_slider_rerun(pairs: int = 12, warm_up: int = 2) -> dict[str, Any]:
    """``loaded_input_vs_builtin_rerun``: the Explore rerun after a move of a two-input function's scalar input
    (``grad_reverse``'s ``lam`` slider: its view op sweeps in the worker, lam a parameter, so no retrace)
    against the rerun after a move of the built-in ``fast_sigmoid``'s ``slope``; interleaved pairs, median
    of per-pair ratios, target <= :data:`TARGET_RATIO`."""
    with _serving(INPUT_TARGET):
        mine, builtin = _page(INPUT_OP), _page(BUILTIN_OP)
        lams = [round(-1.9 + 0.13 * i, 2) for i in range(warm_up + pairs)]  # never the default 1.0
        slopes = _values(2.5, 100.0, warm_up + pairs)

        def input_side(index: int) -> float:
            mine.slider(key=f"w.i.{INPUT_OP}.{INPUT_NAME}").set_value(lams[index])
            start = time.perf_counter()
            mine.run()
            seconds = time.perf_counter() - start
            if mine.exception or mine.error:
                raise RuntimeError(f"the explore page failed on {INPUT_OP}: {(mine.exception or mine.error)[0].value}")
            return seconds

        ratio, mine_s, builtin_s, pairs_measured = _interleaved(
            len(lams), warm_up, input_side, lambda index: _timed_change(builtin, BUILTIN_OP, slopes[index])
        )
        return {
            "loaded_input_vs_builtin_rerun": ratio,
            "loaded_input_vs_builtin_rerun_target": TARGET_RATIO,
            "loaded_input_vs_builtin_rerun_met": ratio <= TARGET_RATIO,
            "loaded_input_rerun_ms": 1e3 * mine_s,
            "builtin_input_rerun_ms": 1e3 * builtin_s,
            "loaded_input_rerun_pairs": pairs_measured,
            "loaded_input_rerun_ops": f"{INPUT_OP} (loaded, input {INPUT_NAME}) vs {BUILTIN_OP} (built-in, {SLIDER_PARAM})",
        }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--input" in args:
        result = measure_input_slider_rerun()
        print(json.dumps(result, indent=2))
        return 0 if result["loaded_input_vs_builtin_rerun_met"] else 1
    result = measure_loaded_rerun(settle_checks="--settle-checks" in args)
    print(json.dumps(result, indent=2))
    return 0 if result["loaded_vs_builtin_rerun_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
