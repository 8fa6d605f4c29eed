"""Runs the checks: :func:`check` on one op, :func:`check_targets` on a team's files, and
``python -m explorer verify`` (tables, JSON, dated records under ``verification/``).

Every op goes through :func:`explorer.checker.plan.check_function` (a built-in op, an editor op, a function of
your own code of any signature, ``ops.from_function``), a Keras layer through
:func:`~explorer.checker.plan.check_layer`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as _dt
import json
import platform
import queue
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

import ops
from explorer.checker import discover, plan
from explorer.checker.common import LEVELS, VERIFICATION_DIR, Check

COLUMNS = ["op", "check", "level", "passed", "message", "backend"]  # backend: where the check ran
MAX_JOBS = 16  # verify --jobs: worker processes at once, each with TensorFlow and your module (a few hundred MB)


def check(op: str | ops.OpSpec, /, *, forward_mode: bool = False, **params: Any) -> list[Check]:
    """Run the checks on ``op`` at ``params`` (defaults for the rest); one :class:`Check` each.

    One checker for every op (:func:`explorer.checker.plan.check_function`): a built-in op is a function
    with declarations (forward, surrogate, special points, why), your own function one without.
    Raises KeyError for an unknown op key and ValueError for an invalid parameter; the checks
    themselves never raise. ``forward_mode`` adds the opt-in ``forward_mode`` check.
    """
    spec = ops.get(op)
    resolved = spec.resolve(params)
    return plan.check_function(spec, forward_mode=forward_mode, **resolved)


# -- the command line ------------------------------------------------------------------------------------
def run_all(keys: Iterable[str], forward_mode: bool = False) -> pd.DataFrame:
    """One row per (op, check): op, check, level, passed, message."""
    rows = []
    for key in keys:
        for result in check(key, forward_mode=forward_mode):
            rows.append({"op": key, "check": result.name, **{k: v for k, v in asdict(result).items() if k != "name"}})
    return pd.DataFrame([{**row, "backend": "tensorflow"} for row in rows], columns=COLUMNS)


def format_table(results: pd.DataFrame, width: int = 100) -> str:
    """A left-aligned plain-text table: op, check, result, message (cut to ``width`` characters)."""
    op_width = max([len("op"), *results["op"].map(len)])
    check_width = max([len("check"), *results["check"].map(len)])
    lines = [f"{'op':<{op_width}}  {'check':<{check_width}}  result  message"]
    for row in results.itertuples(index=False):
        message = row.message if len(row.message) <= width else row.message[: width - 3] + "..."
        lines.append(f"{row.op:<{op_width}}  {row.check:<{check_width}}  {row.level:<6}  {message}")
    return "\n".join(lines)


def level_counts(results: pd.DataFrame) -> dict[str, int]:
    """How many rows of each level, every level of :data:`LEVELS` present (a skip is counted apart, never as a pass)."""
    counts = results["level"].value_counts()
    return {level: int(counts.get(level, 0)) for level in LEVELS}


def summary_line(results: pd.DataFrame, seconds: float) -> str:
    counts = level_counts(results)
    ops_count = results["op"].nunique()
    return (
        f"{ops_count} op(s), {len(results)} checks: {counts['pass']} pass, {counts['warn']} warn, "
        f"{counts['fail']} fail, {counts['skip']} skip in {seconds:.1f} s"
    )


def environment() -> dict[str, str]:
    """Versions and platform for a verification record (streamlit by metadata, never imported here)."""
    versions = {"python": platform.python_version()}
    for package in ("tensorflow", "keras", "streamlit", "numpy", "pandas", "plotly"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {**versions, "platform": platform.platform(), "machine": platform.machine(), "system": platform.system()}


def write_record(results: pd.DataFrame, seconds: float, directory: Path = VERIFICATION_DIR) -> list[Path]:
    """Write ``<date>-<system>-<machine>.json`` and ``.md`` under ``directory``; return both paths."""
    env = environment()
    today = _dt.date.today().isoformat()
    stem = f"{today}-{env['system'].lower()}-{env['machine'].lower()}"
    directory.mkdir(parents=True, exist_ok=True)
    record = {
        "date": today,
        "environment": env,
        "summary": summary_line(results, seconds),
        "counts": level_counts(results),
        "all_passed": bool(results["passed"].all()),
        "seconds": round(seconds, 1),
        "checks": results.to_dict(orient="records"),
    }
    json_path = directory / f"{stem}.json"
    json_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    lines = [
        f"# Verification record, {today}",
        "",
        *[f"- {name}: {value}" for name, value in env.items()],
        "",
        f"**{record['summary']}**",
        "",
        "| op | check | result | message |",
        "|---|---|---|---|",
        *[
            f"| {r.op} | {r.check} | {r.level} | {r.message.replace('|', '/')} |"
            for r in results.itertuples(index=False)
        ],
        "",
    ]
    md_path = directory / f"{stem}.md"
    md_path.write_text("\n".join(lines), encoding="utf-8")
    return [json_path, md_path]


def check_targets(
    targets: Sequence[str], backends: Sequence[str] | None = None, forward_mode: bool = False,
    progress: Any = None, jobs: int = 1,
) -> tuple[pd.DataFrame, list[str]]:
    """Check every custom-gradient function and Layer subclass in ``targets`` (see :mod:`explorer.discover`).

    Each function's or layer's checks run in a worker process (:func:`checked_in_worker`): one that
    ends its worker or hangs gets failed rows saying how, and the others are still checked.
    Returns the rows (as :func:`run_all`) and one line per target that could not be checked (missing,
    import error, nothing to check). A function that cannot be checked (a bad declaration, no inputs it
    accepts) is a failed or warned row of its own, never a problem of the whole module.

    ``backends`` (``["tensorflow", "jax", "torch"]``): each ``keras.ops.custom_gradient`` function also gets a
    ``backends`` row comparing them (:mod:`explorer.checker.backends`); without it, a ``skip`` row saying it
    was checked on TensorFlow only. ``progress`` (:mod:`explorer.checker.progress`) is told each function's start
    and verdict. ``jobs``: how many functions are checked at once, each in a worker process of its own (rows in
    the same order as one at a time; a function that hangs holds only its own worker until its time limit).
    """
    from explorer.checker.progress import SILENT

    if not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"jobs={jobs!r}; allowed: 1 to {MAX_JOBS}")
    progress = SILENT if progress is None else progress
    found = discover.Discovered()
    origin: dict[int, str] = {}
    found_in_target: dict[int, int] = {}  # its place among what discover(target) returns (a file's module name
    for target in targets:  # is made up per import, so the worker finds the item again by place)
        got = discover.discover(target)
        for place, item in enumerate(got.functions + got.layers):
            origin[id(item)], found_in_target[id(item)] = target, place
        found.extend(got)
    problems = [str(error) for error in found.errors]
    names = [item.name for item in found.functions + found.layers]
    rows = []
    progress.add(len(names))
    told = threading.Lock()  # progress lines from several lanes, one at a time

    def labelled(item: discover.Found) -> str:
        return item.name if names.count(item.name) == 1 else f"{item.module}.{item.name}"

    def check_one(item: discover.Found, lane: str) -> list[Check]:
        with told:
            progress.start(labelled(item))
        if ISOLATE:
            results = checked_in_worker(
                origin[id(item)], found_in_target[id(item)], item, is_layer=item not in found.functions,
                forward_mode=forward_mode, lane=lane,
            )
        else:
            results = check_found(item, found, forward_mode)
        with told:
            progress.done(labelled(item), [result.level for result in results])
        return results

    items = found.functions + found.layers
    if jobs == 1 or not ISOLATE:
        checked = [check_one(item, VERIFY_LANE) for item in items]
    else:
        lanes: queue.SimpleQueue[str] = queue.SimpleQueue()
        for number in range(jobs):
            lanes.put(VERIFY_LANE if number == 0 else f"{VERIFY_LANE}-{number + 1}")

        def in_a_free_lane(item: discover.Found) -> list[Check]:
            lane = lanes.get()
            try:
                return check_one(item, lane)
            finally:
                lanes.put(lane)

        with concurrent.futures.ThreadPoolExecutor(jobs, thread_name_prefix="verify-lane") as pool:
            checked = list(pool.map(in_a_free_lane, items))  # in discovery order, whichever ends first
    for item, results in zip(items, checked, strict=True):
        for result in results:
            rows.append({"op": labelled(item), "check": result.name,
                         **{k: v for k, v in asdict(result).items() if k != "name"}, "backend": "tensorflow"})
    if found.functions or backends:
        from explorer.checker import backends as across

        rows += across.backend_rows(targets, found.functions, backends, progress=progress, forward_mode=forward_mode)
    return pd.DataFrame(rows, columns=COLUMNS), problems


def check_found(item: discover.Found, found: discover.Discovered, forward_mode: bool = False) -> list[Check]:
    """The checks of one discovered function or layer (``found``: everything discovered with it), here.
    A function that cannot be an op (a bad declaration, an unreadable signature) gets failed rows: "not
    checked", ``shape_dtype`` saying why."""
    if item in found.functions:
        try:
            spec = ops.from_function(item.obj, key=item.name, **discover.declarations(item))
        except Exception as error:  # noqa: BLE001 - a bad declaration or an unreadable signature: a row, not exit 2
            message = (
                f"not checked: {type(error).__name__}: {error}. Fix the declaration in its module's "
                f"{discover.DECLARATIONS} dict (keys: {', '.join(discover.DECLARED_KEYWORDS)})"
            )
            return [
                Check(name, False, message if name == "shape_dtype" else "not checked: see shape_dtype", "fail")
                for name in plan.function_checks(forward_mode)
            ]
        return plan.check_function(spec, forward_mode=forward_mode)
    siblings = [(f.name, f.obj) for f in found.functions if f.module == item.module]
    return plan.check_layer(item.obj, siblings)


