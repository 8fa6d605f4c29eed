"""Pitfall: a custom second derivative whose inner @tf.custom_gradient closes over the input.

sin(x) with its backward written as a custom gradient of dy (to give the second derivative by hand), reading x
from the enclosing function. Eagerly the second derivative comes out right, -sin(x), by accident: the eager
tape records the closure's ops. Inside tf.function only the inner function's arguments are differentiated, and
the second derivative is None (TensorFlow issue 34503 is this family).

Caught by: second_order (a warning: eager gives it, tf.function None). Fix: pass x to the inner function as an
argument and return its gradient too (examples/sine_second_order.py).
"""

import tensorflow as tf


@tf.custom_gradient
def sine_closure(x):
    @tf.custom_gradient
    def first(dy):
        def second(ddy):
            return ddy * tf.cos(x)

        return dy * tf.cos(x), second

    return tf.sin(x), first
