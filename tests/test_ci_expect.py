""".ci/verify_expect.py, which reads one ``verify --json`` run for .ci/run: the exit status, and that every item of
the good files passed (what a second ``verify`` of those files alone checked by exiting 0)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("verify_expect", ROOT / ".ci" / "verify_expect.py")
verify_expect = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(verify_expect)

NAMES = {"good.py": ["good_fn", "GoodLayer"], "pitfalls.py": ["bad_fn"]}


def row(op: str, check: str, level: str) -> dict:
    return {"op": op, "check": check, "level": level, "passed": level != "fail", "message": "m", "backend": "tensorflow"}


ROWS = [
    row("good_fn", "finite", "pass"), row("good_fn", "vs_autodiff", "warn"), row("good_fn", "backends", "skip"),
    row("GoodLayer", "input_gradient", "pass"),
    row("bad_fn", "finite", "fail"), row("bad_fn", "graph", "pass"),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _names(monkeypatch):
    monkeypatch.setattr(verify_expect, "names_in", lambda path: NAMES[path])


def test_as_expected_when_the_status_matches_and_the_good_items_only_pass_warn_or_skip():
    assert verify_expect.problems(ROWS, 1, 1, ["good.py"]) == []


def test_a_wrong_status_a_failed_good_item_and_a_missing_one_are_each_named():
    failed = [*ROWS[:3], row("GoodLayer", "input_gradient", "fail"), row("GoodLayer", "keras_save", "fail"), *ROWS[4:]]
    assert verify_expect.problems(failed, 0, 1, ["good.py"]) == [
        "verify exited 0, expected 1",
        "good.py: GoodLayer failed input_gradient, keras_save",
    ]
    without_layer = [r for r in ROWS if r["op"] != "GoodLayer"]
    assert verify_expect.problems(without_layer, 1, 1, ["good.py"]) == [
        "good.py: no rows for GoodLayer (renamed, or qualified by a clashing name?)"
    ]
    assert verify_expect.problems(ROWS, 1, 1, ["good.py", "pitfalls.py"]) == ["pitfalls.py: bad_fn failed finite"]


def test_main_prints_the_table_and_exits_1_on_a_problem_or_output_that_is_not_json(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(ROWS))
    assert verify_expect.main([str(results), "1", "--expect-status", "1", "--passing", "good.py"]) == 0
    out = capsys.readouterr().out
    assert "good_fn    finite" in out and "3 op(s), 6 checks: 3 pass, 1 warn, 1 fail, 1 skip" in out
    assert verify_expect.main([str(results), "1", "--expect-status", "0", "--passing", "good.py"]) == 1
    assert "UNEXPECTED: verify exited 1, expected 0" in capsys.readouterr().err
    results.write_text("Traceback (most recent call last): ...")
    assert verify_expect.main([str(results), "2", "--expect-status", "1"]) == 1
    assert "is not verify's JSON (exit status 2)" in capsys.readouterr().err
