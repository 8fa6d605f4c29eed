"""The textbook custom gradient: a square whose gradient is deliberately half of autodiff.

    python -m explorer verify examples/square.py   # its vs_autodiff says "half of autodiff"
    python examples/square.py                      # trains the three-line model
"""

import tensorflow as tf

# Declared, so vs_autodiff passes the halved gradient as intentional (see pitfall_undocumented.py without it).
GRADIENT_EXPLORER = {
    "square_with_scaled_grad": {"justification": "a textbook example: the gradient is deliberately half of autodiff"}
}


@tf.custom_gradient
def square_with_scaled_grad(x):
    y = x * x
    def grad(dy):
        return dy * (0.5 * 2.0 * x)   # intentionally half of autodiff
    return y, grad

class CustomSquareLayer(tf.keras.layers.Layer):
    def call(self, inputs):
        return square_with_scaled_grad(inputs)


if __name__ == "__main__":  # importing this module (the checker does) must not train
    model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), CustomSquareLayer(), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(tf.random.normal((64, 1)), tf.random.normal((64, 1)), epochs=1, verbose=1)
