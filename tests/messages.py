"""Checks of error messages by what they tell the user (the argument, the allowed values), not their wording."""

from __future__ import annotations

import re
from collections.abc import Iterable


def numbers_in(text: str) -> set[float]:
    """Every number written in ``text`` (1_000_000, -2e+06 and 65504 alike)."""
    return {float(m.replace("_", "")) for m in re.findall(r"-?\d[\d_]*(?:\.\d+)?(?:e[+-]?\d+)?", text)}


def assert_tells(message: str, argument: str, bounds: Iterable[float] = (), allowed: Iterable[str] = ()) -> None:
    """``message`` names ``argument``, every bound of its allowed range, and every allowed value."""
    assert argument in message, f"{message!r} does not name {argument!r}"
    missing = set(bounds) - numbers_in(message)
    assert not missing, f"{message!r} does not give the bound(s) {sorted(missing)}"
    absent = [value for value in allowed if value not in message]
    assert not absent, f"{message!r} does not list {absent}"
