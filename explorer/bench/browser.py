"""Browser benchmark: several users training at once on one server, measured from real browsers.

    python -m explorer.bench.browser [--sessions 5] [--seconds 300] [--slider-moves 30] [--trainers-idle] [--runs 3] [--json]
    python -m explorer.bench.browser --soak | --load   (days of use; ten users on one or two replicas: explorer.bench.soak)
    python -m explorer.bench.browser --login           (slider to figure signed in vs plain: explorer.bench.login_overhead)

Starts ``streamlit run app.py`` on a free port, opens one Chromium (Debian's, via Playwright) with
one browser context per user, and has every user open the Explore page with a different op, go
to the Train page and train that op (custom and true gradient, a 4,096-point data set in mini-batches
of 64) until the loaded slider
moves are done (at most ``--seconds`` after opening the app). Meanwhile one
more context moves a slider on the Explore page again and again. Reported:

- the server's peak memory: the largest sampled sum of VmRSS over the streamlit process and its
  children (read from ``/proc`` every 0.2 s), and the sum of their VmHWM (each process's own
  high-water mark; an upper bound of the true peak of the sum);
- the median time from a slider key press to the updated figure in the browser (the figure's
  data has changed and the script run is over), idle and while every user trains (the loaded
  moves start once each user's loss chart shows points, and pairs that end after the first user's
  results appear are dropped: a user starting or finishing is not "training");
- the same for the floor page of ``python -m explorer bench`` (:data:`explorer.bench.speed.FLOOR_PAGE`:
  a slider, NumPy formulas, one three-panel figure, a table; nothing of the project imported) on a
  second server, measured in pairs with the app in the same browser, and app / floor from those pairs
  (:func:`paired_ratio`). The browsers run on the server's two cores, so the absolute
  figures include Chromium drawing every page; the ratio says what the app adds to what any Streamlit
  page costs on this machine at that moment. Three things keep the ratio from moving with the machine
  (:func:`pair_schedule`): the two moves of a pair are 0.2 s apart, so they share whatever the machine
  and the training users are doing; every other pair moves the app first, so what the second move of a
  pair pays (the first one's rerun ending, a core waking up) falls on both pages equally and cancels in
  :func:`paired_ratio`; and the pauses between pairs are drawn at random (seeded), so the pairs do not lock
  onto the period of the trainers' chunks. The quartiles of the per-pair ratios show the spread;
- the app server's CPU use while the loaded moves run (cores: CPU seconds of its process tree over
  wall seconds), so that runs can be compared on the load the server actually carried.

``--trainers-idle`` puts the training users in a second Chromium run under SCHED_IDLE
(:func:`idle_priority_chromium`): their pages still train and draw, but get a core only when the servers
and the measured browser leave it idle, as if they ran on the users' own machines. Everything on the server
side is unchanged (``server_cores_loaded`` shows the load it carried). The measured user and the floor page
keep the first Chromium. By default everyone shares one Chromium, as before.

The server, browser launch flags, page-state checks and the users' page actions are in
:mod:`explorer.bench.harness`, shared with ``tests/e2e``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from explorer.bench.harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    VIEWPORT,
    MemorySampler,
    UserRun,
    async_playwright,
    chromium_available,
    nudge_first_slider,
    open_explore,
    serve_app,
    settle,
    slider_ops,
    train_as_user,
    tree_cpu_seconds,
)
from explorer.bench.speed import FLOOR_BROWSER_PAGE

MEMORY_TARGET_BYTES = 2 * 1024**3
LATENCY_IDLE_TARGET_SECONDS = 0.2  # slider change to updated figure, nobody training (issue 15)
LATENCY_TARGET_SECONDS = 0.4  # the same with the users training
TRAINING_START_TIMEOUT_S = 180.0
TRAINING_POINTS = 4096
WITHIN_PAIR_SECONDS = 0.2  # between the two moves of a pair: both see the same phase of the machine's load
PAUSE_SECONDS = (0.5, 1.5)  # between pairs, drawn uniformly per pair: a user's pace, and no fixed period
MIN_TRAIN_SECONDS = 60.0


def idle_priority_chromium(directory: Path) -> Path:
    """An executable that runs :data:`CHROMIUM` under Linux's SCHED_IDLE policy (``chrt --idle 0``), which
    every process and thread it starts inherits: they get a core only when nothing else wants it. Not
    ``nice``: Chromium sets its own threads' nice values (as root it raises them, to -8), but leaves their
    policy alone. Playwright launches the wrapper like Chromium."""
    wrapper = directory / "chromium_sched_idle.sh"
    wrapper.write_text(f'#!/bin/sh\nexec chrt --idle 0 {shlex.quote(CHROMIUM)} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


# -- the benchmark ---------------------------------------------------------------------------------------
@dataclass
class BenchResult:
    sessions: int
    train_seconds: float
    peak_rss_bytes: int
    peak_hwm_sum_bytes: int
    latency_idle_median_s: float
    latency_loaded_median_s: float
    latency_loaded_samples: list[float]
    floor_idle_median_s: float  # the floor page, interleaved with the app
    floor_loaded_median_s: float
    idle_vs_floor: float  # app / floor of the pairs (paired_ratio)
    loaded_vs_floor: float
    loaded_pairs_while_training: str  # pairs that ended before the first user's results (only those count)
    users: list[dict[str, Any]]
    load_average_1m: tuple[float, float] = (0.0, 0.0)  # the machine's load when the run began and ended
    server_cores_loaded: float = 0.0  # the app server's CPU seconds / wall seconds during the loaded moves
    trainers_idle: bool = False  # the training users' Chromium under SCHED_IDLE (else they share the measured one)
    idle_vs_floor_quartiles: tuple[float, float] = (0.0, 0.0)  # of the per-pair ratios: their spread
    loaded_vs_floor_quartiles: tuple[float, float] = (0.0, 0.0)
    second_move_factor: tuple[float, float] = (1.0, 1.0)  # idle, training: what the second move of a pair pays

    @property
    def latency_idle_ok(self) -> bool:
        return self.latency_idle_median_s < LATENCY_IDLE_TARGET_SECONDS

    @property
    def memory_ok(self) -> bool:
        return self.peak_rss_bytes < MEMORY_TARGET_BYTES

    @property
    def latency_ok(self) -> bool:
        return self.latency_loaded_median_s < LATENCY_TARGET_SECONDS




# -- the paired statistics (pure: tests/test_browser_pairs.py) ---------------------------------------------
def pair_schedule(pairs: int, seed: int = 0) -> list[tuple[bool, float]]:
    """(app first?, pause before the pair in seconds) for each pair: every other pair moves the app first
    (floor, app | app, floor | floor, app ...), and the pauses are uniform in :data:`PAUSE_SECONDS` from
    ``random.Random(seed)``, the same for every run."""
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    draw = random.Random(seed)
    return [(index % 2 == 1, draw.uniform(*PAUSE_SECONDS)) for index in range(pairs)]


def _order_medians(app: Sequence[float], floor: Sequence[float], app_first: Sequence[bool]) -> tuple[float, float] | None:
    """(median app / floor of the floor-first pairs, the same of the app-first pairs); None without both orders."""
    ratios = [a / f for a, f in zip(app, floor, strict=True)]
    if len(app_first) != len(ratios):
        raise ValueError(f"app_first has {len(app_first)} entries for {len(ratios)} pairs")
    floor_first = [r for r, first in zip(ratios, app_first, strict=True) if not first]
    app_first_ratios = [r for r, first in zip(ratios, app_first, strict=True) if first]
    if not floor_first or not app_first_ratios:
        return None
    return statistics.median(floor_first), statistics.median(app_first_ratios)


def paired_ratio(app: Sequence[float], floor: Sequence[float], app_first: Sequence[bool]) -> float:
    """App / floor from pairs measured in both orders: the geometric mean of the two orders' medians of the
    per-pair ratios (with one order only: the median of the ratios).

    A slowdown both moves of a pair share cancels in each pair's ratio. A factor k on whichever move
    comes second multiplies the floor-first ratios by k and divides the app-first ones by k: the geometric
    mean of the two is free of it, where the plain median would move by up to k."""
    if not app:
        raise ValueError("no pairs")
    medians = _order_medians(app, floor, app_first)
    if medians is None:
        return statistics.median(a / f for a, f in zip(app, floor, strict=True))
    return math.sqrt(medians[0] * medians[1])


def second_move_factor(app: Sequence[float], floor: Sequence[float], app_first: Sequence[bool]) -> float:
    """How much slower the second move of a pair is than it would be first (the k of :func:`paired_ratio`):
    sqrt(floor-first median / app-first median); 1.0 without both orders. Far from 1: the pairs are too close."""
    medians = _order_medians(app, floor, app_first)
    return 1.0 if medians is None else math.sqrt(medians[0] / medians[1])


def ratio_quartiles(app: Sequence[float], floor: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles of the per-pair ratios app / floor (both the one ratio for one pair)."""
    ratios = [a / f for a, f in zip(app, floor, strict=True)]
    if len(ratios) < 2:
        return ratios[0], ratios[0]
    quartiles = statistics.quantiles(ratios, n=4, method="inclusive")
    return quartiles[0], quartiles[2]


