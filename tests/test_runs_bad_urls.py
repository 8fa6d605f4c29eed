"""Thirty-odd hostile run names and steps in the Runs page's URL: a notice each, no traceback, and nothing read
outside the runs folder.

"Nothing read outside" is observed two ways while the page runs: a Python audit hook records every file opened
and every folder listed (``open``, ``os.listdir``, ``os.scandir``), and the Parquet reader the run folder uses is
wrapped to record every path it reads; each recorded path is resolved (links followed) and none may lie in
``outside/``, which holds a whole run (a sentinel) that a link ``runs/evil`` points to. A control test shows the
recorder does see a read of that run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from explorer.watch import run_folder
from tests.runs_fixtures import SENTINEL_MODEL, make_runs, open_page

_RECORDED: list[str] = []
_RECORDING = [False]


def _audit(event: str, args: tuple, recording: list[bool] = _RECORDING) -> None:
    # ``recording`` bound here: at the interpreter's exit the module's globals are None while the hook still runs
    if recording[0] and event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _RECORDED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # an audit hook stays for the process; it records only while _RECORDING


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return make_runs(tmp_path_factory.mktemp("hostile"))


@pytest.fixture
def reads(monkeypatch):
    """The resolved paths opened, listed or read as Parquet while the test runs."""
    real = run_folder.pq.read_table

    def read_table(source, *args, **kwargs):
        _RECORDED.append(os.fspath(source))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(run_folder.pq, "read_table", read_table)
    _RECORDED.clear()
    _RECORDING[0] = True
    yield _RECORDED
    _RECORDING[0] = False


def _outside(recorded: list[str], outside: Path) -> list[str]:
    base = str(outside.resolve())
    return [path for path in recorded if os.path.realpath(path).startswith(base)]


def test_the_recorder_sees_a_read_of_the_sentinel_run(runs, reads):
    run = run_folder.Run(runs["outside"], "outside-run")
    run.read("steps")
    assert run.info["model"] == SENTINEL_MODEL
    found = _outside(reads, runs["outside"])
    assert any(p.endswith("info.json") for p in found) and any(p.endswith(".parquet") for p in found)


HUGE = "9" * 150
# (id, query, text a notice must contain)
CASES = [
    ("traversal", {"run": "../outside/outside-run"}, "is not the name of a run"),
    ("traversal-parent", {"run": ".."}, "is not the name of a run"),
    ("dot", {"run": "."}, "is not the name of a run"),
    ("traversal-inside-name", {"run": "clip-a/../../outside/outside-run"}, "is not the name of a run"),
    ("traversal-backslash", {"run": "..\\outside\\outside-run"}, "is not the name of a run"),
    ("double-dot-in-name", {"run": "clip..a"}, "is not the name of a run"),
    ("absolute-etc", {"run": "/etc/passwd"}, "is not the name of a run"),
    ("absolute-sentinel", {"run": "SENTINEL_PATH"}, "is not the name of a run"),
    ("home", {"run": "~/runs"}, "is not the name of a run"),
    ("file-url", {"run": "file:///etc/passwd"}, "is not the name of a run"),
    ("windows-drive", {"run": "C:\\Windows"}, "is not the name of a run"),
    ("nul-byte", {"run": "clip-a\x00"}, "is not the name of a run"),
    ("space", {"run": "clip a"}, "is not the name of a run"),
    ("html", {"run": "<script>alert(1)</script>"}, "is not the name of a run"),
    ("fullwidth-dots", {"run": "．．"}, "is not the name of a run"),
    ("link-out-of-folder", {"run": "evil"}, "leads out of the runs folder"),
    ("info-json-linked-out", {"run": "linked-info"}, "is a link"),
    ("no-such-run", {"run": "nope"}, "There is no run 'nope'"),
    ("empty-run", {"run": ""}, "'run' is empty"),
    ("too-long-run", {"run": "a" * 300}, "too long"),
    ("step-huge", {"run": "clip-a", "step": HUGE}, "'step'"),
    ("step-overflow", {"run": "clip-a", "step": "1e400"}, "'step'"),
    ("step-beyond-2-53", {"run": "clip-a", "step": str(2**53 + 1)}, "'step'"),
    ("step-nan", {"run": "clip-a", "step": "nan"}, "'step'"),
    ("step-inf", {"run": "clip-a", "step": "inf"}, "'step'"),
    ("step-negative", {"run": "clip-a", "step": "-1"}, "'step'"),
    ("step-fraction", {"run": "clip-a", "step": "2.5"}, "'step'"),
    ("step-empty", {"run": "clip-a", "step": ""}, "'step'"),
    ("step-text", {"run": "clip-a", "step": "last"}, "'step'"),
    ("step-not-recorded", {"run": "clip-a", "step": "1000000"}, "is not recorded"),
    ("step-repeated-last-bad", {"run": "clip-a", "step": ["3", "nan"]}, "'step'"),
    ("compare-traversal", {"run": "clip-a", "cmp": "../outside/outside-run"}, "Ignored compared run"),
    ("compare-link-out", {"run": "clip-a", "cmp": "evil"}, "Cannot compare with 'evil'"),
    ("compare-absolute", {"run": "clip-a", "cmp": "clip-b,/etc"}, "Ignored compared run '/etc'"),
    ("layer-traversal", {"run": "clip-a", "layer": "../../etc/passwd"}, "has no watched layer"),
    ("what-if-unknown-op", {"run": "clip-a", "wi": "../ops"}, "What-if op"),
    ("what-if-nan-param", {"run": "clip-a", "wi": "ste_sign", "wi.clip_value": "nan"}, "What-if parameter 'clip_value'"),
]


@pytest.mark.parametrize(("query", "needle"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_hostile_url_gets_a_notice_no_traceback_and_nothing_outside_is_read(runs, reads, query, needle):
    query = {key: (str(runs["sentinel"]) if value == "SENTINEL_PATH" else value) for key, value in query.items()}
    app = open_page(runs["root"], query)
    assert not app.exception, [e.value for e in app.exception]
    warnings = [w.value.replace("\\", "") for w in app.warning]  # as shown: Markdown escapes undone
    assert any(needle in w for w in warnings), warnings
    texts = [e.value for kind in ("markdown", "caption", "header", "subheader") for e in getattr(app, kind)]
    assert not any(SENTINEL_MODEL in str(text) for text in texts)
    assert _outside(reads, runs["outside"]) == []
    # the page still works: the list, or the run asked for
    assert app.dataframe or app.header


def test_there_are_at_least_thirty_cases():
    assert len(CASES) >= 30
