"""A watched run on disk: ``runs/<name>/``, written while training goes on and read by anyone at any time.

::

    runs/<name>/info.json                 what was run (written at start, rewritten at the end)
    runs/<name>/heartbeat                 its mtime is the writer's last record (a live run is a recent one)
    runs/<name>/<table>/part-*.parquet    one folder of Parquet parts per kind of record (TABLES)

Each part is written whole under a temporary name and renamed into place (an atomic rename on one file
system), so a reader never sees half a row and a killed writer leaves whole parts behind. Parts are merged
by the writer when there are many; a merged part is named for the range of parts it holds
(``part-000000-000031.parquet``), and a reader that lists it beside the parts it replaced (the writer removes
them just after the rename) reads only the merged one. A part that cannot be read (cut short by a copy, a full
disk) is left out and named in ``problems``: what is whole is still shown.

Runs are found by scanning the folder (as TensorBoard's ``--logdir``): there is no registry to keep in sync.
A run's name is a plain file name inside the runs folder; :func:`run_path` refuses anything else, and an
``info.json``, table folder or part that is a symbolic link is not read (it may lead out of the runs folder).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

FORMAT = 1
TABLES = ("steps", "layers", "histograms")
INFO_FILE = "info.json"
HEARTBEAT_FILE = "heartbeat"
STATUSES = ("running", "finished", "stopped")
# A "running" run whose writer has not recorded for this long is reported as stopped before its end.
LIVE_SECONDS = 60.0
MERGE_AT_PARTS = 32
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_PART = re.compile(r"part-(\d{6})(?:-(\d{6}))?\.parquet")


class RunNameError(ValueError):
    """A run name that is not a plain name inside the runs folder (the message says what is allowed)."""


def check_name(name: Any) -> str:
    """``name`` if it is a run name: 1 to 128 of letters, digits, ``.``, ``_``, ``-``, not starting with a dot
    and without ``..``; else :class:`RunNameError` saying so."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise RunNameError(
            f"run name {shown} is not allowed: a run is named by 1 to 128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..'"
        )
    return name


def run_path(root: str | os.PathLike, name: str) -> Path:
    """The folder of run ``name`` inside ``root``; :class:`RunNameError` for a name that is not plain or
    whose folder (a symbolic link) leads out of ``root``. The folder need not exist."""
    base = Path(root).resolve()
    path = base / check_name(name)
    if path.is_symlink() or not path.resolve().is_relative_to(base):
        raise RunNameError(f"run {name!r} is a link that leads out of the runs folder; it is not read")
    return path