RATIO_HOLDS_WITHIN = 0.10  # issue 45: app / floor of repeated runs on a quiet machine within 10 % of each other


def relative_spread(values: Sequence[float]) -> float:
    """max / min - 1 of positive figures of repeated runs (0 for one run): 0.10 means the largest is 10 %
    above the smallest."""
    if not values or min(values) <= 0:
        raise ValueError(f"relative_spread needs positive values, got {list(values)}")
    return max(values) / min(values) - 1.0


@dataclass
class Latencies:
    """Slider-to-figure seconds of the app and of the floor page, measured in pairs (see :func:`pair_schedule`)."""

    app: list[float]
    floor: list[float]
    ended: list[float] = field(default_factory=list)  # time.perf_counter() at the end of each pair
    app_first: list[bool] = field(default_factory=list)  # the pair moved the app first

    @property
    def ratio(self) -> float:
        return paired_ratio(self.app, self.floor, self.app_first or [False] * len(self.app))

    @property
    def second_move_factor(self) -> float:
        return second_move_factor(self.app, self.floor, self.app_first or [False] * len(self.app))

    @property
    def quartiles(self) -> tuple[float, float]:
        return ratio_quartiles(self.app, self.floor)

    def before(self, deadline: float) -> Latencies:
        """The pairs that ended by ``deadline``."""
        keep = [i for i, end in enumerate(self.ended) if end <= deadline]
        first = [self.app_first[i] for i in keep] if self.app_first else []
        return Latencies([self.app[i] for i in keep], [self.floor[i] for i in keep], [self.ended[i] for i in keep], first)