# -- the worker hook: each function's checks in a worker process (explorer.worker) ----------------------
ISOLATE = True  # False: check in this process (a test that replaces the checks here sets it)
VERIFY_LANE = "verify"  # the shared worker (explorer.worker.shared) of this process's verify checks
_DISCOVERED_IN_WORKER: dict[str, discover.Discovered] = {}


def _check_by_place(target: str, place: int, name: str, forward_mode: bool = False) -> list[Check]:
    """In the worker: discover ``target`` (once) and check the item at ``place`` (named ``name``)."""
    if target not in _DISCOVERED_IN_WORKER:
        _DISCOVERED_IN_WORKER[target] = discover.discover(target)
    found = _DISCOVERED_IN_WORKER[target]
    items = found.functions + found.layers
    if place >= len(items) or items[place].name != name:
        raise RuntimeError(f"{target} defines other functions in the worker process than here (no {name})")
    return check_found(items[place], found, forward_mode)


def checked_in_worker(
    target: str, place: int, item: discover.Found, *, is_layer: bool, forward_mode: bool = False,
    lane: str = VERIFY_LANE,
) -> list[Check]:
    """:func:`check_found` for ``item`` of ``target`` in this process's verify worker ``lane``. If the worker
    ends (exit, signal, SystemExit) or does not return in time: one failed row per check naming how; the
    worker is replaced for the next function."""
    from explorer import worker

    running = worker.shared(lane, worker.importing(plan.__name__))
    try:
        return running.call(
            _check_by_place, target, place, item.name, forward_mode, time_limit=worker.check_seconds()
        )
    except worker.WorkerFailure as failure:
        names = plan.LAYER_CHECKS if is_layer else plan.function_checks(forward_mode)
        message = f"{item.name}'s checks {failure.how}; the checker went on with a new worker process"
        return [Check(name=name, passed=False, message=message, level="fail") for name in names]