def new_run_name(prefix: str = "run") -> str:
    """A name that sorts by start time: ``<prefix>-20261205-213000-123456``."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-%f")
    return check_name(f"{prefix}-{stamp}")


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _json_safe(value: Any) -> Any:
    """NaN and infinities as None (JSON has neither); tuples as lists; numpy scalars as numbers."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunWriter:
    """Appends the records of one run. Only one process writes a run (under ``tf.distribute``, the chief).

    ``RunWriter(root, name, info)`` creates ``root/name`` (``FileExistsError`` if it holds a run already) and
    writes ``info.json``; an unwritable folder raises ``OSError`` here, before any training. ``append(table,
    rows)`` buffers rows; a part is written when ``flush_seconds`` have passed since the last one, on
    :meth:`flush` and on :meth:`close`.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        name: str,
        info: Mapping[str, Any],
        *,
        flush_seconds: float = 2.0,
        merge_at_parts: int = MERGE_AT_PARTS,
    ):
        if not flush_seconds >= 0:
            raise ValueError(f"flush_seconds must be >= 0, got {flush_seconds}")
        if merge_at_parts < 2:
            raise ValueError(f"merge_at_parts must be >= 2, got {merge_at_parts}")
        self.path = run_path(root, name)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.mkdir(exist_ok=False)
        self.flush_seconds = float(flush_seconds)
        self.merge_at_parts = int(merge_at_parts)
        self._buffers: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLES}
        self._next_part = {table: 0 for table in TABLES}
        self._last_flush = time.monotonic()
        self.info: dict[str, Any] = {
            "format": FORMAT, "name": name, "status": "running", "stop_reason": None,
            "started": _now_iso(), "ended": None, "pid": os.getpid(), **dict(info),
        }  # fmt: skip
        self._write_info()
        for table in TABLES:
            (self.path / table).mkdir()
        self.beat()
        self.closed = False

    def _write_info(self) -> None:
        text = json.dumps(_json_safe(self.info), indent=1, sort_keys=True, allow_nan=False)
        _write_atomically(self.path / INFO_FILE, text.encode())

    def update_info(self, **values: Any) -> None:
        """Rewrite ``info.json`` with ``values`` added (for what is known only once training has begun)."""
        self.info.update(values)
        self._write_info()

    def beat(self) -> None:
        """Mark the run as alive now (the Runs page calls a run live while its heartbeat is recent)."""
        (self.path / HEARTBEAT_FILE).touch()

    def append(self, table: str, rows: Iterable[Mapping[str, Any]] | pd.DataFrame) -> None:
        if table not in TABLES:
            raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r}")
        if self.closed:
            raise ValueError(f"run {self.info['name']!r} is closed; nothing more can be appended")
        records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else [dict(row) for row in rows]
        self._buffers[table].extend(records)
        self.beat()
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Write every buffered row as whole parts; merge a table's parts when there are many."""
        for table, rows in self._buffers.items():
            if not rows:
                continue
            number = self._next_part[table]
            frame = pa.Table.from_pylist(rows)
            self._write_part(table, frame, f"part-{number:06d}.parquet")
            self._next_part[table] = number + 1
            self._buffers[table] = []
            if len(_part_files(self.path / table)) >= self.merge_at_parts:
                self._merge(table)
        self._last_flush = time.monotonic()

    def _write_part(self, table: str, frame: pa.Table, name: str) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(frame, sink, row_group_size=max(1, min(len(frame), 4096)))
        _write_atomically(self.path / table / name, sink.getvalue().to_pybytes())

    def _merge(self, table: str) -> None:
        folder = self.path / table
        parts = _part_files(folder)
        frames, covered = [], []
        for part in parts:
            frames.append(pq.read_table(part))
            covered.append(part)
        merged = pa.concat_tables(frames, promote_options="default")
        first = _part_range(parts[0])[0]
        last = _part_range(parts[-1])[1]
        self._write_part(table, merged, f"part-{first:06d}-{last:06d}.parquet")
        for part in covered:
            part.unlink()

    def close(self, status: str = "finished", stop_reason: str | None = None) -> None:
        """Write what is buffered and mark the run ``status`` ("finished" or "stopped")."""
        if status not in STATUSES[1:]:
            raise ValueError(f"status must be 'finished' or 'stopped', got {status!r}")
        if self.closed:
            return
        self.flush()
        self.update_info(status=status, stop_reason=stop_reason, ended=_now_iso())
        self.beat()
        self.closed = True


def _part_range(path: Path) -> tuple[int, int]:
    match = _PART.fullmatch(path.name)
    first = int(match.group(1))
    return first, int(match.group(2)) if match.group(2) else first


def _part_files(folder: Path) -> list[Path]:
    """The parts of a table to read, in order: a merged part hides the parts it holds."""
    try:
        if folder.is_symlink():
            return []  # a table folder that is a link may lead out of the runs folder: not read
        names = [p for p in folder.iterdir() if _PART.fullmatch(p.name) and not p.is_symlink()]
    except OSError:
        return []
    ranges = {p: _part_range(p) for p in names}
    merged = [r for p, r in ranges.items() if r[0] != r[1]]
    kept = [p for p, (first, last) in ranges.items() if not any(a <= first and last <= b and (a, b) != (first, last)
                                                                 for a, b in merged)]  # fmt: skip
    return sorted(kept, key=lambda p: ranges[p])


@dataclass
class TableRead:
    """Rows of one table, and the parts that could not be read (file name, reason)."""

    frame: pd.DataFrame
    problems: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class RunSummary:
    name: str
    state: str  # "live", "finished", "stopped", "stopped before its end"
    started: str
    model: str
    ops: str
    steps: int
    user: str | None


