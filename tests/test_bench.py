"""The benchmark command: its JSON, its table, its NumPy floor and its helpers. No timing assertions:
speed targets are checked by ``python -m explorer bench``, not by timed tests."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest

import ops
from explorer.bench import speed as bench

FAST_KEYS = ("sweep_2k_ms", "param_change_retraces", "figure_bytes_1m")


@pytest.fixture(scope="module")
def quick_json() -> dict:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = bench.main(["--json", "--quick", "--only", ",".join(FAST_KEYS)])
    assert code == 0
    return json.loads(stdout.getvalue())


def test_json_has_the_requested_figures_and_no_errors(quick_json):
    assert quick_json["errors"] == {}
    for key in FAST_KEYS:
        assert key in quick_json
    assert set(quick_json) & set(bench.TARGETS) == set(FAST_KEYS)  # --only measured nothing else


@pytest.mark.parametrize("key", ["sweep_2k_ms", "figure_bytes_1m", "figure_build_1m_ms", "sweep_2k_max_ms", "peak_rss_mb"])
def test_measured_values_are_positive_numbers(quick_json, key):
    value = quick_json[key]
    assert isinstance(value, (int, float)) and not isinstance(value, bool)
    assert math.isfinite(value) and value > 0


def test_changing_a_parameter_never_retraces_the_sweep(quick_json):
    assert quick_json["param_change_retraces"] == 0
    assert quick_json["param_change_retraces_ops"] == {}


def test_sweep_2k_is_timed_for_every_registered_op(quick_json):
    by_op = quick_json["sweep_2k_ms_by_op"]
    assert list(by_op) == ops.names()
    assert quick_json["sweep_2k_ms"] == pytest.approx(float(np.median(list(by_op.values()))), rel=1e-2)
    assert quick_json["sweep_2k_max_ms"] == pytest.approx(max(by_op.values()), rel=1e-2)


def test_machine_info_names_cores_and_tensorflow(quick_json):
    machine = quick_json["machine"]
    assert machine["cores"] >= 1
    assert machine["tensorflow"].count(".") >= 1
    import platform

    glibc = platform.libc_ver()[0] == "glibc"
    assert machine["allocator"] == ("glibc mmap threshold pinned at 32 MiB" if glibc else "default (not glibc)")


PAGE_FAULTS_OF_THE_FLOOR = """
import resource, sys
from explorer.bench import speed
if sys.argv[1] == "pinned":
    speed.pin_allocator()
