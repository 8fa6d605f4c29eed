"""A ReadyFigure carries Streamlit's theme itself (theme=None, no template): in Chromium it must draw exactly as
the same figure drawn by ``st.plotly_chart`` with Streamlit's theme and the figure's template.

One served page draws each figure both ways, side by side in equal columns. Compared: plotly.js's resolved
layout and traces (``_fullLayout``, ``_fullData``: every attribute after templates and defaults) and the
pixels of the two charts. The page draws six charts at once, which makes Streamlit copy each figure before
its first draw has computed the axes' ranges: the case explorer.ui.widgets._with_range_hints is for.
A Streamlit upgrade that changes its theme fails here, not in a user's eyes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from explorer.bench import harness

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "e2e"

pytestmark = pytest.mark.e2e

FIGURES = ("main", "overlay", "atan", "compare", "loss", "layers")
PIXEL_LEVELS = 24  # of 255: a plotly_white grid line on white differs by 25
CHANGED_PIXELS_LIMIT = 0.0015  # of the pixels: 0.07 % seen (layers), a grid line ~0.2 %

PAGE = f"""\
import json

import numpy as np
import pandas as pd
import streamlit as st

from explorer.explore import figures

from explorer.train import figures as train_figures
from explorer.explore.points import special_points
from explorer.explore.sweeps import sweep
from explorer.ui.widgets import ReadyFigure, show_figure

st.set_page_config(layout="wide")
result, atan = sweep("ste_sign"), sweep("atan")
sweeps = [sweep("ste_sign", params={{"clip_value": c}}) for c in (0.5, 1.0, 2.0)]
rng = np.random.default_rng(0)
histories = [
    pd.DataFrame({{"epoch": np.arange(1, n + 1), "loss": rng.random(n), "grad_norm_1": rng.random(n) + 0.1,
                  "grad_norm_output": rng.random(n) + 0.1}})
    for n in (30, 12)
]
specs = {{
    "main": figures.main_figure_spec(result, special_points(result)),
    "overlay": figures.main_figure_spec(result, special_points(result), overlay=True),
    "atan": figures.main_figure_spec(atan, special_points(atan)),  # shaded: no true gradient, and a note
    "compare": figures.compare_figure_spec(sweeps, ["a", "b", "c"], [special_points(s) for s in sweeps]),
    "loss": train_figures.loss_figure_spec(histories, ["custom", "true"], log_y=True),
    "layers": train_figures.layer_norm_figure_spec(histories, ["custom", "true"]),
}}
revisions = {{}}
for name in {list(FIGURES)!r}:
    left, right = st.columns(2)
    with left:
        st.plotly_chart(figures.as_figure(specs[name]), key=f"streamlit_{{name}}")  # theme="streamlit"
    with right:
        ready = ReadyFigure(specs[name])
        revisions[f"ready_{{name}}"] = ready.to_dict()["layout"].get("datarevision")
        show_figure(ready, key=f"ready_{{name}}")
with st.container(key="revisions"):
    st.text(json.dumps(revisions))  # the data revision the server sent for each ReadyFigure
