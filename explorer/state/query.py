"""What every page's URL form shares: the last value of a repeated key, a finite number, the shortest
text that reads back as the same float."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_QUERY_VALUE = 200  # characters kept from one URL value; a longer one is ignored with a notice


def last_value(query: Mapping[str, Any], key: str) -> str | None:
    value = query.get(key)
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else None  # repeated keys: the last one wins, as in Streamlit
    return None if value is None else str(value)


def bounded_value(query: Mapping[str, Any], key: str, notices: list[str]) -> str | None:
    """:func:`last_value`, or None with a notice in ``notices`` when it is longer than :data:`MAX_QUERY_VALUE`."""
    raw = last_value(query, key)
    if raw is not None and len(raw) > MAX_QUERY_VALUE:
        notices.append(f"URL value of '{key}' is too long ({len(raw)} characters); using the default.")
        return None
    return raw


def finite_number(text: str) -> float:
    value = float(text.strip())
    if not math.isfinite(value):
        raise ValueError("not finite")
    return value


def number_in_range(text: str, low: float, high: float, integer: bool = False) -> float:
    """``text`` as a finite number in [low, high], an ``int`` when ``integer`` (then it must be whole);
    ValueError otherwise (the caller's notice names the key and the range)."""
    value = finite_number(text)
    if integer and value != round(value):
        raise ValueError("not whole")
    if not low <= value <= high:
        raise ValueError("out of range")
    return int(value) if integer else value


def url_number(value: float) -> str:
    """The shortest text that parses back to exactly ``value`` (``repr(float)``), so a copied URL
    reproduces the view; a whole number drops its ``.0`` (``-1``, not ``-1.0``) and an exponent its
    ``+`` (``1e22``: a ``+`` in a query string may be read back as a space); both parse back the same.
    The one formatter of every number in a URL, explore and editor state alike."""
    text = repr(float(value)).replace("e+", "e")
    return text[:-2] if text.endswith(".0") else text
