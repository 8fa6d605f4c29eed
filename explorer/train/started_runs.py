"""Who started which training run on this server: the Train page's "Training runs on this server".

A training session lives in one browser session (``st.session_state``), so another user cannot see it; this is a
bounded record of the runs started here (newest first), so that with ``--login`` a team sees whose run is whose.
One server keeps it in memory; under ``--replicas`` the replicas of the machine append to one private file
(:data:`STARTED_RUNS_ENV`, in the replica set's runtime folder), one JSON line per run, so a user on one replica
sees the runs started on the others.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

STARTED_RUNS_ENV = "GRADIENT_EXPLORER_STARTED_RUNS"  # set by --replicas: the file every replica appends to
KEPT = 50
TAIL_BYTES = 64 * 1024  # what is read of the shared file: far more than KEPT lines


@dataclass(frozen=True)
class StartedRun:
    run_id: str
    user: str | None  # the signed-in user; None when the server runs without --login
    started: float  # time.time()
    labels: tuple[str, ...]  # the runs compared (the Train page's run labels)
    epochs: int
    replica: str = ""  # under --replicas: the replica that trains it


_lock = threading.Lock()
_started: deque[StartedRun] = deque(maxlen=KEPT)


def _shared_file() -> Path | None:
    path = os.environ.get(STARTED_RUNS_ENV)
    return Path(path) if path else None


def record(
    run_id: str, user: str | None, labels: tuple[str, ...], epochs: int, replica: str = "", now: float | None = None
) -> StartedRun:
    entry = StartedRun(run_id, user, time.time() if now is None else now, tuple(labels), int(epochs), replica)
    shared = _shared_file()
    if shared is None:
        with _lock:
            _started.append(entry)
        return entry
    line = (json.dumps(asdict(entry)) + "\n").encode()
    descriptor = os.open(shared, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, line)  # one write of one short line with O_APPEND: replicas never interleave lines
    finally:
        os.close(descriptor)
    return entry


def recent(limit: int = KEPT) -> list[StartedRun]:
    """The last ``limit`` runs started on this server (under ``--replicas``: on any replica), newest first."""
    shared = _shared_file()
    if shared is None:
        with _lock:
            return list(reversed(_started))[:limit]
    try:
        with shared.open("rb") as handle:
            start = max(0, handle.seek(0, os.SEEK_END) - TAIL_BYTES)
            handle.seek(start)
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    if start > 0:
        lines = lines[1:]  # the window began inside a line
    entries = []
    for line in reversed(lines):
        try:
            fields = json.loads(line)
            entries.append(StartedRun(**{**fields, "labels": tuple(fields["labels"])}))
        except (ValueError, TypeError, KeyError):
            continue  # not one of ours (another version's line)
        if len(entries) == limit:
            break
    return entries


def clear() -> None:
    with _lock:
        _started.clear()
