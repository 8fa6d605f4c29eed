"""Pinned gradients: assert_custom_gradient(fn, snapshot=PATH) records, compares and re-records.

CI runs with CI=true, under which a missing snapshot fails by design: every test here sets (or removes) CI
itself and writes its snapshots under tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from explorer.checker import snapshot
from explorer.testing import assert_custom_gradient

ROOT = Path(__file__).resolve().parents[1]

MODULE = '''
import tensorflow as tf

from pathlib import Path

# a test turns the gradient up by 1 % by writing this file: read at each call, so that the checks' worker
# process sees the change as well as this one
SCALE_FILE = Path(__file__).with_name("scale.txt")


def scale():
    return float(SCALE_FILE.read_text()) if SCALE_FILE.exists() else 1.0


@tf.custom_gradient
def hard_tanh_ste(x):
    """Straight-through clip: the gradient passes where |x| <= 1."""

    def grad(dy):
        return dy * tf.cast(tf.abs(x) <= 1.0, dy.dtype) * tf.constant(scale(), dy.dtype)  # tf.cast would round via float32

    return tf.clip_by_value(x, -1.0, 1.0), grad


@tf.custom_gradient
def float32_only(x):
    """Adds a float32 constant: other dtypes raise."""

    def grad(dy):
        return dy * tf.constant(2.0, tf.float32)

    return x + tf.constant(0.5, tf.float32), grad
'''


@pytest.fixture
def pinned(tmp_path, monkeypatch):
    """The module above, importable here and in a fresh process; CI and the update flag unset."""
    (tmp_path / "pinned_ops.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv(snapshot.UPDATE_VARIABLE, raising=False)
    sys.modules.pop("pinned_ops", None)
    import pinned_ops

    yield pinned_ops
    (tmp_path / "scale.txt").unlink(missing_ok=True)
    sys.modules.pop("pinned_ops", None)


def set_scale(module, value: float) -> None:
    module.SCALE_FILE.write_text(repr(value))


def record(path: Path) -> dict:
    return snapshot.loads(path.read_text())


def test_numbers_are_written_with_the_fewest_digits_that_give_them_back():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(size=200) * 10.0 ** rng.integers(-6, 6, 200), [0.1, 1 / 3, -2.5, 0.0]])
    for dtype, kind in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16), ("float32", np.float32),
                        ("float64", np.float64)):  # fmt: skip
        for value in values:
            with np.errstate(over="ignore"):
                stored = float(kind(value))
            text = snapshot.number_text(stored, dtype)
            if not np.isfinite(stored):  # beyond float16's range
                assert text == ('"inf"' if stored > 0 else '"-inf"')
                continue
            assert kind(float(text)) == kind(stored)  # gives the value back in its dtype
            digits = next(d for d in range(1, 18) if f"{stored:.{d}g}" == text)
            assert digits == 1 or kind(float(f"{stored:.{digits - 1}g}")) != kind(stored)  # and no digit fewer would
    assert snapshot.number_text(float(np.float32(0.1)), "float32") == "0.1"
    assert snapshot.number_text(float("nan"), "float32") == '"nan"'
    assert snapshot.number_text(float("-inf"), "float16") == '"-inf"'


def test_a_missing_snapshot_is_recorded_with_a_warning(pinned, tmp_path):
    path = tmp_path / "snapshots" / "hard_tanh_ste.json"
    with pytest.warns(UserWarning) as caught:
        results = assert_custom_gradient(pinned.hard_tanh_ste, snapshot=str(path), points=[(0.5, "kink")])
    assert results[-1].name == "snapshot" and results[-1].level == "warn"
    # one warning per warn row: the misplaced kink (its kinks are at +-1), then the recording
    messages = [str(w.message) for w in caught]
    assert [m.split(": ")[:2] for m in messages] == [["hard_tanh_ste", "special_points"], ["hard_tanh_ste", "snapshot"]]
    assert re.search("recorded .*hard_tanh_ste.json", messages[1])
    text = path.read_text()
    data = json.loads(text)
    assert data["made_with"] == {name: metadata.version(name) for name in ("tensorflow", "keras", "numpy")}
    assert list(data["values"]) == ["float16", "bfloat16", "float32", "float64"]
    dtype_lines = [line for line in text.splitlines() if line.lstrip().startswith('"float') or '"bfloat16"' in line]
    assert len(dtype_lines) == 4 and len(text.splitlines()) == 13  # one line per dtype
    assert len(text) < 6000
    for dtype, columns in record(path)["values"].items():
        x = columns["x"]
        assert x.size == snapshot.SNAPSHOT_N + 0  # 0.5 is on the grid of step 0.1
        np.testing.assert_array_equal(columns["forward"], np.clip(x, -1.0, 1.0), err_msg=dtype)
        np.testing.assert_array_equal(columns["gradient"], (np.abs(x) <= 1.0).astype(float), err_msg=dtype)
        assert x[np.argmin(np.abs(x - 1.0))] == 1.0 and columns["gradient"][np.argmin(np.abs(x - 1.0))] == 1.0


def test_a_declared_point_off_the_grid_is_recorded(pinned, tmp_path):
    path = tmp_path / "off_grid.json"
    with pytest.warns(UserWarning):
        check = snapshot.check_snapshot(pinned.hard_tanh_ste, path, points=[(0.25, "kink")])
    assert check.level == "warn"
    x64 = record(path)["values"]["float64"]["x"]
    assert x64.size == snapshot.SNAPSHOT_N + 1 and 0.25 in x64


def test_with_ci_true_a_missing_snapshot_fails_and_nothing_is_written(pinned, tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")
    path = tmp_path / "missing.json"
    with pytest.raises(AssertionError, match="snapshot: snapshot missing: record it locally"):
        assert_custom_gradient(pinned.hard_tanh_ste, snapshot=str(path))
    assert not path.exists()


def test_a_one_percent_change_of_the_gradient_fails_naming_where_and_both_versions(pinned, tmp_path):
    path = tmp_path / "hard_tanh_ste.json"
    with pytest.warns(UserWarning):
        snapshot.check_snapshot(pinned.hard_tanh_ste, path)
    data = json.loads(path.read_text())
    data["made_with"]["tensorflow"] = "2.0.0"  # as if recorded before an upgrade
    path.write_text(snapshot.dumps({**data, "values": record(path)["values"]}))
    assert snapshot.check_snapshot(pinned.hard_tanh_ste, path).level == "pass"  # unchanged values still pass
    set_scale(pinned, 1.01)
    with pytest.raises(AssertionError) as error:
        assert_custom_gradient(pinned.hard_tanh_ste, snapshot=str(path))
    message = str(error.value)
    assert "snapshot: " in message and "the values changed" in message
    assert "TensorFlow 2.0.0" in message and f"TensorFlow {metadata.version('tensorflow')}" in message
    assert "largest relative change is 1 %" in message
    # the gradient is scaled where |x| <= 1: 21 points of the 61-point grid, in float16, float32 and float64;
    # bfloat16 cannot show 1 % of 1 (1.01 rounds to 1 + 2^-7, within its tolerance of one unit there)
    inside = int(np.sum(np.abs(np.linspace(*snapshot.SNAPSHOT_RANGE, snapshot.SNAPSHOT_N)) <= 1.0 + 1e-9))
    assert inside == 21
    assert float(np.float64(1.01).astype(ml_dtypes.bfloat16)) - 1.0 <= snapshot.RELATIVE_TOLERANCE["bfloat16"]
    assert f"{3 * inside} value(s) changed" in message
    rows = [line.split() for line in message.splitlines() if line.startswith("    gradient ")]
    assert rows and all(abs(float(row[2])) <= 1.0 and float(row[3]) == 1.0 for row in rows)
    assert {row[1] for row in rows} <= {"float16", "float32", "float64"}
    assert "GRADIENT_EXPLORER_UPDATE_SNAPSHOTS=1" in message


def test_a_change_within_the_dtypes_tolerance_passes(pinned, tmp_path):
    path = tmp_path / "hard_tanh_ste.json"
    with pytest.warns(UserWarning):
        snapshot.check_snapshot(pinned.hard_tanh_ste, path)
    set_scale(pinned, 1.0 + 1e-12)  # float64 moves by 1e-12 relative, below its 1e-10; the others not at all
    assert snapshot.check_snapshot(pinned.hard_tanh_ste, path).level == "pass"
    set_scale(pinned, 1.0 + 1e-9)  # above float64's tolerance only
    check = snapshot.check_snapshot(pinned.hard_tanh_ste, path)
    assert check.level == "fail" and "21 value(s) changed" in check.message and "float64" in check.message


def test_the_update_flag_re_records(pinned, tmp_path, monkeypatch):
    path = tmp_path / "hard_tanh_ste.json"
    with pytest.warns(UserWarning):
        snapshot.check_snapshot(pinned.hard_tanh_ste, path)
    set_scale(pinned, 1.5)
    assert snapshot.check_snapshot(pinned.hard_tanh_ste, path).level == "fail"
    monkeypatch.setenv(snapshot.UPDATE_VARIABLE, "1")
    monkeypatch.setenv("CI", "true")  # an explicit update is allowed anywhere
    with pytest.warns(UserWarning, match="re-recorded"):
        assert snapshot.check_snapshot(pinned.hard_tanh_ste, path).level == "warn"
    monkeypatch.delenv(snapshot.UPDATE_VARIABLE)
    assert snapshot.check_snapshot(pinned.hard_tanh_ste, path).level == "pass"
    assert record(path)["values"]["float32"]["gradient"].max() == 1.5


def test_only_the_dtypes_a_function_runs_in_are_pinned(pinned, tmp_path):
    path = tmp_path / "float32_only.json"
    with pytest.warns(UserWarning):
        snapshot.check_snapshot(pinned.float32_only, path)
    values = record(path)["values"]
    assert list(values) == ["float32"]
    np.testing.assert_array_equal(values["float32"]["gradient"], np.full(snapshot.SNAPSHOT_N, 2.0))


def test_a_layer_is_pinned_in_float32(pinned, tmp_path):
    from examples.square import CustomSquareLayer

    path = tmp_path / "layer.json"
    with pytest.warns(UserWarning):
        assert snapshot.check_snapshot(CustomSquareLayer, path).level == "warn"
    columns = record(path)["values"]["float32"]
    np.testing.assert_allclose(columns["forward"], columns["x"] ** 2, rtol=1e-6)
    np.testing.assert_allclose(columns["gradient"], columns["x"], rtol=1e-6)  # half of autodiff, as written
    assert snapshot.check_snapshot(CustomSquareLayer, path).level == "pass"


def test_a_file_that_is_not_a_snapshot_fails_clearly(pinned, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    check = snapshot.check_snapshot(pinned.hard_tanh_ste, path)
    assert check.level == "fail" and "is not a snapshot" in check.message and "delete it to re-record" in check.message
    path.write_text('{"values": {"float8": {"x": [0], "forward": [0], "gradient": [1]}}}')
    assert "unknown dtype 'float8'" in snapshot.check_snapshot(pinned.hard_tanh_ste, path).message
    path.write_text('{"values": {"float32": {"x": [0, 1], "forward": [0], "gradient": [1]}}}')
    assert "differ in length" in snapshot.check_snapshot(pinned.hard_tanh_ste, path).message


@pytest.mark.slow
def test_an_unchanged_rerun_in_a_fresh_process_passes_and_a_changed_one_fails(pinned, tmp_path):
    path = tmp_path / "hard_tanh_ste.json"
    with pytest.warns(UserWarning):
        assert_custom_gradient(pinned.hard_tanh_ste, snapshot=str(path), points=[(1.0, "kink")])
    rerun = textwrap.dedent(
        """
        import sys
        import pinned_ops
        from explorer.testing import assert_custom_gradient
        pinned_ops.SCALE_FILE.write_text(sys.argv[2])
        results = assert_custom_gradient(pinned_ops.hard_tanh_ste, snapshot=sys.argv[1], points=[(1.0, "kink")])
        print(results[-1].name, results[-1].level)
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "CI": "true"}
    env.pop(snapshot.UPDATE_VARIABLE, None)
    before = path.read_text()
    same = subprocess.run([sys.executable, "-c", rerun, str(path), "1.0"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)  # fmt: skip
    assert same.returncode == 0, same.stderr[-3000:]
    assert same.stdout.split()[-2:] == ["snapshot", "pass"]
    changed = subprocess.run([sys.executable, "-c", rerun, str(path), "1.01"], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=300)  # fmt: skip
    assert changed.returncode == 1 and "largest relative change is 1 %" in changed.stderr
    assert path.read_text() == before  # comparing never rewrites the file


@pytest.mark.slow
def test_pytest_update_snapshots_re_records(pinned, tmp_path):
    path = tmp_path / "hard_tanh_ste.json"
    with pytest.warns(UserWarning):
        snapshot.check_snapshot(pinned.hard_tanh_ste, path)
    (tmp_path / "test_pin.py").write_text(textwrap.dedent(
        """
        import pinned_ops
        from explorer.testing import assert_custom_gradient

        def test_pinned():
            pinned_ops.SCALE_FILE.write_text("1.5")  # a changed backward
            assert_custom_gradient(pinned_ops.hard_tanh_ste, snapshot="hard_tanh_ste.json")
        """
    ))  # fmt: skip
    # only this plugin, loaded by name (installed, pytest would also load it by its entry point)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "CI": "true",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # fmt: skip
    env.pop(snapshot.UPDATE_VARIABLE, None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "explorer.checker.pytest_plugin", "test_pin.py"]
    failed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert failed.returncode == 1 and "pytest --update-snapshots" in failed.stdout, failed.stdout[-3000:]
    updated = subprocess.run([*command, "--update-snapshots"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=300)  # fmt: skip
    assert updated.returncode == 0, updated.stdout[-3000:]
    assert "re-recorded" in updated.stdout  # the warning, in pytest's summary
    assert record(path)["values"]["float32"]["gradient"].max() == 1.5


def test_a_positional_only_parameter_is_passed_when_pinning(tmp_path, monkeypatch):
    """examples/spike.py's slope is positional-only, so its backward returns two gradients: calling it with x
    alone raises, and a snapshot that did so recorded no dtype at all."""
    from examples.spike import fast_sigmoid_spike

    monkeypatch.delenv("CI", raising=False)  # recording is what is tested (CI=true never records)
    monkeypatch.delenv(snapshot.UPDATE_VARIABLE, raising=False)
    path = tmp_path / "spike.json"
    with pytest.warns(UserWarning, match="recorded"):
        assert_custom_gradient(fast_sigmoid_spike, snapshot=str(path))
    values = record(path)["values"]
    assert list(values) == ["float16", "bfloat16", "float32", "float64"]
    x, gradient = values["float64"]["x"], values["float64"]["gradient"]
    np.testing.assert_allclose(gradient, 1.0 / (25.0 * np.abs(x) + 1.0) ** 2, rtol=1e-12)
    np.testing.assert_array_equal(values["float64"]["forward"], (x > 0).astype(float))


def test_the_readme_example_snapshot_still_matches(monkeypatch):
    """tests/snapshots/fast_sigmoid_spike.json is the README's example, recorded and committed."""
    from examples.spike import fast_sigmoid_spike

    monkeypatch.delenv(snapshot.UPDATE_VARIABLE, raising=False)  # compared, never re-recorded
    path = Path(__file__).resolve().parent / "snapshots" / "fast_sigmoid_spike.json"
    results = assert_custom_gradient(fast_sigmoid_spike, snapshot=str(path))
    assert results[-1].name == "snapshot" and results[-1].level == "pass", results[-1].message
