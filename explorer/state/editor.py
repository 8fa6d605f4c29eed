"""The Editor page's state: :class:`EditorSource`, its URL form and the op it compiles to."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ops
from explorer import expr
from explorer.state.query import url_number

# -- the editor ------------------------------------------------------------------------------------
# URL keys: ``u_name``, ``u_fwd``, ``u_grad``, ``u_params`` as ``"k:25:1:100;a:2:1:5"`` (name:default:
# low:high) and ``u_points`` as ``"0, -1/k, 1:kink"``.
EDITOR_URL_KEYS = ("u_name", "u_fwd", "u_grad", "u_params", "u_points")
EDITOR_CACHE_SIZE = 16  # compiled editor ops kept (each holds its TensorFlow functions)
EDITOR_SOURCE_KEY = "editor.good"  # session-state key of the editor's last source that compiled


@dataclass(frozen=True)
class EditorSource:
    """Everything the user typed; hashable, so it keys the caches. ``params``: (name, default, low, high)."""

    name: str = "my_spike"
    forward: str = "where(x > 0, 1, 0)"
    gradient: str = "1 / (k * abs(x) + 1) ** 2"
    params: tuple[tuple[str, float, float, float], ...] = (("k", 25.0, 1.0, 100.0),)
    points: str = "0"


DEFAULT = EditorSource()


# -- text forms (URL values) ------------------------------------------------------------------------
def params_to_text(params: tuple[tuple[str, float, float, float], ...]) -> str:
    return ";".join(f"{name}:{url_number(d)}:{url_number(lo)}:{url_number(hi)}" for name, d, lo, hi in params)


def params_from_text(text: str) -> tuple[tuple[str, float, float, float], ...]:
    """``"k:25:1:100;a:2:1:5"`` -> (("k", 25, 1, 100), ("a", 2, 1, 5)); ValueError says what is wrong."""
    params = []
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        fields = item.split(":")
        if len(fields) != 4:
            raise ValueError(f"{item!r} is not name:default:low:high")
        name, *numbers = (field.strip() for field in fields)
        try:
            default, low, high = (float(number) for number in numbers)
        except ValueError:
            raise ValueError(f"{item!r}: default, low and high must be numbers") from None
        if not all(math.isfinite(v) for v in (default, low, high)):
            raise ValueError(f"{item!r}: default, low and high must be finite")
        params.append((name, default, low, high))
    if len(params) > expr.MAX_PARAMS:
        raise ValueError(f"{len(params)} parameters given; at most {expr.MAX_PARAMS} are allowed")
    return tuple(params)


def points_from_text(text: str) -> list[float | str | tuple[float | str, str]]:
    """``"0, -1/k, 1:kink"``: numbers or expressions of the parameters, each optionally ``:kind``."""
    points: list[float | str | tuple[float | str, str]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        value_text, _, kind = item.partition(":")
        value_text, kind = value_text.strip(), kind.strip()
        try:
            value: float | str = float(value_text)
        except ValueError:
            value = value_text
        points.append((value, kind) if kind else value)
    return points


def editor_to_query(source: EditorSource) -> dict[str, str]:
    return {
        "u_name": source.name,
        "u_fwd": source.forward,
        "u_grad": source.gradient,
        "u_params": params_to_text(source.params),
        "u_points": source.points,
    }


def editor_from_query(query: Mapping[str, Any]) -> tuple[EditorSource | None, list[str]]:
    """The editor source in the URL (None if it has no u_* key) and notices about ignored values."""
    if not any(key in query for key in EDITOR_URL_KEYS):
        return None, []
    notices: list[str] = []
    values = {}
    for key, attribute in (("u_name", "name"), ("u_fwd", "forward"), ("u_grad", "gradient"), ("u_points", "points")):
        if key in query:
            text = str(query[key])
            if len(text) > expr.MAX_LENGTH:
                notices.append(f"URL value {key} is longer than {expr.MAX_LENGTH} characters and was ignored.")
                continue
            values[attribute] = text
    if "u_params" in query:
        try:
            values["params"] = params_from_text(str(query["u_params"]))
        except ValueError as error:
            notices.append(f"URL value u_params was ignored ({error}); the example's parameters are used.")
    source = EditorSource(**{**DEFAULT.__dict__, **values})
    return source, notices




@functools.lru_cache(maxsize=EDITOR_CACHE_SIZE)
def compile_editor_op(source: EditorSource) -> ops.OpSpec:
    """The op an editor source describes; raises :class:`explorer.expr.ExpressionError` (not cached)."""
    params = {name: (default, low, high) for name, default, low, high in source.params}
    if len(params) != len(source.params):
        raise expr.ExpressionError("two parameters have the same name", expression="params")
    return expr.compile_op(
        source.name, source.forward, source.gradient, params=params, points=points_from_text(source.points)
    )


def editor_op(source: EditorSource | None) -> ops.OpSpec | None:
    """The op of an editor source (the one under :data:`EDITOR_SOURCE_KEY`), or None if it has none."""
    if source is None:
        return None
    try:
        return compile_editor_op(source)
    except expr.ExpressionError:
        return None
