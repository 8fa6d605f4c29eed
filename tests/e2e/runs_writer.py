"""A training run that writes a run folder until told to stop, for the Runs page's browser test.

    python tests/e2e/runs_writer.py fit ROOT NAME STOP_FILE        # a real model.fit with the Watch callback
    python tests/e2e/runs_writer.py synthetic ROOT NAME STOP_FILE  # run_folder's writer in a loop (no callback)

It records until ``STOP_FILE`` exists (the test creates it once it has seen what it waits for), bounded by
MAX_STEPS records and MAX_SECONDS, then closes the run ("finished"). A pause after each batch keeps it from
taking a whole core of a shared machine; the test waits for states, never for a time, so its speed does not matter.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

MAX_STEPS = 3000
MAX_SECONDS = 600.0
PAUSE_SECONDS = 0.25


def _stop(stop_file: Path, started: float, step: int) -> bool:
    return stop_file.exists() or step >= MAX_STEPS or time.monotonic() - started > MAX_SECONDS


def fit(root: str, name: str, stop_file: Path) -> None:
    """A 2-4-4-1 model with a spike op and a straight-through sign, trained with the Watch callback every step."""
    import keras
    import numpy as np

    import ops
    from explorer.watch.callback import Watch

    started = time.monotonic()

    class StopWhenTold(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(PAUSE_SECONDS)
            if _stop(stop_file, started, int(self.model.optimizer.iterations.numpy())):
                self.model.stop_training = True

    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 2)).astype("float32")
    y = (x[:, :1] * x[:, 1:] > 0).astype("float32")
    model = keras.Sequential([
        keras.Input((2,)), keras.layers.Dense(4), ops.SurrogateLayer("fast_sigmoid", name="spike"),
        keras.layers.Dense(4), ops.SurrogateLayer("ste_sign", clip_value=1.0, name="sign"), keras.layers.Dense(1),
    ])  # fmt: skip
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=32, epochs=MAX_STEPS, verbose=0, callbacks=[
        Watch(root, every=1, name=name, flush_seconds=0.0), StopWhenTold()])  # fmt: skip


def synthetic(root: str, name: str, stop_file: Path) -> None:
    """The same record shapes from :mod:`explorer.runs.synthetic`, one step at a time, one part per step."""
    import numpy as np

    from explorer.runs import synthetic as made_up
    from explorer.watch.run_folder import RunWriter

    writer = RunWriter(root, name, made_up.info(2), flush_seconds=0.0)
    base = np.random.default_rng(0).standard_normal((2, 256))
    previous: dict = {}
    started, step = time.monotonic(), 0
    while not _stop(stop_file, started, step):
        step += 1
        layer_rows, histogram_rows, step_row = made_up.records(step, 2, base, previous)
        writer.append("layers", layer_rows)
        writer.append("histograms", histogram_rows)
        writer.append("steps", [step_row])
        time.sleep(PAUSE_SECONDS)
    writer.close()


if __name__ == "__main__":
    mode, root_arg, name_arg, stop_arg = sys.argv[1:5]
    {"fit": fit, "synthetic": synthetic}[mode](root_arg, name_arg, Path(stop_arg))
