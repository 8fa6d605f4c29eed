"""The loaded package's parts: one reset() for every cache, the lanes' names, no worker held in a module-level
list, a sweep that carries its re-evaluation function, and the one SweepRange value every sweep takes."""

from __future__ import annotations

import ast
import concurrent.futures
import importlib
import json
import math
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import explorer
import explorer.loaded as loaded
from explorer import notebook, state, worker
from explorer.explore import points, sweeps
from explorer.explore.sweeps import SweepRange
from explorer.loaded import background, lanes, memory, worker_side

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "explorer" / "loaded"


def _modules() -> list:
    return [importlib.import_module(f"explorer.loaded.{m.name}") for m in pkgutil.iter_modules([str(PACKAGE)])]


# -- one reset() ------------------------------------------------------------------------------------------
def test_every_cache_of_the_package_is_a_remembered_and_reset_clears_each():
    modules = _modules()
    caches = [value for module in modules for value in vars(module).values() if isinstance(value, memory.Remembered)]
    assert len(caches) >= 10  # catalogue 2, sweeps 3, views 3, background 1, worker_side 4
    assert {id(c) for c in caches} <= {id(c) for c in memory.every()}
    for module in modules:  # no other mutable module-level store beside them (the package's name table aside)
        if module.__name__ == "explorer.loaded":
            continue
        stores = [n for n, value in vars(module).items() if type(value) in (dict, list, set) and not n.startswith("__")]
        assert not stores, f"{module.__name__} keeps {stores} outside a Remembered"
    pending = concurrent.futures.Future()  # a check not started yet: reset cancels it
    filled = [c for c in caches if c is not background._CHECKS]
    for number, cache in enumerate(filled):
        cache.remember(("key", number), number)
    background._CHECKS.remember(("op", ()), pending)
    assert all(len(cache) == 1 for cache in caches)
    loaded.reset()
    assert [cache.what for cache in caches if len(cache)] == []
    assert pending.cancelled()


def test_remembered_forgets_the_least_recently_used_beyond_its_limit():
    cache = memory.Remembered("test", limit=2)
    cache.remember("a", 1)
    cache.remember("b", 2)
    cache.touch("a")  # b is now the oldest
    cache.remember("c", 3)
    assert list(cache) == ["a", "c"] and cache["c"] == 3 and "b" not in cache
    with pytest.raises(ValueError, match="limit must be None or a whole number >= 1"):
        memory.Remembered("bad", limit=0)


# -- lanes ----------------------------------------------------------------------------------------------------
def test_every_body_sent_to_a_lane_is_a_function_of_worker_side():
    sent = set()
    for path in PACKAGE.glob("*.py"):
        sent |= set(re.findall(r'on_worker\("(\w+)"\)', path.read_text(encoding="utf-8")))
    assert {"start", "sweep", "evaluate", "problem", "layout", "view_sweep", "view_evaluate", "checks"} <= sent
    for name in sent:
        assert callable(getattr(worker_side, name)), name


def test_the_background_lane_warms_the_checker_and_serve_starts_the_interactive_lane_as_the_app_does():
    interactive = lanes.warm_up(("a.py",), "/here")
    assert interactive == ((worker.Named("explorer.loaded.worker_side", "start"), (("a.py",), "/here")),)
    background_warm = lanes.warm_up(("a.py",), "/here", lanes.BACKGROUND)
    assert background_warm == interactive + ((worker.Named("importlib", "import_module"), ("explorer.checker.plan",)),)
    assert lanes.warm_up(["a.py"], "/here") == interactive  # equal warm-ups: explorer.worker.shared keeps the worker
    with pytest.raises(ValueError, match="lane must be one of interactive, background, training"):
        lanes.warm_up((), "/", "other")
    assert lanes.parse_targets(" a.py, pkg.mod,, ") == ("a.py", "pkg.mod")


def test_serve_names_no_private_function_of_loaded():
    text = "".join(path.read_text(encoding="utf-8") for path in sorted((ROOT / "explorer" / "serve").glob("*.py")))
    assert "_worker_start" not in text and "import explorer.loaded.lanes" in text


