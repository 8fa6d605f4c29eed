"""Seconds from a preset's choice to its first result on screen (issue 16's target: under 10 s each).

What each preset computes before the page can show its numbers (what the Train page calls, without
Streamlit's cache, so every repetition pays the full cost, tracing and compiling included):

* ``yin2019``: :func:`explorer.train.presets.yin2019` for the three STEs (3,000 steps each) and the summary.
* ``dann``: :func:`explorer.train.presets.dann` (10 seeds x 2 networks, XLA-compiled) and the summary.
* ``zenke2021``: :func:`explorer.train.presets.shape_scale` (10 Heaviside networks, 300 epochs).
* ``depth``: the live preset's session (3 networks of 6 hidden layers) built and trained one epoch,
  then :func:`explorer.train.presets.gradient_flow_table`: the first first/last ratio on the page.

Robustness on a shared machine: the presets are timed interleaved (each repetition times every
preset once, in an order rotated by one per repetition, so slow spells of the machine spread over
all of them), after one untimed warm-up training that pays the process-wide first-use costs a
running server has already paid; the figure is the median over repetitions.

    python -m explorer.bench.presets [--repeats N]   # prints JSON
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

from explorer.train import presets
from explorer.train import trainer as train


def _yin() -> object:
    return presets.yin2019_summary({ste: presets.yin2019(ste) for ste in presets.STES})


def _dann() -> object:
    return presets.dann_summary(presets.dann())


def _ste_bias() -> object:
    return presets.ste_bias_summary(presets.ste_bias(2.0, 0.45, surrogate="atan"), 2.0, 0.45)


def _shape_scale() -> object:
    return presets.shape_scale_table(presets.shape_scale())


def _depth_first_epoch() -> object:
    return presets.gradient_flow_table(train.Session(presets.get("depth").state).step(1))


FIRST_RESULT: dict[str, Callable[[], object]] = {
    "yin2019": _yin,
    "dann": _dann,
    "ste_bias": _ste_bias,
    "zenke2021": _shape_scale,
    "depth": _depth_first_epoch,
}


def preset_seconds(repeats: int = 3) -> dict[str, float]:
    """Median wall-clock seconds to compute each preset's first result (keys: the preset keys)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= 20:
        raise ValueError(f"repeats must be a whole number in [1, 20], got {repeats!r}")
    train.compare(task="xor", runs=[train.Run("atan")], epochs=2)  # warm-up: TensorFlow's and Keras's first use
    keys = list(FIRST_RESULT)
    times: dict[str, list[float]] = {key: [] for key in keys}
    for repetition in range(repeats):
        shift = repetition % len(keys)
        for key in keys[shift:] + keys[:shift]:
            start = time.perf_counter()
            FIRST_RESULT[key]()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(values) for key, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(json.dumps({key: round(value, 2) for key, value in preset_seconds(args.repeats).items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