for _ in range(3):
    speed.numpy_floor(1_000_000, 25.0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    speed.numpy_floor(1_000_000, 25.0)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def test_the_pinned_allocator_reuses_memory_where_the_default_takes_fresh_pages():
    """Why the benchmark pins glibc's mmap threshold: by default each 1M-point floor call maps its
    temporaries afresh (about 1,000 page faults per 4 MB); pinned, it reuses the heap."""
    import subprocess
    import sys

    faults = {
        mode: float(subprocess.run([sys.executable, "-c", PAGE_FAULTS_OF_THE_FLOOR, mode], capture_output=True,
                                   text=True, check=True).stdout)
        for mode in ("default", "pinned")
    }
    assert faults["default"] > 1_000, faults
    assert faults["pinned"] < 50, faults


def test_numpy_floor_matches_hand_computed_fast_sigmoid():
    x, forward, surrogate = bench.numpy_floor(5, slope=25.0, lo=-0.04, hi=0.04)
    assert x.dtype == forward.dtype == surrogate.dtype == np.float32
    np.testing.assert_allclose(x, [-0.04, -0.02, 0.0, 0.02, 0.04], rtol=1e-6)
    np.testing.assert_array_equal(forward, [0, 0, 0, 1, 1])  # [x > 0]: 0 AT the threshold
    # 1 / (25 * 0.04 + 1)^2 = 1/4, 1 / (25 * 0.02 + 1)^2 = 1/2.25
    np.testing.assert_allclose(surrogate, [0.25, 1 / 2.25, 1.0, 1 / 2.25, 0.25], rtol=1e-6)


def test_numpy_floor_computes_the_same_surrogate_as_the_op():
    """The baseline must do the op's work, or the ratio compares different things."""
    slope = 7.0
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    _, surrogate = bench.numpy_formulas(x, slope)
    expected = ops.get("fast_sigmoid").surrogate_grad(x, slope=slope).numpy()
    np.testing.assert_allclose(surrogate, expected, rtol=1e-6)


@pytest.mark.parametrize("key", [key for key in ops.names() if ops.get(key).params])
def test_parameter_values_are_distinct_and_in_range(key):
    for param in ops.get(key).params:
        values = bench.parameter_values(param)
        assert len(set(values)) == len(values) > 0
        assert all(param.low <= v <= param.high and v != param.default for v in values)
        if param.integer:
            assert all(v == round(v) for v in values)
            whole_numbers = int(param.high) - int(param.low) + 1
            assert len(values) == min(bench.RETRACE_VALUES, whole_numbers - 1)
        else:
            assert len(values) == bench.RETRACE_VALUES


def test_target_comparisons():
    upper = bench.Target("t", 1.5, "x", "")
    assert upper.met(1.5) is True and upper.met(1.51) is False and upper.met(None) is None
    exact = bench.Target("c", 0, "traces", "", "==")
    assert exact.met(0) is True and exact.met(1) is False


def test_table_marks_pass_miss_and_error():
    results = {"sweep_2k_ms": 10.0, "rerun_ms": 301.0, "cold_start_vs_import": None, "errors": {"cold_start": "boom"}}
    lines = bench.format_table(results).splitlines()
    row = {line.split()[1]: line.split()[0] for line in lines[1:4]}
    assert row == {"sweep_2k_ms": "PASS", "rerun_ms": "MISS", "cold_start_vs_import": "ERROR"}
    assert any("cold_start: boom" in line for line in lines)


def test_unknown_only_key_is_a_usage_error(capsys):
    assert bench.main(["--only", "sweep_2k_ms,not_a_key"]) == 2
    assert "not_a_key" in capsys.readouterr().err


def test_fresh_process_timer_reads_the_done_line():
    seconds, peak_mb = bench.time_fresh_process("import time; print('DONE', repr(time.time()), 2048, 'OK')")
    assert 0 < seconds < bench.SUBPROCESS_TIMEOUT_S
    assert peak_mb == 2.0  # KiB -> MB
    with pytest.raises(RuntimeError, match="exit 3"):
        bench.time_fresh_process("import sys; sys.exit(3)")


@pytest.mark.slow
def test_app_and_training_measurements_run():
    keys = ["rerun_vs_floor", "rerun_ms", "train_300_epochs_s", "train_warm_300_epochs_s", "custom_vs_relu_steps"]
    results = bench.run(keys, quick=True)
    assert results["errors"] == {}
    for key in keys:
        assert results[key] > 0
    assert results["rerun_slider"].startswith("w.p.")


# -- interleaving: baseline, measured, baseline, measured, ...; the median of the per-pair ratios ----------
class FakeClock:
    """A clock that only moves when a fake piece of work says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def work(self, seconds: float):
        def run() -> None:
            self.now += seconds

        return run


def test_timed_reads_the_given_clock():
    clock = FakeClock()
    assert bench.timed(clock.work(0.25), clock)() == 0.25


def test_interleave_runs_baseline_and_measured_in_turn_and_takes_the_median_of_pair_ratios():
    calls = []
    base = iter([1.0, 2.0, 1.0, 4.0, 1.0])  # the machine slows down in pairs 2 and 4: both sides slow
    measured = iter([1.5, 3.0, 1.5, 40.0, 1.5])  # pair 4 also has one outlier of the measured code

    def baseline() -> float:
        calls.append("B")
        return next(base)

    def code() -> float:
        calls.append("M")
        return next(measured)

    result = bench.interleave(baseline, code, 5)
    assert calls == ["B", "M"] * 5
    assert result.ratios == (1.5, 1.5, 1.5, 10.0, 1.5)
    assert result.ratio == 1.5  # the median of the per-pair ratios, not 3.0 / 1.0
    assert result.baseline_s == 1.0 and result.measured_s == 1.5
    with pytest.raises(ValueError, match="pairs"):
        bench.interleave(baseline, code, 0)


def test_interleave_on_a_fake_clock():
    clock = FakeClock()
    result = bench.interleave(bench.timed(clock.work(0.02), clock), bench.timed(clock.work(0.03), clock), 3)
    assert result.ratio == pytest.approx(1.5) and result.ratios == pytest.approx((1.5, 1.5, 1.5))
    assert clock.now == pytest.approx(3 * 0.05)


def test_busy_neighbour_spins_while_the_block_runs_and_is_gone_after():
    with bench.busy_neighbour() as process:
        assert process.poll() is None  # running
    assert process.poll() is not None


def test_floor_page_is_the_smallest_page_for_the_same_interaction():
    """The floor imports nothing of the project and shows a slider, one three-panel figure of four traces
    (2,001 points each for the curves) and a small table; a new slider value changes the figure."""
    from streamlit.testing.v1 import AppTest

    assert "explorer" not in bench.FLOOR_PAGE and "import ops" not in bench.FLOOR_PAGE
    at = AppTest.from_string(bench.FLOOR_PAGE, default_timeout=120).run()
    assert not at.exception
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert len(spec["data"]) == 4 and {"xaxis", "xaxis2", "xaxis3"} <= set(spec["layout"])
    assert len(at.dataframe) == 1 and len(at.sidebar.slider) == 1
    rerun = bench._slider_rerun(at, bench.FLOOR_SLIDER, [0.5, 2.0])
    assert rerun() >= 0 and at.slider(key=bench.FLOOR_SLIDER).value == 0.5
    first = json.loads(at.get("plotly_chart")[0].proto.spec)
    rerun()
    assert json.loads(at.get("plotly_chart")[0].proto.spec) != first


# -- the preset benchmark (issue 16's target, wired into the same command) -------------------------------
def test_preset_target_is_strictly_under_ten_seconds():
    target = bench.TARGETS["preset_first_result_s"]
    assert target.limit == 10 and target.met(9.99) is True and target.met(10.0) is False


def test_presets_are_skipped_under_quick_and_shown_as_skipped():
    assert bench.QUICK.presets == 0 and bench.FULL.presets >= 1
    results = bench.measure_presets(bench.QUICK)
    assert results == {"preset_first_result_s": None, "skipped": ["preset_first_result_s"]}
    lines = bench.format_table({**results, "errors": {}}).splitlines()
    assert lines[1].split()[:2] == ["SKIP", "preset_first_result_s"]


def test_preset_figures_are_the_slowest_and_each_preset(monkeypatch):
    from explorer.bench import presets as preset_bench

    calls = []

    def fake(repeats):
        calls.append(repeats)
        return {"yin2019": 1.5, "dann": 12.0, "zenke2021": 3.0, "depth": 2.0}

    monkeypatch.setattr(preset_bench, "preset_seconds", fake)
    results = bench.measure_presets(bench.FULL)
    assert calls == [bench.FULL.presets]
    assert results["preset_first_result_s"] == 12.0 and results["preset_first_result_slowest"] == "dann"
    assert results["preset_first_result_s_by_preset"] == {"yin2019": 1.5, "dann": 12.0, "zenke2021": 3.0, "depth": 2.0}
    assert results["preset_first_result_met_by_preset"] == {"yin2019": True, "dann": False, "zenke2021": True, "depth": True}
    assert bench.TARGETS["preset_first_result_s"].met(results["preset_first_result_s"]) is False
    table = bench.format_table({**results, "errors": {}})
    assert table.splitlines()[1].split()[:2] == ["MISS", "preset_first_result_s"]
    assert "preset_first_result_s_by_preset: yin2019=1.5, dann=12.0" in table


def test_loaded_op_figure_comes_from_the_interleaved_pairs(monkeypatch):
    from explorer.bench import yours

    calls = []

    def fake(pairs):
        calls.append(pairs)
        return {"loaded_vs_builtin_rerun": 1.7, "loaded_rerun_ms": 85.0, "builtin_rerun_ms": 50.0}

    monkeypatch.setattr(yours, "measure_loaded_rerun", fake)
    results = bench.measure_loaded(bench.QUICK)
    assert calls == [bench.QUICK.loaded_pairs] and results["loaded_vs_builtin_rerun"] == 1.7
    assert bench.TARGETS["loaded_vs_builtin_rerun"].met(1.7) is False and bench.TARGETS["loaded_vs_builtin_rerun"].met(1.5)
    assert bench.format_table({**results, "errors": {}}).splitlines()[1].split()[:2] == ["MISS", "loaded_vs_builtin_rerun"]


def test_the_cold_start_reads_compiled_bytecode_of_every_project_module():
    """compile_project_bytecode leaves an up-to-date .pyc beside every module of ops and explorer (what pip
    writes for an installed wheel), so a fresh process compiles none of them."""
    import importlib.util
    from pathlib import Path

    assert bench.compile_project_bytecode()
    sources = [path for name in bench.PROJECT_PACKAGES for path in (bench.REPO_ROOT / name).rglob("*.py")]
    assert len(sources) > 30
    for source in sources:
        cached = importlib.util.cache_from_source(str(source))
        header = Path(cached).read_bytes()[:16]  # magic, flags, source mtime, source size
        assert header[:4] == importlib.util.MAGIC_NUMBER, source
        assert int.from_bytes(header[8:12], "little") == int(source.stat().st_mtime) & 0xFFFFFFFF, source


def test_tree_cpu_seconds_counts_what_the_kernel_reports_for_this_process():
    """explorer.bench.browser.tree_cpu_seconds (the server's cores during the loaded moves) against the
    process's own CPU clock. /proc counts whole clock ticks (10 ms at the usual 100 Hz), so the two agree
    within a few ticks, never exactly; the reference is the nanosecond clock, not tick-rounded os.times()."""
    import os
    import time

    from explorer.bench.browser import tree_cpu_seconds

    tick = 1 / os.sysconf("SC_CLK_TCK")
    before, clock_before = tree_cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - clock_before < 0.3:  # burn 0.3 CPU-seconds
        pass
    burnt, reference = tree_cpu_seconds(os.getpid()) - before, time.process_time() - clock_before
    assert burnt == pytest.approx(reference, abs=5 * tick)


def test_the_idle_priority_wrapper_runs_its_program_under_sched_idle(monkeypatch, tmp_path):
    """--trainers-idle: whatever the wrapper starts runs under SCHED_IDLE, which the kernel reports."""
    import os
    import subprocess
    import sys

    from explorer.bench import browser
    from tests.conftest import require_tool

    require_tool("chrt", "--trainers-idle runs Chromium under chrt (util-linux)")
    monkeypatch.setattr(browser, "CHROMIUM", sys.executable)  # stands in for Chromium: reports its policy
    wrapper = browser.idle_priority_chromium(tmp_path)
    done = subprocess.run(
        [str(wrapper), "-c", "import os; print(os.sched_getscheduler(0))"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == os.SCHED_IDLE


def test_the_soaks_random_views_stay_in_each_parameters_range_and_cover_loaded_ops():
    import random
    from urllib.parse import parse_qs, urlsplit

    import ops
    from explorer.bench import soak

    rng = random.Random(3)
    keys = [*ops.names(), *soak.LOADED_OPS]
    seen = set()
    for _ in range(300):
        query = parse_qs(urlsplit(soak._random_view(rng, keys)).query)
        key = query["op"][0]
        seen.add(key)
        for name, (value,) in ((k[2:], v) for k, v in query.items() if k.startswith("p.")):
            param = next(p for p in ops.get(key).params if p.name == name)
            assert param.low <= float(value) <= param.high, (key, name, value)
    assert set(soak.LOADED_OPS) <= seen and len(seen) > 20


def test_soak_growth_is_the_least_squares_slope_through_every_reading_after_warm_up():
    import numpy as np

    from explorer.bench import soak

    mib = 1024**2
    points = [{"sessions": 130, "rss_bytes": 1000 * mib}, {"sessions": 230, "rss_bytes": 1003 * mib},
              {"sessions": 330, "rss_bytes": 1008 * mib}]  # fmt: skip
    # by hand: mean x 230, sum dx*dy = (-100)(-11/3 MiB) + (100)(13/3 MiB) = 800 MiB, sum dx^2 = 20,000: 4 MiB per 100
    assert soak.growth_per_100(points) == pytest.approx(4 * mib)
    noisy = [{"sessions": 130 + 10 * i, "rss_bytes": (1000 + 0.02 * 10 * i + (3 if i == 20 else 0)) * mib} for i in range(21)]
    # a last reading 3 MiB high moves a first-to-last slope to 3.5 MiB/100; the fit through all 21 barely moves
    fitted = np.polyfit([p["sessions"] for p in noisy], [p["rss_bytes"] for p in noisy], 1)[0] * 100
    assert soak.growth_per_100(noisy) == pytest.approx(fitted) and soak.growth_per_100(noisy) < 2.5 * mib
    assert soak.growth_per_100(points[:1]) == 0.0
    result = soak.SoakResult(sessions=330, warmup_sessions=130, checkpoints=[p | {"processes": 3} for p in points])
    result.growth_per_100_bytes = soak.growth_per_100(points)
    assert result.growth_ok and result.processes_ok
    result.checkpoints[-1]["processes"] = 4  # a worker more at the end: growth in processes
    assert not result.processes_ok


def test_load_legs_interleave_both_replica_counts_and_only_those():
    from explorer.bench import soak

    assert soak.LOAD_LEGS == (1, 2, 2, 1)  # ABBA: a linear drift of the machine's load weighs on both alike
    for legs in ((1, 1), (1, 2, 3)):
        with pytest.raises(ValueError, match=r"must run every replica count of \(1, 2\) and no other"):
            soak.run_load((1, 2), moves=1, legs=legs)
