"""The Runs page's state: :class:`RunsState` and its URL form (:func:`runs_from_query`, :func:`runs_to_query`).

URL keys: ``run`` (a run's name in the server's runs folder; none: the list of runs), ``layer`` (a watched
layer's Keras name; none: the first), ``step`` (a recorded step; none: the newest, which follows a live run),
``cmp`` (the runs compared with it, comma-separated), ``wi`` (the what-if op; none: the layer's own) and one
``wi.<name>`` per what-if parameter.

A run name is checked here for its form only (:func:`is_run_name`: one folder name, no ``..``, no ``/``); the
page then asks the runs folder whether it holds that run, and the folder's reader refuses any name whose
folder leads outside it (a link). Whether a layer or a step is in the run is known only once the run is read:
the page checks those and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ops
from explorer.state.query import bounded_value, finite_number, number_in_range, url_number
from explorer.watch.run_folder import RunNameError, check_name

MAX_STEP = 2**53  # the largest whole number a float64 (and a JavaScript slider) holds exactly
MAX_COMPARED = 5  # runs compared with the shown one
WHAT_IF_PREFIX = "wi."
RUNS_URL_KEYS = ("run", "layer", "step", "cmp", "wi")


def is_run_name(text: str) -> bool:
    """True when ``text`` has the form of a run's folder name (:func:`explorer.watch.run_folder.check_name`: 1 to 128
    letters, digits, ``.``, ``_``, ``-``, no ``..``), so never a path, absolute or relative, nor the folder's parent."""
    try:
        check_name(text)
    except RunNameError:
        return False
    return True


def _shown_name(text: str) -> str:
    """``text`` cut to 60 characters for a notice (the notice escapes it; this keeps it short)."""
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class RunsState:
    run: str = ""  # "" : the list of runs
    layer: str = ""  # "" : the run's first watched layer
    step: int | None = None  # None: the newest recorded step (follows a live run)
    compare: tuple[str, ...] = ()
    what_if_op: str = ""  # "" : the layer's own op
    what_if_params: Mapping[str, float] = field(default_factory=dict)


def runs_from_query(query: Mapping[str, Any]) -> tuple[RunsState, list[str]]:
    """State from URL query parameters, plus a notice for every value that fell back to its default. Never raises."""
    notices: list[str] = []

    def text(key: str) -> str | None:
        return bounded_value(query, key, notices)

    raw_run = text("run")
    run = raw_run or ""
    if raw_run == "":
        notices.append("'run' is empty in the URL; showing the list of runs.")
    if run and not is_run_name(run):
        notices.append(
            f"'{_shown_name(run)}' is not the name of a run in the runs folder (a run's name is one folder name: letters, "
            "digits, '.', '_' and '-', no '..' and no '/'); showing the list of runs."
        )
        run = ""
    layer = text("layer") or ""
    step: int | None = None
    raw = text("step")
    if raw is not None:
        try:
            step = _whole_number(raw, MAX_STEP)
        except ValueError:
            notices.append(f"'step' = '{_shown_name(raw)}' must be a whole number in [0, 2^53]; showing the newest step.")
    compare: list[str] = []
    raw = text("cmp")
    if raw is not None:
        for name in (item.strip() for item in raw.split(",")):
            if not name:
                continue
            if not is_run_name(name):
                notices.append(f"Ignored compared run '{_shown_name(name)}': not the name of a run in the runs folder.")
            elif name != run and name not in compare:
                compare.append(name)
        if len(compare) > MAX_COMPARED:
            notices.append(f"At most {MAX_COMPARED} runs are compared with the shown one; ignored {', '.join(compare[MAX_COMPARED:])}.")
            compare = compare[:MAX_COMPARED]
    what_if_op, what_if_params = _what_if_from_query(query, text, notices)
    if not run:
        layer, step, compare = "", None, []
    return RunsState(run, layer, step, tuple(compare), what_if_op, what_if_params), notices


def _what_if_from_query(query: Mapping[str, Any], text, notices: list[str]) -> tuple[str, dict[str, float]]:
    op = text("wi") or ""
    if op and op not in ops.names():
        notices.append(f"What-if op '{_shown_name(op)}' is not a built-in op; using the layer's own op.")
        op = ""
    keys = [key for key in query if key.startswith(WHAT_IF_PREFIX)]
    if not op:
        if keys:
            notices.append("Ignored what-if parameter(s) given without a what-if op ('wi').")
        return "", {}
    spec = ops.get(op)
    params: dict[str, float] = {}
    for key in keys:
        name, raw = key[len(WHAT_IF_PREFIX) :], text(key)
        param = next((p for p in spec.params if p.name == name), None)
        if param is None:
            notices.append(f"Ignored what-if parameter '{_shown_name(name)}': '{op}' has {', '.join(spec.param_names) or 'none'}.")
            continue
        if raw is None:
            continue
        try:
            params[name] = param.validate(finite_number(raw), op)
        except ValueError:
            notices.append(
                f"What-if parameter '{name}' = '{_shown_name(raw)}' is not a number in [{param.low:g}, {param.high:g}]; "
                f"using {param.default:g}."
            )
    try:
        spec.resolve(params)
    except ValueError as error:
        notices.append(f"{error}; using the defaults of '{op}'.")
        params = {}
    return op, params


def _whole_number(text: str, largest: int) -> int:
    """``text`` as a whole number in [0, largest]: digits compared exactly (``2^53 + 1`` is not rounded into range),
    anything else as a finite whole float (``1e3``); ValueError otherwise."""
    digits = text.strip()
    if digits.isascii() and digits.isdigit():
        value = int(digits)
        if value > largest:
            raise ValueError("out of range")
        return value
    return int(number_in_range(text, 0, largest, integer=True))


def runs_to_query(state: RunsState) -> dict[str, str]:
    """The URL query for ``state``; defaults left out."""
    if not state.run:
        return {}
    query = {"run": state.run}
    if state.layer:
        query["layer"] = state.layer
    if state.step is not None:
        query["step"] = str(state.step)
    if state.compare:
        query["cmp"] = ",".join(state.compare)
    if state.what_if_op:
        query["wi"] = state.what_if_op
        for name, value in state.what_if_params.items():
            query[WHAT_IF_PREFIX + name] = url_number(value)
    return query
