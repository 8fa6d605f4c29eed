"""The two watch examples on scikit-learn's digits write runs the Runs page lists, and their runs show what the
examples say: the narrow surrogate's units mostly get a zero gradient, the tight clip leaves most inputs beyond it."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import pytest

from explorer.watch.run_folder import Run, list_runs

ROOT = Path(__file__).resolve().parent.parent


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _last_layer_rows(root: Path) -> dict[str, dict]:
    runs, problems = list_runs(root)
    assert problems == [] and all(run.state == "finished" for run in runs)
    rows = {}
    for run in runs:
        frame = Run(root, run.name).read("layers").frame
        rows[Run(root, run.name).info["model"]] = frame.iloc[-1].to_dict()
    return rows


@pytest.mark.slow
def test_the_spiking_example_shows_the_narrow_support_beside_the_fix(tmp_path, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _example("watch_spiking_digits").main(["--runs", str(tmp_path), "--epochs", "3"])
    rows = _last_layer_rows(tmp_path)
    narrow, wide = rows["spiking-digits-alpha-8"], rows["spiking-digits-alpha-0.5"]
    assert narrow["zero_grad_share"] > 0.9 > wide["zero_grad_share"]
    assert "alarm: layer 'spike' at step 0" in capsys.readouterr().out


@pytest.mark.slow
def test_the_binary_example_shows_the_tight_clip_beside_the_wider_one(tmp_path):
    _example("watch_binary_digits").main(["--runs", str(tmp_path), "--epochs", "3"])
    rows = _last_layer_rows(tmp_path)
    tight, wide = rows["binary-digits-clip-0.1"], rows["binary-digits-clip-1"]
    assert tight["below_share"] + tight["above_share"] > 0.8 > wide["below_share"] + wide["above_share"]
    assert tight["zero_grad_share"] == pytest.approx(tight["below_share"] + tight["above_share"])  # closed boundaries
    assert 0 <= wide["flip_ratio"] <= 1


@pytest.mark.slow
def test_the_runs_page_shows_the_runs_the_callback_wrote(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from explorer import serve

    _example("watch_binary_digits").main(["--runs", str(tmp_path), "--epochs", "1"])
    monkeypatch.setenv(serve.RUNS_ENV, str(tmp_path))
    runs, _ = list_runs(tmp_path)
    assert len(runs) == 2
    for run in runs:
        at = AppTest.from_string("from explorer.ui import runs\nruns.page()\n", default_timeout=300)
        at.query_params["run"] = run.name
        at.run()
        assert not at.exception and not at.error, run.name
        assert any(chart.key == "runs.layer_figure" for chart in at.get("plotly_chart"))