"""

# plotly.js's resolved figure of the chart with Streamlit key ``key``: every public attribute of _fullLayout and
# _fullData, numeric arrays as (length, sum, nulls); the title without Streamlit's <b> (its theme bolds it again
# on every redraw: "<b><b>..."); the template and the data revision left out (they are what differs by design),
# and so are the auto-tick steps (dtick, tick0) that a full redraw writes into the layout.
RESOLVED_JS = """(key) => {
  const gd = document.querySelector('.st-key-' + key + ' .js-plotly-plot');
  const clean = (v, depth) => {
    if (typeof v === 'function') return '<function>';
    if (v === null || typeof v !== 'object') return v;
    const numeric = ArrayBuffer.isView(v)
      || (Array.isArray(v) && v.length > 0 && v.every((x) => x === null || typeof x === 'number'));
    if (numeric) {
      const values = Array.from(v);
      const finite = values.filter((x) => x !== null && Number.isFinite(x));
      const sum = finite.reduce((a, b) => a + b, 0).toPrecision(7);
      return {n: values.length, sum, nulls: values.length - finite.length};
    }
    if (depth > 8) return '<deep>';
    if (Array.isArray(v)) return v.map((x) => clean(x, depth + 1));
    const out = {};
    for (const k of Object.keys(v).sort()) {
      if (k.startsWith('_') || k === 'uid' || k === 'template' || k === 'datarevision') continue;
      out[k] = clean(v[k], depth + 1);
    }
    return out;
  };
  const layout = clean(gd._fullLayout, 0);
  for (const [name, axis] of Object.entries(layout)) {  // auto ticks: written by a full redraw, not set
    if (/^[xy]axis\\d*$/.test(name) && axis.tickmode === 'auto') { delete axis.dtick; delete axis.tick0; }
  }
  if (layout.title) layout.title.text = String(layout.title.text).replace(/<\\/?b>/g, '');
  return {layout, data: gd._fullData.map((t) => clean(t, 0))};
}"""


# Counts, on every chart's div, the times plotly.js is handed a layout (Plotly.react assigns gd.layout
# once per call): Streamlit calls it twice per new chart, the second time ~10 ms to seconds (on a busy
# machine) after the first, with a JSON copy of the figure, themed again and at its measured width.
COUNT_PLOTLY_CALLS_JS = """
Object.defineProperty(HTMLDivElement.prototype, 'layout', {
  configurable: true,
  get() { return this.__layout; },
  set(value) { this.__layout = value; this.__plotlyCalls = (this.__plotlyCalls || 0) + 1; },
});
"""
STREAMLIT_PLOTLY_CALLS = 2

# True once every chart (by Streamlit key) is drawn as the server sent it: Streamlit's second plotly call
# made, plotly.js resolved it (_fullLayout) at the width Streamlit set, and a ReadyFigure with the data
# revision the server gave it (null: none, when an axis has no range hint).
DRAWN_AS_SENT_JS = f"""([keys, revisions]) => keys.every((key) => {{
  const gd = document.querySelector('.st-key-' + key + ' .js-plotly-plot');
  if (!gd || (gd.__plotlyCalls || 0) < {STREAMLIT_PLOTLY_CALLS}) return false;
  if (!gd._fullLayout || !gd.layout || gd.layout.width === undefined) return false;
  if (gd._fullLayout.width !== gd.layout.width || gd._fullLayout.height !== gd.layout.height) return false;
  return !(key in revisions) || (gd._fullLayout.datarevision ?? null) === revisions[key];
}})"""


@pytest.fixture(scope="module")
def theme_page(tmp_path_factory):
    script = tmp_path_factory.mktemp("theme") / "figure_theme_page.py"
    script.write_text(PAGE)
    log = ARTIFACTS / "figure_theme.log"
    with harness.serve_app(log_path=log, script=script, env={"PYTHONPATH": str(harness.ROOT)}) as server:
        yield server


@pytest.fixture(scope="module")
def drawn(browser, theme_page):
    """The page loaded once: every chart drawn and the page settled."""
    context = browser.new_context(viewport={"width": 2400, "height": 1200})
    context.add_init_script(COUNT_PLOTLY_CALLS_JS)
    page = context.new_page()
    page.goto(theme_page.url)
    page.wait_for_function(harness.SETTLED_JS, timeout=90_000)
    keys = [f"{way}_{name}" for name in FIGURES for way in ("streamlit", "ready")]
    revisions = json.loads(page.locator(".st-key-revisions").inner_text())
    assert set(revisions) == {key for key in keys if key.startswith("ready_")}
    # Streamlit's second plotly call (a copy of the figure, which may predate the first draw's ranges) comes
    # after the first draw: wait for it on every chart, then read twice, two animation frames apart; the
    # reads must agree, or the test fails.
    page.wait_for_function(DRAWN_AS_SENT_JS, arg=[keys, revisions], timeout=60_000)
    first = [page.evaluate(RESOLVED_JS, key) for key in keys]
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    page.wait_for_function(DRAWN_AS_SENT_JS, arg=[keys, revisions], timeout=60_000)
    second = [page.evaluate(RESOLVED_JS, key) for key in keys]
    assert first == second, "a chart was still being redrawn after every chart was drawn as sent"
    yield page
    context.close()


def _is_numbers(value) -> bool:
    return isinstance(value, dict) and set(value) == {"n", "sum", "nulls"}


def _differences(a, b, path: str = "") -> list[str]:
    """Paths where two resolved figures differ; numeric arrays equal if their lengths, nulls and sums agree
    (to 1e-6: float32 values sent as float32 and as their shortest decimals)."""
    if _is_numbers(a) and _is_numbers(b):
        same_sum = float(a["sum"]) == pytest.approx(float(b["sum"]), rel=1e-6, abs=1e-9)
        same = (a["n"], a["nulls"]) == (b["n"], b["nulls"]) and same_sum
        return [] if same else [f"{path}: {a} != {b}"]
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b)) for d in _differences(a.get(key), b.get(key), f"{path}.{key}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:80]} != {json.dumps(b)[:80]}"]


@pytest.mark.parametrize("name", FIGURES)
def test_ready_figure_resolves_and_draws_as_streamlits_theme_does(drawn, name):
    ours = drawn.evaluate(RESOLVED_JS, f"ready_{name}")
    theirs = drawn.evaluate(RESOLVED_JS, f"streamlit_{name}")
    differences = _differences(theirs, ours)
    assert differences == [], "\n".join(differences)
    paths = [ARTIFACTS / f"figure_theme_{name}_{way}.png" for way in ("streamlit", "ready")]
    for path, way in zip(paths, ("streamlit", "ready"), strict=True):
        drawn.locator(f".st-key-{way}_{name} .js-plotly-plot").screenshot(path=path, animations="disabled")
    streamlit_drawn, ready_drawn = (np.asarray(Image.open(path).convert("RGB"), dtype=np.int16) for path in paths)
    assert streamlit_drawn.shape == ready_drawn.shape
    # the same picture: numbers sent as JSON decimals, not base64, can move a line by a fraction of a pixel and
    # change a few anti-aliased pixels; one grid line, axis line or label more or less
    # changes a whole row of pixels (~0.2 %) by more than PIXEL_LEVELS
    changed = np.abs(streamlit_drawn - ready_drawn).max(axis=2) > PIXEL_LEVELS
    assert changed.mean() < CHANGED_PIXELS_LIMIT
