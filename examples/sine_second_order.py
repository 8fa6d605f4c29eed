"""A custom second derivative done right: the inner @tf.custom_gradient takes x as an argument.

sin(x) whose backward is itself a custom gradient (the pattern for a hand-written second derivative, e.g. a
fused kernel's): it receives dy and x as arguments and returns the gradient of each, so the second derivative
-sin(x) is the same eagerly and inside tf.function (examples/pitfall_closure_second_order.py closes over x).
"""

import tensorflow as tf


@tf.custom_gradient
def sine_second_order(x):
    def first(dy):
        @tf.custom_gradient
        def cosine_times(upstream, at):
            def second(ddy):
                return ddy * tf.cos(at), ddy * upstream * -tf.sin(at)

            return upstream * tf.cos(at), second

        return cosine_times(dy, x)

    return tf.sin(x), first