class Run:
    """One run folder, read. ``Run(root, name)`` raises :class:`RunNameError` for a name outside ``root`` and
    ``FileNotFoundError`` when there is no such run (no ``info.json``)."""

    def __init__(self, root: str | os.PathLike, name: str):
        self.root = Path(root)
        self.name = name
        self.path = run_path(root, name)
        self.info = read_info(self.path)

    def state(self, now: float | None = None) -> str:
        """The state: "live", "finished", "stopped" (ended early on purpose), or "stopped before its end" (its writer
        stopped recording more than LIVE_SECONDS ago without closing it: killed, or a machine gone)."""
        status = self.info.get("status")
        if status in ("finished", "stopped"):
            return status
        age = (time.time() if now is None else now) - self.heartbeat()
        return "live" if age <= LIVE_SECONDS else "stopped before its end"

    def heartbeat(self) -> float:
        """The time of the writer's last record (seconds since the epoch)."""
        try:
            return (self.path / HEARTBEAT_FILE).stat().st_mtime
        except OSError:
            return (self.path / INFO_FILE).stat().st_mtime

    def parts(self, table: str) -> list[Path]:
        if table not in TABLES:
            raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r}")
        return _part_files(self.path / table)

    def version(self) -> tuple:
        """Changes whenever the run's files change: a cache key for what was read from it."""
        stamps = []
        for name in (INFO_FILE, HEARTBEAT_FILE):
            try:
                stamps.append((self.path / name).stat().st_mtime_ns)
            except OSError:
                stamps.append(0)
        return (*stamps, *(tuple(p.name for p in self.parts(t)) for t in TABLES))

    def read(
        self,
        table: str,
        columns: Sequence[str] | None = None,
        *,
        steps: Sequence[int] | None = None,
        layers: Sequence[str] | None = None,
    ) -> TableRead:
        """Rows of ``table``, only ``columns`` (all when None), only the given ``steps`` and ``layers``.

        Filters and projection are pushed into the Parquet reader, so a page reads the rows it shows and not the
        run. Rows are sorted by step (then layer)."""
        filters = []
        if steps is not None:
            filters.append(("step", "in", [int(s) for s in steps]))
        if layers is not None:
            filters.append(("layer", "in", [str(layer) for layer in layers]))
        wanted = None if columns is None else list(dict.fromkeys(columns))
        frames, problems = [], []
        for part in self.parts(table):
            try:
                frame = pq.read_table(part, columns=wanted, filters=filters or None).to_pandas()
            except FileNotFoundError:
                continue  # merged away between the listing and this read: the merged part has its rows
            except (OSError, pa.ArrowException, ValueError) as error:
                problems.append((f"{table}/{part.name}", _first_line(error)))
                continue
            if len(frame):
                frames.append(frame)
        if not frames:
            return TableRead(pd.DataFrame(columns=wanted or []), problems)
        frame = pd.concat(frames, ignore_index=True)
        order = [c for c in ("step", "layer") if c in frame.columns]
        if order:
            frame = frame.sort_values(order, kind="stable", ignore_index=True)
        return TableRead(frame, problems)

    def recorded_steps(self) -> list[int]:
        """Every recorded step, in order (from the small ``steps`` table)."""
        frame = self.read("steps", ["step"]).frame
        return sorted({int(s) for s in frame["step"]}) if len(frame) else []

    def summary(self, now: float | None = None) -> RunSummary:
        layers = self.info.get("layers") or []
        ops = ", ".join(dict.fromkeys(str(layer.get("op") or layer.get("title") or "?") for layer in layers))
        return RunSummary(
            name=self.name, state=self.state(now), started=str(self.info.get("started", "")),
            model=str(self.info.get("model", "")), ops=ops, steps=len(self.recorded_steps()),
            user=self.info.get("user"),
        )  # fmt: skip


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def read_info(path: Path) -> dict[str, Any]:
    """``info.json`` of a run folder; ``FileNotFoundError`` if there is none, ``ValueError`` if unreadable."""
    if (path / INFO_FILE).is_symlink():
        raise ValueError(f"run {path.name!r}: its {INFO_FILE} is a link, which may lead out of the runs folder; not read")
    try:
        text = (path / INFO_FILE).read_text()
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(f"no run {path.name!r}: its folder has no {INFO_FILE}") from None
    try:
        info = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"run {path.name!r}: {INFO_FILE} is not valid JSON ({error.msg})") from None
    if not isinstance(info, dict):
        raise ValueError(f"run {path.name!r}: {INFO_FILE} is not a JSON object")
    return info


def list_runs(root: str | os.PathLike, now: float | None = None) -> tuple[list[RunSummary], list[tuple[str, str]]]:
    """The runs in ``root``, newest first, and the folders that look like runs but cannot be read (name,
    reason). Symbolic links and names that are not run names are not followed."""
    base = Path(root)
    runs, problems = [], []
    try:
        entries = list(base.iterdir())
    except OSError:
        return [], []
    for entry in entries:
        if not NAME_PATTERN.fullmatch(entry.name) or ".." in entry.name or entry.is_symlink() or not entry.is_dir():
            continue
        if not (entry / INFO_FILE).exists():
            continue
        try:
            runs.append(Run(base, entry.name).summary(now))
        except (OSError, ValueError) as error:
            problems.append((entry.name, str(error)))
    runs.sort(key=lambda run: (run.started, run.name), reverse=True)
    return runs, problems