async def _slider_latencies(browser, url: str, floor_url: str, op: str, moves: int, seed: int = 0) -> Latencies:
    """``moves`` pairs of the floor page's slider and the app's first slider of ``op``, in the order and with
    the pauses of :func:`pair_schedule`."""
    contexts = [await browser.new_context(viewport=VIEWPORT) for _ in range(2)]
    try:
        app_page, floor_page = [await context.new_page() for context in contexts]
        await open_explore(app_page, url, op)
        await floor_page.goto(floor_url)
        await settle(floor_page)
        await nudge_first_slider(floor_page)  # warm: the first change pays one-off costs on both
        await nudge_first_slider(app_page)
        result = Latencies([], [])
        for app_first, pause in pair_schedule(moves, seed):
            await asyncio.sleep(pause)  # a user's pace, and time for the trainers to get CPU
            if app_first:
                result.app.append(await nudge_first_slider(app_page))
                await asyncio.sleep(WITHIN_PAIR_SECONDS)
                result.floor.append(await nudge_first_slider(floor_page))
            else:
                result.floor.append(await nudge_first_slider(floor_page))
                await asyncio.sleep(WITHIN_PAIR_SECONDS)
                result.app.append(await nudge_first_slider(app_page))
            result.ended.append(time.perf_counter())
            result.app_first.append(app_first)
        return result
    finally:
        for context in contexts:
            await context.close()


