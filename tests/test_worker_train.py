"""Training a run of a team's op in the training worker (tests/fixtures/crashing_training_ops.py): the same
numbers as training here, and a backward that ends or blocks its process on a later batch fails that
session's runs by name while this (the server's) process and the other sessions go on.

Time limits are the operator's setting (GRADIENT_EXPLORER_CALL_SECONDS), never wall-clock bounds of the test.
"""

import threading

import numpy as np
import pandas as pd
import psutil
import pytest
from streamlit.testing.v1 import AppTest

from explorer import loaded
from explorer.train import trainer as train
from tests.processes import serving
from tests.processes import started_children as _children
from tests.test_train_page import _finish, train_app

pytestmark = pytest.mark.slow  # training in worker processes that crash and are restarted

FIXTURE = "tests/fixtures/crashing_training_ops.py"
CALL_SECONDS = 10
TIMEOUT = 180


@pytest.fixture(scope="module")
def training_env():
    with serving(FIXTURE, CALL_SECONDS) as current:
        yield current


def _losses(results: list[train.RunResult]) -> list[np.ndarray]:
    return [r.history["loss"].to_numpy() for r in results]


def test_a_loaded_op_trains_in_the_worker_with_the_numbers_of_training_here(training_env):
    spec = loaded.get("good_softsign")
    runs = [train.Run(spec), train.Run(spec, gradient="true"), train.Run("atan")]
    assert loaded.needs_worker(runs) and not loaded.needs_worker([train.Run("atan")])
    state = train.TrainState(task="xor", n=256, noise=0.1, width=8, learning_rate=0.05, batch_size=64, seed=4, runs=runs)
    dataset = state.dataset()
    remote = loaded.WorkerSession(state)
    here = train.Session(state)  # the good op in this process: the reference
    assert remote.train_to(15) == here.train_to(15) == 15
    remote.step(1)
    here.step(1)
    (remote_epoch, remote_results), (here_epoch, here_results) = remote.snapshot(), here.snapshot()
    assert remote_epoch == here_epoch == 16 and not remote.finished
    assert [r.run.label for r in remote_results] == ["good_softsign (custom)", "good_softsign (true)", "atan (custom)"]
    assert [r.status for r in remote_results] == ["ok", "ok", "ok"]
    for remote_loss, here_loss in zip(_losses(remote_results), _losses(here_results), strict=True):
        assert len(remote_loss) == 16 and remote_loss[-1] < remote_loss[0]
        np.testing.assert_array_equal(remote_loss, here_loss)  # same seed, same batches, same numbers
    # softsign's custom backward is its true derivative: custom and autodiff training agree closely
    np.testing.assert_allclose(_losses(remote_results)[0], _losses(remote_results)[1], rtol=1e-4)
    grids = remote.predictions(resolution=30)
    for grid, result in zip(grids, here_results, strict=True):
        expected = train.predict_grid(result.model, dataset, resolution=30)
        np.testing.assert_array_equal(grid.x, expected.x)
        np.testing.assert_allclose(grid.values, expected.values, rtol=1e-5, atol=1e-6)
        assert grid.values.shape == (30, 30)
    remote.reset()  # back to the initial weights and optimiser state, in the worker
    assert remote.snapshot()[0] == 0 and remote.train_to(3) == 3
    for remote_loss, here_loss in zip(_losses(remote.results()), _losses(here_results), strict=True):
        np.testing.assert_array_equal(remote_loss, here_loss[:3])


def test_a_backward_that_blocks_on_a_later_batch_fails_the_session_after_the_time_limit(training_env):
    spec = loaded.get("sleeps_on_a_later_backward")
    assert loaded.problem("sleeps_on_a_later_backward") is None  # the probe's one backward passes
    threads = threading.active_count()
    session = loaded.WorkerSession(train.TrainState(task="xor", runs=[train.Run(spec)], learning_rate=0.1, seed=1))
    training_pid = loaded.worker_pids()["training"]
    session.train_to(40, seconds=0.5)
    [result] = session.results()
    assert result.status == "failed" and session.finished
    limit = CALL_SECONDS * 1 + 0.5
    how = f"did not return within {limit:g} s (its worker process was stopped)"
    assert result.error == f"the training step {how}; the worker process was replaced"
    assert not psutil.pid_exists(training_pid) or psutil.Process(training_pid).status() == psutil.STATUS_ZOMBIE
    epoch = session.epoch
    assert session.train_to(50) == epoch < 50 and session.epoch == epoch  # failed: it trains no further, no exception
    [again] = session.results()
    assert (again.status, again.error) == ("failed", result.error)
    # nothing of the hung call is left: no thread here, only the current workers as children
    assert threading.active_count() == threads
    assert _children() <= set(loaded.worker_pids().values())  # started here: only current workers (earlier ones count from before)


def _page(runs: dict[str, list[str]], epochs: int) -> AppTest:
    app = AppTest.from_function(train_app, default_timeout=TIMEOUT).run()
    app.session_state["train.runs_seed"] = pd.DataFrame({**runs, "params": [""] * len(runs["op"])})
    app.run()
    app.number_input(key="train.epochs").set_value(epochs).run()
    app.button[0].click().run()  # Start
    return _finish(app, limit=200)


def test_a_backward_that_exits_on_a_later_batch_fails_its_session_and_the_server_goes_on(training_env):
    good = _page({"op": ["good_softsign"], "gradient": ["custom"]}, epochs=5)
    assert not good.exception and isinstance(good.session_state["train.session"], loaded.WorkerSession)
    [before] = _losses(good.session_state["train.session"].results())
    builtin = _page({"op": ["atan"], "gradient": ["custom"]}, epochs=3)  # another user, built-in ops only
    assert isinstance(builtin.session_state["train.session"], train.Session)  # trains in this process, as before
    training_pid = loaded.worker_pids()["training"]

    bad = _page({"op": ["exits_on_a_later_backward", "atan"], "gradient": ["custom", "custom"]}, epochs=40)
    assert not bad.exception
    table = bad.dataframe[-1].value
    assert table["run"].tolist() == ["exits_on_a_later_backward (custom)", "atan (custom)"]
    assert table["status"].tolist() == ["failed", "failed"]  # one worker call trains the session's runs together
    assert table["epochs"].max() < 13  # its 13th backward (epoch 13, full batch) ended the worker
    cause = "ended the worker process with exit code 3"
    errors = [e.value for e in bad.error]
    assert len(errors) == 2 and all("failed while training" in e and cause in e for e in errors)
    assert [s.value for s in bad.subheader][-1] == "Decision boundaries"  # drawn (empty) without its models

    # this process is the server: the worker was replaced, nothing else started, and its pages still run (below)
    assert loaded.worker_pids()["training"] != training_pid
    assert _children() <= set(loaded.worker_pids().values())  # started here: only current workers (earlier ones count from before)
    # the other sessions go on: the built-in one here, the loaded one rebuilt in the new worker
    builtin.button[2].click().run()  # Step
    assert builtin.session_state["train.session"].epoch == 4 and not builtin.exception
    good.button[2].click().run()  # Step: its models were in the replaced worker, trained back to epoch 5 first
    assert not good.exception and not good.error
    [after] = _losses(good.session_state["train.session"].results())
    assert len(after) == 6
    np.testing.assert_array_equal(after[:5], before)
    pids = loaded.worker_pids()
    loaded.stop_workers()
    assert not any(psutil.pid_exists(pid) for pid in pids.values()) and _children() == set()