def across_backends(text: str) -> list[str]:
    from explorer.checker import backends

    return backends.parse_backends(text)


def _jobs(text: str) -> int:
    """``--jobs``: a whole number from 1 to :data:`MAX_JOBS` (argparse makes the error an exit 2)."""
    if not text.strip().isdigit() or not 1 <= int(text) <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"{text!r}: allowed a whole number from 1 to {MAX_JOBS}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """``python -m explorer verify [TARGET ...] [--op KEY ...] [--backends LIST] [--forward-mode] [--jobs N] [--json]
    [--record ...]``.

    TARGETs are ``.py`` files, directories of them or module names (your own code); without one the
    built-in ops are checked. Exit 1 on a failed check, 2 when a target or op cannot be checked.
    """
    parser = argparse.ArgumentParser(prog="python -m explorer verify", description="Run the gradient checker.")
    parser.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help="a .py file, a directory of .py files or a module name: check its custom-gradient functions and "
        "Keras layers; default: the built-in ops",
    )
    parser.add_argument("--op", action="append", metavar="KEY", help="check only this op (repeatable); default: all")
    parser.add_argument(
        "--forward-mode",
        action="store_true",
        help="also check forward mode: tf.autodiff.ForwardAccumulator's JVP against the custom gradient (opt-in: "
        "few teams use JVPs)",
    )
    parser.add_argument(
        "--jobs", type=_jobs, metavar="N",
        help=f"check N of your functions at once, each in a worker process of its own (1 to {MAX_JOBS}; default 1): "
        "on 2 cores, 2 check many functions in about half the time, and a function that hangs holds only its "
        "own worker",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument(
        "--backends",
        metavar="LIST",
        help="also compare each keras.ops.custom_gradient function across Keras backends: all (every installed) "
        "or a comma-separated list of tensorflow, jax, torch; default: TensorFlow only",
    )
    parser.add_argument("--record", action="store_true", help="also write a dated record under verification/")
    parser.add_argument("--record-dir", type=Path, default=VERIFICATION_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    problems: list[str] = []
    if args.targets:
        if args.op:
            print("give either TARGETs (your code) or --op (built-in ops), not both", file=sys.stderr)
            return 2
        try:
            chosen = None if args.backends is None else across_backends(args.backends)
        except ValueError as error:
            print(f"--backends: {error}", file=sys.stderr)
            return 2
        from explorer.checker.progress import for_terminal

        results, problems = check_targets(
            args.targets, chosen, args.forward_mode, for_terminal(0, args.json), jobs=args.jobs or 1
        )
    else:
        if args.backends is not None:
            print("--backends compares your keras.ops functions: give TARGETs", file=sys.stderr)
            return 2
        if args.jobs is not None:
            print("--jobs checks your functions in worker processes: give TARGETs (the built-in ops are checked here)",
                  file=sys.stderr)
            return 2
        keys = args.op or ops.names()
        unknown = [key for key in keys if key not in ops.names()]
        if unknown:
            print(f"unknown op(s): {', '.join(unknown)}; valid ops: {', '.join(ops.names())}", file=sys.stderr)
            return 2
        results = run_all(keys, args.forward_mode)
    seconds = time.perf_counter() - start
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if results.empty:
        return 2
    if args.json:
        print(json.dumps(results.to_dict(orient="records"), indent=2))
    else:
        print(format_table(results))
        print(summary_line(results, seconds))
    if args.record:
        for path in write_record(results, seconds, args.record_dir):
            print(f"wrote {path}", file=sys.stderr)
    if problems:
        return 2
    return 0 if results["passed"].all() else 1
