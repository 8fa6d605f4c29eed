"""The run folder: whole parts only, merged parts read once, unreadable parts named, names kept inside the folder."""

import json
import os
import time

import pandas as pd
import pytest

from explorer.watch import run_folder
from explorer.watch.run_folder import Run, RunNameError, RunWriter, list_runs, run_path


def _layer_rows(step, layers=("spike", "clip")):
    return [
        {"step": step, "layer": name, "depth": depth, "mean": step + depth / 10} for depth, name in enumerate(layers)
    ]


def test_rows_read_back_in_order_with_filters_and_projection(tmp_path):
    writer = RunWriter(tmp_path, "a", {"model": "mlp"}, flush_seconds=0)
    for step in (10, 20, 30):
        writer.append("layers", _layer_rows(step))
        writer.append("steps", [{"step": step, "loss": 1.0 / step}])
    writer.close()
    run = Run(tmp_path, "a")
    assert run.state() == "finished"
    assert run.recorded_steps() == [10, 20, 30]
    read = run.read("layers", ["step", "mean"], steps=[20], layers=["clip"])
    assert read.problems == []
    assert read.frame.to_dict("records") == [{"step": 20, "mean": 20.1}]
    every = run.read("layers").frame
    assert list(zip(every["step"], every["layer"], strict=True)) == [
        (10, "clip"), (10, "spike"), (20, "clip"), (20, "spike"), (30, "clip"), (30, "spike")]  # fmt: skip
    assert len(run.parts("layers")) == 3  # flush_seconds=0: one part per append


def test_buffered_rows_are_written_on_close_and_nothing_half_written_is_listed(tmp_path):
    writer = RunWriter(tmp_path, "b", {}, flush_seconds=3600)
    writer.append("steps", [{"step": 1, "loss": 0.5}])
    assert Run(tmp_path, "b").read("steps").frame.empty  # buffered: a reader sees no rows, not half of them
    (tmp_path / "b" / "steps" / ".part-000000.parquet.123.tmp").write_bytes(b"PAR1 half")
    writer.close("stopped", "dead units")
    run = Run(tmp_path, "b")
    assert run.read("steps").frame.to_dict("records") == [{"step": 1, "loss": 0.5}]
    assert (run.info["status"], run.info["stop_reason"], run.state()) == ("stopped", "dead units", "stopped")
    with pytest.raises(ValueError, match="closed"):
        writer.append("steps", [{"step": 2, "loss": 0.4}])


def test_parts_are_merged_and_each_row_is_read_once(tmp_path):
    writer = RunWriter(tmp_path, "m", {}, flush_seconds=0, merge_at_parts=4)
    for step in range(1, 12):
        writer.append("steps", [{"step": step, "loss": float(step)}])
    names = sorted(p.name for p in (tmp_path / "m" / "steps").iterdir())
    # 4 files make a merge: parts 0-3, then that and 4, 5, 6; then that and 7, 8, 9; part 10 is left beside it
    assert names == ["part-000000-000009.parquet", "part-000010.parquet"]
    # A reader listing a merged part beside the parts it replaced (removed a moment later) reads each row once.
    merged = pd.DataFrame({"step": [11, 12], "loss": [11.0, 12.0]})
    merged.to_parquet(tmp_path / "m" / "steps" / "part-000010-000011.parquet")
    (tmp_path / "m" / "steps" / "part-000011.parquet").write_bytes(b"")  # hidden by the merged part: never read
    assert Run(tmp_path, "m").recorded_steps() == list(range(1, 13))
    assert len(Run(tmp_path, "m").read("steps").frame) == 12


def test_a_truncated_part_is_named_and_the_whole_ones_are_read(tmp_path):
    writer = RunWriter(tmp_path, "t", {}, flush_seconds=0)
    for step in (1, 2, 3):
        writer.append("steps", [{"step": step, "loss": 0.1 * step}])
    part = tmp_path / "t" / "steps" / "part-000001.parquet"
    part.write_bytes(part.read_bytes()[:-20])  # cut short, as by a copy that stopped
    read = Run(tmp_path, "t").read("steps")
    assert list(read.frame["step"]) == [1, 3]
    assert [name for name, _ in read.problems] == ["steps/part-000001.parquet"]


def test_state_live_then_stopped_before_its_end(tmp_path):
    writer = RunWriter(tmp_path, "live", {}, flush_seconds=0)
    writer.append("steps", [{"step": 1, "loss": 1.0}])
    run = Run(tmp_path, "live")
    beat = run.heartbeat()
    assert run.state(now=beat + run_folder.LIVE_SECONDS) == "live"
    assert run.state(now=beat + run_folder.LIVE_SECONDS + 1) == "stopped before its end"


