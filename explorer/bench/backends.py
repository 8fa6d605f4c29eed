"""Issue 38's benchmark: a three-backend ``backends`` check of one function against the same check on TensorFlow
alone, with warm workers, interleaved (:func:`measure_backends_vs_tf`); and each backend worker's start time and
memory."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTION = (str(REPO_ROOT / "examples" / "backends_portable.py"), "spike")


def _memory_mb(pid: int | None) -> dict[str, float | None]:
    """A process's resident memory now and at its peak (VmRSS, VmHWM) in MB; None where /proc cannot tell."""
    if pid is None:
        return {"rss_mb": None, "peak_rss_mb": None}
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {"rss_mb": None, "peak_rss_mb": None}
    values = {}
    for key, name in (("VmRSS:", "rss_mb"), ("VmHWM:", "peak_rss_mb")):
        values[name] = round(int(status.split(key)[1].split()[0]) / 1024, 1) if key in status else None
    return values


def measure_backends_vs_tf(interleave: Callable[..., Any], timed: Callable[..., Any], pairs: int = 5) -> dict[str, Any]:
    """``check_backends_vs_tf``: the median over interleaved pairs of (the ``backends`` check of
    ``examples/backends_portable.py``'s ``spike`` on every installed backend) / (the same check on TensorFlow
    alone: its inputs, eager and ``tf.function``), each worker started and warmed up first (one untimed run of
    each). The backends run in their workers at once. ``interleave`` and ``timed``: the speed benchmark's
    (:func:`explorer.bench.speed.interleave`), passed in so that this module does not import it back."""
    from explorer.checker import backends

    names = [name for name in backends.BACKENDS if backends.installed(name)]
    target, name = FUNCTION
    started = time.perf_counter()
    for backend in names:
        backends.backend_worker(backend)  # all start at once, as verify starts them
    for backend in names:
        backends._call(backend, "warm", time_limit=300.0)
    all_ready_s = time.perf_counter() - started
    try:
        tf_only = timed(lambda: backends.run_backends(target, name, ["tensorflow"]))
        every = timed(lambda: backends.run_backends(target, name, names))
        tf_only(), every()  # warm-up: traces, jit and torch.compile caches
        measured = interleave(tf_only, every, pairs)
        workers = {}
        for backend in names:
            running = backends.backend_worker(backend)
            workers[backend] = {"start_s": round(running.start_seconds or float("nan"), 2), **_memory_mb(running.pid)}
    finally:
        backends.close_workers()
    return {
        "check_backends_vs_tf": measured.ratio,
        "check_backends_tf_only_s": round(measured.baseline_s, 3),
        "check_backends_all_s": round(measured.measured_s, 3),
        "check_backends_compared": ",".join(names),
        "check_backends_ratios": [round(r, 2) for r in measured.ratios],
        "backend_workers_ready_s": round(all_ready_s, 2),
        "backend_workers": workers,
        "backend_worker_rss_mb_total": round(statistics.fsum(w["rss_mb"] or 0.0 for w in workers.values()), 1),
    }