async def _bench(
    url: str, floor_url: str, op_keys: Sequence[str], seconds: float, moves: int, server_pid: int,
    trainers_idle: bool = False,
) -> tuple[Latencies, Latencies, list[UserRun], float]:
    """Idle moves, then users training and loaded moves; also the server's cores during the loaded moves."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        trainers_browser = browser
        try:
            if trainers_idle:
                wrapper = idle_priority_chromium(ROOT / "test-artifacts")
                trainers_browser = await playwright.chromium.launch(
                    executable_path=str(wrapper), args=list(CHROMIUM_ARGS)
                )
            idle_op, loaded_op = slider_ops()[:2]
            idle = await _slider_latencies(browser, url, floor_url, idle_op, moves, seed=0)
            from explorer.train.trainer import MAX_EPOCHS

            shots = ROOT / "test-artifacts" / "bench_browser"
            shots.mkdir(parents=True, exist_ok=True)
            started, stop = [asyncio.Event() for _ in op_keys], asyncio.Event()
            trainers = asyncio.gather(*(
                # 4,096 points in mini-batches (2,000 epochs take many minutes): everyone trains until the
                # loaded moves are done; the page's per-tick budget keeps the server's load the same
                train_as_user(trainers_browser, url, op, MAX_EPOCHS, seconds, shots / f"user_{op}.png", training=event,
                              full_batch=False, stop=stop, points=TRAINING_POINTS)
                for op, event in zip(op_keys, started, strict=True)
            ))  # fmt: skip
            # measure while every user trains (their models are built and traced by then); a user who
            # fails or finishes first ends the wait with its own exception or result
            all_started = asyncio.ensure_future(asyncio.gather(*(event.wait() for event in started)))
            await asyncio.wait({all_started, trainers}, timeout=TRAINING_START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
            if not all_started.done():
                all_started.cancel()
                if trainers.done():
                    await trainers  # raises a user's exception
                    raise RuntimeError("every user finished before all of them were training")
                stop.set()
                trainers.cancel()
                raise RuntimeError(f"not every user was training {TRAINING_START_TIMEOUT_S:g} s after opening the app")
            try:
                cpu_before, wall_before = tree_cpu_seconds(server_pid), time.perf_counter()
                loaded = await _slider_latencies(browser, url, floor_url, loaded_op, moves, seed=1)
                server_cores = (tree_cpu_seconds(server_pid) - cpu_before) / (time.perf_counter() - wall_before)
            finally:
                stop.set()
            users = await trainers
            return idle, loaded, users, server_cores
        finally:
            await browser.close()
            if trainers_browser is not browser:
                await trainers_browser.close()


def run_benchmark(sessions: int = 5, seconds: float = 300.0, moves: int = 30, trainers_idle: bool = False) -> BenchResult:
    import ops

    load_before = os.getloadavg()[0]

    # one op per user, spread over the families
    by_family = list(ops.by_family().values())
    op_keys = [by_family[i % len(by_family)][i // len(by_family)].key for i in range(sessions)]
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    floor_script = artifacts / "bench_browser_floor_page.py"
    floor_script.write_text(FLOOR_BROWSER_PAGE)
    with (
        serve_app(log_path=artifacts / "bench_browser_streamlit.log") as server,
        serve_app(log_path=artifacts / "bench_browser_floor.log", script=floor_script) as floor,
        MemorySampler(server.process.pid) as sampler,
    ):
        idle, loaded_all, users, server_cores = asyncio.run(
            _bench(server.url, floor.url, op_keys, seconds, moves, server.process.pid, trainers_idle)
        )
    loaded = loaded_all.before(min(user.training_until for user in users))
    if not loaded.app:
        first_move = loaded_all.ended[0] - loaded_all.app[0] - WITHIN_PAIR_SECONDS - loaded_all.floor[0]
        spans = ", ".join(
            f"{u.op} {u.training_from - first_move:+.1f} to {u.training_until - first_move:+.1f} s" for u in users
        )
        raise RuntimeError(f"a user stopped training before the first loaded slider move (training spans, from that move: {spans})")
    return BenchResult(
        sessions=sessions,
        train_seconds=seconds,
        peak_rss_bytes=sampler.peak_rss,
        peak_hwm_sum_bytes=sampler.peak_hwm,
        latency_idle_median_s=statistics.median(idle.app),
        latency_loaded_median_s=statistics.median(loaded.app),
        latency_loaded_samples=loaded.app,
        loaded_pairs_while_training=f"{len(loaded.app)} of {len(loaded_all.app)}",
        floor_idle_median_s=statistics.median(idle.floor),
        floor_loaded_median_s=statistics.median(loaded.floor),
        idle_vs_floor=idle.ratio,
        loaded_vs_floor=loaded.ratio,
        users=[asdict(user) | {"loss_points": user.loss_points[-1:]} for user in users],
        load_average_1m=(load_before, os.getloadavg()[0]),
        server_cores_loaded=server_cores,
        trainers_idle=trainers_idle,
        idle_vs_floor_quartiles=idle.quartiles,
        loaded_vs_floor_quartiles=loaded.quartiles,
        second_move_factor=(idle.second_move_factor, loaded.second_move_factor),
    )


def _table(result: BenchResult) -> str:
    gib = 1024**3
    rows = [
        ("sessions training", f"{result.sessions} (at most {result.train_seconds:g} s)", ""),
        ("server peak RSS (sampled sum)", f"{result.peak_rss_bytes / gib:.2f} GiB", "ok" if result.memory_ok else "OVER 2 GiB"),
        ("server sum of VmHWM (upper bound)", f"{result.peak_hwm_sum_bytes / gib:.2f} GiB", ""),
        ("slider -> figure, median, idle", f"{result.latency_idle_median_s * 1000:.0f} ms",
         "ok" if result.latency_idle_ok else f"OVER {LATENCY_IDLE_TARGET_SECONDS * 1000:.0f} ms"),
        ("slider -> figure, median, training", f"{result.latency_loaded_median_s * 1000:.0f} ms",
         "ok" if result.latency_ok else f"OVER {LATENCY_TARGET_SECONDS * 1000:.0f} ms"),
        ("floor page, idle / training", f"{result.floor_idle_median_s * 1000:.0f} / {result.floor_loaded_median_s * 1000:.0f} ms", ""),
        ("app / floor (paired), idle", f"{result.idle_vs_floor:.2f}",
         "quartiles {:.2f} to {:.2f}".format(*result.idle_vs_floor_quartiles)),
        ("app / floor (paired), training", f"{result.loaded_vs_floor:.2f}",
         "quartiles {:.2f} to {:.2f}".format(*result.loaded_vs_floor_quartiles)),
        ("second move of a pair, idle / training", "{:.2f} / {:.2f}".format(*result.second_move_factor), ""),
        ("loaded pairs while all trained", result.loaded_pairs_while_training, ""),
        ("server cores during the loaded moves", f"{result.server_cores_loaded:.2f}", ""),
        ("training users' Chromium", "SCHED_IDLE" if result.trainers_idle else "shared", ""),
        ("load average (1 min), start / end", "{:.1f} / {:.1f}".format(*result.load_average_1m), ""),
    ]  # fmt: skip
    lines = [f"{name:<36} {value:>14}  {verdict}" for name, value, verdict in rows]
    for user in result.users:
        lines.append(
            f"  user {user['op']:<20} runs={len(user['runs'])} exceptions={user['exceptions']} "
            f"visit {user['seconds']:.0f} s, Start to results {user['start_to_results_s']:.1f} s"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorer.bench.browser", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=5, help="users training at the same time (default 5)")
    parser.add_argument(
        "--seconds", type=float, default=300.0,
        help="longest a user trains, from opening the app (default 300; they stop once the loaded moves are done)",
    )  # fmt: skip
    parser.add_argument(
        "--slider-moves", type=int, default=30,
        help="pairs of slider changes (app and floor page) timed, idle and loaded (default 30)",
    )
    parser.add_argument(
        "--trainers-idle", action="store_true",
        help="run the training users in a second Chromium under SCHED_IDLE, as if on their own machines "
        "(default: one Chromium for everyone)",
    )  # fmt: skip
    parser.add_argument(
        "--runs", type=int, default=1,
        help="run the whole benchmark this many times, one after another, and print the spread of app / floor "
        "(issue 45: within 10 %% over three runs on a quiet machine; default 1)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    modes = parser.add_argument_group("soak and load modes (explorer.bench.soak)")
    modes.add_argument("--soak", action="store_true", help="hundreds of short sessions, a slider moved a thousand times, "
                       "training runs: the server tree's memory per 100 sessions and its live processes")
    modes.add_argument("--soak-sessions", type=int, default=330, help="short sessions, warm-up included (default 330)")
    modes.add_argument("--soak-moves", type=int, default=1000, help="slider moves of one session (default 1000)")
    modes.add_argument("--soak-trainings", type=int, default=3, help="training runs at the end (default 3)")
    modes.add_argument("--soak-minutes", type=float, default=180.0,
                       help="at most this long; the sessions stop at 70%% of it (default 180)")
    modes.add_argument("--login", action="store_true", help="slider to figure signed in (--login oidc, a local "
                       "provider) against a plain server, interleaved (explorer.bench.login_overhead)")
    modes.add_argument("--login-moves", type=int, default=30, help="interleaved rounds of --login (default 30)")
    modes.add_argument("--load", action="store_true", help="10 users (5 training, 5 moving sliders) on 1, then 2 replicas")
    modes.add_argument("--load-moves", type=int, default=15, help="slider moves per slider user in --load (default 15)")
    args = parser.parse_args(argv)
    if args.soak or args.load:
        if async_playwright is None or not chromium_available():
            print(f"--soak / --load need Playwright and Chromium at {CHROMIUM}", file=sys.stderr)
            return 2
        from explorer.bench import soak

        return soak.main(args)
    if args.login:
        if async_playwright is None or not chromium_available():
            print(f"--login needs Playwright and Chromium at {CHROMIUM}", file=sys.stderr)
            return 2
        if not 5 <= args.login_moves <= 500:
            raise ValueError(f"--login-moves must be in [5, 500], got {args.login_moves}")
        from explorer.bench import login_overhead

        overhead = login_overhead.run(args.login_moves)
        print(json.dumps(asdict(overhead) | {"ratio": overhead.ratio}, indent=2) if args.json else overhead.table())
        return 0 if overhead.ratio <= login_overhead.TARGET_RATIO else 1
    if args.seconds < MIN_TRAIN_SECONDS:
        raise ValueError(f"--seconds must be >= {MIN_TRAIN_SECONDS:g} (users start, then the loaded moves run), got {args.seconds:g}")
    if not 1 <= args.sessions <= 20:
        raise ValueError(f"--sessions must be in [1, 20], got {args.sessions}")
    if not 1 <= args.slider_moves <= 100:
        raise ValueError(f"--slider-moves must be in [1, 100], got {args.slider_moves}")
    if async_playwright is None:
        print("The Python package 'playwright' is missing: pip install -r requirements-dev.txt", file=sys.stderr)
        return 2
    if not chromium_available():
        print(f"Chromium not found at {CHROMIUM} (apt-get install -y chromium, or set E2E_CHROMIUM)", file=sys.stderr)
        return 2
    if not 1 <= args.runs <= 10:
        raise ValueError(f"--runs must be in [1, 10], got {args.runs}")
    results = []
    for _ in range(args.runs):
        result = run_benchmark(args.sessions, args.seconds, args.slider_moves, args.trainers_idle)
        results.append(result)
        if args.json:
            verdicts = {"memory_ok": result.memory_ok, "latency_idle_ok": result.latency_idle_ok, "latency_ok": result.latency_ok}
            print(json.dumps(asdict(result) | verdicts, indent=2))
        else:
            print(_table(result))
    if len(results) > 1 and not args.json:
        print(_runs_summary(results))
    return 0 if all(r.memory_ok and r.latency_ok for r in results) else 1


def _runs_summary(results: Sequence[BenchResult]) -> str:
    """The app / floor figures of repeated runs and their spread against :data:`RATIO_HOLDS_WITHIN`."""
    lines = [f"app / floor over {len(results)} runs (holds if the largest is within {RATIO_HOLDS_WITHIN:.0%} of the smallest)"]
    for name, values in (
        ("idle", [r.idle_vs_floor for r in results]),
        ("training", [r.loaded_vs_floor for r in results]),
    ):
        spread = relative_spread(values)
        verdict = "holds" if spread <= RATIO_HOLDS_WITHIN else "MOVES"
        lines.append(f"  {name:<9} {' / '.join(f'{v:.2f}' for v in values)}  spread {spread:.0%}  {verdict}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