def test_list_runs_newest_first_with_model_ops_steps_and_unreadable_runs_named(tmp_path):
    for name, started in (("old", "2026-01-01T00:00:00+00:00"), ("new", "2026-02-01T00:00:00+00:00")):
        writer = RunWriter(tmp_path, name, {"model": f"m-{name}", "started": started, "user": "ana",
                                             "layers": [{"op": "heaviside_atan"}, {"op": "ste_clip"}]}, flush_seconds=0)  # fmt: skip
        writer.append("steps", [{"step": s, "loss": 1.0} for s in (5, 10)])
        writer.close()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "info.json").write_text("{not json")
    (tmp_path / "not-a-run").mkdir()
    runs, problems = list_runs(tmp_path)
    assert [(r.name, r.model, r.ops, r.steps, r.state, r.user) for r in runs] == [
        ("new", "m-new", "heaviside_atan, ste_clip", 2, "finished", "ana"),
        ("old", "m-old", "heaviside_atan, ste_clip", 2, "finished", "ana"),
    ]
    assert [name for name, _ in problems] == ["broken"]
    assert list_runs(tmp_path / "missing") == ([], [])


@pytest.mark.parametrize(
    "name", ["..", "../x", "a/b", "/etc", "", ".hidden", "a..b", "x" * 129, "a\x00b", "é", None, 3, "a b"]
)
def test_names_that_are_not_plain_names_are_refused(tmp_path, name):
    with pytest.raises(RunNameError, match="not allowed"):
        run_path(tmp_path, name)


def test_a_link_out_of_the_folder_is_refused_and_never_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "info.json").write_text(json.dumps({"name": "secret"}))
    runs = tmp_path / "runs"
    runs.mkdir()
    os.symlink(outside, runs / "escape")
    with pytest.raises(RunNameError, match="leads out"):
        Run(runs, "escape")
    assert list_runs(runs) == ([], [])


def test_an_unwritable_folder_fails_before_anything_is_recorded(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        RunWriter(blocker, "r", {})
    RunWriter(tmp_path, "r", {})
    with pytest.raises(FileExistsError):
        RunWriter(tmp_path, "r", {})


def test_info_keeps_what_json_can_hold(tmp_path):
    writer = RunWriter(tmp_path, "i", {"layers": [{"clip_bounds": (-1.0, float("nan"))}]})
    info = Run(tmp_path, "i").info
    assert info["layers"] == [{"clip_bounds": [-1.0, None]}]
    assert (info["format"], info["status"], info["name"], info["pid"]) == (1, "running", "i", os.getpid())
    writer.close()


def test_new_run_names_sort_by_time():
    first = run_folder.new_run_name("digits")
    time.sleep(0.001)
    assert (
        run_folder.check_name(first) == first
        and first.startswith("digits-")
        and first < run_folder.new_run_name("digits")
    )


def test_links_inside_a_run_are_not_followed_out_of_the_runs_folder(tmp_path):
    """Issue 47: a run whose info.json, a table folder or a part is a link (to a run outside) is not read there."""
    outside = tmp_path / "outside"
    writer = RunWriter(outside, "real", {"model": "outside"}, flush_seconds=0)
    writer.append("steps", [{"step": 1, "loss": 9.0}])
    writer.close()
    root = tmp_path / "runs"
    inner = RunWriter(root, "linked-info", {"model": "inside"}, flush_seconds=0)
    inner.close()
    (root / "linked-info" / "info.json").unlink()
    (root / "linked-info" / "info.json").symlink_to(outside / "real" / "info.json")
    with pytest.raises(ValueError, match="is a link"):
        Run(root, "linked-info")
    parts = RunWriter(root, "linked-parts", {"model": "inside"}, flush_seconds=0)
    parts.append("steps", [{"step": 1, "loss": 1.0}])
    parts.close()
    (root / "linked-parts" / "steps" / "part-000007.parquet").symlink_to(outside / "real" / "steps" / "part-000000.parquet")
    (root / "linked-parts" / "layers").rmdir()
    (root / "linked-parts" / "layers").symlink_to(outside / "real" / "steps", target_is_directory=True)
    run = Run(root, "linked-parts")
    assert run.read("steps").frame.to_dict("records") == [{"step": 1, "loss": 1.0}]
    assert run.read("layers").frame.empty
