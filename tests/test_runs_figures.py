"""The Runs page's figures are valid Plotly figures (built again with Plotly's validation on) and draw the rows
they are given."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from explorer.explore.points import special_points
from explorer.explore.sweeps import sweep
from explorer.runs import figures, synthetic
from explorer.runs.what_if import Histogram, what_if
from explorer.watch.run_folder import Run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    root = tmp_path_factory.mktemp("figures")
    synthetic.write_run(root, "r", 12, 2)
    return Run(root, "r")


def _validated(spec: dict) -> go.Figure:
    return go.Figure(spec)  # raises ValueError naming any property plotly does not know


def test_every_figure_is_valid_plotly(run):
    layers = run.read("layers").frame
    row = layers[(layers["step"] == 5) & (layers["layer"] == "binary_1")].iloc[0].to_dict()
    histogram = Histogram.from_row(run.read("histograms", steps=[5], layers=["binary_1"]).frame.iloc[0].to_dict())
    result = sweep("ste_sign", lo=histogram.lo, hi=histogram.hi, n=201, params={"clip_value": 1.0})
    specs = {
        "layer": figures.layer_figure_spec(result, special_points(result), histogram, row, step=5, layer="binary_1",
                                           clip_bounds=[-1.0, 1.0]),
        "over": figures.over_steps_spec(layers[layers["layer"] == "binary_1"], layer="binary_1", step=5),
        "depth": figures.gradient_depth_spec(layers[layers["step"] == 5], layers, step=5),
        "loss": figures.loss_spec(run.read("steps").frame),
        "compare": figures.compare_spec([("r", layers[layers["layer"] == "binary_1"], run.read("steps").frame)], depth=1),
        "what_if": figures.what_if_spec(histogram, [what_if(histogram, "ste_sign", {"clip_value": 1.5})], step=5, layer="binary_1"),
    }  # fmt: skip
    for name, spec in specs.items():
        figure = _validated(spec)
        assert len(figure.data) > 0, name
    depth = specs["depth"]["data"]
    per_layer = {trace["name"]: trace for trace in depth[1:]}
    for name in ("spike_0", "binary_1"):
        mine = layers[layers["layer"] == name].sort_values("step")
        assert np.allclose(per_layer[name]["y"], mine["grad_norm"]) and list(per_layer[name]["x"]) == mine["step"].tolist()


def test_the_shares_line_leaves_out_what_the_op_does_not_have():
    text = figures.shares_text({"zero_grad_share": 0.125, "special_share": 0.0, "below_share": float("nan"),
                                "above_share": float("nan")})  # fmt: skip
    assert text == "zero gradient 12.5 % · on a special point 0 %"
