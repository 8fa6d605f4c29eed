"""Who started which training run in this server process: the Train page's "Training runs on this server".

A training session lives in one browser session (``st.session_state``), so another user cannot see it; this is a
bounded, process-wide record of the runs started here (:data:`KEPT`, newest last), so that with ``--login`` a team
sees whose run is whose. Under ``--replicas`` each replica keeps its own.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

KEPT = 50


@dataclass(frozen=True)
class StartedRun:
    run_id: str
    user: str | None  # the signed-in user; None when the server runs without --login
    started: float  # time.time()
    labels: tuple[str, ...]  # the runs compared (the Train page's run labels)
    epochs: int


_lock = threading.Lock()
_started: deque[StartedRun] = deque(maxlen=KEPT)


def record(run_id: str, user: str | None, labels: tuple[str, ...], epochs: int, now: float | None = None) -> StartedRun:
    entry = StartedRun(run_id, user, time.time() if now is None else now, tuple(labels), int(epochs))
    with _lock:
        _started.append(entry)
    return entry


def recent(limit: int = KEPT) -> list[StartedRun]:
    """The last ``limit`` runs started in this process, newest first."""
    with _lock:
        return list(reversed(_started))[:limit]


def clear() -> None:
    with _lock:
        _started.clear()