def _module_level_lists(path: Path) -> list[str]:
    """Module-level names bound to a list literal that is empty or holds flags (``_W = []``, ``_IN = [False]``)."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.List) and all(isinstance(e, ast.Constant) and isinstance(e.value, bool) for e in value.elts):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [f"{path.relative_to(ROOT)}: {ast.unparse(t)}" for t in targets]
    return found


def test_no_module_level_list_or_flag_holds_a_worker():
    """Workers are held by explorer.worker.shared only; the app's lanes, verify and the guardrail ask it."""
    lists = [hit for path in sorted((ROOT / "explorer").rglob("*.py")) for hit in _module_level_lists(path)]
    assert lists == []
    from explorer.checker import guardrail, runner

    for module in [*_modules(), runner, guardrail]:
        for name, value in vars(module).items():
            held = value if isinstance(value, (list, tuple, set, dict)) else [value]
            items = held.values() if isinstance(held, dict) else held
            assert not any(isinstance(item, worker.Worker) for item in items), f"{module.__name__}.{name}"


def test_the_public_names_of_loaded_import_without_tensorflow_at_package_import():
    assert set(loaded.__all__) >= {
        "get", "names", "current", "load", "reset", "sweep", "sweep_and_points", "problem", "checks", "layout",
        "view_sweep_and_points", "untrainable", "WorkerSession", "needs_worker", "UserOpError", "OPS_ENV",
        "worker_pids", "start_workers", "stop_workers", "graph_failure", "keyword_note", "is_loaded", "module_of",
    }  # fmt: skip
    # in a fresh process (this one imported TensorFlow long ago): the package alone imports no TensorFlow, and
    # each public name then is the very object of the module _WHERE names for it
    code = (
        "import importlib, json, sys; import explorer.loaded as loaded; before = 'tensorflow' in sys.modules;"
        "same = {n: getattr(loaded, n) is getattr(importlib.import_module('explorer.loaded.' + m), n)"
        " for n, m in loaded._MODULE_OF.items()};"
        "print(json.dumps({'tensorflow_at_import': before, 'same': same}))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tensorflow_at_import"] is False
    assert set(found["same"]) == set(loaded.__all__) - {"reset"} and all(found["same"].values()), found["same"]
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        loaded.nothing_here  # noqa: B018


# -- a sweep carries its re-evaluation --------------------------------------------------------------------
def test_a_sweep_that_carries_a_reevaluate_function_is_zoomed_through_it():
    plain = sweeps.sweep("ste_sign", -2.0, 2.0, 401)
    calls = []

    def elsewhere(result, x, dtype):
        calls.append((result.key, x.size, dtype))
        return sweeps.evaluate(result.spec, x, result.params, result.upstream, dtype)

    carried = sweeps.Sweep(plain.spec, plain.params, -2.0, 2.0, 401, "float32", 1.0, plain.frame, reevaluate=elsewhere)
    assert carried.with_frame(plain.frame.iloc[:10]).reevaluate is elsewhere  # kept when the rows change
    table = points.special_points(carried)  # the zoom of explorer.explore.points goes through the carried function
    assert calls and all(key == "ste_sign" and dtype == "float32" for key, _, dtype in calls)
    np.testing.assert_array_equal(table["x"], points.special_points(plain)["x"])
    # ste_sign at x = 0: forward sign(0) = +1 (the catalogue's convention), gradient 1 inside |x| <= 1
    at = carried.evaluate(np.array([0.0, 0.5, 1.5]))
    np.testing.assert_array_equal(at["custom_grad"], [1.0, 1.0, 0.0])


# -- SweepRange -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"lo": 2.0, "hi": 1.0}, r"lo \(2\) must be below hi \(1\)"),
        ({"lo": 1.0, "hi": 1.0}, r"lo \(1\) must be below hi \(1\)"),
        ({"lo": math.nan}, r"lo = nan is not finite; allowed: a finite number in \[-1e\+06, 1e\+06\]"),
        ({"hi": 2e6}, r"hi = 2e\+06 is outside the allowed range \[-1e\+06, 1e\+06\] \(float32\)"),
        ({"lo": -7e4, "dtype": "float16"}, r"lo = -70000 is outside the allowed range \[-65504, 65504\] \(float16\)"),
        ({"n": 10}, r"n = 10 is outside the allowed range \[11, 1_000_000\]"),
        ({"n": 1_000_001}, r"n = 1000001 is outside the allowed range \[11, 1_000_000\]"),
        ({"n": 100.5}, r"n must be a whole number in \[11, 1_000_000\], got 100.5"),
        ({"n": True}, r"n must be a whole number"),
        ({"dtype": "float8"}, r"dtype must be one of float16, bfloat16, float32, float64, got 'float8'"),
        ({"upstream": math.inf}, r"upstream = inf is not finite"),
        ({"upstream": 1e5, "dtype": "float16"}, r"upstream = 100000 is outside the allowed range \[-65504, 65504\]"),
        ({"lo": "-3"}, r"lo must be a number, got str"),
    ],
)
def test_sweep_range_names_the_allowed_range_of_a_bad_value(arguments, words):
    with pytest.raises(ValueError, match=words):
        SweepRange(**arguments)


