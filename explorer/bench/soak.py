"""The browser benchmark's soak and load modes: days of a team server in minutes, and ten users on one or two replicas.

    python -m explorer.bench.browser --soak [--soak-sessions 330] [--soak-moves 1000] [--soak-trainings 3] [--json]
    python -m explorer.bench.browser --load [--load-moves 15] [--json]

**Soak.** One app server (``streamlit run app.py``, the project's settings) with the examples' ops loaded
(``examples/spike.py``, ``examples/square.py``: their calls run in worker processes). Hundreds of short
sessions, one after another in two browser contexts at a time, each opening Explore on a random op (built-in or
loaded) at a random parameter value, waiting for the figure and closing; then one session moving a slider a
thousand times (right, left, right, ...: the figure changes every time); then training runs. The server tree's
resident memory (VmRSS summed over the server and its children) and its live processes are read every 10
sessions after a warm-up of :data:`WARMUP_SESSIONS`: more than the 128 disconnected sessions Streamlit keeps
(``server.disconnectedSessionTTL``, its session store's size), so the store is full when measuring starts and
what grows after it is a leak, not a session kept on purpose. Target: at most :data:`GROWTH_TARGET_BYTES` per
100 sessions (the least-squares slope through the readings) and the same number of processes at every checkpoint.

**Load.** ``gradient-explorer run --replicas N`` (HAProxy in front, the same proxy for every N), in legs
interleaved 1, 2, 2, 1 (:data:`LOAD_LEGS`), each count's moves pooled over its legs:
five users training (mini-batches, until the moves are done) and five users each moving a slider of their own
op, while one more context moves the floor page's slider (``explorer.bench.speed.FLOOR_PAGE``, its own server)
as often: slider-to-figure medians of the app's users and of the floor page in the same run, and the peak of
the whole tree's memory (proxy, replicas, workers). Two replicas must not be slower than one: on one machine
they share its training time (:mod:`explorer.train.time_share`), so the second adds no training, only a process.

Loopback only; every loop is bounded in count and in time.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from explorer.bench.harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    FIGURE_JS,
    ROOT,
    VIEWPORT,
    MemorySampler,
    async_playwright,
    free_port,
    nudge_first_slider,
    open_explore,
    process_tree,
    serve_app,
    settle,
    slider_ops,
    train_as_user,
    tree_memory,
)
from explorer.bench.speed import FLOOR_BROWSER_PAGE

LOADED_MODULES = ("examples/spike.py", "examples/square.py")
LOADED_OPS = ("fast_sigmoid_spike", "square_with_scaled_grad")  # their functions: op keys on the Explore page
WARMUP_SESSIONS = 130  # > 128, the disconnected sessions Streamlit keeps (MemorySessionStorage's maxsize)
READING_SESSIONS = 10  # the tree's memory is read every 10 sessions; the table shows every 100th
CHECKPOINT_SESSIONS = 100
GROWTH_TARGET_BYTES = 5 * 1024**2  # per 100 sessions, after warm-up
PARALLEL_SESSIONS = 2
SESSION_TIMEOUT_SECONDS = 120.0  # one short session (a hang only)
SESSION_PHASE_SHARE = 0.7  # of --soak-minutes: the short sessions stop there, leaving the rest to the slider and training
TRAINING_EPOCHS = 300
TRAINING_SECONDS = 20.0
LOAD_TRAINERS = 5
LOAD_SLIDER_USERS = 5
LOAD_PACE_SECONDS = 0.5
LOAD_START_TIMEOUT_SECONDS = 240.0
LOAD_LEGS = (1, 2, 2, 1)  # interleaved: a drift of the machine's load over the run weighs on both counts
LOAD_TRAIN_SECONDS = 1800.0  # the trainers' bound (a hang only): the stop event ends them once the moves are done


# -- soak ----------------------------------------------------------------------------------------------------
@dataclass
class SoakResult:
    sessions: int
    warmup_sessions: int
    checkpoints: list[dict] = field(default_factory=list)  # {"sessions", "rss_bytes", "processes"}: every 10 after warm-up
    growth_per_100_bytes: float = 0.0
    slider_moves: int = 0
    slider_median_s: float = 0.0
    after_slider: dict = field(default_factory=dict)
    trainings: int = 0
    after_training: dict = field(default_factory=dict)
    training_readings: list[dict] = field(default_factory=list)  # after each training run, "trainings" counted
    seconds: float = 0.0

    @property
    def growth_ok(self) -> bool:
        return self.growth_per_100_bytes <= GROWTH_TARGET_BYTES

    @property
    def processes_ok(self) -> bool:
        return len({point["processes"] for point in self.checkpoints}) <= 1


def _random_view(rng: random.Random, ops_keys: list[str]) -> str:
    """``/?op=...`` for a random op at a random value of its first parameter (loaded ops: their defaults)."""
    import ops

    key = rng.choice(ops_keys)
    if key in LOADED_OPS:
        return f"/?op={key}"
    spec = ops.get(key)
    if not spec.params:
        return f"/?op={key}"
    param = spec.params[0]
    value = rng.randint(int(param.low), int(param.high)) if param.integer else round(rng.uniform(param.low, param.high), 3)
    return f"/?op={key}&p.{param.name}={value}"


async def _short_session(browser, url: str, path: str) -> None:
    context = await browser.new_context(viewport=VIEWPORT)
    try:
        page = await context.new_page()
        await page.goto(url + path)
        await settle(page, timeout=SESSION_TIMEOUT_SECONDS)
        await page.wait_for_function(FIGURE_JS, arg="main_figure", timeout=SESSION_TIMEOUT_SECONDS * 1000)
    finally:
        await context.close()


def _reading(pid: int, sessions: int) -> dict:
    return {"sessions": sessions, "rss_bytes": tree_memory(pid)[0], "processes": len(process_tree(pid))}


async def _soak(url: str, pid: int, sessions: int, moves: int, trainings: int, seconds: float, seed: int) -> SoakResult:
    import ops

    rng = random.Random(seed)
    keys = [*ops.names(), *LOADED_OPS]
    result = SoakResult(sessions=sessions, warmup_sessions=WARMUP_SESSIONS)
    began = time.monotonic()
    deadline, sessions_deadline = began + seconds, began + SESSION_PHASE_SHARE * seconds
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            done = 0
            while done < sessions and time.monotonic() < sessions_deadline:
                batch = min(PARALLEL_SESSIONS, sessions - done)
                await asyncio.gather(*(_short_session(browser, url, _random_view(rng, keys)) for _ in range(batch)))
                done += batch
                if done % READING_SESSIONS < batch:  # a reading; progress on stderr: a long soak says where it is
                    reading = _reading(pid, done)
                    if done >= WARMUP_SESSIONS:
                        result.checkpoints.append(reading)
                    print(f"soak: {done} sessions, {time.monotonic() - began:.0f} s, tree RSS {reading['rss_bytes'] / 1024**2:.0f} MiB, "
                          f"{reading['processes']} processes", file=sys.stderr, flush=True)  # fmt: skip
            result.sessions = done
            context = await browser.new_context(viewport=VIEWPORT)
            page = await context.new_page()
            await open_explore(page, url, slider_ops()[0])
            times = []
            for move in range(moves):
                if time.monotonic() > deadline:
                    break
                times.append(await nudge_first_slider(page, "ArrowRight" if move % 2 == 0 else "ArrowLeft"))
            await context.close()
            result.slider_moves, result.slider_median_s = len(times), statistics.median(times) if times else 0.0
            result.after_slider = _reading(pid, done)
            shots = ROOT / "test-artifacts" / "bench_soak"
            shots.mkdir(parents=True, exist_ok=True)
            for number in range(trainings):
                if time.monotonic() > deadline:
                    break
                op = keys[number % len(ops.names())]
                await train_as_user(browser, url, op, TRAINING_EPOCHS, TRAINING_SECONDS, shots / f"training_{number}.png")
                result.trainings += 1
                result.training_readings.append(_reading(pid, done) | {"trainings": result.trainings})
            result.after_training = _reading(pid, done)
        finally:
            await browser.close()
    result.growth_per_100_bytes = growth_per_100(result.checkpoints)
    return result


def growth_per_100(checkpoints: list[dict]) -> float:
    """Bytes of tree RSS per 100 sessions: the least-squares slope through every reading after warm-up (0 with
    fewer than two). A slope through all of them, not the first and last alone: one reading's noise (a page of the
    allocator returned or not) does not decide the verdict."""
    if len(checkpoints) < 2:
        return 0.0
    sessions = [point["sessions"] for point in checkpoints]
    if len(set(sessions)) < 2:
        return 0.0
    slope, _ = statistics.linear_regression(sessions, [point["rss_bytes"] for point in checkpoints])
    return slope * 100


def growth_per_training(readings: list[dict]) -> float:
    """Bytes of tree RSS per training run: the least-squares slope through the readings after each run (0 with
    fewer than two)."""
    if len(readings) < 2:
        return 0.0
    slope, _ = statistics.linear_regression([r["trainings"] for r in readings], [r["rss_bytes"] for r in readings])
    return slope


def run_soak(sessions: int, moves: int, trainings: int, minutes: float = 180.0, seed: int = 0) -> SoakResult:
    from explorer.serve import OPS_ENV

    start = time.perf_counter()
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    env = {OPS_ENV: ",".join(str(ROOT / module) for module in LOADED_MODULES)}
    with serve_app(log_path=artifacts / "bench_soak_streamlit.log", env=env) as server:
        result = asyncio.run(_soak(server.url, server.process.pid, sessions, moves, trainings, minutes * 60, seed))
    result.seconds = time.perf_counter() - start
    return result


def soak_table(result: SoakResult) -> str:
    mib = 1024**2
    lines = [f"{'sessions (after warm-up)':<40} {'server tree RSS':>16} {'live processes':>15}"]
    for point in result.checkpoints:
        if (point["sessions"] - result.warmup_sessions) % CHECKPOINT_SESSIONS >= READING_SESSIONS and point is not result.checkpoints[-1]:
            continue
        lines.append(f"{point['sessions']:<40} {point['rss_bytes'] / mib:>13.0f} MiB {point['processes']:>15}")
    for name, point in ((f"after {result.slider_moves} slider moves", result.after_slider),
                        (f"after {result.trainings} training runs", result.after_training)):  # fmt: skip
        if point:
            lines.append(f"{name:<40} {point['rss_bytes'] / mib:>13.0f} MiB {point['processes']:>15}")
    for point in result.training_readings:
        lines.append(f"{'after training run ' + str(point['trainings']):<40} {point['rss_bytes'] / mib:>13.0f} MiB {point['processes']:>15}")
    if len(result.training_readings) > 1:
        lines.append(f"growth per training run: {growth_per_training(result.training_readings) / mib:.1f} MiB")
    growth = "ok" if result.growth_ok else f"OVER {GROWTH_TARGET_BYTES / mib:.0f} MiB"
    lines.append(f"growth per 100 sessions: {result.growth_per_100_bytes / mib:.1f} MiB ({growth}); "
                 f"processes {'steady' if result.processes_ok else 'CHANGED'}; "
                 f"slider median {result.slider_median_s * 1000:.0f} ms; {result.sessions} sessions in {result.seconds:.0f} s")  # fmt: skip
    return "\n".join(lines)


# -- load ----------------------------------------------------------------------------------------------------
@contextmanager
def replica_server(count: int, log_path: Path, timeout: float = LOAD_START_TIMEOUT_SECONDS) -> Iterator[tuple[str, int]]:
    """``gradient-explorer run --replicas count`` on a free loopback port, its operator folder a temporary one;
    yields (url, the command's pid: the root of the tree whose memory counts)."""
    from explorer.ui.train import EPOCHS_PER_TICK_ENV

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ge-load-") as config:
        env = {**os.environ, "XDG_CONFIG_HOME": config, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
        env.pop(EPOCHS_PER_TICK_ENV, None)
        status = Path(config) / "gradient-explorer" / f"run-{port}.json"
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "explorer", "run", "--replicas", str(count), "--server.port", str(port)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout
            while not status.exists():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"--replicas {count} did not start; log {log_path}")
                time.sleep(0.2)
            yield f"http://127.0.0.1:{port}", process.pid
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # its own group: what this benchmark started
                process.wait(timeout=10)


@dataclass
class LoadResult:
    replicas: int
    slider_median_s: float
    floor_median_s: float
    slider_samples: int
    peak_rss_bytes: int
    trainers: int
    slider_users: int
    exceptions: int
    legs: int = 1


async def _open_slider_page(browser, url: str, op: str):
    """A context on Explore (or the floor page) with its first slider moved once (the first move's one-off costs)."""
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    await page.goto(f"{url}/?op={op}")
    await settle(page, timeout=SESSION_TIMEOUT_SECONDS)
    await page.wait_for_function(FIGURE_JS, arg="main_figure", timeout=SESSION_TIMEOUT_SECONDS * 1000)
    await nudge_first_slider(page)
    return context, page


async def _moves(page, moves: int) -> list[float]:
    times = []
    for move in range(moves):
        times.append(await nudge_first_slider(page, "ArrowLeft" if move % 2 == 0 else "ArrowRight"))
        await asyncio.sleep(LOAD_PACE_SECONDS)
    return times


async def _load(url: str, floor_url: str, moves: int) -> tuple[list[float], list[float], int]:
    """The slider users' pages open first (idle), then five users start training; once all train, the slider
    users and the floor page's context move their sliders together."""
    from explorer.train.trainer import MAX_EPOCHS

    keys = slider_ops()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            floor = await _open_slider_page(browser, floor_url, "")
            users = [await _open_slider_page(browser, url, keys[LOAD_TRAINERS + i]) for i in range(LOAD_SLIDER_USERS)]
            started, stop = [asyncio.Event() for _ in range(LOAD_TRAINERS)], asyncio.Event()
            trainers = asyncio.gather(*(
                train_as_user(browser, url, keys[i], MAX_EPOCHS, LOAD_TRAIN_SECONDS, training=event, full_batch=False, stop=stop, points=4096)
                for i, event in enumerate(started)
            ))  # fmt: skip
            all_started = asyncio.ensure_future(asyncio.gather(*(event.wait() for event in started)))
            await asyncio.wait({all_started, trainers}, timeout=LOAD_START_TIMEOUT_SECONDS, return_when=asyncio.FIRST_COMPLETED)
            if not all_started.done():
                stop.set()
                all_started.cancel()
                raise RuntimeError(f"not every trainer was training {LOAD_START_TIMEOUT_SECONDS:g} s after the start")
            try:
                results = await asyncio.gather(_moves(floor[1], moves), *(_moves(page, moves) for _, page in users))
            finally:
                stop.set()
            trained = await trainers
            for context, _ in [floor, *users]:
                await context.close()
        finally:
            await browser.close()
    app_times = [t for times in results[1:] for t in times]
    return app_times, results[0], sum(user.exceptions for user in trained)


def run_load(replica_counts: tuple[int, ...], moves: int, legs: tuple[int, ...] = LOAD_LEGS) -> list[LoadResult]:
    """Each leg starts ``--replicas count`` afresh; legs run interleaved (1, 2, 2, 1 by default), so that the
    machine's drift over the run weighs on both counts alike, and each count's moves are pooled over its legs."""
    if set(legs) != set(replica_counts):
        raise ValueError(f"legs {legs} must run every replica count of {replica_counts} and no other")
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    floor_script = artifacts / "bench_load_floor_page.py"
    floor_script.write_text(FLOOR_BROWSER_PAGE)
    pooled = {count: {"app": [], "floor": [], "peak": 0, "exceptions": 0, "legs": 0} for count in replica_counts}
    with serve_app(log_path=artifacts / "bench_load_floor.log", script=floor_script) as floor:
        for number, count in enumerate(legs, start=1):
            with (
                replica_server(count, artifacts / f"bench_load_leg{number}_{count}_replicas.log") as (url, pid),
                MemorySampler(pid) as sampler,
            ):
                app_times, floor_times, exceptions = asyncio.run(_load(url, floor.url, moves))
            leg = pooled[count]
            leg["app"] += app_times
            leg["floor"] += floor_times
            leg["peak"] = max(leg["peak"], sampler.peak_rss)
            leg["exceptions"] += exceptions
            leg["legs"] += 1
            print(f"leg {number}/{len(legs)}: {count} replica(s), slider median {statistics.median(app_times) * 1000:.0f} ms, "
                  f"floor {statistics.median(floor_times) * 1000:.0f} ms, peak {sampler.peak_rss / 1024**3:.2f} GiB",
                  file=sys.stderr, flush=True)  # fmt: skip
    return [
        LoadResult(
            count, statistics.median(leg["app"]), statistics.median(leg["floor"]), len(leg["app"]), leg["peak"],
            LOAD_TRAINERS, LOAD_SLIDER_USERS, leg["exceptions"], leg["legs"],
        )
        for count, leg in pooled.items()
    ]  # fmt: skip


def load_table(results: list[LoadResult]) -> str:
    lines = [f"{'replicas':<10} {'legs':>5} {'slider->figure median':>22} {'floor page median':>18} {'moves':>6} {'peak tree RSS':>14} {'exceptions':>11}"]
    for r in results:
        lines.append(
            f"{r.replicas:<10} {r.legs:>5} {r.slider_median_s * 1000:>19.0f} ms {r.floor_median_s * 1000:>15.0f} ms {r.slider_samples:>6} "
            f"{r.peak_rss_bytes / 1024**3:>10.2f} GiB {r.exceptions:>11}"
        )
    return "\n".join(lines)


def main(args) -> int:
    """``--soak`` / ``--load`` of ``python -m explorer.bench.browser`` (the options are parsed there)."""
    if args.soak:
        if not 1 <= args.soak_sessions <= 5000:
            raise ValueError(f"--soak-sessions must be in [1, 5000], got {args.soak_sessions}")
        if not 0 <= args.soak_moves <= 5000:
            raise ValueError(f"--soak-moves must be in [0, 5000], got {args.soak_moves}")
        if not 1 <= args.soak_minutes <= 24 * 60:
            raise ValueError(f"--soak-minutes must be in [1, 1440], got {args.soak_minutes:g}")
        result = run_soak(args.soak_sessions, args.soak_moves, args.soak_trainings, args.soak_minutes)
        print(json.dumps(asdict(result) | {"growth_ok": result.growth_ok, "processes_ok": result.processes_ok}, indent=2)
              if args.json else soak_table(result))  # fmt: skip
        return 0 if result.growth_ok and result.processes_ok else 1
    if not 1 <= args.load_moves <= 200:
        raise ValueError(f"--load-moves must be in [1, 200], got {args.load_moves}")
    results = run_load((1, 2), args.load_moves)
    print(json.dumps([asdict(r) for r in results], indent=2) if args.json else load_table(results))
    return 0 if results[-1].slider_median_s <= results[0].slider_median_s else 1
