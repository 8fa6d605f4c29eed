"""Runs written with the run folder's own writer for the Runs page's tests, and the page run by AppTest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from streamlit.testing.v1 import AppTest

from explorer import serve
from explorer.runs import synthetic

TIMEOUT = 120
SENTINEL_MODEL = "SENTINEL-MODEL-OUTSIDE"


def runs_app():
    from explorer.ui import runs

    runs.page()


def open_page(root: Path, query: dict | None = None) -> AppTest:
    """The Runs page on runs folder ``root`` (the variable ``--runs`` sets), opened with URL ``query``."""
    os.environ[serve.RUNS_ENV] = str(root)
    app = AppTest.from_function(runs_app, default_timeout=TIMEOUT)
    for key, value in (query or {}).items():
        app.query_params[key] = value
    return app.run()


def make_runs(base: Path) -> dict[str, Path]:
    """``base/runs`` with two finished runs of 30 and 20 steps (2 layers: fast_sigmoid, ste_sign), a run stopped
    before its end, and ``base/outside`` holding a run whose model is :data:`SENTINEL_MODEL`, with a link
    ``runs/evil`` to it: a page that shows that model has read outside the runs folder."""
    root, outside = base / "runs", base / "outside"
    root.mkdir()
    outside.mkdir()
    synthetic.write_run(root, "clip-a", 30, 2, seed=1)
    synthetic.write_run(root, "clip-b", 20, 2, seed=2)
    stale = synthetic.write_run(root, "stale", 5, 2, close=None)
    old = stale.stat().st_mtime - 3600
    os.utime(stale / "heartbeat", (old, old))
    sentinel = synthetic.write_run(outside, "outside-run", 5, 2)
    info = json.loads((sentinel / "info.json").read_text())
    (sentinel / "info.json").write_text(json.dumps({**info, "model": SENTINEL_MODEL}))
    (root / "evil").symlink_to(sentinel, target_is_directory=True)
    linked = synthetic.write_run(root, "linked-info", 3, 2)  # a run whose info.json is a link to the sentinel's
    (linked / "info.json").unlink()
    (linked / "info.json").symlink_to(sentinel / "info.json")
    return {"root": root, "outside": outside, "sentinel": sentinel}


def table(root: Path, run: str, name: str) -> pd.DataFrame:
    """A table of a run read straight from its Parquet files (the tests' own reader, not the page's)."""
    parts = sorted((root / run / name).glob("part-*.parquet"))
    return pd.concat([pq.read_table(p).to_pandas() for p in parts], ignore_index=True)


def figure(app: AppTest, key: str) -> dict:
    chart = next(c for c in app.get("plotly_chart") if c.key == key)
    return json.loads(chart.proto.spec)


def values(raw) -> np.ndarray:
    if isinstance(raw, dict):
        import base64

        return np.frombuffer(base64.b64decode(raw["bdata"]), dtype=np.dtype(raw["dtype"])).astype(float)
    return np.array([np.nan if v is None else v for v in raw], dtype=float)
