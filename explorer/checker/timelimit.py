"""Run the user's code with a time limit: :func:`call_with_time_limit`.

Python cannot stop a thread, so an overrunning call is abandoned, not stopped: the caller gets a
TimeoutError while the call runs on in a daemon thread. That is why the checks of a team's code run in a
worker process (:mod:`explorer.worker`): a worker whose call left such a thread running is retired after it
answers, so the abandoned thread ends with it. Used by the checker (:mod:`explorer.checker.plan`), in the
worker or, for a function the guardrail cannot send there, in the caller's process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class TimeLimitExceeded(TimeoutError):
    """The call overran its time limit (a TimeoutError the user's own code raised is passed on as it is)."""


def call_with_time_limit(function: Callable[[], Any], seconds: float, name: str = "user-code") -> Any:
    """``function()`` in a daemon thread: its result, its exception re-raised, or TimeLimitExceeded after ``seconds``."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = function()
        except BaseException as error:  # noqa: BLE001 - user code may even raise SystemExit
            box["error"] = error

    worker = threading.Thread(target=work, name=name, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeLimitExceeded(f"did not finish within {seconds:g} s (a hung or very slow forward or backward)")
    if "error" in box:
        raise box["error"]
    return box["result"]
