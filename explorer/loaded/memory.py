"""What the loaded package remembers: each cache a :class:`Remembered` beside the code that fills it.

Every Remembered registers itself here when made, so :func:`forget_all` (called by
:func:`explorer.loaded.reset`) clears all of them, on whichever side of the process boundary they live,
without a list of caches to keep up to date by hand.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

_EVERY: weakref.WeakSet[Remembered] = weakref.WeakSet()


class Remembered:
    """A small mapping that forgets its oldest entries beyond ``limit`` (None: keeps everything).

    ``on_forget`` is called with each value that :meth:`clear` drops (the background checks cancel their
    futures). :attr:`lock` guards a read-then-write of the caller (e.g. "remembered, else start one")."""

    def __init__(self, what: str = "", limit: int | None = None, on_forget: Callable[[Any], None] | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be None or a whole number >= 1, got {limit!r}")
        self.what = what
        self.limit = limit
        self.on_forget = on_forget
        self.lock = threading.RLock()
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        _EVERY.add(self)

    def __repr__(self) -> str:
        return f"Remembered({self.what!r}, {len(self)} of {self.limit or 'any number'})"

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __getitem__(self, key: Hashable) -> Any:
        return self._items[key]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._items))

    def get(self, key: Hashable, default: Any = None) -> Any:
        return self._items.get(key, default)

    def items(self) -> list[tuple[Hashable, Any]]:
        return list(self._items.items())

    def remember(self, key: Hashable, value: Any) -> Any:
        """Keep ``value`` under ``key`` as the newest entry (the oldest beyond the limit are forgotten);
        returns ``value``."""
        with self.lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while self.limit is not None and len(self._items) > self.limit:
                self._items.popitem(last=False)
            return value

    def touch(self, key: Hashable) -> None:
        """Mark ``key`` as just used: the least recently used entry is forgotten first."""
        with self.lock:
            self._items.move_to_end(key)

    def forget(self, key: Hashable) -> None:
        with self.lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self.lock:
            dropped = list(self._items.values())
            self._items.clear()
        if self.on_forget is not None:
            for value in dropped:
                self.on_forget(value)


def every() -> list[Remembered]:
    """Every Remembered made so far that still exists (the test of :func:`explorer.loaded.reset` reads it)."""
    return list(_EVERY)


def forget_all() -> None:
    for cache in every():
        cache.clear()