def test_sweep_range_holds_plain_numbers_and_is_a_key():
    span = SweepRange(np.int64(-2), 2, np.int32(101), "float64", np.float32(0.5))
    assert (span.lo, span.hi, span.n, span.dtype, span.upstream) == (-2.0, 2.0, 101, "float64", 0.5)
    assert type(span.lo) is float and type(span.n) is int and type(span.upstream) is float
    assert span == SweepRange(-2.0, 2.0, 101, "float64", 0.5) and len({span, SweepRange(-2, 2, 101, "float64", 0.5)}) == 1
    assert SweepRange() == SweepRange(-3.0, 3.0, 2001, "float32", 1.0)


def test_every_sweep_takes_the_range_as_one_value_and_the_old_call_forms_still_work():
    span = SweepRange(-1.5, 2.5, 301, "float64", 2.0)
    by_value = sweeps.sweep("atan", params={"alpha": 2.0}, sweep_range=span)
    by_arguments = sweeps.sweep("atan", -1.5, 2.5, 301, params={"alpha": 2.0}, upstream=2.0, dtype="float64")
    assert by_value.sweep_range == span == by_arguments.sweep_range
    np.testing.assert_array_equal(by_value.frame["custom_grad"], by_arguments.frame["custom_grad"])
    x = by_value.frame["x"].to_numpy()
    assert x[0] == -1.5 and x[-1] == 2.5
    # atan's surrogate, d/dx (1/pi) atan(pi/2 alpha x) = alpha/2 / (1 + (pi/2 alpha x)^2), times the upstream 2
    reference = 2.0 * (2.0 / 2) / (1 + (np.pi / 2 * 2.0 * x) ** 2)
    np.testing.assert_allclose(by_value.frame["custom_grad"], reference, rtol=1e-12)
    with pytest.raises(ValueError, match="either as sweep_range=SweepRange"):
        sweeps.sweep("atan", lo=-1.0, sweep_range=span)
    with pytest.raises(ValueError, match="sweep_range must be a SweepRange, got tuple"):
        sweeps.sweep("atan", sweep_range=(-1.0, 1.0, 101, "float32", 1.0))
    assert loaded.sweep("atan", params={"alpha": 2.0}, sweep_range=span).sweep_range == span  # a built-in: here
    notebook_sweep = explorer.sweep("atan", params={"alpha": 2.0}, sweep_range=span)
    np.testing.assert_array_equal(notebook_sweep.frame["custom_grad"], by_value.frame["custom_grad"])
    figure = explorer.plot("atan", sweep_range=span)
    shown = np.concatenate([np.asarray(trace.x, dtype=float) for trace in figure.data if trace.x is not None])
    assert np.nanmin(shown) == -1.5 and np.nanmax(shown) == 2.5
    with pytest.raises(ValueError, match=r"n = 5 is outside the allowed range"):
        notebook.plot("atan", sweep_range=None, n=5)


def test_explore_state_gives_and_takes_its_range_as_one_value():
    explore = state.ExploreState(op="atan", lo=-1.0, hi=4.0, n=501, dtype="float16", upstream=0.5)
    assert explore.sweep_range == SweepRange(-1.0, 4.0, 501, "float16", 0.5)
    moved = explore.with_range(SweepRange(0.0, 1.0, 11, "float64", 3.0))
    assert (moved.lo, moved.hi, moved.n, moved.dtype, moved.upstream, moved.op) == (0.0, 1.0, 11, "float64", 3.0, "atan")
    with pytest.raises(ValueError, match=r"lo = -70000 is outside the allowed range \[-65504, 65504\] \(float16\)"):
        state.ExploreState(lo=-7e4, dtype="float16").sweep_range  # noqa: B018
