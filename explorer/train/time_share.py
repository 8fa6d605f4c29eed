"""Who is training right now, and each one's share of the training time per Train-page tick.

A tick trains for :data:`TRAIN_SECONDS_PER_TICK` divided by the number of people training now, so five people
training on a two-core server still get answers to their slider moves. Without a folder the count is this
process's. With replicas on one machine (``gradient-explorer run --replicas N``) the count must be the machine's,
or N replicas would train N times as much per second and take the cores the slider moves need: the command
makes one private folder (:data:`TRAINERS_DIR_ENV`) and every replica marks its trainers there, a file per
trainer whose modification time is its last tick.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

TRAIN_SECONDS_PER_TICK = 0.5  # of every Train-page tick (1 s), for everyone training on this server or machine
STALE_SECONDS = 4.0  # a trainer with no tick for this long has gone (a closed tab, a dead replica)
TRAINERS_DIR_ENV = "GRADIENT_EXPLORER_TRAINERS_DIR"  # set by ``run --replicas``: the machine's folder of trainers
TRAINER_ID = re.compile(r"[0-9a-f]{1,64}")  # a uuid4 hex: a safe file name


class Trainers:
    """The trainers of this process (``folder=None``) or of every process marking ``folder``.

    ``clock`` is wall-clock time (``time.time``): in folder mode it is compared with file modification times.
    """

    def __init__(self, folder: Path | None = None, stale_seconds: float = STALE_SECONDS, clock: Callable[[], float] = time.time):
        if not stale_seconds > 0:
            raise ValueError(f"stale_seconds must be > 0, got {stale_seconds}")
        self.folder, self.stale_seconds, self.clock = folder, stale_seconds, clock
        self._ticks: dict[str, float] = {}
        self._lock = threading.Lock()

    def tick(self, trainer: str) -> int:
        """Mark ``trainer`` as training now, forget those gone quiet; how many train now (``trainer`` included)."""
        _check(trainer)
        now = self.clock()
        if self.folder is None:
            with self._lock:
                self._ticks[trainer] = now
                for other, last in list(self._ticks.items()):
                    if now - last > self.stale_seconds:
                        del self._ticks[other]
                return len(self._ticks)
        mark = self.folder / trainer
        with open(mark, "a"):
            pass
        os.utime(mark, (now, now))
        count = 0
        with os.scandir(self.folder) as entries:
            for entry in entries:
                try:
                    if now - entry.stat().st_mtime > self.stale_seconds:
                        os.unlink(entry.path)  # another replica may have removed it first
                    else:
                        count += 1
                except FileNotFoundError:
                    continue
        return max(count, 1)

    def leave(self, trainer: str) -> None:
        """``trainer`` stopped (finished, stopped, reset): it no longer counts."""
        _check(trainer)
        if self.folder is None:
            with self._lock:
                self._ticks.pop(trainer, None)
        else:
            (self.folder / trainer).unlink(missing_ok=True)

    def seconds_for(self, trainer: str) -> float:
        """This tick's training seconds for ``trainer``: :data:`TRAIN_SECONDS_PER_TICK` over everyone training now."""
        return TRAIN_SECONDS_PER_TICK / self.tick(trainer)


def _check(trainer: str) -> None:
    if not TRAINER_ID.fullmatch(trainer):
        raise ValueError(f"a trainer id is 1 to 64 lowercase hex digits (a uuid4 hex), got {trainer!r}")


def from_environment() -> Trainers:
    """This process's or, under ``run --replicas``, the machine's trainers (:data:`TRAINERS_DIR_ENV`)."""
    folder = os.environ.get(TRAINERS_DIR_ENV, "").strip()
    if not folder:
        return Trainers()
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"{TRAINERS_DIR_ENV}={folder!r} is not a folder; it is set by `gradient-explorer run --replicas N`")
    return Trainers(path)
