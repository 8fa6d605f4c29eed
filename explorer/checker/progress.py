"""What ``verify`` shows while it runs on a terminal: :class:`Progress`, one line per finished function or layer
(its verdict) and a status line for the one being checked (done of total, its name, elapsed seconds).

Only for a person watching: ``verify --json`` and output that is not a terminal (a pipe, a file, CI) get nothing
extra (:func:`for_terminal` returns :data:`SILENT`), so their output is what it was.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

ORDER = ("fail", "warn", "skip", "pass")  # a verdict line names the worst level first


class Progress:
    """``start(name)`` before a function's (or a backends row's) checks, ``done(name, levels)`` after; ``add(n)``
    when more work is found (the backends rows are known only once the TensorFlow worker lists them)."""

    def __init__(self, total: int, stream: TextIO, clock: Callable[[], float] = time.monotonic):
        self.total, self.finished = total, 0
        self.stream, self.clock = stream, clock
        self.began = clock()

    def add(self, count: int) -> None:
        self.total += count

    def _elapsed(self) -> str:
        return f"{self.clock() - self.began:.0f} s"

    def start(self, name: str) -> None:
        self.stream.write(f"\r\x1b[K[{self.finished}/{self.total}] checking {name} ... {self._elapsed()}")
        self.stream.flush()

    def done(self, name: str, levels: Iterable[str]) -> None:
        self.finished += 1
        counts: dict[str, int] = {}
        for level in levels:
            counts[level] = counts.get(level, 0) + 1
        verdict = ", ".join(f"{counts[level]} {level}" for level in ORDER if counts.get(level))
        self.stream.write(f"\r\x1b[K[{self.finished}/{self.total}] {name}: {verdict or 'no rows'} ({self._elapsed()})\n")
        self.stream.flush()


class _Silent:
    total = finished = 0

    def add(self, count: int) -> None:
        pass

    def start(self, name: str) -> None:
        pass

    def done(self, name: str, levels: Iterable[str]) -> None:
        pass


SILENT: Any = _Silent()


def for_terminal(total: int, as_json: bool, stream: TextIO | None = None) -> Progress | Any:
    """A :class:`Progress` on ``stream`` (stderr) when stdout and it are a terminal and the output is not JSON;
    else :data:`SILENT`."""
    stream = sys.stderr if stream is None else stream
    if as_json or not (sys.stdout.isatty() and stream.isatty()):
        return SILENT
    return Progress(total, stream)
