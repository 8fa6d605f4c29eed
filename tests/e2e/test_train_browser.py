"""The Train page in a real browser: one user's live training, then five users at once."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

import ops
from explorer.bench import harness
from explorer.train import trainer as train
from tests.e2e.conftest import ARTIFACTS

pytestmark = pytest.mark.e2e

EPOCHS = 200  # at most EPOCHS_PER_TICK a tick: ten ticks of >= 1 s, so the loss chart (redrawn every ~2 s) updates live several times on any machine
BATCH_SIZE = 8  # mini-batches, as a user would train
TRAINING_SECONDS = 240  # a bound for a hang only: ten ticks take ~10 s (more on a loaded machine)
USERS = 5

# The number of points on the loss chart once it has more than ``above`` while Training's Stop button is
# enabled (training is running); -1 once training ended (the Results heading) without that; else false,
# for page.wait_for_function, which re-checks on every frame.
LIVE_POINTS_JS = f"""(above) => {{
  const main = document.querySelector('[data-testid="stMain"]');
  if (Array.from(main.querySelectorAll('h1, h2, h3')).some((h) => h.innerText.trim() === 'Results')) return -1;
  const stop = Array.from(main.querySelectorAll('button')).find((b) => b.innerText.trim() === 'Stop');
  const chart = ({harness.FIGURE_JS})('train.loss_chart');
  if (!stop || stop.disabled || !chart) return false;
  const points = chart.traces.reduce((sum, trace) => sum + trace.n, 0);
  return points > above ? points : false;
}}"""
USER_EPOCHS = 20


def _ops_with_float_param(count: int) -> list[ops.OpSpec]:
    """``count`` ops from different families first, each with a float first parameter."""
    families = [[s for s in specs if s.params and not s.params[0].integer] for specs in ops.by_family().values()]
    picked, depth = [], 0
    while len(picked) < count:
        picked += [specs[depth] for specs in families if depth < len(specs)][: count - len(picked)]
        depth += 1
    return picked


def _labels(spec: ops.OpSpec, params: dict | None = None) -> list[str]:
    return [train.Run(spec, params or {}, mode).label for mode in ("custom", "true")]


def test_training_updates_the_loss_chart_then_shows_results(app):
    spec = _ops_with_float_param(1)[0]
    app.open(query={"op": spec.key})
    app.wait_figure()
    app.page.get_by_test_id("stSidebarNav").get_by_role("link", name="Train").click()
    app.page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True).wait_for()
    app.settle()
    sidebar = app.page.get_by_test_id("stSidebar")
    sidebar.get_by_test_id("stCheckbox").filter(has_text="Full batch").locator("label").click()
    app.settle()
    batch = sidebar.get_by_role("spinbutton", name="Batch size", exact=True)
    batch.fill(str(BATCH_SIZE))
    batch.press("Enter")
    app.settle()
    epochs = sidebar.get_by_role("spinbutton", name="Epochs", exact=True)
    epochs.fill(str(EPOCHS))
    epochs.press("Enter")
    app.settle()
    assert app.grid_rows(0) == [[spec.key, "custom", "", "false"], [spec.key, "true", "", "false"]]  # op, mode, params, learn

    app.page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True).click()
    # Events, not a clock: the loss chart has points while Stop is enabled, then more while it still is.
    first = app.page.wait_for_function(LIVE_POINTS_JS, arg=0, timeout=TRAINING_SECONDS * 1000).json_value()
    assert first > 0, "training ended before the loss chart showed a point while Stop was enabled"
    app.screenshot("04a_training_live")
    later = app.page.wait_for_function(LIVE_POINTS_JS, arg=first, timeout=TRAINING_SECONDS * 1000).json_value()
    assert later > first, f"training ended and the loss chart never grew past {first} points while Stop was enabled"
    results = app.page.get_by_role("heading", name="Results")
    results.wait_for(timeout=TRAINING_SECONDS * 1000)
    app.settle()
    app.screenshot("04b_training_results")

    assert app.exceptions() == []
    final = app.figure("train.loss_chart")
    assert {t["name"]: t["n"] for t in final["traces"]} == dict.fromkeys(_labels(spec), EPOCHS)
    rows = app.grid_rows(-1)
    assert [row[0] for row in rows] == _labels(spec)
    assert [row[4] for row in rows] == [str(EPOCHS)] * 2  # the "epochs" column


def test_five_users_at_once_see_only_their_own_op_and_runs(chromium_path, app_server):  # its own Chromium: skips with the rest
    specs = _ops_with_float_param(USERS)
    params = []
    for index, spec in enumerate(specs):
        param = spec.params[0]
        params.append({param.name: round(param.low + (0.2 + 0.15 * index) * (param.high - param.low), 2)})

    outcome: dict = {}

    def drive() -> None:  # a thread of its own: the session's sync Playwright owns this thread's loop
        try:
            outcome["users"] = asyncio.run(
                harness.many_users(app_server.url, [s.key for s in specs], USER_EPOCHS,
                                         screenshot_dir=ARTIFACTS, params=params)
            )  # fmt: skip
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = error

    worker = threading.Thread(target=drive, daemon=True)
    worker.start()
    worker.join(timeout=240)
    assert not worker.is_alive(), "five users did not finish within 240 s"
    if "error" in outcome:
        raise outcome["error"]
    users = outcome["users"]
    seconds = {user.op: round(user.start_to_results_s, 1) for user in users}
    (ARTIFACTS / "five_users_start_to_results.json").write_text(json.dumps(seconds, indent=2))
    print(f"seconds from Start to results, {USER_EPOCHS} epochs each: {seconds}")
    assert [user.op for user in users] == [spec.key for spec in specs]
    for spec, user_params, user in zip(specs, params, users, strict=True):
        name, value = next(iter(user_params.items()))
        assert user.exceptions == 0, user
        assert user.explore_title == spec.title
        assert user.explore_query["op"] == [spec.key]
        assert float(user.explore_query[f"p.{name}"][0]) == pytest.approx(value)
        assert user.runs_table == [[spec.key, "custom", "", "false"], [spec.key, "true", "", "false"]]
        assert user.runs == _labels(spec), user
        # exactly the epochs typed before Start: a stale value once trained these users for 300
        assert user.final_loss_points == dict.fromkeys(_labels(spec), USER_EPOCHS), user


LINK_EPOCHS = 30
LINK_OP = "gaussian"


def _final_losses(app) -> dict[str, float]:
    """The last loss of every run, from the drawn loss chart's traces (full precision)."""
    figure = app.figure("train.loss_chart")
    return {trace["name"]: app.trace(trace["name"], "train.loss_chart")[1][-1] for trace in figure["traces"]}


