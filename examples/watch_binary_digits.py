"""Watch a binary network learn scikit-learn's digits: a straight-through clip boundary too tight, beside a wider one.

    python examples/watch_binary_digits.py [--runs runs] [--epochs 8]

Both networks are the same (64 pixels -> 12 sign units in {-1, +1} -> 10 classes), from the same weights, on the
same data. The sign's backward is the straight-through estimator ``ste_sign``: the gradient passes where
|x| <= clip_value (closed) and is cancelled beyond. With clip_value = 0.1 most pre-activations sit beyond the
boundary: the callback records the shares below and above it, the zero-gradient share, and how many of the
signs still flip between records (Larq's flip ratio); with clip_value = 1 (Larq's default) the units keep
learning and the loss ends about half as high.

Needs the ``examples`` extra (scikit-learn). Runs are written to ``--runs`` for the Runs page (and TensorBoard).
No custom-gradient function is defined at module level: ``python -m explorer verify examples/`` is unchanged.
"""

from __future__ import annotations

import argparse
import warnings

HIDDEN = 12
TIGHT, WIDE = 0.1, 1.0  # ste_sign's clip_value
SEED = 0


def load_digits():
    """scikit-learn's 8x8 digits (shipped with it, no download), pixels scaled to [0, 1]: (x, y) float32/int."""
    from sklearn.datasets import load_digits as sklearn_digits

    data = sklearn_digits()
    return (data.data / 16.0).astype("float32"), data.target.astype("int32")


def build_model(clip_value: float, name: str):
    """64 -> Dense(12) -> sign (ste_sign at clip_value) -> Dense(10), the same weights for a seed."""
    import keras

    import ops

    keras.utils.set_random_seed(SEED)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(HIDDEN, name="dense"),
            ops.SurrogateLayer("ste_sign", clip_value=clip_value, name="sign"),
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
    print(f"{'clip boundary':<18} {'final loss':>10} {'accuracy':>9} {'zero grad':>10} {'below':>7} {'above':>7} "
          f"{'flips':>6}  run")  # fmt: skip
    for clip_value in (TIGHT, WIDE):
        model = build_model(clip_value, f"binary-digits-clip-{clip_value:g}")
        watch = explorer.Watch(args.runs, every=20)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeadGradientWarning)  # the table says it
            history = model.fit(x, y, batch_size=64, epochs=args.epochs, verbose=0, callbacks=[watch])
        last = watch.layers.iloc[-1]
        print(f"{f'|x| <= {clip_value:g}':<18} {history.history['loss'][-1]:>10.3f} "
              f"{history.history['accuracy'][-1]:>9.1%} {last['zero_grad_share']:>10.1%} {last['below_share']:>7.1%} "
              f"{last['above_share']:>7.1%} {last['flip_ratio']:>6.1%}  {watch.run_path}")  # fmt: skip


if __name__ == "__main__":
    main()
