"""Watch a spiking MLP learn scikit-learn's digits: a surrogate whose support is too narrow, beside the fix.

    python examples/watch_spiking_digits.py [--runs runs] [--epochs 8]

Both networks are the same (64 pixels -> 12 spiking units -> 10 classes), from the same weights, on the same
data. The spike's backward is the box surrogate ``rect``: height alpha on |x - threshold| < 0.5 / alpha, zero
outside. At alpha = 8 the box is 0.125 wide, far narrower than the spread of the units' inputs: the callback
records that most of them get a zero custom gradient (and warns), the hidden layer stops learning and the loss
stalls where the readout alone can take it. At alpha = 0.5 (a box 2 wide) the same units learn.

Needs the ``examples`` extra (scikit-learn, for its offline digits). The runs are written to ``--runs`` for the
Runs page (and TensorBoard: ``<run>/events``). No custom-gradient function is defined at module level, so
``python -m explorer verify examples/`` has nothing new to check here.
"""

from __future__ import annotations

import argparse
import warnings

HIDDEN = 12
NARROW, WIDE = 8.0, 0.5  # rect's alpha: box half-width 0.5 / alpha
SEED = 0


def load_digits():
    """scikit-learn's 8x8 digits (shipped with it, no download), pixels scaled to [0, 1]: (x, y) float32/int."""
    from sklearn.datasets import load_digits as sklearn_digits

    data = sklearn_digits()
    return (data.data / 16.0).astype("float32"), data.target.astype("int32")


def build_model(alpha: float, name: str):
    """64 -> Dense(12) -> spike (rect surrogate of width 1 / alpha) -> Dense(10), the same weights for a seed."""
    import keras

    import ops

    keras.utils.set_random_seed(SEED)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(HIDDEN, name="dense"),
            ops.SurrogateLayer("rect", alpha=alpha, name="spike"),
            keras.layers.Dense(10, name="readout"),
        ],
        name=name,
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])  # fmt: skip
    return model


def main(argv: list[str] | None = None) -> None:
    import explorer
    from explorer.watch.callback import DeadGradientWarning

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs", help="the runs folder (default: runs)")
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args(argv)
    x, y = load_digits()
    print(f"{'surrogate':<22} {'final loss':>10} {'accuracy':>9} {'zero grad':>10} {'firing':>7}  run")
    for label, alpha in (("rect, too narrow", NARROW), ("rect, wide enough", WIDE)):
        model = build_model(alpha, f"spiking-digits-alpha-{alpha:g}")
        watch = explorer.Watch(args.runs, every=20, dead_threshold=0.8)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DeadGradientWarning)
            history = model.fit(x, y, batch_size=64, epochs=args.epochs, verbose=0, callbacks=[watch])
        last = watch.layers.iloc[-1]
        print(f"{label + f' ({alpha:g})':<22} {history.history['loss'][-1]:>10.3f} "
              f"{history.history['accuracy'][-1]:>9.1%} {last['zero_grad_share']:>10.1%} {last['firing_rate']:>7.1%}  "
              f"{watch.run_path}")  # fmt: skip
        for warning in caught:
            if issubclass(warning.category, DeadGradientWarning):
                print(f"  alarm: {warning.message}")


if __name__ == "__main__":
    main()