def _start_and_wait(app) -> dict[str, float]:
    app.page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True).click()
    app.page.get_by_role("heading", name="Results").wait_for(timeout=TRAINING_SECONDS * 1000)
    app.settle()
    return _final_losses(app)


def _set_number(app, label: str, value: str) -> None:
    box = app.page.get_by_test_id("stSidebar").get_by_role("spinbutton", name=label, exact=True)
    box.fill(value)
    box.press("Enter")
    app.settle()


def _pick_run_op(app, row: int, op: str) -> None:
    """Type ``op`` into the op cell of run ``row`` of the runs table (a canvas grid: click the cell, open its
    editor with Enter, type, choose)."""
    grid = app.page.get_by_test_id("stDataFrame").first
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    row_height, header = 35, 35
    editor = app.page.locator('input[id^="react-select-"]').first  # the cell's dropdown editor
    for _ in range(5):  # the first click may only focus the canvas: ask again until the editor shows (bounded)
        grid.dblclick(position={"x": 60, "y": header + row_height * row + row_height / 2})
        try:
            editor.wait_for(timeout=3_000)
            break
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: try again
            app.page.keyboard.press("Escape")
    editor.wait_for(timeout=10_000)
    editor.fill(op)
    app.page.get_by_role("option", name=op, exact=True).first.click()
    app.page.keyboard.press("Escape")
    app.page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] + 60)  # leave the grid: its edits are sent
    app.page.wait_for_function(  # the server took the edit: the URL's runs name the op at this row
        "([row, op]) => (new URLSearchParams(window.location.search).get('runs') || '').split(';')[row]?.startsWith(op + ':')",
        arg=[row, op], timeout=60_000,
    )  # fmt: skip
    app.settle()


def _grid_ops_and_modes(app, expected: list[list[str]], seconds: float = 10.0) -> list[list[str]]:
    """The runs table's (op, mode) rows once they show ``expected`` (the canvas may draw a beat after the URL the
    server sent), or as they are after ``seconds``: a table that never shows them fails the test."""
    deadline = time.monotonic() + seconds
    while True:
        rows = [row[:2] for row in app.grid_rows(0)]
        if rows == expected or time.monotonic() > deadline:
            return rows
        app.page.wait_for_timeout(250)


def test_a_copied_train_link_opens_the_same_controls_and_trains_the_same_final_loss(app, browser):
    """Change the learning rate, the epochs and the op; open the page's URL in a new browser context (a new
    session, as a teammate would); Start in both: the same final loss of every run, to 1e-6."""
    app.open("train")
    app.page.get_by_test_id("stMain").get_by_role("button", name="Start", exact=True).wait_for()
    _set_number(app, "Learning rate", "0.07")
    _set_number(app, "Epochs", str(LINK_EPOCHS))
    _pick_run_op(app, 0, LINK_OP)
    _pick_run_op(app, 1, LINK_OP)
    assert _grid_ops_and_modes(app, [[LINK_OP, "custom"], [LINK_OP, "true"]]) == [[LINK_OP, "custom"], [LINK_OP, "true"]]
    query = app.query()
    assert query["lr"] == ["0.07"] and query["epochs"] == [str(LINK_EPOCHS)]
    assert query["runs"] == [f"{LINK_OP}:custom;{LINK_OP}:true"]
    first = _start_and_wait(app)
    link = app.page.url

    context = browser.new_context(viewport=harness.VIEWPORT)
    try:
        page = context.new_page()
        teammate = type(app)(page, app.url)
        page.goto(link)
        teammate.settle()
        sidebar = page.get_by_test_id("stSidebar")
        assert sidebar.get_by_role("spinbutton", name="Learning rate", exact=True).input_value() == "0.07"
        assert sidebar.get_by_role("spinbutton", name="Epochs", exact=True).input_value() == str(LINK_EPOCHS)
        assert _grid_ops_and_modes(teammate, [[LINK_OP, "custom"], [LINK_OP, "true"]]) == [[LINK_OP, "custom"], [LINK_OP, "true"]]
        second = _start_and_wait(teammate)
        teammate.screenshot("04c_train_link_reproduced")
        assert teammate.exceptions() == []
    finally:
        context.close()
    assert sorted(first) == sorted(second) == sorted(_labels(ops.get(LINK_OP)))
    for name, loss in first.items():
        assert abs(second[name] - loss) <= 1e-6, (name, loss, second[name])
